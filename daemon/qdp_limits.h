/* qdp_limits.h — the tunables and caps that more than one module applies, each declared once here:
 * config.c's table takes its defaults and ranges from these, and the modules that apply a value
 * check it against the same numbers. */
#ifndef QDP_QDP_LIMITS_H
#define QDP_QDP_LIMITS_H

#define QDP_STRINGIFY_(x) #x
#define QDP_STRINGIFY(x) QDP_STRINGIFY_(x) /* a number as config.c's table writes its default */

/* Devices of one mesh (a host "device" is a share of host memory: more than this is a typo, not a
 * machine; no node has more GPUs) and members of one device group (jobs name the members in a
 * 64-bit set). */
#define QDP_DEVICES_MAX 64

/* mem_fraction: the share of each device's free memory at start qdp may hold when no device
 * budget is given. */
#define QDP_MEM_FRACTION_DEFAULT 0.9
#define QDP_MEM_FRACTION_MIN 0.01
#define QDP_MEM_FRACTION_MAX 1.0

/* The daemon's own files (socket, lock, configuration, tokens) that main.c names to the server and
 * that a caller can never have read or replaced through it. */
#define QDP_OWN_FILES_MAX 8

#endif /* QDP_QDP_LIMITS_H */
