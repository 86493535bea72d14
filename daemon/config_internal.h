/* config_internal.h — what the files of the configuration share (config.h is its contract):
 * lookups in the option table that config.c owns, and the binary size units.
 */
#ifndef QDP_CONFIG_INTERNAL_H
#define QDP_CONFIG_INTERNAL_H

#include <stddef.h>

#include "config.h"

#define KI 1024ull
#define MI (1024ull * KI)
#define GI (1024ull * MI)
#define TI (1024ull * GI)

/* The option named by the len bytes at name; `-` matches `_`. NULL if unknown. */
const struct config_option *config_find_n(const char *name, size_t len);
/* The table index of o, which comes from the table. */
size_t config_option_index(const struct config_option *o);
/* "QDP_" and o's name in upper case: the environment variable that sets o. */
void config_env_name(const struct config_option *o, char *buf, size_t len);

#endif /* QDP_CONFIG_INTERNAL_H */
