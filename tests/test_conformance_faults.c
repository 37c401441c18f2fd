/* test_conformance_faults.c - the conformance suite itself under test: it must pass a faithful lane and
 * catch lanes with the faults real lanes have.
 *
 * Fake lanes keep their buffers behind a device-style interface (not host memory), so the core uploads and
 * downloads for them. The faithful one runs the whole suite, router and cross-lane chains included, next to
 * the CPU: that exercises residency between a host-memory lane and a device lane, which a CPU-only build
 * cannot. Each faulty lane must fail the contracts its fault breaks and pass those it does not (an FMA
 * matmul is fine under fp32, not under exact), so the fp32 bounds are shown to be neither too tight nor
 * too loose for the faults that matter. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"

typedef enum fault {
  FAULT_NONE,
  FAULT_FMA,         /* matmul accumulates with fused multiply-add */
  FAULT_FTZ,         /* subnormal results flushed to zero */
  FAULT_RELU_NEGZERO,/* relu of a negative gives -0 */
  FAULT_LIBM_EXP,    /* softmax_xent with libm's expf/logf instead of weft's */
  FAULT_UNWRITTEN,   /* the last output element is never written */
  FAULT_TRANS_B,     /* matmul ignores trans_b */
  FAULT_STALE,       /* a buffer keeps its first upload; later uploads are dropped */
  FAULT_FMA_LARGE_K, /* fused multiply-add only for k > 2000 (past the suite's size cap for slow lanes) */
  FAULT_COUNT
} fault;

static const char *const FAULT_NAMES[FAULT_COUNT] = {"faithful", "fma", "ftz", "relu-negzero", "libm-exp",
                                                     "unwritten", "trans-b", "stale-upload", "fma-large-k"};
/* Which contracts each fault must break: bit 0 exact, bit 1 fp32. */
static const int FAULT_BREAKS[FAULT_COUNT] = {0, 1, 1, 1, 1, 3, 3, 3, 1};

typedef struct fake {
  char name[32];
  fault fault;
} fake;

/* A buffer: the floats, and whether it has been uploaded to (for FAULT_STALE). */
typedef struct fbuf {
  int uploaded;
  float data[];
} fbuf;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "fake";
  out->device = "fake device";
  out->driver = "";
  out->details = "device-style memory, reference kernels";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
}
static void fk_destroy(void *self) { free(self); }
static weft_status fk_alloc(void *self, size_t bytes, weft_buffer **out) {
  (void)self;
  fbuf *b = calloc(1, sizeof(fbuf) + bytes);
  *out = b;
  return b ? WEFT_OK : WEFT_ERR_OUT_OF_MEMORY;
}
static void fk_free(void *self, weft_buffer *b) {
  (void)self;
  free(b);
}
static weft_status fk_up(void *self, weft_buffer *buf, size_t off, const void *src, size_t n) {
  fake *l = self;
  fbuf *b = buf;
  if (l->fault == FAULT_STALE && b->uploaded) return WEFT_OK;
  b->uploaded = 1;
  memcpy((char *)b->data + off, src, n);
  return WEFT_OK;
}
static weft_status fk_down(void *self, weft_buffer *buf, size_t off, void *dst, size_t n) {
  (void)self;
  memcpy(dst, (const char *)((fbuf *)buf)->data + off, n);
  return WEFT_OK;
}

static float *data_of(weft_buffer *b) { return b ? ((fbuf *)b)->data : NULL; }

/* Output element counts of an op: out[0], out[1]. */
static void out_counts(const weft_op *op, size_t *n0, size_t *n1) {
  *n1 = 0;
  switch (op->kind) {
  case WEFT_OP_MATMUL: *n0 = (size_t)(op->batch * op->m * op->n); break;
  case WEFT_OP_SUM_ROWS: *n0 = (size_t)op->cols; break;
  case WEFT_OP_SOFTMAX_XENT:
    *n0 = op->out[0] ? 1 : 0;
    *n1 = op->out[1] ? (size_t)(op->rows * op->cols) : 0;
    break;
  default: *n0 = (size_t)(op->rows * op->cols); break;
  }
}

static void matmul_fma(const weft_op *op) {
  const int64_t m = op->m, n = op->n, k = op->k;
  for (int64_t p = 0; p < op->batch; p++) {
    const float *a = (const float *)op->in[0] + p * m * k, *b = (const float *)op->in[1] + (op->b_batched ? p * k * n : 0);
    float *c = (float *)op->out[0] + p * m * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int64_t q = 0; q < k; q++)
          acc = fmaf(op->trans_a ? a[q * m + i] : a[i * k + q], op->trans_b ? b[j * k + q] : b[q * n + j], acc);
        c[i * n + j] = acc;
      }
  }
}

static void softmax_libm(const weft_op *op) {
  const float *z = op->in[0], *t = op->in[1];
  float *loss = op->out[0], *grad = op->out[1], tot = 0.0f;
  for (int64_t i = 0; i < op->rows; i++) {
    const float *zr = z + i * op->cols, *tr = t + i * op->cols;
    float mx = zr[0], s = 0.0f, acc = 0.0f;
    for (int64_t j = 1; j < op->cols; j++) mx = zr[j] > mx ? zr[j] : mx;
    for (int64_t j = 0; j < op->cols; j++) s += expf(zr[j] - mx);
    float ls = logf(s);
    for (int64_t j = 0; j < op->cols; j++) {
      float lsm = (zr[j] - mx) - ls;
      acc += tr[j] * lsm;
      if (grad) grad[i * op->cols + j] = (expf(lsm) - tr[j]) * op->inv_rows;
    }
    tot += -acc;
  }
  if (loss) loss[0] = tot * op->inv_rows;
}

static weft_status fk_run(void *self, const weft_op *op_in) {
  fake *l = self;
  weft_op op = *op_in;
  for (int i = 0; i < 2; i++) op.in[i] = data_of(op_in->in[i]), op.out[i] = data_of(op_in->out[i]);
  size_t n0, n1;
  out_counts(&op, &n0, &n1);
  float keep = n0 ? ((float *)op.out[0])[n0 - 1] : 0.0f;
  if ((l->fault == FAULT_FMA || (l->fault == FAULT_FMA_LARGE_K && op.k > 2000)) && op.kind == WEFT_OP_MATMUL)
    matmul_fma(&op);
  else if (l->fault == FAULT_LIBM_EXP && op.kind == WEFT_OP_SOFTMAX_XENT) softmax_libm(&op);
  else {
    if (l->fault == FAULT_TRANS_B) op.trans_b = 0;
    weft_reference_run(&op);
  }
  if (l->fault == FAULT_RELU_NEGZERO && op.kind == WEFT_OP_RELU)
    for (size_t e = 0; e < n0; e++) {
      float *o = op.out[0];
      if (o[e] == 0.0f) o[e] = -0.0f;
    }
  if (l->fault == FAULT_FTZ)
    for (int i = 0; i < 2; i++) {
      float *o = op.out[i];
      for (size_t e = 0; o && e < (i ? n1 : n0); e++)
        if (o[e] != 0.0f && fabsf(o[e]) < 1.17549435e-38f) o[e] = copysignf(0.0f, o[e]);
    }
  if (l->fault == FAULT_UNWRITTEN && n0) ((float *)op.out[0])[n0 - 1] = keep;
  return WEFT_OK;
}

static const weft_lane_vtable FAKE_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = fk_describe,
    .destroy = fk_destroy, .buffer_alloc = fk_alloc, .buffer_free = fk_free, .upload = fk_up,
    .download = fk_down, .run = fk_run,
};

/* A CPU fabric plus one fake lane with `fault`; returns the fake lane's index in *lane. */
static weft_fabric *open_with_fake(fault flt, int *lane) {
  weft_fabric *f = NULL;
  if (tu_open("cpu", &f) != WEFT_OK) {
    TU_CHECK(0, "weft_fabric_open: %s", weft_open_error());
    return NULL;
  }
  fake *l = calloc(1, sizeof *l);
  snprintf(l->name, sizeof l->name, "fake:%s", FAULT_NAMES[flt]);
  l->fault = flt;
  weft_status st = weft_testing_add_lane(f, &FAKE_VTABLE, l);
  TU_CHECK(st == WEFT_OK, "weft_testing_add_lane(%s): %s", l->name, weft_status_str(st));
  *lane = (int)weft_fabric_lane_count(f) - 1;
  return f;
}

int main(void) {
  const double start = tu_now();
  const uint64_t seed = tu_seed();
  int lane;

  /* The faithful device lane: the whole suite passes, alone and mixed with the CPU. */
  printf("-- the suite on cpu + a faithful device-memory lane\n");
  weft_fabric *f = open_with_fake(FAULT_NONE, &lane);
  if (!f) return tu_finish("conformance_faults", start);
  weft_conf_stats total = {0, 0, 0, 0};
  weft_conf_run_all(f, seed, &total);
  TU_CHECK(total.failed == 0 && total.cases > 0, "the faithful lane failed %ld of %ld cases", total.failed,
           total.cases);
  weft_fabric_close(f);

  /* Each fault: caught under the contracts it breaks, passed under the others. Mismatch reports are
   * expected here, so they go to a scratch file and the failures they count are taken back. */
  printf("-- faulty lanes (their mismatch reports are discarded unless WEFT_TEST_VERBOSE is set)\n");
  FILE *scratch = getenv("WEFT_TEST_VERBOSE") ? NULL : tmpfile();
  weft_conf_log = scratch;
  for (int flt = 1; flt < FAULT_COUNT; flt++) {
    f = open_with_fake((fault)flt, &lane);
    if (!f) continue;
    for (int ci = 0; ci < 2; ci++) {
      const weft_contract contract = ci ? WEFT_CONTRACT_FP32 : WEFT_CONTRACT_EXACT;
      const long checks = tu_checks, failures = tu_failures;
      weft_conf_stats s = {0, 0, 0, 0};
      weft_conf_run(f, lane, contract, 1, 0, seed, &s);
      tu_checks = checks, tu_failures = failures;
      const int must_fail = (FAULT_BREAKS[flt] >> ci) & 1;
      printf("fake:%-13s %-5s: %ld of %ld cases failed (%s)\n", FAULT_NAMES[flt], weft_contract_str(contract), s.failed,
             s.cases, must_fail ? "must catch" : "must pass");
      if (must_fail)
        TU_CHECK(s.failed > 0, "the suite did not catch the '%s' fault under %s", FAULT_NAMES[flt],
                 weft_contract_str(contract));
      else
        TU_CHECK(s.failed == 0, "the suite rejected %ld cases of the '%s' lane under %s, which that contract allows",
                 s.failed, FAULT_NAMES[flt], weft_contract_str(contract));
    }
    weft_fabric_close(f);
  }
  weft_conf_log = NULL;
  if (scratch) fclose(scratch);
  return tu_finish("conformance_faults", start);
}
