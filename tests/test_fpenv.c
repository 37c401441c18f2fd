/* test_fpenv.c - the caller's floating-point environment must not change the bits. A host linked with
 * -ffast-math, or a framework that flushes denormals, runs with FTZ/DAZ set; another may change the rounding
 * mode. weft's exact kernels run under round-to-nearest with subnormals kept on every thread that computes
 * (the caller's, for the tiny ops it runs itself; the host queue's; every CPU pool thread, which inherit the
 * environment of the thread that opened the fabric), and leave the caller's environment as it was.
 *
 * For each dirty environment (FTZ and DAZ with rounding toward zero; FTZ and DAZ with rounding upward), set
 * either before weft_fabric_open (so every thread the fabric starts inherits it) or only after it, every op
 * below runs on every exact lane (the CPU lane with three threads; vulkan:0 where present) on values that
 * make or consume subnormals and whose roundings are inexact, and its bits must equal the reference computed
 * in the clean environment. After each op, the caller's rounding mode and MXCSR control bits (x86) must be
 * the ones it set. The reference itself is also checked under the dirty environment.
 *
 * Environment: WEFT_TEST_LANES restricts the lanes (default "cpu,vulkan"). */
#include <fenv.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#define MXCSR_FTZ 0x8000u
#define MXCSR_DAZ 0x0040u
#define MXCSR_FLAGS 0x003fu /* exception flags: status, not environment; weft's bookkeeping may raise them */
#endif

#include "core/reference.h"
#include "tutil.h"

enum fill {
  F_SUB,    /* subnormals of both signs and tiny normals, +-0 */
  F_HALF,   /* [0.3, 0.9): products with F_SUB stay subnormal and are inexact */
  F_MIXED,  /* [-1, 1) with about one in four F_SUB */
  F_WIDE,   /* logits in [-95, 5): exp(z - max) underflows into the subnormals */
  F_ONEHOT, /* one 1 per row */
};

typedef struct fcase {
  const char *name;
  weft_op_kind kind;
  int64_t rows, cols; /* matmul: m, n */
  int64_t k;          /* matmul only */
  float alpha;
  int fill_x, fill_y;
} fcase;

/* Small ones run on the caller's thread; the large ones go to the host queue and the pool's threads. */
static const fcase CASES[] = {
    {"matmul 3x4x5 (tiny)", WEFT_OP_MATMUL, 3, 5, 4, 0, F_SUB, F_HALF},
    {"matmul 9x40x26", WEFT_OP_MATMUL, 9, 26, 40, 0, F_SUB, F_HALF},
    {"matmul 160x192x176 (threads)", WEFT_OP_MATMUL, 160, 176, 192, 0, F_MIXED, F_SUB},
    {"add 7x9", WEFT_OP_ADD, 7, 9, 0, 0, F_SUB, F_SUB},
    {"add 1024x640 (threads)", WEFT_OP_ADD, 1024, 640, 0, 0, F_MIXED, F_SUB},
    {"scale 0.5 7x9", WEFT_OP_SCALE, 7, 9, 0, 0.5f, F_SUB, F_SUB},
    {"scale 0.3 1024x640 (threads)", WEFT_OP_SCALE, 1024, 640, 0, 0.3f, F_MIXED, F_SUB},
    {"axpy 0.7 5x11", WEFT_OP_AXPY, 5, 11, 0, 0.7f, F_SUB, F_SUB},
    {"relu 7x9", WEFT_OP_RELU, 7, 9, 0, 0, F_SUB, F_SUB},
    {"relu 1024x640 (threads)", WEFT_OP_RELU, 1024, 640, 0, 0, F_SUB, F_SUB},
    {"relu_backward 7x9", WEFT_OP_RELU_BACKWARD, 7, 9, 0, 0, F_SUB, F_SUB},
    {"sum_rows 300x37", WEFT_OP_SUM_ROWS, 300, 37, 0, 0, F_SUB, F_SUB},
    {"sum_rows 1024x640 (threads)", WEFT_OP_SUM_ROWS, 1024, 640, 0, 0, F_MIXED, F_SUB},
    {"softmax_xent 13x10", WEFT_OP_SOFTMAX_XENT, 13, 10, 0, 0, F_WIDE, F_ONEHOT},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* The host data and reference bits of one case. */
typedef struct data {
  float *x, *y;         /* inputs (matmul: a [m,k], b [k,n]; softmax: logits, targets) */
  float *want, *want2;  /* the output (axpy: y after), and softmax's grad (want holds its loss) */
  size_t nx, ny, nout, nout2;
  float inv_rows; /* softmax's 1/rows, computed in the clean environment as the fabric computes it */
} data;

static void fill(tu_rng *r, float *h, size_t n, int64_t cols, int how) {
  for (size_t e = 0; e < n; e++) {
    int64_t pick = tu_rng_int(r, 0, 5);
    if (how == F_MIXED && tu_rng_int(r, 0, 3) != 0) {
      h[e] = tu_rng_float(r, -1, 1);
      continue;
    }
    switch (how) {
    case F_HALF: h[e] = tu_rng_float(r, 0.3f, 0.9f); break;
    case F_WIDE: h[e] = tu_rng_float(r, -95, 5); break;
    case F_ONEHOT: h[e] = 0.0f; break;
    default:
      if (pick == 0) h[e] = 0.0f;
      else if (pick <= 2) h[e] = tu_float((uint32_t)tu_rng_int(r, 1, 0x007fffff) | (pick == 2 ? 0x80000000u : 0u));
      else h[e] = tu_rng_float(r, -4, 4) * FLT_MIN;
      break;
    }
  }
  if (how == F_ONEHOT)
    for (size_t row = 0; row < n / (size_t)cols; row++) h[row * (size_t)cols + (size_t)tu_rng_int(r, 0, cols - 1)] = 1.0f;
}

static void op_of(const fcase *c, data *d, weft_op *op) {
  memset(op, 0, sizeof *op);
  op->kind = c->kind;
  op->contract = WEFT_CONTRACT_EXACT;
  op->in[0] = d->x;
  op->in[1] = d->y;
  op->out[0] = d->want;
  op->rows = c->rows, op->cols = c->cols, op->alpha = c->alpha;
  if (c->kind == WEFT_OP_MATMUL) op->batch = 1, op->m = c->rows, op->n = c->cols, op->k = c->k;
  if (c->kind == WEFT_OP_RELU_BACKWARD) op->in[0] = d->y, op->in[1] = d->x; /* grad, x */
  if (c->kind == WEFT_OP_SOFTMAX_XENT) op->out[1] = d->want2, op->inv_rows = d->inv_rows;
}

/* Inputs from a fixed seed, and the reference bits computed in the current (clean) environment. */
static int data_make(const fcase *c, int idx, data *d) {
  memset(d, 0, sizeof *d);
  tu_rng r = {0x5eed0000u + (uint64_t)idx};
  const int mm = c->kind == WEFT_OP_MATMUL;
  d->nx = (size_t)(mm ? c->rows * c->k : c->rows * c->cols);
  d->ny = (size_t)(mm ? c->k * c->cols : c->rows * c->cols);
  d->nout = (size_t)(c->kind == WEFT_OP_SUM_ROWS ? c->cols : c->kind == WEFT_OP_SOFTMAX_XENT ? 1 : c->rows * c->cols);
  d->nout2 = c->kind == WEFT_OP_SOFTMAX_XENT ? (size_t)(c->rows * c->cols) : 0;
  d->x = malloc(d->nx * sizeof(float));
  d->y = malloc(d->ny * sizeof(float));
  d->want = malloc(d->nout * sizeof(float));
  d->want2 = d->nout2 ? malloc(d->nout2 * sizeof(float)) : NULL;
  if (!d->x || !d->y || !d->want || (d->nout2 && !d->want2)) return 0;
  d->inv_rows = 1.0f / (float)c->rows;
  fill(&r, d->x, d->nx, mm ? c->k : c->cols, c->fill_x);
  fill(&r, d->y, d->ny, c->cols, c->fill_y);
  if (c->kind == WEFT_OP_AXPY) memcpy(d->want, d->y, d->nout * sizeof(float));
  weft_op op;
  op_of(c, d, &op);
  weft_reference_run(&op);
  return 1;
}

static void data_free(data *d) {
  free(d->x), free(d->y), free(d->want), free(d->want2);
  memset(d, 0, sizeof *d);
}

static size_t count_diff(const float *got, const float *want, size_t n, size_t *first) {
  size_t bad = 0;
  for (size_t e = 0; e < n; e++)
    if (tu_bits(got[e]) != tu_bits(want[e]) && bad++ == 0) *first = e;
  return bad;
}

/* The environment the test sets, and reads back to compare. */
typedef struct env {
  int round;
  unsigned mxcsr; /* control bits only */
} env;

static env env_now(void) {
  env e;
  e.round = fegetround();
  e.mxcsr = 0;
#ifdef HAVE_MXCSR
  e.mxcsr = _mm_getcsr() & ~MXCSR_FLAGS;
#endif
  return e;
}

static int env_set_dirty(int round) {
  if (fesetround(round) != 0) return 0;
#ifdef HAVE_MXCSR
  _mm_setcsr(_mm_getcsr() | MXCSR_FTZ | MXCSR_DAZ);
#endif
  return 1;
}

static void env_set_clean(void) {
  fesetround(FE_TONEAREST);
#ifdef HAVE_MXCSR
  _mm_setcsr(_mm_getcsr() & ~(MXCSR_FTZ | MXCSR_DAZ));
#endif
}

static void check_env(const env *want, const char *what) {
  const env got = env_now();
  TU_CHECK(got.round == want->round, "%s: the caller's rounding mode is %d afterwards; it set %d", what, got.round,
           want->round);
  TU_CHECK(got.mxcsr == want->mxcsr, "%s: the caller's MXCSR control bits are 0x%04x afterwards; it set 0x%04x", what,
           got.mxcsr, want->mxcsr);
}

static weft_status make(weft_fabric *f, int64_t a, int64_t b, const float *h, weft_tensor **t) {
  const int64_t dims[2] = {a, b};
  return weft_tensor_create(f, 2, dims, h, t);
}

/* Runs case c on lane `lane` of f and compares its bits with the reference. */
static void run_case(weft_fabric *f, int lane, const char *lane_name, const fcase *c, const data *d, const env *dirty,
                     const char *when) {
  weft_op_desc desc = {WEFT_CONTRACT_EXACT, lane};
  weft_tensor *x = NULL, *y = NULL, *o = NULL, *o2 = NULL;
  const int mm = c->kind == WEFT_OP_MATMUL;
  char what[256];
  snprintf(what, sizeof what, "%s on %s (dirty environment %s)", c->name, lane_name, when);
  weft_status st = make(f, c->rows, mm ? c->k : c->cols, d->x, &x);
  if (st == WEFT_OK) st = make(f, mm ? c->k : c->rows, c->cols, d->y, &y);
  if (st == WEFT_OK && c->kind != WEFT_OP_AXPY)
    st = c->kind == WEFT_OP_SUM_ROWS ? make(f, 1, c->cols, NULL, &o)
         : c->kind == WEFT_OP_SOFTMAX_XENT ? make(f, 1, 1, NULL, &o)
                                            : make(f, c->rows, c->cols, NULL, &o);
  if (st == WEFT_OK && c->kind == WEFT_OP_SOFTMAX_XENT) st = make(f, c->rows, c->cols, NULL, &o2);
  TU_CHECK(st == WEFT_OK, "%s: creating tensors: %s", what, weft_fabric_last_error(f));
  if (st != WEFT_OK) goto done;
  switch (c->kind) {
  case WEFT_OP_MATMUL: st = weft_op_matmul(f, &desc, x, 0, y, 0, o); break;
  case WEFT_OP_ADD: st = weft_op_add(f, &desc, x, y, o); break;
  case WEFT_OP_SCALE: st = weft_op_scale(f, &desc, c->alpha, x, o); break;
  case WEFT_OP_AXPY: st = weft_op_axpy(f, &desc, c->alpha, x, y); break;
  case WEFT_OP_RELU: st = weft_op_relu(f, &desc, x, o); break;
  case WEFT_OP_RELU_BACKWARD: st = weft_op_relu_backward(f, &desc, y, x, o); break;
  case WEFT_OP_SUM_ROWS: st = weft_op_sum_rows(f, &desc, x, o); break;
  case WEFT_OP_SOFTMAX_XENT: st = weft_op_softmax_xent(f, &desc, x, y, o, o2); break;
  default: break;
  }
  TU_CHECK(st == WEFT_OK, "%s: %s: %s", what, weft_status_str(st), weft_fabric_last_error(f));
  if (st != WEFT_OK) goto done;
  float *got = malloc(d->nout * sizeof(float)), *got2 = d->nout2 ? malloc(d->nout2 * sizeof(float)) : NULL;
  if (got && (!d->nout2 || got2)) {
    st = weft_tensor_read(c->kind == WEFT_OP_AXPY ? y : o, got, d->nout);
    if (st == WEFT_OK && o2) st = weft_tensor_read(o2, got2, d->nout2);
    check_env(dirty, what); /* before the test's own arithmetic */
    TU_CHECK(st == WEFT_OK, "%s: read: %s", what, weft_fabric_last_error(f));
    size_t first = 0, bad = st == WEFT_OK ? count_diff(got, d->want, d->nout, &first) : 0;
    TU_CHECK(bad == 0, "%s: %zu of %zu elements differ from the clean environment's; first [%zu] got 0x%08x want 0x%08x",
             what, bad, d->nout, first, bad ? tu_bits(got[first]) : 0u, bad ? tu_bits(d->want[first]) : 0u);
    if (st == WEFT_OK && got2) {
      bad = count_diff(got2, d->want2, d->nout2, &first);
      TU_CHECK(bad == 0, "%s: grad: %zu of %zu elements differ from the clean environment's; first [%zu] got 0x%08x "
               "want 0x%08x", what, bad, d->nout2, first, bad ? tu_bits(got2[first]) : 0u,
               bad ? tu_bits(d->want2[first]) : 0u);
    }
  }
  free(got), free(got2);
done:
  weft_tensor_destroy(x), weft_tensor_destroy(y), weft_tensor_destroy(o), weft_tensor_destroy(o2);
}

/* The reference itself, called under the dirty environment. */
static void check_reference(const fcase *c, const data *d, const env *dirty, const char *when) {
  data tmp = *d;
  tmp.want = malloc(d->nout * sizeof(float));
  tmp.want2 = d->nout2 ? malloc(d->nout2 * sizeof(float)) : NULL;
  if (!tmp.want || (d->nout2 && !tmp.want2)) {
    free(tmp.want), free(tmp.want2);
    return;
  }
  if (c->kind == WEFT_OP_AXPY) memcpy(tmp.want, d->y, d->nout * sizeof(float));
  weft_op op;
  op_of(c, &tmp, &op);
  weft_reference_run(&op);
  char what[200];
  snprintf(what, sizeof what, "weft_reference_run %s (dirty environment %s)", c->name, when);
  check_env(dirty, what);
  size_t first = 0, bad = count_diff(tmp.want, d->want, d->nout, &first);
  if (tmp.want2) bad += count_diff(tmp.want2, d->want2, d->nout2, &first);
  TU_CHECK(bad == 0, "%s: %zu elements differ from the clean environment's", what, bad);
  free(tmp.want), free(tmp.want2);
}

int main(void) {
  const double start = tu_now();
  env_set_clean();
  data d[NCASES];
  for (int i = 0; i < NCASES; i++)
    if (!data_make(&CASES[i], i, &d[i])) {
      fprintf(stderr, "FAIL: out of memory for the case data\n");
      return 1;
    }
  const char *lanes = getenv("WEFT_TEST_LANES");
  if (!lanes || !*lanes) lanes = "cpu,vulkan";
  static const struct {
    int round;
    const char *name;
  } modes[] = {{FE_TOWARDZERO, "FTZ+DAZ, toward zero"}, {FE_UPWARD, "FTZ+DAZ, upward"}};
  int ran = 0;
  for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++)
    for (int before_open = 1; before_open >= 0; before_open--) {
      char when[96];
      snprintf(when, sizeof when, "%s, set %s weft_fabric_open", modes[mi].name, before_open ? "before" : "after");
      env_set_clean();
      if (before_open && !env_set_dirty(modes[mi].round)) {
        printf("skip: %s: this platform cannot set that rounding mode\n", when);
        continue;
      }
      weft_fabric_desc desc = tu_desc();
      desc.lanes = lanes;
      desc.cpu_threads = 3;
      weft_fabric *f = NULL;
      weft_status st = weft_fabric_open(&desc, &f);
      if (!before_open && !env_set_dirty(modes[mi].round)) {
        printf("skip: %s: this platform cannot set that rounding mode\n", when);
        if (st == WEFT_OK) weft_fabric_close(f);
        continue;
      }
      const env dirty = env_now();
      check_env(&dirty, "weft_fabric_open");
      TU_CHECK(st == WEFT_OK, "weft_fabric_open(%s) (%s): %s", lanes, when, weft_open_error());
      if (st != WEFT_OK) continue;
      printf("%s:", when);
      for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
        weft_lane_info info;
        if (weft_fabric_lane_info(f, l, &info) != WEFT_OK || info.failed ||
            !(info.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)))
          continue;
        printf(" %s", info.name);
        for (int i = 0; i < NCASES; i++) run_case(f, (int)l, info.name, &CASES[i], &d[i], &dirty, when);
        ran++;
      }
      printf("\n");
      for (int i = 0; i < NCASES; i++) check_reference(&CASES[i], &d[i], &dirty, when);
      weft_fabric_close(f);
      check_env(&dirty, "weft_fabric_close");
      env_set_clean();
    }
  for (int i = 0; i < NCASES; i++) data_free(&d[i]);
  TU_CHECK(ran > 0, "no exact lane ran the cases");
  return tu_finish("fpenv", start);
}
