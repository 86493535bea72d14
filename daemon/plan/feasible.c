/* feasible.c — what each device of a plan must hold (its shard, the input staging and the
 * workspace the encoding needs) against its budget, and the refusal of a plan that does not fit,
 * which names every device's figures.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "qdp_size.h"

uint64_t plan_workspace_bytes(const struct plan *p, const struct plan_shard *s) {
  const struct qdp_encoding_desc *e = p && s ? qdp_encoding_desc(p->encoding) : NULL;
  if (!e) {
    return 0;
  }
  if (e->reduction == QDP_REDUCTION_NORM) {
    uint64_t leaves = s->count / PLAN_NORM_LEAF + (s->count % PLAN_NORM_LEAF ? 1 : 0);
    return sat_mul(sat_mul(8, s->rows), sat_add(1, leaves));
  }
  if (e->exchange == QDP_EXCHANGE_WHT && p->global_bits > p->iqp_top_bits) {
    return s->bytes < PLAN_EXCHANGE_CHUNK_BYTES ? s->bytes : PLAN_EXCHANGE_CHUNK_BYTES;
  }
  return 0;
}

void plan_count_needs(struct plan *p, const struct plan_world *w) {
  p->feasible = 1;
  for (size_t i = 0; i < p->nshards; i++) {
    const struct plan_shard *s = &p->shards[i];
    const struct plan_device *dev = &w->devices[s->device];
    struct plan_need *n = &p->needs[i];
    n->device = s->device;
    n->rank = s->rank;
    n->ordinal = s->ordinal;
    if (dev->name[0]) {
      snprintf(n->name, sizeof n->name, "%.*s", (int)sizeof dev->name, dev->name);
    } else {
      snprintf(n->name, sizeof n->name, "r%d/device %d", dev->rank, dev->ordinal);
    }
    n->shard_bytes = p->output_external ? 0 : s->bytes;
    n->staging_bytes = p->staging_bytes;
    n->workspace_bytes = plan_workspace_bytes(p, s);
    n->need_bytes = sat_add(sat_add(n->shard_bytes, n->staging_bytes), n->workspace_bytes);
    n->budget_bytes = dev->budget_bytes;
    n->fits = n->need_bytes <= n->budget_bytes;
    if (!n->fits) {
      p->feasible = 0;
    }
  }
}

/* ---- feasibility message --------------------------------------------------------------------- */

struct text {
  char *buf;
  size_t cap, len;
};

/* Appends only if the whole piece fits within `limit` bytes (NUL excluded); returns 1 if it did. */
static int text_add(struct text *t, size_t limit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int text_add(struct text *t, size_t limit, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n < 0 || t->len + (size_t)n > limit || t->len + (size_t)n >= t->cap) {
    t->buf[t->len] = '\0';
    return 0;
  }
  t->len += (size_t)n;
  return 1;
}

qdp_status plan_check_feasible(const struct plan *p, struct qdp_error *reterr) {
  if (!p) {
    return qdp_error_set(reterr, QDP_ERR_INTERNAL, NULL, "no plan to check");
  }
  if (p->feasible) {
    return QDP_OK;
  }
  /* The worst device: the largest shortfall, ties to the earliest. */
  size_t worst = p->nneeds;
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct plan_need *n = &p->needs[i];
    if (!n->fits &&
        (worst == p->nneeds || n->need_bytes - n->budget_bytes >
                                   p->needs[worst].need_bytes - p->needs[worst].budget_bytes)) {
      worst = i;
    }
  }
  if (!reterr) {
    return QDP_ERR_RESOURCE_EXHAUSTED;
  }
  char msg[sizeof reterr->msg];
  char tail[160];
  struct text t = {msg, sizeof msg, 0};
  const char *dt = qdp_dtype_name(p->out_dtype);
  const int c128 = p->out_dtype == QDP_DTYPE_COMPLEX128;
  snprintf(tail, sizeof tail, "; lower 'qubits'%s%s, or add devices",
           p->batch > 1 ? " or the batch size" : "", c128 ? ", use complex64" : "");
  if (p->batch > 1) {
    text_add(&t, sizeof msg - 1,
             "a batch of %llu %u-qubit %s states (%s) does not fit: ", ull(p->batch), p->qubits,
             dt ? dt : "?", QDP_SIZE_STR(p->total_bytes));
  } else {
    text_add(&t, sizeof msg - 1, "%u-qubit %s state (%s) does not fit: ", p->qubits, dt ? dt : "?",
             QDP_SIZE_STR(p->total_bytes));
  }
  /* Room for the list: what the hint and a closing "; ..." leave. */
  const size_t limit = sizeof msg - 1 - strlen(tail) - strlen("; ...");
  int listed = 0;
  for (size_t i = 0; i < p->nneeds; i++) {
    const struct plan_need *n = &p->needs[i];
    if (n->fits) {
      continue;
    }
    char need[QDP_SIZE_TEXT], budget[QDP_SIZE_TEXT];
    qdp_size_text_pair(need, budget, sizeof need, n->need_bytes, n->budget_bytes);
    if (!text_add(&t, limit,
                  "%s%s needs %s (shard %s + staging %s + workspace %s) but its budget is %s",
                  listed ? "; " : "", n->name, need, QDP_SIZE_STR(n->shard_bytes),
                  QDP_SIZE_STR(n->staging_bytes), QDP_SIZE_STR(n->workspace_bytes), budget)) {
      text_add(&t, sizeof msg - 1, "%s...", listed ? "; " : "");
      break;
    }
    listed++;
  }
  text_add(&t, sizeof msg - 1, "%s", tail);
  qdp_error_set(reterr, QDP_ERR_RESOURCE_EXHAUSTED, NULL, "%s", msg);
  if (worst < p->nneeds) {
    reterr->need_bytes = p->needs[worst].need_bytes;
    reterr->free_bytes = p->needs[worst].budget_bytes;
    reterr->device = p->needs[worst].ordinal;
    reterr->rank = p->needs[worst].rank;
  }
  return QDP_ERR_RESOURCE_EXHAUSTED;
}
