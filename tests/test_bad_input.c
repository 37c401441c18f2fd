/* test_bad_input.c - every kind of bad call gets a clear status and never a crash.
 *
 * For each refused call: the exact status code, a message in weft_fabric_last_error (or weft_open_error)
 * that names what was wrong, outputs cleared or left untouched, and nothing already accepted lost: tensors
 * created before still read back their data and every lane still runs a correct op afterwards.
 * (A destroyed tensor is not tested: passing one is a use after free, which no C library can catch safely.) */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "tutil.h"

#if defined(__SANITIZE_ADDRESS__)
/* The 4 TiB tensor below must come back as WEFT_ERR_OUT_OF_MEMORY; ASan would abort on it instead. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

static weft_fabric *F;  /* the fabric under test */
static weft_fabric *F2; /* another fabric, for its tensors */

/* Tensors accepted before the bad calls, with the data they must keep. */
#define NKEEP 3
static weft_tensor *keep[NKEEP];
static float keep_data[NKEEP][15];
static const int64_t KEEP_A[2] = {3, 5}, KEEP_B[2] = {5, 3}, KEEP_C[2] = {3, 3};

static void setup(void) {
  tu_rng r = {tu_seed()};
  const int64_t *dims[NKEEP] = {KEEP_A, KEEP_B, KEEP_C};
  for (int i = 0; i < NKEEP; i++) {
    for (int e = 0; e < 15; e++) keep_data[i][e] = tu_rng_float(&r, -1, 1);
    TU_STATUS(weft_tensor_create(F, 2, dims[i], keep_data[i], &keep[i]), WEFT_OK, "setup: weft_tensor_create");
  }
}

/* Nothing accepted is lost, and every lane still computes: keep[0] . keep[1] on each lane, bit for bit. */
static void still_healthy(const char *after) {
  for (int i = 0; i < NKEEP; i++) {
    float got[15];
    size_t n = weft_tensor_numel(keep[i]);
    weft_status st = weft_tensor_read(keep[i], got, n);
    TU_CHECK(st == WEFT_OK && memcmp(got, keep_data[i], n * sizeof(float)) == 0,
             "after %s: a tensor created before no longer reads back its data (%s)", after, weft_status_str(st));
  }
  float want[9];
  weft_op op;
  memset(&op, 0, sizeof op);
  op.kind = WEFT_OP_MATMUL, op.in[0] = keep_data[0], op.in[1] = keep_data[1], op.out[0] = want;
  op.batch = 1, op.m = 3, op.n = 3, op.k = 5;
  weft_reference_run(&op);
  for (size_t l = 0; l < weft_fabric_lane_count(F); l++) {
    weft_lane_info li; /* a tensor-unit lane (tf32/bf16 only) has no exact matmul to check */
    if (weft_fabric_lane_info(F, l, &li) != WEFT_OK || !(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) continue;
    weft_op_desc d = {WEFT_CONTRACT_EXACT, (int)l};
    weft_status st = weft_op_matmul(F, &d, keep[0], 0, keep[1], 0, keep[2]);
    float got[9];
    if (st == WEFT_OK) st = weft_tensor_read(keep[2], got, 9);
    TU_CHECK(st == WEFT_OK && memcmp(got, want, sizeof want) == 0,
             "after %s: lane %zu no longer runs a correct matmul (%s: %s)", after, l, weft_status_str(st),
             weft_fabric_last_error(F));
    memcpy(keep_data[2], want, sizeof want);
  }
}

/* Clears the last error so that the message checked next is the refused call's own. weft_fabric_sync
 * starts with an empty message; if that ever changes, the needles below still tie a message to its call. */
static void clear_error(void) { weft_fabric_sync(F); }

/* A refused call on F: status, message mentioning `n1` and `n2` (NULL: not checked), nothing lost. */
static void expect(weft_status got, weft_status want, const char *what, const char *n1, const char *n2) {
  TU_STATUS(got, want, what);
  const char *msg = weft_fabric_last_error(F);
  TU_CHECK(msg && msg[0], "%s: refused with no message in weft_fabric_last_error", what);
  if (n1) TU_CHECK(tu_contains(msg, n1), "%s: the message '%s' does not mention '%s'", what, msg, n1);
  if (n2) TU_CHECK(tu_contains(msg, n2), "%s: the message '%s' does not mention '%s'", what, msg, n2);
  still_healthy(what);
}

/* A tensor of F with given shape and data 0, 1, 2, ... so a failed op can be shown not to have touched it. */
static weft_tensor *mk(int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t dims[4] = {d0, d1, d2, d3};
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
  float *data = malloc((n ? n : 1) * sizeof(float));
  for (size_t e = 0; e < n; e++) data[e] = (float)e;
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create(F, ndim, dims, data, &t);
  TU_CHECK(st == WEFT_OK, "mk: weft_tensor_create: %s", weft_fabric_last_error(F));
  free(data);
  return t;
}

/* t still holds 0, 1, 2, ...: a refused op wrote nothing. */
static void untouched(weft_tensor *t, const char *what) {
  size_t n = weft_tensor_numel(t);
  float *got = malloc((n ? n : 1) * sizeof(float));
  weft_status st = weft_tensor_read(t, got, n);
  size_t bad = 0;
  for (size_t e = 0; st == WEFT_OK && e < n; e++) bad += got[e] != (float)e;
  TU_CHECK(st == WEFT_OK && bad == 0, "%s: the refused op changed its output (%zu elements, %s)", what, bad,
           weft_status_str(st));
  free(got);
}

/* ------------------------------------------------------------------------------------------ open */

static void test_open(void) {
  weft_fabric *f = (weft_fabric *)&f; /* not NULL, so clearing shows */
  TU_STATUS(weft_fabric_open(NULL, NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_open(out NULL)");
  TU_CHECK(tu_contains(weft_open_error(), "out_fabric"), "weft_open_error '%s' does not name out_fabric",
           weft_open_error());
  static const char *const filters[] = {"no-such-lane", "cpu:7", ",", "vulkan:99,nothing"};
  for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
    weft_fabric_desc d = tu_desc();
    d.lanes = filters[i];
    f = (weft_fabric *)&f;
    weft_status st = weft_fabric_open(&d, &f);
    TU_CHECK(st == WEFT_ERR_NOT_FOUND, "weft_fabric_open(lanes '%s'): got %s, want not found", filters[i],
             weft_status_str(st));
    TU_CHECK(f == NULL, "weft_fabric_open(lanes '%s') failed but left *out_fabric set", filters[i]);
    TU_CHECK(tu_contains(weft_open_error(), filters[i]), "weft_open_error '%s' does not show the filter '%s'",
             weft_open_error(), filters[i]);
    if (st == WEFT_OK) weft_fabric_close(f);
  }
  weft_fabric_desc d = tu_desc();
  static const int calib[] = {-1, 3, 1000};
  for (size_t i = 0; i < sizeof calib / sizeof calib[0]; i++) {
    d.calibration = calib[i];
    f = (weft_fabric *)&f;
    TU_STATUS(weft_fabric_open(&d, &f), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_open(calibration out of range)");
    TU_CHECK(f == NULL, "a failed open left *out_fabric set");
    TU_CHECK(tu_contains(weft_open_error(), "calibration"), "weft_open_error '%s' does not name calibration",
             weft_open_error());
  }
  d = tu_desc();
  d.cpu_threads = -1;
  f = (weft_fabric *)&f;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_open(cpu_threads -1)");
  TU_CHECK(f == NULL, "a failed open left *out_fabric set");
  TU_CHECK(tu_contains(weft_open_error(), "cpu_threads"), "weft_open_error '%s' does not name cpu_threads",
           weft_open_error());
}

/* ------------------------------------------------------------------------------------------ tensors */

static void create_bad(int ndim, const int64_t *dims, weft_status want, const char *what, const char *n1,
                       const char *n2) {
  weft_tensor *t = (weft_tensor *)&t;
  clear_error();
  weft_status st = weft_tensor_create(F, ndim, dims, NULL, &t);
  TU_CHECK(t == NULL, "%s: a failed create left *out_tensor set", what);
  if (st == WEFT_OK) weft_tensor_destroy(t);
  expect(st, want, what, n1, n2);
}

static void test_create(void) {
  weft_tensor *t = (weft_tensor *)&t;
  const int64_t d2[2] = {2, 2};
  TU_STATUS(weft_tensor_create(NULL, 2, d2, NULL, &t), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_create(NULL fabric)");
  TU_CHECK(t == NULL, "weft_tensor_create(NULL fabric) left *out_tensor set");
  clear_error();
  expect(weft_tensor_create(F, 2, d2, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_create(out NULL)",
         "out_tensor", NULL);
  create_bad(2, NULL, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_create(dims NULL)", "dims", NULL);
  const int64_t d5[5] = {1, 1, 1, 1, 1};
  create_bad(0, d5, WEFT_ERR_SHAPE, "weft_tensor_create(rank 0)", "rank 0", NULL);
  create_bad(5, d5, WEFT_ERR_SHAPE, "weft_tensor_create(rank 5)", "rank 5", NULL);
  create_bad(-1, d5, WEFT_ERR_SHAPE, "weft_tensor_create(rank -1)", "rank -1", NULL);
  /* Negative dimensions anywhere; zero anywhere but a batch dimension of a rank-3 or rank-4 tensor. */
  static const struct {
    int ndim;
    int64_t dims[4];
    const char *what, *needle;
  } bad[] = {
      {1, {-1}, "[-1]", "-1"},
      {2, {3, -2}, "[3,-2]", "-2"},
      {3, {-1, 2, 2}, "[-1,2,2] (negative batch)", "-1"},
      {4, {2, 2, 2, INT64_MIN}, "[2,2,2,INT64_MIN]", "dimension 3"},
      {1, {0}, "[0]", "dimension 0"},
      {2, {0, 3}, "[0,3]", "dimension 0"},
      {2, {3, 0}, "[3,0]", "dimension 1"},
      {3, {2, 0, 3}, "[2,0,3] (zero rows)", "dimension 1"},
      {3, {2, 3, 0}, "[2,3,0] (zero columns)", "dimension 2"},
      {4, {1, 1, 0, 5}, "[1,1,0,5]", "dimension 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "weft_tensor_create %s", bad[i].what);
    create_bad(bad[i].ndim, bad[i].dims, WEFT_ERR_SHAPE, what, bad[i].needle, NULL);
  }
  /* Zero batch dimensions are empty tensors, not errors. */
  static const int64_t empty[][4] = {{0, 2, 3}, {2, 0, 2, 3}, {0, 0, 2, 3}};
  static const int empty_rank[] = {3, 4, 4};
  for (int i = 0; i < 3; i++) {
    t = NULL;
    TU_STATUS(weft_tensor_create(F, empty_rank[i], empty[i], NULL, &t), WEFT_OK, "weft_tensor_create(empty batch)");
    TU_CHECK(t && weft_tensor_numel(t) == 0, "an empty-batch tensor has %zu elements", weft_tensor_numel(t));
    weft_tensor_destroy(t);
  }
  /* Sizes whose product does not fit, including through a zero batch (the matrix itself must be describable:
   * ops multiply its rows by its columns). */
  static const struct {
    int ndim;
    int64_t dims[4];
    const char *what;
  } over[] = {
      {2, {(int64_t)1 << 32, (int64_t)1 << 32}, "[2^32,2^32]"},
      {2, {INT64_MAX, 2}, "[INT64_MAX,2]"},
      {4, {65536, 65536, 65536, 65536}, "[2^16,2^16,2^16,2^16] (wraps to 0)"},
      {2, {(int64_t)1 << 21, (int64_t)1 << 20}, "[2^21,2^20] (past the 2^40 cap)"},
      {1, {((int64_t)1 << 40) + 1}, "[2^40+1]"},
      {3, {0, (int64_t)1 << 32, (int64_t)1 << 32}, "[0,2^32,2^32] (empty batch of an overflowing matrix)"},
      {4, {2, 0, (int64_t)1 << 21, (int64_t)1 << 20}, "[2,0,2^21,2^20] (empty batch past the cap)"},
  };
  for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
    char what[128];
    snprintf(what, sizeof what, "weft_tensor_create %s", over[i].what);
    create_bad(over[i].ndim, over[i].dims, WEFT_ERR_OVERFLOW, what, "overflow", NULL);
  }
  /* 2^40 floats (4 TiB) fit the description but not the machine. With overcommit "always" the allocation
   * would succeed and zeroing it would bring in the OOM killer, so the case runs only where the kernel
   * refuses such an allocation. */
  FILE *fp = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (fp) {
    if (fscanf(fp, "%d", &mode) != 1) mode = -1;
    fclose(fp);
  }
  if (mode == 0 || mode == 2) {
    const int64_t huge[2] = {(int64_t)1 << 20, (int64_t)1 << 20};
    create_bad(2, huge, WEFT_ERR_OUT_OF_MEMORY, "weft_tensor_create [2^20,2^20] (4 TiB)", "memory", NULL);
  } else {
    printf("skip: 4 TiB tensor (vm.overcommit_memory is %d, the allocation might succeed)\n", mode);
  }
}

static void test_read_write(void) {
  weft_tensor *t = mk(2, 2, 3, 0, 0);
  float buf[8];
  clear_error();
  expect(weft_tensor_read(t, buf, 5), WEFT_ERR_SHAPE, "weft_tensor_read(count 5 of 6)", "5", "6");
  clear_error();
  expect(weft_tensor_read(t, buf, 7), WEFT_ERR_SHAPE, "weft_tensor_read(count 7 of 6)", "7", "6");
  clear_error();
  expect(weft_tensor_read(t, buf, 0), WEFT_ERR_SHAPE, "weft_tensor_read(count 0 of 6)", "0", "6");
  clear_error();
  expect(weft_tensor_read(t, NULL, 6), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read(NULL out)", "NULL", NULL);
  for (int e = 0; e < 8; e++) buf[e] = -7.0f;
  clear_error();
  expect(weft_tensor_write(t, buf, 5), WEFT_ERR_SHAPE, "weft_tensor_write(count 5 of 6)", "5", "6");
  clear_error();
  expect(weft_tensor_write(t, buf, 8), WEFT_ERR_SHAPE, "weft_tensor_write(count 8 of 6)", "8", "6");
  clear_error();
  expect(weft_tensor_write(t, NULL, 6), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write(NULL data)", "NULL", NULL);
  untouched(t, "weft_tensor_write with a bad count");
  /* No fabric to hold a message: the status alone. */
  TU_STATUS(weft_tensor_read(NULL, buf, 6), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read(NULL tensor)");
  TU_STATUS(weft_tensor_write(NULL, buf, 6), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write(NULL tensor)");
  int nd = 7;
  int64_t dims[4];
  TU_STATUS(weft_tensor_shape(NULL, &nd, dims), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_shape(NULL tensor)");
  TU_CHECK(nd == 0, "weft_tensor_shape(NULL) left out_ndim %d", nd);
  TU_STATUS(weft_tensor_shape(t, NULL, dims), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_shape(NULL out_ndim)");
  TU_STATUS(weft_tensor_shape(t, &nd, NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_shape(NULL out_dims)");
  weft_tensor_destroy(t);
  still_healthy("NULL tensor reads");
}

/* ------------------------------------------------------------------------------------------- lanes */

static void test_lane_queries(void) {
  size_t n = weft_fabric_lane_count(F);
  weft_lane_info li;
  char num[32];
  snprintf(num, sizeof num, "%zu", n);
  clear_error();
  expect(weft_fabric_lane_info(F, n, &li), WEFT_ERR_NOT_FOUND, "weft_fabric_lane_info(index = count)", num, "lane");
  TU_CHECK(li.name == NULL, "a failed weft_fabric_lane_info left out_info filled");
  clear_error();
  expect(weft_fabric_lane_info(F, (size_t)-1, &li), WEFT_ERR_NOT_FOUND, "weft_fabric_lane_info(index SIZE_MAX)", "lane",
         NULL);
  TU_STATUS(weft_fabric_lane_info(NULL, 0, &li), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_info(NULL fabric)");
  TU_STATUS(weft_fabric_lane_info(F, 0, NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_info(NULL out)");
  size_t idx = 77;
  weft_lane_info l0;
  weft_fabric_lane_info(F, 0, &l0);
  clear_error();
  expect(weft_fabric_lane_find(F, "no-such-lane", &idx), WEFT_ERR_NOT_FOUND, "weft_fabric_lane_find(unknown)",
         "no-such-lane", l0.name); /* the message lists the lanes that exist */
  TU_CHECK(idx == 0, "a failed weft_fabric_lane_find left out_index %zu", idx);
  clear_error();
  expect(weft_fabric_lane_find(F, NULL, &idx), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_find(NULL name)", "NULL",
         NULL);
  const char *name = "x", *reason = "x";
  TU_STATUS(weft_fabric_absent_info(F, weft_fabric_absent_count(F), &name, &reason), WEFT_ERR_NOT_FOUND,
            "weft_fabric_absent_info(index = count)");
  TU_CHECK(name == NULL && reason == NULL, "a failed weft_fabric_absent_info left its outputs set");
  TU_STATUS(weft_fabric_absent_info(F, 0, NULL, &reason), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_absent_info(NULL out)");
}

/* ---------------------------------------------------------------------------------------------- ops */

/* The same call under every bad op_desc: a lane index out of range, an unknown contract, a contract the
 * pinned lane does not honour. `run` calls the op with the desc; `out` must come through untouched. */
typedef weft_status (*op_fn)(const weft_op_desc *d, void *arg);

static void bad_descs(const char *op, op_fn run, void *arg, weft_tensor *out) {
  char what[160];
  const int n = (int)weft_fabric_lane_count(F);
  const int lanes[] = {n, n + 5, -2, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
    weft_op_desc d = {WEFT_CONTRACT_EXACT, lanes[i]};
    char num[24];
    snprintf(num, sizeof num, "%d", lanes[i]);
    snprintf(what, sizeof what, "%s pinned to lane %d of %d", op, lanes[i], n);
    clear_error();
    expect(run(&d, arg), WEFT_ERR_NOT_FOUND, what, "lane", num);
    if (out) untouched(out, what);
  }
  const int contracts[] = {WEFT_CONTRACT_COUNT, 99, -1, INT_MAX};
  for (size_t i = 0; i < sizeof contracts / sizeof contracts[0]; i++) {
    weft_op_desc d = {(weft_contract)contracts[i], WEFT_LANE_AUTO};
    snprintf(what, sizeof what, "%s under contract %d", op, contracts[i]);
    clear_error();
    expect(run(&d, arg), WEFT_ERR_INVALID_ARGUMENT, what, "contract", NULL);
    if (out) untouched(out, what);
  }
  /* TF32 and BF16 pinned to each lane that does not honour them (the CPU: exact and fp32 only). */
  weft_contract_mask any = 0;
  for (int l = 0; l < n; l++) {
    weft_lane_info li;
    weft_fabric_lane_info(F, (size_t)l, &li);
    any |= li.contracts;
    for (int c = WEFT_CONTRACT_TF32; c < WEFT_CONTRACT_COUNT; c++) {
      if (li.contracts & WEFT_CONTRACT_BIT(c)) continue;
      weft_op_desc d = {(weft_contract)c, l};
      snprintf(what, sizeof what, "%s under %s pinned to %s", op, weft_contract_str((weft_contract)c), li.name);
      clear_error();
      expect(run(&d, arg), WEFT_ERR_UNSUPPORTED, what, li.name, weft_contract_str((weft_contract)c));
      if (out) untouched(out, what);
    }
  }
  /* ... and left to the router when no lane honours them. */
  for (int c = WEFT_CONTRACT_TF32; c < WEFT_CONTRACT_COUNT; c++) {
    if (any & WEFT_CONTRACT_BIT(c)) continue;
    weft_op_desc d = {(weft_contract)c, WEFT_LANE_AUTO};
    snprintf(what, sizeof what, "%s under %s (no lane honours it)", op, weft_contract_str((weft_contract)c));
    clear_error();
    expect(run(&d, arg), WEFT_ERR_UNSUPPORTED, what, weft_contract_str((weft_contract)c), NULL);
    if (out) untouched(out, what);
  }
}

typedef struct mm_args {
  weft_tensor *a, *b, *c;
  int ta, tb;
} mm_args;
static weft_status run_mm(const weft_op_desc *d, void *p) {
  mm_args *m = p;
  return weft_op_matmul(F, d, m->a, m->ta, m->b, m->tb, m->c);
}

static void mm_bad(weft_tensor *a, int ta, weft_tensor *b, int tb, weft_tensor *c, weft_status want, const char *what,
                   const char *n1, const char *n2) {
  clear_error();
  expect(weft_op_matmul(F, NULL, a, ta, b, tb, c), want, what, n1, n2);
  if (c && c != a && c != b && weft_tensor_numel(c)) untouched(c, what);
}

static void test_matmul(void) {
  weft_tensor *a = mk(2, 3, 5, 0, 0), *b = mk(2, 5, 4, 0, 0), *c = mk(2, 3, 4, 0, 0);
  weft_tensor *a3 = mk(3, 2, 3, 5, 0), *b3 = mk(3, 2, 5, 4, 0), *c3 = mk(3, 2, 3, 4, 0);
  weft_tensor *b3x = mk(3, 3, 5, 4, 0), *c3x = mk(3, 3, 3, 4, 0), *b4 = mk(4, 1, 2, 5, 4), *v = mk(1, 5, 0, 0, 0);
  weft_tensor *c_wrong = mk(2, 4, 3, 0, 0), *c_rank3 = mk(3, 1, 3, 4, 0);
  TU_STATUS(weft_op_matmul(NULL, NULL, a, 0, b, 0, c), WEFT_ERR_INVALID_ARGUMENT, "weft_op_matmul(NULL fabric)");
  mm_bad(NULL, 0, b, 0, c, WEFT_ERR_INVALID_ARGUMENT, "matmul(a NULL)", "a is NULL", NULL);
  mm_bad(a, 0, NULL, 0, c, WEFT_ERR_INVALID_ARGUMENT, "matmul(b NULL)", "b is NULL", NULL);
  mm_bad(a, 0, b, 0, NULL, WEFT_ERR_INVALID_ARGUMENT, "matmul(c NULL)", "c is NULL", NULL);
  mm_bad(a, 0, a, 0, c, WEFT_ERR_SHAPE, "matmul [3,5].[3,5]", "[3,5]", "k=");
  mm_bad(a, 1, b, 0, c, WEFT_ERR_SHAPE, "matmul [3,5]^T.[5,4]", "[3,5]^T", "[5,4]");
  mm_bad(a, 0, b, 1, c, WEFT_ERR_SHAPE, "matmul [3,5].[5,4]^T", "[5,4]^T", "k=");
  mm_bad(a, 0, b, 0, c_wrong, WEFT_ERR_SHAPE, "matmul into c [4,3] for [3,4]", "[4,3]", "3,4");
  mm_bad(a, 0, b, 0, c_rank3, WEFT_ERR_SHAPE, "matmul [3,5].[5,4] into c [1,3,4]", "[1,3,4]", NULL);
  mm_bad(a3, 0, b3x, 0, c3, WEFT_ERR_SHAPE, "matmul batch 2 . batch 3", "[3,5,4]", "batch");
  mm_bad(a3, 0, b3, 0, c3x, WEFT_ERR_SHAPE, "matmul batch 2 into c of batch 3", "[3,3,4]", NULL);
  mm_bad(a3, 0, b4, 0, c3, WEFT_ERR_SHAPE, "matmul rank 3 . rank 4", "[1,2,5,4]", NULL);
  mm_bad(a, 0, b3, 0, c, WEFT_ERR_SHAPE, "matmul rank 2 . batched b", "[2,5,4]", NULL);
  mm_bad(v, 0, b, 0, c, WEFT_ERR_SHAPE, "matmul with a rank-1 a", "rank", "[5]");
  mm_bad(a, 0, v, 0, c, WEFT_ERR_SHAPE, "matmul with a rank-1 b", "rank", "[5]");
  weft_tensor *sq = mk(2, 5, 5, 0, 0), *sq2 = mk(2, 5, 5, 0, 0);
  mm_bad(sq, 0, sq2, 0, sq, WEFT_ERR_INVALID_ARGUMENT, "matmul c == a", "c", "a");
  mm_bad(sq, 0, sq2, 0, sq2, WEFT_ERR_INVALID_ARGUMENT, "matmul c == b", "c", "b");
  untouched(sq, "matmul c == a"), untouched(sq2, "matmul c == b");
  weft_tensor *o = NULL;
  const int64_t d2[2] = {5, 4};
  TU_STATUS(weft_tensor_create(F2, 2, d2, NULL, &o), WEFT_OK, "create on the second fabric");
  mm_bad(a, 0, o, 0, c, WEFT_ERR_WRONG_FABRIC, "matmul with b from another fabric", "b", "fabric");
  mm_bad(o, 0, b, 0, c, WEFT_ERR_WRONG_FABRIC, "matmul with a from another fabric", "a", "fabric");
  weft_tensor_destroy(o);
  mm_args args = {a, b, c, 0, 0};
  bad_descs("matmul", run_mm, &args, c);
  weft_tensor *tl[] = {a, b, c, a3, b3, c3, b3x, c3x, b4, v, c_wrong, c_rank3, sq, sq2};
  for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++) weft_tensor_destroy(tl[i]);
}

typedef struct ew_args {
  int op; /* 0 add, 1 relu, 2 relu_backward, 3 scale, 4 axpy, 5 sum_rows, 6 softmax_xent */
  weft_tensor *x, *y, *out, *out2;
} ew_args;

static weft_status run_ew(const weft_op_desc *d, void *p) {
  ew_args *e = p;
  switch (e->op) {
  case 0: return weft_op_add(F, d, e->x, e->y, e->out);
  case 1: return weft_op_relu(F, d, e->x, e->out);
  case 2: return weft_op_relu_backward(F, d, e->x, e->y, e->out);
  case 3: return weft_op_scale(F, d, 2.0f, e->x, e->out);
  case 4: return weft_op_axpy(F, d, 2.0f, e->x, e->y);
  case 5: return weft_op_sum_rows(F, d, e->x, e->out);
  default: return weft_op_softmax_xent(F, d, e->x, e->y, e->out, e->out2);
  }
}

static const char *const EW_NAMES[] = {"add", "relu", "relu_backward", "scale", "axpy", "sum_rows", "softmax_xent"};

/* Runs op with the given operands and no desc, expecting `want`; checks `watch` stays untouched. */
static void ew_bad(int op, weft_tensor *x, weft_tensor *y, weft_tensor *out, weft_tensor *out2, weft_tensor *watch,
                   weft_status want, const char *what, const char *n1, const char *n2) {
  ew_args e = {op, x, y, out, out2};
  char full[200];
  snprintf(full, sizeof full, "%s: %s", EW_NAMES[op], what);
  clear_error();
  expect(run_ew(NULL, &e), want, full, n1, n2);
  if (watch) untouched(watch, full);
}

static void test_elementwise(void) {
  weft_tensor *x = mk(2, 3, 4, 0, 0), *y = mk(2, 3, 4, 0, 0), *out = mk(2, 3, 4, 0, 0), *out2 = mk(2, 3, 4, 0, 0);
  weft_tensor *t43 = mk(2, 4, 3, 0, 0), *row = mk(1, 4, 0, 0, 0), *row3 = mk(1, 3, 0, 0, 0), *row1n = mk(2, 1, 4, 0, 0);
  weft_tensor *col = mk(2, 3, 1, 0, 0), *x3 = mk(3, 2, 3, 4, 0), *loss = mk(1, 1, 0, 0, 0), *loss2 = mk(1, 2, 0, 0, 0);
  weft_tensor *empty = mk(3, 0, 3, 4, 0), *empty_t = mk(3, 0, 3, 4, 0), *flat = mk(1, 12, 0, 0, 0);
  weft_tensor *o = NULL;
  const int64_t d2[2] = {3, 4};
  TU_STATUS(weft_tensor_create(F2, 2, d2, NULL, &o), WEFT_OK, "create on the second fabric");

  /* NULL fabric: a status and nothing else (there is no fabric to hold a message). */
  TU_STATUS(weft_op_add(NULL, NULL, x, y, out), WEFT_ERR_INVALID_ARGUMENT, "weft_op_add(NULL fabric)");
  TU_STATUS(weft_op_relu(NULL, NULL, x, out), WEFT_ERR_INVALID_ARGUMENT, "weft_op_relu(NULL fabric)");
  TU_STATUS(weft_op_relu_backward(NULL, NULL, x, y, out), WEFT_ERR_INVALID_ARGUMENT, "weft_op_relu_backward(NULL)");
  TU_STATUS(weft_op_scale(NULL, NULL, 1.0f, x, out), WEFT_ERR_INVALID_ARGUMENT, "weft_op_scale(NULL fabric)");
  TU_STATUS(weft_op_axpy(NULL, NULL, 1.0f, x, y), WEFT_ERR_INVALID_ARGUMENT, "weft_op_axpy(NULL fabric)");
  TU_STATUS(weft_op_sum_rows(NULL, NULL, x, row), WEFT_ERR_INVALID_ARGUMENT, "weft_op_sum_rows(NULL fabric)");
  TU_STATUS(weft_op_softmax_xent(NULL, NULL, x, y, loss, out), WEFT_ERR_INVALID_ARGUMENT, "weft_op_softmax_xent(NULL)");

  /* NULL tensors: the message names the op and the argument. */
  ew_bad(0, NULL, y, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "add", "x is NULL");
  ew_bad(0, x, NULL, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "y NULL", "add", "y is NULL");
  ew_bad(0, x, y, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out NULL", "add", "out is NULL");
  ew_bad(1, NULL, NULL, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "relu", "x is NULL");
  ew_bad(1, x, NULL, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out NULL", "relu", "out is NULL");
  ew_bad(2, NULL, y, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "grad NULL", "relu_backward", "grad is NULL");
  ew_bad(2, x, NULL, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "relu_backward", "x is NULL");
  ew_bad(2, x, y, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out NULL", "relu_backward", "out is NULL");
  ew_bad(3, NULL, NULL, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "scale", "x is NULL");
  ew_bad(3, x, NULL, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out NULL", "scale", "out is NULL");
  ew_bad(4, NULL, y, NULL, NULL, y, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "axpy", "x is NULL");
  ew_bad(4, x, NULL, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "y NULL", "axpy", "y is NULL");
  ew_bad(5, NULL, NULL, row, NULL, row, WEFT_ERR_INVALID_ARGUMENT, "x NULL", "sum_rows", "x is NULL");
  ew_bad(5, x, NULL, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out NULL", "sum_rows", "out is NULL");
  ew_bad(6, NULL, y, loss, out, out, WEFT_ERR_INVALID_ARGUMENT, "logits NULL", "softmax_xent", "logits is NULL");
  ew_bad(6, x, NULL, loss, out, out, WEFT_ERR_INVALID_ARGUMENT, "targets NULL", "softmax_xent", "targets is NULL");
  ew_bad(6, x, y, NULL, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "both outputs NULL", "softmax_xent", "both NULL");

  /* Shape mismatches, each op. */
  ew_bad(0, x, t43, out, NULL, out, WEFT_ERR_SHAPE, "y [4,3] for x [3,4]", "[4,3]", "[3,4]");
  ew_bad(0, x, row3, out, NULL, out, WEFT_ERR_SHAPE, "row y [3] for x [3,4]", "[3]", "[3,4]");
  ew_bad(0, x, col, out, NULL, out, WEFT_ERR_SHAPE, "column y [3,1] for x [3,4]", "[3,1]", NULL);
  ew_bad(0, x, flat, out, NULL, out, WEFT_ERR_SHAPE, "y [12] for x [3,4] (same count)", "[12]", NULL);
  ew_bad(0, x, y, t43, NULL, t43, WEFT_ERR_SHAPE, "out [4,3] for x [3,4]", "[4,3]", "[3,4]");
  ew_bad(0, x3, x, x3, NULL, x3, WEFT_ERR_SHAPE, "y [3,4] for x [2,3,4] (not a row)", "[3,4]", "[2,3,4]");
  /* out == a broadcast row y is always caught as out's shape differing from x's */
  ew_bad(0, x, row, row, NULL, row, WEFT_ERR_SHAPE, "out is the broadcast row y", "out [4]", "[3,4]");
  ew_bad(1, x, NULL, t43, NULL, t43, WEFT_ERR_SHAPE, "out [4,3] for x [3,4]", "[4,3]", "[3,4]");
  ew_bad(1, x, NULL, flat, NULL, flat, WEFT_ERR_SHAPE, "out [12] for x [3,4]", "[12]", "[3,4]");
  ew_bad(2, x, t43, out, NULL, out, WEFT_ERR_SHAPE, "x [4,3] for grad [3,4]", "[4,3]", "[3,4]");
  ew_bad(2, x, y, x3, NULL, x3, WEFT_ERR_SHAPE, "out [2,3,4] for [3,4]", "[2,3,4]", NULL);
  ew_bad(3, x, NULL, t43, NULL, t43, WEFT_ERR_SHAPE, "out [4,3] for x [3,4]", "[4,3]", "[3,4]");
  ew_bad(4, x, t43, NULL, NULL, t43, WEFT_ERR_SHAPE, "y [4,3] for x [3,4]", "[4,3]", "[3,4]");
  ew_bad(4, x, row, NULL, NULL, row, WEFT_ERR_SHAPE, "y [4] for x [3,4] (no broadcast in axpy)", "[4]", NULL);
  ew_bad(4, y, y, NULL, NULL, y, WEFT_ERR_INVALID_ARGUMENT, "x == y", "x", "y");
  ew_bad(5, x, NULL, row3, NULL, row3, WEFT_ERR_SHAPE, "out [3] for x [3,4]", "[3]", "[3,4]");
  ew_bad(5, x, NULL, out, NULL, out, WEFT_ERR_SHAPE, "out [3,4] for x [3,4]", "[3,4]", NULL);
  ew_bad(5, x, NULL, x, NULL, x, WEFT_ERR_INVALID_ARGUMENT, "out == x", "out", "x");
  ew_bad(6, x, t43, loss, out, out, WEFT_ERR_SHAPE, "targets [4,3] for logits [3,4]", "[4,3]", "[3,4]");
  ew_bad(6, x, y, loss, t43, t43, WEFT_ERR_SHAPE, "grad [4,3] for logits [3,4]", "[4,3]", "[3,4]");
  ew_bad(6, x, y, loss2, out, out, WEFT_ERR_SHAPE, "loss of 2 elements", "[2]", "one element");
  ew_bad(6, x, y, loss, x, NULL, WEFT_ERR_INVALID_ARGUMENT, "out_grad == logits", "out_grad", NULL);
  ew_bad(6, x, y, loss, y, NULL, WEFT_ERR_INVALID_ARGUMENT, "out_grad == targets", "out_grad", NULL);
  ew_bad(6, empty, empty_t, loss, NULL, loss, WEFT_ERR_SHAPE, "logits with no rows [0,3,4]", "no rows", NULL);

  /* A pointer to something that is not a tensor (readable, zeroed memory: nothing else is safe to pass). */
  static uint64_t not_a_tensor[64];
  weft_tensor *bogus = (weft_tensor *)not_a_tensor;
  ew_bad(1, bogus, NULL, out, NULL, out, WEFT_ERR_INVALID_ARGUMENT, "x is not a tensor", "x", "not a live");
  ew_bad(0, x, y, bogus, NULL, NULL, WEFT_ERR_INVALID_ARGUMENT, "out is not a tensor", "out", "not a live");
  float buf[4];
  TU_STATUS(weft_tensor_read(bogus, buf, 4), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read(not a tensor)");
  TU_STATUS(weft_tensor_write(bogus, buf, 4), WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write(not a tensor)");
  TU_CHECK(weft_tensor_numel(bogus) == 0, "weft_tensor_numel(not a tensor) != 0");
  weft_tensor_destroy(bogus); /* ignored */
  for (size_t i = 0; i < sizeof not_a_tensor / sizeof not_a_tensor[0]; i++)
    TU_CHECK(not_a_tensor[i] == 0, "weft_tensor_destroy wrote into something that is not a tensor");

  /* A tensor of another fabric, in each position. */
  ew_bad(0, x, o, out, NULL, out, WEFT_ERR_WRONG_FABRIC, "y of another fabric", "y", "fabric");
  ew_bad(0, x, y, o, NULL, NULL, WEFT_ERR_WRONG_FABRIC, "out of another fabric", "out", "fabric");
  ew_bad(1, o, NULL, out, NULL, out, WEFT_ERR_WRONG_FABRIC, "x of another fabric", "x", "fabric");
  ew_bad(2, x, o, out, NULL, out, WEFT_ERR_WRONG_FABRIC, "x of another fabric", "x", "fabric");
  ew_bad(3, x, NULL, o, NULL, NULL, WEFT_ERR_WRONG_FABRIC, "out of another fabric", "out", "fabric");
  ew_bad(4, o, y, NULL, NULL, y, WEFT_ERR_WRONG_FABRIC, "x of another fabric", "x", "fabric");
  ew_bad(5, o, NULL, row, NULL, row, WEFT_ERR_WRONG_FABRIC, "x of another fabric", "x", "fabric");
  ew_bad(6, x, y, loss, o, loss, WEFT_ERR_WRONG_FABRIC, "out_grad of another fabric", "grad", "fabric");

  /* Every bad desc, for each op. */
  ew_args args[7] = {{0, x, y, out, NULL}, {1, x, NULL, out, NULL}, {2, x, y, out, NULL}, {3, x, NULL, out, NULL},
                     {4, x, out2, NULL, NULL}, {5, x, NULL, row, NULL}, {6, x, y, loss, out}};
  weft_tensor *watch[7] = {out, out, out, out, out2, row, out};
  for (int i = 0; i < 7; i++) bad_descs(EW_NAMES[i], run_ew, &args[i], watch[i]);

  weft_tensor *tl[] = {x, y, out, out2, t43, row, row3, row1n, col, x3, loss, loss2, empty, empty_t, flat, o};
  for (size_t i = 0; i < sizeof tl / sizeof tl[0]; i++) weft_tensor_destroy(tl[i]);
}

/* ------------------------------------------------------------------------------------ cost and route */

static void test_cost_route(void) {
  weft_fabric *fresh = NULL;
  TU_STATUS(tu_open(NULL, &fresh), WEFT_OK, "open a fresh fabric");
  if (fresh) {
    weft_route_explanation e;
    weft_status st = weft_route_last(fresh, &e);
    TU_STATUS(st, WEFT_ERR_STATE, "weft_route_last before any routed op");
    TU_CHECK(tu_contains(weft_fabric_last_error(fresh), "no op"), "weft_route_last's message: '%s'",
             weft_fabric_last_error(fresh));
    weft_fabric_close(fresh);
  }
  const size_t n = weft_fabric_lane_count(F);
  char num[32];
  snprintf(num, sizeof num, "%zu", n);
  weft_cost_line line;
  clear_error();
  expect(weft_fabric_cost_model(F, n, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_NOT_FOUND,
         "weft_fabric_cost_model(lane = count)", "lane", num);
  clear_error();
  expect(weft_fabric_cost_model(F, 0, WEFT_COST_CLASS_COUNT, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_INVALID_ARGUMENT,
         "weft_fabric_cost_model(class out of range)", "class", NULL);
  clear_error();
  expect(weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, (weft_contract)-1, &line), WEFT_ERR_INVALID_ARGUMENT,
         "weft_fabric_cost_model(contract -1)", "contract", NULL);
  TU_STATUS(weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, NULL), WEFT_ERR_INVALID_ARGUMENT,
            "weft_fabric_cost_model(NULL out)");
  TU_STATUS(weft_fabric_cost_model(NULL, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_INVALID_ARGUMENT,
            "weft_fabric_cost_model(NULL fabric)");
  weft_cost_line before;
  weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &before);
  static const double bad_ab[][2] = {{-1, 1}, {NAN, 1}, {INFINITY, 1}, {0, -1}, {0, NAN}, {0, INFINITY}, {1e300, 1}};
  for (size_t i = 0; i < sizeof bad_ab / sizeof bad_ab[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "weft_fabric_set_cost_model(alpha %g, beta %g)", bad_ab[i][0], bad_ab[i][1]);
    clear_error();
    expect(weft_fabric_set_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, bad_ab[i][0], bad_ab[i][1]),
           WEFT_ERR_INVALID_ARGUMENT, what, "alpha", "beta");
  }
  clear_error();
  expect(weft_fabric_set_cost_model(F, n + 3, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 0, 1), WEFT_ERR_NOT_FOUND,
         "weft_fabric_set_cost_model(no such lane)", "lane", NULL);
  clear_error();
  expect(weft_fabric_set_cost_model(F, 0, (weft_cost_class)99, WEFT_CONTRACT_EXACT, 0, 1), WEFT_ERR_INVALID_ARGUMENT,
         "weft_fabric_set_cost_model(class 99)", "class", NULL);
  weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  /* (refine and points may move: the ops still_healthy runs are observed) */
  TU_CHECK(line.alpha == before.alpha && line.beta == before.beta && line.source == before.source,
           "refused weft_fabric_set_cost_model calls changed the model: alpha %g -> %g, beta %g -> %g", before.alpha,
           line.alpha, before.beta, line.beta);

  weft_route_explanation e;
  weft_route_query q;
  memset(&q, 0, sizeof q);
  q.op = WEFT_OP_MATMUL, q.batch = 1, q.m = 4, q.n = 4, q.k = 4;
  clear_error();
  expect(weft_route_explain(F, NULL, &e), WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain(NULL query)", "NULL", NULL);
  clear_error();
  expect(weft_route_explain(F, &q, NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain(NULL out)", "NULL", NULL);
  TU_STATUS(weft_route_explain(NULL, &q, &e), WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain(NULL fabric)");
  weft_route_query b = q;
  b.op = WEFT_OP_COUNT;
  clear_error();
  expect(weft_route_explain(F, &b, &e), WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain(op out of range)", "op", NULL);
  b = q, b.contract = (weft_contract)77;
  clear_error();
  expect(weft_route_explain(F, &b, &e), WEFT_ERR_INVALID_ARGUMENT, "weft_route_explain(contract 77)", "contract", NULL);
  b = q, b.m = 0;
  clear_error();
  expect(weft_route_explain(F, &b, &e), WEFT_ERR_SHAPE, "weft_route_explain(matmul m = 0)", "matmul", NULL);
  b = q, b.batch = -1;
  clear_error();
  expect(weft_route_explain(F, &b, &e), WEFT_ERR_SHAPE, "weft_route_explain(matmul batch -1)", "batch", NULL);
  b = q, b.op = WEFT_OP_RELU, b.rows = 0, b.cols = 3;
  clear_error();
  expect(weft_route_explain(F, &b, &e), WEFT_ERR_SHAPE, "weft_route_explain(relu rows 0)", "rows", NULL);
  /* Sizes no tensor could have: an answer (or a refusal), not an overflow. */
  b = q, b.batch = INT64_MAX, b.m = INT64_MAX, b.n = INT64_MAX, b.k = INT64_MAX;
  weft_status st = weft_route_explain(F, &b, &e);
  TU_CHECK(st == WEFT_OK || st == WEFT_ERR_SHAPE || st == WEFT_ERR_OVERFLOW, "weft_route_explain(INT64_MAX dims): %s",
           weft_status_str(st));
  still_healthy("weft_route_explain(INT64_MAX dims)");
  char path[8];
  TU_STATUS(weft_cost_cache_path(NULL, 64), WEFT_ERR_INVALID_ARGUMENT, "weft_cost_cache_path(NULL)");
  TU_STATUS(weft_cost_cache_path(path, 0), WEFT_ERR_INVALID_ARGUMENT, "weft_cost_cache_path(len 0)");
  st = weft_cost_cache_path(path, sizeof path);
  TU_CHECK(st == WEFT_ERR_IO || st == WEFT_ERR_INVALID_ARGUMENT, "weft_cost_cache_path into 8 bytes: %s",
           weft_status_str(st));
}

/* ------------------------------------------------------------------------------------------- scopes */

static void test_scopes(void) {
  clear_error();
  expect(weft_scope_end(F), WEFT_ERR_STATE, "weft_scope_end without a begin", "no scope", NULL);
  TU_STATUS(weft_scope_begin(F), WEFT_OK, "weft_scope_begin");
  clear_error();
  expect(weft_scope_begin(F), WEFT_ERR_STATE, "a nested weft_scope_begin", "already", NULL);
  /* The first scope is still open and working (still_healthy ran ops and reads inside it). */
  TU_STATUS(weft_scope_end(F), WEFT_OK, "weft_scope_end of the open scope");
  clear_error();
  expect(weft_scope_end(F), WEFT_ERR_STATE, "a second weft_scope_end", "no scope", NULL);
  TU_STATUS(weft_scope_begin(NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_scope_begin(NULL)");
  TU_STATUS(weft_scope_end(NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_scope_end(NULL)");
  TU_STATUS(weft_fabric_sync(NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_sync(NULL)");
}

/* ---------------------------------------------------------------------------------- transformer ops */

/* Bad calls of the transformer ops, on every lane that offers each op and through the router: an index out
 * of range (too large and negative) in an embedding lookup and its backward, a target out of range in
 * crossentropy, shapes that do not agree (a layernorm gamma of the wrong length, attention heads that do not
 * divide C, a qkv that is not 3C wide), an i32 tensor where floats are wanted and an f32 one where indices
 * are, and aliasing the op table refuses. Each: the status, a message naming the problem, the outputs left
 * as they were, and a result computed before the bad calls still reading back its bits. */
static weft_tensor *mki(int ndim, int64_t d0, int64_t d1, const int32_t *vals) {
  const int64_t dims[2] = {d0, d1};
  weft_tensor *t = NULL;
  weft_status st = weft_tensor_create_typed(F, WEFT_DTYPE_I32, ndim, dims, vals, &t);
  TU_CHECK(st == WEFT_OK, "mki: weft_tensor_create_typed: %s", weft_fabric_last_error(F));
  return t;
}

static weft_tensor *tx_good;    /* an embedding computed before any bad call */
static float tx_good_bits[6 * 8];

static void tx_refused(weft_status got, weft_status want, const char *what, const char *lane, const char *n1,
                       const char *n2) {
  char w[160];
  snprintf(w, sizeof w, "%s (on %s)", what, lane);
  expect(got, want, w, n1, n2);
  float now[6 * 8];
  weft_status st = weft_tensor_read(tx_good, now, 6 * 8);
  TU_CHECK(st == WEFT_OK && memcmp(now, tx_good_bits, sizeof now) == 0,
           "%s: an embedding computed before the bad call no longer reads back its bits (%s)", w, weft_status_str(st));
}

static void test_tx_ops(void) {
  enum { Bq = 2, Tq = 3, Cq = 8, Vq = 5 };
  const int32_t tok_ok[Bq * Tq] = {0, 4, 2, 1, 3, 4}, tok_big[Bq * Tq] = {0, 4, 2, 1, 5, 4},
                tok_neg[Bq * Tq] = {0, 4, -1, 1, 3, 4};
  weft_tensor *wte = mk(2, Vq, Cq, 0, 0), *wpe = mk(2, Tq, Cq, 0, 0), *out = mk(3, Bq, Tq, Cq, 0);
  weft_tensor *tok = mki(2, Bq, Tq, tok_ok), *big = mki(2, Bq, Tq, tok_big), *neg = mki(2, Bq, Tq, tok_neg);
  weft_tensor *dwte = mk(2, Vq, Cq, 0, 0), *dwpe = mk(2, Tq, Cq, 0, 0);
  /* the result that must survive: out = wte[tok] + wpe[t], computed now */
  tx_good = mk(2, Bq * Tq, Cq, 0, 0);
  TU_STATUS(weft_tensor_reshape(tx_good, 3, (const int64_t[]){Bq, Tq, Cq}), WEFT_OK, "reshape");
  TU_STATUS(weft_op_embedding(F, NULL, tok, NULL, wte, wpe, tx_good), WEFT_OK, "a good embedding");
  TU_STATUS(weft_tensor_read(tx_good, tx_good_bits, 6 * 8), WEFT_OK, "read the good embedding");
  for (int i = 0; i < 6 * 8; i++)
    TU_CHECK(tx_good_bits[i] == (float)(tok_ok[i / Cq] * Cq + i % Cq) + (float)((i / Cq) % Tq * Cq + i % Cq),
             "the good embedding's element %d is %g", i, (double)tx_good_bits[i]);
  /* layernorm, attention, crossentropy operands */
  weft_tensor *x = mk(2, 4, 10, 0, 0), *g10 = mk(1, 10, 0, 0, 0), *g11 = mk(1, 11, 0, 0, 0), *y = mk(2, 4, 10, 0, 0);
  weft_tensor *qkv30 = mk(3, 1, 4, 30, 0), *qkv31 = mk(3, 1, 4, 31, 0), *ao = mk(3, 1, 4, 10, 0), *att = mk(4, 1, 4, 4, 4);
  weft_tensor *ao2 = mk(3, 1, 4, 10, 0), *att3 = mk(4, 1, 3, 4, 4), *att1 = mk(4, 1, 1, 4, 4);
  const int32_t tg_ok[4] = {0, 9, 3, 2}, tg_big[4] = {0, 10, 3, 2}, tg_neg[4] = {0, 1, -3, 2};
  weft_tensor *logits = mk(2, 4, 10, 0, 0), *tg = mki(1, 4, 0, tg_ok), *tgb = mki(1, 4, 0, tg_big),
              *tgn = mki(1, 4, 0, tg_neg), *losses = mk(1, 4, 0, 0, 0), *dloss = mk(1, 4, 0, 0, 0),
              *dlogits = mk(2, 4, 10, 0, 0);
  const int32_t ints[40] = {0};
  weft_tensor *xi = mki(2, 4, 10, ints);

  for (int li = -1; li < (int)weft_fabric_lane_count(F); li++) {
    weft_lane_info info;
    const char *lane = "the router";
    uint64_t ops = WEFT_OPS_ALL;
    if (li >= 0) {
      if (weft_fabric_lane_info(F, (size_t)li, &info) != WEFT_OK || info.failed ||
          !(info.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)))
        continue;
      lane = info.name, ops = info.ops ? info.ops : WEFT_OPS_V1;
    }
    const weft_op_desc d = {WEFT_CONTRACT_EXACT, li < 0 ? WEFT_LANE_AUTO : li};
#define OFFERS(k) ((ops & WEFT_OP_BIT(k)) != 0)
    if (OFFERS(WEFT_OP_EMBEDDING)) {
      clear_error();
      tx_refused(weft_op_embedding(F, &d, big, NULL, wte, wpe, out), WEFT_ERR_INVALID_ARGUMENT,
                 "embedding with token id 5 of a 5-row table", lane, "tok[4]", "5");
      untouched(out, "embedding, token id out of range");
      clear_error();
      tx_refused(weft_op_embedding(F, &d, neg, NULL, wte, wpe, out), WEFT_ERR_INVALID_ARGUMENT,
                 "embedding with token id -1", lane, "tok[2]", "-1");
      untouched(out, "embedding, negative token id");
      clear_error();
      tx_refused(weft_op_embedding(F, &d, x, NULL, wte, wpe, out), WEFT_ERR_INVALID_ARGUMENT,
                 "embedding with f32 token ids", lane, "tok", "f32");
      untouched(out, "embedding, f32 token ids");
      clear_error();
      tx_refused(weft_op_embedding(F, &d, tok, NULL, xi, wpe, out), WEFT_ERR_INVALID_ARGUMENT,
                 "embedding with an i32 table", lane, "wte", "i32");
      untouched(out, "embedding, i32 table");
    }
    if (OFFERS(WEFT_OP_EMBEDDING_BACKWARD)) {
      clear_error();
      tx_refused(weft_op_embedding_backward(F, &d, out, big, NULL, dwte, dwpe), WEFT_ERR_INVALID_ARGUMENT,
                 "embedding backward with token id 5 of a 5-row table", lane, "tok[4]", NULL);
      untouched(dwte, "embedding backward, dwte"), untouched(dwpe, "embedding backward, dwpe");
    }
    if (OFFERS(WEFT_OP_LAYERNORM)) {
      clear_error();
      tx_refused(weft_op_layernorm(F, &d, x, g11, g10, 1e-5f, y, NULL, NULL), WEFT_ERR_SHAPE,
                 "layernorm with a gamma of 11 for rows of 10", lane, "gamma", "11");
      untouched(y, "layernorm, gamma of the wrong length");
      clear_error();
      tx_refused(weft_op_layernorm(F, &d, xi, g10, g10, 1e-5f, y, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
                 "layernorm of an i32 tensor", lane, "x", "i32");
      untouched(y, "layernorm of i32");
      clear_error();
      tx_refused(weft_op_layernorm(F, &d, x, g10, g10, 1e-5f, y, dloss, dloss), WEFT_ERR_INVALID_ARGUMENT,
                 "layernorm with mean and rstd one tensor", lane, "mean", "rstd");
      untouched(y, "layernorm, mean = rstd"), untouched(dloss, "layernorm, mean = rstd (mean)");
    }
    if (OFFERS(WEFT_OP_ATTENTION)) {
      clear_error();
      tx_refused(weft_op_attention(F, &d, qkv30, 4, ao, att, NULL), WEFT_ERR_SHAPE,
                 "attention of C = 10 in 4 heads", lane, "10", "4");
      untouched(ao, "attention, heads not dividing C"), untouched(att, "attention, heads not dividing C (att)");
      clear_error();
      tx_refused(weft_op_attention(F, &d, qkv31, 1, ao, att, NULL), WEFT_ERR_SHAPE,
                 "attention of a qkv 31 wide (not 3C)", lane, "qkv", "31");
      untouched(ao, "attention, qkv not 3C");
      clear_error();
      tx_refused(weft_op_attention(F, &d, qkv30, 2, ao2, att3, NULL), WEFT_ERR_SHAPE,
                 "attention with att for 3 heads, 2 asked", lane, "att", NULL);
      untouched(ao2, "attention, att of the wrong shape");
    }
    if (OFFERS(WEFT_OP_ATTENTION_BACKWARD)) {
      clear_error();
      tx_refused(weft_op_attention_backward(F, &d, ao, qkv30, att1, 1, qkv30), WEFT_ERR_INVALID_ARGUMENT,
                 "attention backward writing dqkv over qkv", lane, "dqkv", "qkv");
      untouched(qkv30, "attention backward, dqkv = qkv");
    }
    if (OFFERS(WEFT_OP_CROSSENTROPY)) {
      clear_error();
      tx_refused(weft_op_crossentropy(F, &d, logits, tgb, losses), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy with target 10 of 10 classes", lane, "targets[1]", "10");
      untouched(losses, "crossentropy, target out of range");
      clear_error();
      tx_refused(weft_op_crossentropy(F, &d, logits, tgn, losses), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy with target -3", lane, "targets[2]", "-3");
      untouched(losses, "crossentropy, negative target");
      clear_error();
      tx_refused(weft_op_crossentropy(F, &d, logits, dloss, losses), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy with f32 targets", lane, "targets", "f32");
      untouched(losses, "crossentropy, f32 targets");
      clear_error();
      tx_refused(weft_op_crossentropy(F, &d, xi, tg, losses), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy of i32 logits", lane, "logits", "i32");
      untouched(losses, "crossentropy, i32 logits");
    }
    if (OFFERS(WEFT_OP_CROSSENTROPY_BACKWARD)) {
      clear_error();
      tx_refused(weft_op_crossentropy_backward(F, &d, logits, tg, dloss, logits), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy backward writing dlogits over logits", lane, "dlogits", "logits");
      untouched(logits, "crossentropy backward, dlogits = logits");
      clear_error();
      tx_refused(weft_op_crossentropy_backward(F, &d, logits, tgb, dloss, dlogits), WEFT_ERR_INVALID_ARGUMENT,
                 "crossentropy backward with target 10 of 10 classes", lane, "targets[1]", NULL);
      untouched(dlogits, "crossentropy backward, target out of range");
    }
#undef OFFERS
  }
  weft_tensor *all[] = {wte, wpe, out, tok, big, neg, dwte, dwpe, tx_good, x, g10, g11, y, qkv30, qkv31, ao, att,
                        ao2, att3, att1, logits, tg, tgb, tgn, losses, dloss, dlogits, xi};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
  tx_good = NULL;
}

int main(void) {
  const double start = tu_now();
  test_open();
  if (tu_open(NULL, &F) != WEFT_OK || tu_open(NULL, &F2) != WEFT_OK) {
    fprintf(stderr, "FAIL: weft_fabric_open: %s\n", weft_open_error());
    return 1;
  }
  setup();
  still_healthy("setup");
  test_create();
  test_read_write();
  test_lane_queries();
  test_matmul();
  test_elementwise();
  test_tx_ops();
  test_cost_route();
  test_scopes();
  weft_fabric_close(F2);
  still_healthy("closing the other fabric");
  weft_fabric_close(F);
  return tu_finish("bad_input", start);
}
