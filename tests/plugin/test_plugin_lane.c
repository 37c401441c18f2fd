/* test_plugin_lane.c - a tiny plugin for the plugin tests: a host-memory lane that runs weft's reference
 * kernels, built several times with one misbehaviour each (PLUGIN_FAULT): another ABI version, wrong bits,
 * a crash or a hang in its self-test, an NPU kind with or without an evidence slot, a partial claim it does
 * not enforce, a crash while it is being loaded, fused multiply-adds only for k > 2000, an NPU kind that
 * names its accel device and advances (or does not advance) that device's busy counter in a fake sysfs
 * tree (WEFT_SYSFS_ROOT), a transformer op that stores NaNs with their payloads, another that accumulates
 * in the wrong order, an op it neither claims nor runs (declined by its supports slot). Every lane offers every op: the version-1 ops through reference.c, the transformer
 * ops through reference_tx.c. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/core/reference.h"
#include "../../src/core/reference_tx.h"
#include "weft_plugin.h"

#define FAULT_NONE 0
#define FAULT_ABI 1
#define FAULT_ABI_V1 12 /* a plugin of the version before weft_op grew (plugin ABI 1) */
#define FAULT_WRONG_BITS 2
#define FAULT_CRASH 3
#define FAULT_HANG 4
#define FAULT_NPU_NO_EVIDENCE 5
#define FAULT_NPU_EVIDENCE 6
#define FAULT_CLAIMS 7 /* claims fewer ops but has no supports slot to decline the others */
#define FAULT_LOAD 8   /* crashes as it is loaded (a constructor) */
#define FAULT_FMA_LARGE_K 9 /* exact on small k; fuses multiply-adds for k > 2000 */
#define FAULT_NPU_COUNTER 10 /* kind npu, names accel0 and advances its npu_busy_time_us as it runs */
#define FAULT_NPU_STUCK 11   /* kind npu, names accel0, claims a receipt, and leaves the counter alone */
#define FAULT_TX_NAN 13      /* gelu stores a NaN with its input's payload, not 0x7fc00000 */
#define FAULT_TX_ORDER 14    /* embedding_backward adds each table row's contributions in descending order */
#define FAULT_DECLINE 15     /* does not claim attention_cached, and its supports slot declines it (no fault) */

#ifndef PLUGIN_FAULT
#define PLUGIN_FAULT FAULT_NONE
#endif
#ifndef PLUGIN_NAME
#define PLUGIN_NAME "reftest"
#endif

#if PLUGIN_FAULT == FAULT_NPU_NO_EVIDENCE || PLUGIN_FAULT == FAULT_NPU_EVIDENCE || \
    PLUGIN_FAULT == FAULT_NPU_COUNTER || PLUGIN_FAULT == FAULT_NPU_STUCK
#define PLUGIN_KIND "npu"
#else
#define PLUGIN_KIND "reftest"
#endif

typedef struct ref_lane {
  const weft_lane_host *host;
  int ops_run;
} ref_lane;

static void ref_describe(void *self, weft_lane_desc *out) {
  (void)self;
  memset(out, 0, sizeof *out);
  out->name = PLUGIN_NAME ":0";
  out->kind = PLUGIN_KIND;
  out->device = "weft reference kernels (test plugin)";
  out->driver = "";
  out->details = "built for the plugin tests";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->flags = WEFT_LANE_HOST_MEMORY;
  out->ops = WEFT_OPS_ALL;
}

static void ref_destroy(void *self) { free(self); }

static weft_status ref_alloc(void *self, size_t bytes, weft_buffer **out) {
  (void)self;
  *out = malloc(bytes);
  return *out ? WEFT_OK : WEFT_ERR_OUT_OF_MEMORY;
}

static void ref_free(void *self, weft_buffer *b) {
  (void)self;
  free(b);
}

static weft_status ref_upload(void *self, weft_buffer *b, size_t off, const void *src, size_t bytes) {
  (void)self;
  memcpy((char *)b + off, src, bytes);
  return WEFT_OK;
}

static weft_status ref_download(void *self, weft_buffer *b, size_t off, void *dst, size_t bytes) {
  (void)self;
  memcpy(dst, (const char *)b + off, bytes);
  return WEFT_OK;
}

#define F(i) ((float *)op->in[i])
#define CF(i) ((const float *)op->in[i])
#define CI(i) ((const int32_t *)op->in[i])
#define O(i) ((float *)op->out[i])

/* The transformer ops on host arrays, through reference_tx.c (what optable.c's host kernels do). */
static weft_status ref_run_tx(const weft_op *op) {
  const int64_t *ip = op->iparam;
  const float *fp = op->fparam;
  switch (op->kind) {
  case WEFT_OP_EMBEDDING: return weft_ref_embedding_forward(O(0), CI(0), CI(1), CF(2), CF(3), ip[0], ip[1], ip[2], ip[3], ip[4]);
  case WEFT_OP_EMBEDDING_BACKWARD:
#if PLUGIN_FAULT == FAULT_TX_ORDER
    /* (b, t) descending: every table row gets its contributions in the reverse of the canonical order */
    for (int64_t bt = ip[0] * ip[1] - 1; bt >= 0; bt--) {
      const int32_t *tok = CI(1), *pos = CI(2);
      if (O(0)) weft_ref_embedding_backward(O(0), NULL, CF(0) + bt * ip[2], tok + bt, NULL, 1, 1, ip[2], ip[3], ip[4]);
      if (O(1)) {
        const int32_t p = pos ? pos[bt] : (int32_t)(bt % ip[1]);
        weft_ref_embedding_backward(O(1), NULL, CF(0) + bt * ip[2], &p, NULL, 1, 1, ip[2], ip[4], ip[4]);
      }
    }
    return WEFT_OK;
#else
    return weft_ref_embedding_backward(O(0), O(1), CF(0), CI(1), CI(2), ip[0], ip[1], ip[2], ip[3], ip[4]);
#endif
  case WEFT_OP_LAYERNORM: weft_ref_layernorm_forward(O(0), O(1), O(2), CF(0), CF(1), CF(2), ip[0], ip[1], fp[0]); return WEFT_OK;
  case WEFT_OP_LAYERNORM_BACKWARD:
    weft_ref_layernorm_backward(O(0), O(1), O(2), CF(0), CF(1), CF(2), CF(3), CF(4), ip[0], ip[1]);
    return WEFT_OK;
  case WEFT_OP_GELU:
    weft_ref_gelu_forward(O(0), CF(0), ip[0]);
#if PLUGIN_FAULT == FAULT_TX_NAN
    for (int64_t i = 0; i < ip[0]; i++) /* y = x where x is a NaN: its payload kept, as hardware may */
      if (CF(0)[i] != CF(0)[i]) memcpy(&O(0)[i], &CF(0)[i], sizeof(float));
#endif
    return WEFT_OK;
  case WEFT_OP_GELU_BACKWARD: weft_ref_gelu_backward(O(0), CF(0), CF(1), ip[0]); return WEFT_OK;
  case WEFT_OP_ATTENTION: return weft_ref_attention_forward(O(0), O(2), O(1), CF(0), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_ATTENTION_BACKWARD: return weft_ref_attention_backward(O(0), CF(0), CF(1), CF(2), ip[0], ip[1], ip[2], ip[3]);
  case WEFT_OP_ATTENTION_CACHED: return weft_ref_attention_cached(O(0), O(1), CF(0), ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
  case WEFT_OP_CAUSAL_SOFTMAX: weft_ref_causal_softmax_forward(O(0), CF(0), ip[0], ip[1], fp[0]); return WEFT_OK;
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: weft_ref_causal_softmax_backward(O(0), CF(0), CF(1), ip[0], ip[1], fp[0]); return WEFT_OK;
  case WEFT_OP_CROSSENTROPY: return weft_ref_crossentropy_forward(O(0), CF(0), CI(1), ip[0], ip[1]);
  case WEFT_OP_CROSSENTROPY_BACKWARD: return weft_ref_crossentropy_backward(O(0), CF(0), CI(1), CF(2), ip[0], ip[1]);
  case WEFT_OP_ADAMW: weft_ref_adamw(O(0), CF(0), O(1), O(2), ip[0], fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], fp[6]); return WEFT_OK;
  case WEFT_OP_SUMSQ: O(0)[0] = weft_ref_sumsq(CF(0), ip[0], O(0)[0]); return WEFT_OK;
  case WEFT_OP_PERMUTE: {
    int perm[4];
    for (int a = 0; a < 4; a++) perm[a] = (int)((ip[5] >> (2 * a)) & 3);
    weft_ref_permute((uint32_t *)op->out[0], (const uint32_t *)op->in[0], ip + 1, perm);
    return WEFT_OK;
  }
  case WEFT_OP_COPY_SLICE: weft_ref_copy_slice(op->out[0], op->in[0], ip[0], ip[1], ip[2], ip[3], ip[4]); return WEFT_OK;
  case WEFT_OP_MATMUL_ACC:
    for (int64_t p = 0; p < op->batch; p++) weft_ref_matmul(op, p, 0, op->m);
    return WEFT_OK;
  default: return WEFT_ERR_UNSUPPORTED;
  }
}

/* A plugin links nothing of weft: errors go through the host's report slot. */
static weft_status report(ref_lane *l, weft_status st, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  l->host->report(l->host->ctx, st, fmt, args);
  va_end(args);
  return st;
}

static weft_status ref_run(void *self, const weft_op *op) {
  ref_lane *l = self;
#if PLUGIN_FAULT == FAULT_CRASH
  raise(SIGSEGV);
#elif PLUGIN_FAULT == FAULT_HANG
  for (;;) pause();
#endif
  if (op->kind >= WEFT_OP_V1_COUNT) {
    weft_status st = ref_run_tx(op);
    if (st != WEFT_OK) return report(l, st, "reftest: the reference refused op %d", (int)op->kind);
  } else {
    weft_reference_run(op);
  }
#if PLUGIN_FAULT == FAULT_WRONG_BITS
  if (op->kind == WEFT_OP_MATMUL && op->batch * op->m * op->n > 0) {
    uint32_t u;
    memcpy(&u, op->out[0], 4);
    u ^= 1u;
    memcpy(op->out[0], &u, 4);
  }
#endif
#if PLUGIN_FAULT == FAULT_FMA_LARGE_K
  /* The cheat admission used to miss: a fused multiply-add chain once k is large. */
  if (op->kind == WEFT_OP_MATMUL && op->k > 2000) {
    const float *a = op->in[0], *b = op->in[1];
    float *c = op->out[0];
    for (int64_t p = 0; p < op->batch; p++)
      for (int64_t i = 0; i < op->m; i++)
        for (int64_t j = 0; j < op->n; j++) {
          const float *ap = a + p * op->m * op->k, *bp = b + (op->b_batched ? p * op->k * op->n : 0);
          float acc = 0.0f;
          for (int64_t q = 0; q < op->k; q++)
            acc = fmaf(op->trans_a ? ap[q * op->m + i] : ap[i * op->k + q],
                       op->trans_b ? bp[j * op->k + q] : bp[q * op->n + j], acc);
          c[p * op->m * op->n + i * op->n + j] = acc;
        }
  }
#endif
#if PLUGIN_FAULT == FAULT_NPU_COUNTER
  /* Stands in for the NPU driver: the device's busy counter advances as work runs. */
  const char *root = getenv("WEFT_SYSFS_ROOT");
  if (root) {
    char path[1024];
    snprintf(path, sizeof path, "%s/class/accel/accel0/device/npu_busy_time_us", root);
    unsigned long long us = 0;
    FILE *fp = fopen(path, "r");
    if (fp) {
      if (fscanf(fp, "%llu", &us) != 1) us = 0;
      fclose(fp);
    }
    fp = fopen(path, "w");
    if (fp) {
      fprintf(fp, "%llu\n", us + 7);
      fclose(fp);
    }
  }
#endif
  l->ops_run++;
  return WEFT_OK;
}

#if PLUGIN_FAULT == FAULT_DECLINE
static weft_status ref_supports(void *self, const weft_op *op) {
  (void)self;
  return op->kind == WEFT_OP_ATTENTION_CACHED ? WEFT_ERR_UNSUPPORTED : WEFT_OK;
}
#define SUPPORTS ref_supports
#else
#define SUPPORTS NULL
#endif

#if PLUGIN_FAULT == FAULT_LOAD
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
#endif

static const weft_lane_vtable REF_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = ref_describe,
    .destroy = ref_destroy, .buffer_alloc = ref_alloc, .buffer_free = ref_free, .upload = ref_upload,
    .download = ref_download, .supports = SUPPORTS, .run = ref_run,
};

static weft_status ref_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  ref_lane *l = calloc(1, sizeof *l);
  if (!l) return WEFT_ERR_OUT_OF_MEMORY;
  l->host = args->host;
  return sink->add_lane(sink->ctx, &REF_VTABLE, l);
}

#if PLUGIN_FAULT == FAULT_NPU_EVIDENCE || PLUGIN_FAULT == FAULT_NPU_STUCK || PLUGIN_FAULT == FAULT_NPU_COUNTER
/* A test stand-in for a platform receipt: what the lane itself counted (a claim, proving nothing). */
static int ref_evidence(void *self, char *buf, size_t len) {
  ref_lane *l = self;
  if (!l->ops_run) return 0;
  snprintf(buf, len, "test receipt: %d ops run", l->ops_run);
  return 1;
}
#define EVIDENCE ref_evidence
#else
#define EVIDENCE NULL
#endif

#if PLUGIN_FAULT == FAULT_NPU_STUCK || PLUGIN_FAULT == FAULT_NPU_COUNTER
static int ref_accel_device(void *self, char *buf, size_t len) {
  (void)self;
  snprintf(buf, len, "accel0");
  return 1;
}
#define ACCEL_DEVICE ref_accel_device
#else
#define ACCEL_DEVICE NULL
#endif

static const weft_plugin_desc DESC = {
#if PLUGIN_FAULT == FAULT_ABI
    99,
#elif PLUGIN_FAULT == FAULT_ABI_V1
    1, /* built before lane ABI version 2: its weft_op had two inputs and two outputs */
#else
    WEFT_PLUGIN_ABI_VERSION,
#endif
    sizeof(weft_plugin_desc), WEFT_LANE_ABI_VERSION, PLUGIN_NAME, PLUGIN_KIND,
#if PLUGIN_FAULT == FAULT_CLAIMS
    WEFT_PLUGIN_CLAIM_ALL & ~WEFT_PLUGIN_CLAIM(WEFT_OP_SOFTMAX_XENT),
#elif PLUGIN_FAULT == FAULT_DECLINE
    WEFT_PLUGIN_CLAIM_ALL & ~WEFT_PLUGIN_CLAIM(WEFT_OP_ATTENTION_CACHED),
#else
    WEFT_PLUGIN_CLAIM_ALL,
#endif
    ref_probe, EVIDENCE, ACCEL_DEVICE,
};

__attribute__((visibility("default"))) const weft_plugin_desc *weft_plugin_entry(void) { return &DESC; }
