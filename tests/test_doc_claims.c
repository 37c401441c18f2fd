/* test_doc_claims.c - the claims of include/weft.h that the other tests leave unchecked, each checked as
 * written: the status a refused call returns, the message it leaves (weft_fabric_last_error names what was
 * wrong), its outputs cleared (outputs are written last, through out_* pointers cleared first), and nothing
 * already accepted lost. Hostile arguments too: NULL in every pointer argument, sizes whose product does not
 * fit, indices and enum values out of range, tensors of another fabric, handles that are not tensors.
 * Runs on the CPU lane only: the claims are the core's, and every lane is behind the same checks. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference.h"
#include "core/reference_tx.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft_lane.h"

static weft_fabric *F;  /* the fabric under test */
static weft_fabric *F2; /* another fabric, for its tensors */
static weft_tensor *K;  /* accepted before every bad call; must keep KV */
static const float KV[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};

/* K still holds KV and a fresh op still runs: nothing accepted was lost. */
static void intact(const char *after) {
  float got[6] = {0};
  TU_STATUS(weft_tensor_read(K, got, 6), WEFT_OK, "read of an accepted tensor after a refused call");
  TU_CHECK(memcmp(got, KV, sizeof got) == 0, "after %s: an accepted tensor lost its value", after);
}

/* A refused call on F: the status, a message naming `needle` (NULL: any non-empty message), nothing lost. */
static void refused(weft_status got, weft_status want, const char *what, const char *needle) {
  TU_CHECK(got == want, "%s: got %s (%d), want %s (%d) [%s]", what, weft_status_str(got), (int)got,
           weft_status_str(want), (int)want, weft_fabric_last_error(F));
  const char *m = weft_fabric_last_error(F);
  TU_CHECK(m && m[0], "%s: refused without a message in weft_fabric_last_error", what);
  if (needle)
    TU_CHECK(tu_contains(m, needle), "%s: message '%s' does not name '%s'", what, m ? m : "(null)", needle);
  intact(what);
}

/* weft_fabric_sync empties the message first, so the message checked is the refused call's own. */
#define REFUSED(call, want, what, needle)                                                                         \
  do {                                                                                                            \
    weft_fabric_sync(F);                                                                                          \
    refused((call), (want), (what), (needle));                                                                    \
  } while (0)

static weft_tensor *mk2(weft_fabric *f, int64_t r, int64_t c) {
  const int64_t d[2] = {r, c};
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, 2, d, NULL, &t), WEFT_OK, "mk2");
  return t;
}

static weft_tensor *mk1i(weft_fabric *f, int64_t n) {
  const int64_t d[1] = {n};
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create_typed(f, WEFT_DTYPE_I32, 1, d, NULL, &t), WEFT_OK, "mk1i");
  return t;
}

/* ------------------------------------------------------------------------------------- names, versions */

static void test_names(void) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d.%d.%d", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
  TU_CHECK(strcmp(buf, WEFT_VERSION_STRING) == 0, "WEFT_VERSION_STRING '%s' is not the macros' '%s'",
           WEFT_VERSION_STRING, buf);
  TU_CHECK(strcmp(weft_version(), WEFT_VERSION_STRING) == 0, "weft_version");
  TU_CHECK(weft_version_number() == WEFT_VERSION_NUMBER, "weft_version_number");
  /* Never NULL, even far out of range. */
  const int odd[] = {-1, 99, 1000, INT_MIN, INT_MAX}; /* past every enum's last value */
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    const char *s = weft_status_str((weft_status)odd[i]);
    TU_CHECK(s != NULL && s[0], "weft_status_str(%d) is NULL or empty", odd[i]);
    TU_CHECK(strcmp(weft_contract_str((weft_contract)odd[i]), "?") == 0, "weft_contract_str(%d) is not '?'", odd[i]);
    TU_CHECK(strcmp(weft_dtype_str((weft_dtype)odd[i]), "?") == 0, "weft_dtype_str(%d) is not '?'", odd[i]);
    TU_CHECK(strcmp(weft_op_kind_str((weft_op_kind)odd[i]), "?") == 0, "weft_op_kind_str(%d) is not '?'", odd[i]);
    const char *c = weft_cost_class_str((weft_cost_class)odd[i]);
    TU_CHECK(c != NULL, "weft_cost_class_str(%d) is NULL", odd[i]);
  }
  TU_CHECK(strcmp(weft_contract_str(WEFT_CONTRACT_COUNT), "?") == 0, "weft_contract_str(COUNT)");
  TU_CHECK(strcmp(weft_dtype_str(WEFT_DTYPE_COUNT), "?") == 0, "weft_dtype_str(COUNT)");
  TU_CHECK(strcmp(weft_op_kind_str(WEFT_OP_COUNT), "?") == 0, "weft_op_kind_str(COUNT)");
  TU_CHECK(strcmp(weft_dtype_str(WEFT_DTYPE_F32), "f32") == 0 && strcmp(weft_dtype_str(WEFT_DTYPE_I32), "i32") == 0,
           "weft_dtype_str names");
  static const char *const cls[] = {"matmul", "elementwise", "upload", "download"};
  for (int i = 0; i < WEFT_COST_CLASS_COUNT; i++)
    TU_CHECK(strcmp(weft_cost_class_str((weft_cost_class)i), cls[i]) == 0, "weft_cost_class_str(%d) '%s'", i,
             weft_cost_class_str((weft_cost_class)i));
  /* Parses: every name round-trips; an unknown name or NULL is INVALID_ARGUMENT, the output cleared. */
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) {
    weft_contract got = WEFT_CONTRACT_COUNT;
    TU_STATUS(weft_contract_parse(weft_contract_str((weft_contract)c), &got), WEFT_OK, "weft_contract_parse");
    TU_CHECK(got == (weft_contract)c, "weft_contract_parse(%s) gave %d", weft_contract_str((weft_contract)c), got);
  }
  for (int k = 0; k < WEFT_OP_COUNT; k++) {
    weft_op_kind got = WEFT_OP_COUNT;
    const char *n = weft_op_kind_str((weft_op_kind)k);
    TU_CHECK(strcmp(n, "?") != 0, "op %d has no name", k);
    TU_STATUS(weft_op_kind_parse(n, &got), WEFT_OK, "weft_op_kind_parse");
    TU_CHECK(got == (weft_op_kind)k, "weft_op_kind_parse(%s) gave %d", n, got);
  }
  weft_contract c = WEFT_CONTRACT_TF32;
  TU_STATUS(weft_contract_parse("nope", &c), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(unknown)");
  TU_STATUS(weft_contract_parse(NULL, &c), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(NULL)");
  TU_STATUS(weft_contract_parse("exact", NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(out NULL)");
  TU_STATUS(weft_contract_parse("?", &c), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(\"?\")");
  weft_op_kind k = WEFT_OP_GELU;
  TU_STATUS(weft_op_kind_parse("nope", &k), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(unknown)");
  TU_STATUS(weft_op_kind_parse(NULL, &k), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(NULL)");
  TU_STATUS(weft_op_kind_parse("matmul", NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(out NULL)");
  TU_STATUS(weft_op_kind_parse("?", &k), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(\"?\")");
  /* Op bits. */
  TU_CHECK(WEFT_OPS_V1 == 0xffu, "WEFT_OPS_V1");
  TU_CHECK(WEFT_OPS_ALL == (((uint64_t)1 << WEFT_OP_COUNT) - 1), "WEFT_OPS_ALL");
  TU_CHECK(WEFT_CONTRACT_BIT(WEFT_CONTRACT_BF16) == 8u, "WEFT_CONTRACT_BIT");
}

/* ------------------------------------------------------------------------------------------ open, errors */

typedef struct open_thread {
  const char *before, *after; /* weft_open_error in the thread before and after another thread's failure */
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  int *stage;
} open_thread;

static void *failing_open(void *arg) {
  (void)arg;
  weft_fabric_desc d = tu_desc();
  d.lanes = "no-such-lane-xyz";
  weft_fabric *f = (weft_fabric *)&f;
  weft_status st = weft_fabric_open(&d, &f);
  return (void *)(intptr_t)(st == WEFT_ERR_NOT_FOUND && f == NULL && tu_contains(weft_open_error(), "no-such-lane-xyz"));
}

static void test_open(void) {
  /* A successful open clears the message; every failure sets it. */
  weft_fabric *f = NULL;
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu";
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open cpu");
  TU_CHECK(weft_open_error() && weft_open_error()[0] == 0, "a successful open left '%s' in weft_open_error",
           weft_open_error());
  TU_CHECK(weft_fabric_last_error(f) && weft_fabric_last_error(f)[0] == 0,
           "a fresh fabric's last error is '%s', not \"\"", weft_fabric_last_error(f));
  /* The open error is per thread: another thread's failure does not show here. */
  pthread_t th;
  void *ok = NULL;
  TU_CHECK(pthread_create(&th, NULL, failing_open, NULL) == 0, "pthread_create");
  pthread_join(th, &ok);
  TU_CHECK(ok != NULL, "a failing open on another thread did not set that thread's weft_open_error");
  TU_CHECK(weft_open_error()[0] == 0, "another thread's failed open shows in this thread's weft_open_error: '%s'",
           weft_open_error());
  weft_fabric_close(f);
  weft_fabric_close(NULL); /* NULL is ignored */
  weft_tensor_destroy(NULL);
  /* desc NULL opens with defaults (every lane; here it must at least succeed or fail with a message). */
  d = tu_desc();
  d.lanes = "";
  f = NULL;
  weft_status st = weft_fabric_open(&d, &f);
  TU_CHECK(st == WEFT_OK && f && weft_fabric_lane_count(f) >= 1, "lanes \"\" opens every lane found: %s",
           weft_status_str(st));
  weft_fabric_close(f);
  /* cpu_threads: 0 = the affinity mask's CPUs; a large count is capped at 4096, the details say so. */
  d = tu_desc();
  d.lanes = "cpu";
  d.cpu_threads = 1 << 20;
  f = NULL;
  st = weft_fabric_open(&d, &f);
  TU_CHECK(st == WEFT_OK, "cpu_threads 2^20 (capped at 4096): %s [%s]", weft_status_str(st), weft_open_error());
  if (st == WEFT_OK) {
    weft_lane_info li;
    TU_STATUS(weft_fabric_lane_info(f, 0, &li), WEFT_OK, "lane info");
    TU_CHECK(tu_contains(li.details, "4096 threads") && tu_contains(li.details, "limit"),
             "the cpu lane capped at 4096 threads does not say so: '%s'", li.details);
    weft_fabric_close(f);
  }
  /* 0: one thread per CPU of the affinity mask. */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    char want[32];
    snprintf(want, sizeof want, " %d thread", CPU_COUNT(&set));
    d.cpu_threads = 0;
    f = NULL;
    TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "cpu_threads 0");
    weft_lane_info li;
    if (f && weft_fabric_lane_info(f, 0, &li) == WEFT_OK)
      TU_CHECK(tu_contains(li.details, want), "cpu_threads 0: details '%s' do not say '%s'", li.details, want);
    weft_fabric_close(f);
  }
}

/* ------------------------------------------------------------------------------------------- NULL fabric */

static void test_null_fabric(void) {
  /* Every function taking a fabric, given NULL: a status, never a crash; outputs cleared. */
  const char *s = weft_fabric_last_error(NULL);
  TU_CHECK(s != NULL, "weft_fabric_last_error(NULL) is NULL");
  TU_CHECK(weft_fabric_lane_count(NULL) == 0, "weft_fabric_lane_count(NULL)");
  TU_CHECK(weft_fabric_absent_count(NULL) == 0, "weft_fabric_absent_count(NULL)");
  size_t idx = 5, up = 5;
  TU_STATUS(weft_fabric_lane_find(NULL, "cpu", &idx), WEFT_ERR_INVALID_ARGUMENT, "lane_find(NULL fabric)");
  TU_CHECK(idx == 0, "lane_find(NULL fabric) left *out_index %zu", idx);
  TU_STATUS(weft_fabric_revive(NULL, &up), WEFT_ERR_INVALID_ARGUMENT, "revive(NULL fabric)");
  TU_CHECK(up == 0, "revive(NULL fabric) left *out_up %zu", up);
  TU_STATUS(weft_scope_begin(NULL), WEFT_ERR_INVALID_ARGUMENT, "scope_begin(NULL)");
  TU_STATUS(weft_scope_end(NULL), WEFT_ERR_INVALID_ARGUMENT, "scope_end(NULL)");
  TU_STATUS(weft_fabric_sync(NULL), WEFT_ERR_INVALID_ARGUMENT, "sync(NULL)");
  TU_STATUS(weft_fabric_calibrate(NULL), WEFT_ERR_INVALID_ARGUMENT, "calibrate(NULL)");
  TU_STATUS(weft_fabric_calibration_wait(NULL), WEFT_ERR_INVALID_ARGUMENT, "calibration_wait(NULL)");
  weft_cost_line line;
  memset(&line, 0x5a, sizeof line);
  TU_STATUS(weft_fabric_cost_model(NULL, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_INVALID_ARGUMENT,
            "cost_model(NULL)");
  TU_CHECK(line.alpha == 0 && line.beta == 0 && line.source == 0 && line.points == 0,
           "cost_model(NULL fabric) left *out_line filled");
  TU_STATUS(weft_fabric_set_cost_model(NULL, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 1e9),
            WEFT_ERR_INVALID_ARGUMENT, "set_cost_model(NULL)");
  weft_route_query q = {WEFT_OP_ADD, WEFT_CONTRACT_EXACT, 0, 0, 0, 0, 4, 4};
  weft_route_explanation ex;
  memset(&ex, 0x5a, sizeof ex);
  TU_STATUS(weft_route_explain(NULL, &q, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_explain(NULL)");
  TU_CHECK(ex.lanes == NULL && ex.nlanes == 0, "route_explain(NULL fabric) left *out_explanation filled");
  TU_STATUS(weft_route_explain_registered(NULL, &q, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_explain_registered(NULL)");
  TU_STATUS(weft_route_last(NULL, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_last(NULL)");
  weft_split_report sr;
  memset(&sr, 0x5a, sizeof sr);
  TU_STATUS(weft_split_last(NULL, &sr), WEFT_ERR_INVALID_ARGUMENT, "split_last(NULL)");
  TU_CHECK(sr.shares == NULL && sr.nshares == 0 && sr.split == 0, "split_last(NULL fabric) left *out_report filled");
  weft_lane_stats ls;
  memset(&ls, 0x5a, sizeof ls);
  TU_STATUS(weft_fabric_lane_stats(NULL, 0, &ls), WEFT_ERR_INVALID_ARGUMENT, "lane_stats(NULL)");
  TU_CHECK(ls.ops[0] == 0 && ls.bytes_up == 0, "lane_stats(NULL fabric) left *out_stats filled");
  weft_fabric_reset_stats(NULL);
  TU_CHECK(weft_fabric_last_lane(NULL) == -1, "last_lane(NULL)");
  const char *n = "x", *r = "x";
  TU_STATUS(weft_fabric_absent_info(NULL, 0, &n, &r), WEFT_ERR_INVALID_ARGUMENT, "absent_info(NULL)");
  TU_CHECK(n == NULL && r == NULL, "absent_info(NULL fabric) left its outputs set");
  weft_tensor *t = (weft_tensor *)&t;
  const int64_t d[1] = {4};
  float buf[4];
  TU_STATUS(weft_tensor_wrap(NULL, 1, d, buf, &t), WEFT_ERR_INVALID_ARGUMENT, "wrap(NULL fabric)");
  TU_CHECK(t == NULL, "wrap(NULL fabric) left *out_tensor set");
  t = (weft_tensor *)&t;
  TU_STATUS(weft_tensor_wrap_lane(NULL, 0, 1, d, buf, &t), WEFT_ERR_INVALID_ARGUMENT, "wrap_lane(NULL fabric)");
  TU_CHECK(t == NULL, "wrap_lane(NULL fabric) left *out_tensor set");
  t = (weft_tensor *)&t;
  TU_STATUS(weft_tensor_create_typed(NULL, WEFT_DTYPE_I32, 1, d, NULL, &t), WEFT_ERR_INVALID_ARGUMENT,
            "create_typed(NULL fabric)");
  TU_CHECK(t == NULL, "create_typed(NULL fabric) left *out_tensor set");
  TU_STATUS(weft_op_matmul(NULL, NULL, K, 0, K, 0, K), WEFT_ERR_INVALID_ARGUMENT, "matmul(NULL fabric)");
  TU_STATUS(weft_op_run(NULL, NULL, WEFT_OP_RELU, &K, 1, &K, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "op_run(NULL fabric)");
  float norm = 3;
  TU_STATUS(weft_grad_clip(NULL, NULL, &K, 1, 1.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(NULL fabric)");
  weft_mpi_grad *g = (weft_mpi_grad *)&g;
  weft_status st = weft_mpi_grad_begin(NULL, WEFT_CONTRACT_EXACT, &g);
  TU_CHECK(st != WEFT_OK, "mpi_grad_begin(NULL fabric) succeeded");
  TU_CHECK(g == NULL, "mpi_grad_begin(NULL fabric) left *out_grad set");
  TU_STATUS(weft_mpi_grad_end(NULL), WEFT_OK, "mpi_grad_end(NULL) is ignored");
  intact("NULL fabric calls");
}

/* ------------------------------------------------------------------------------------------ NULL tensor */

static void test_null_tensor(void) {
  TU_CHECK(weft_tensor_numel(NULL) == 0, "numel(NULL) %zu", weft_tensor_numel(NULL));
  TU_CHECK(weft_tensor_dtype(NULL) == WEFT_DTYPE_COUNT, "dtype(NULL)");
  const char *loc = weft_tensor_location(NULL);
  TU_CHECK(loc != NULL, "location(NULL) is NULL");
  /* A handle without a live tensor's mark. */
  static uint64_t junk[64];
  memset(junk, 0x37, sizeof junk);
  weft_tensor *bogus = (weft_tensor *)junk;
  TU_CHECK(weft_tensor_dtype(bogus) == WEFT_DTYPE_COUNT, "dtype(not a tensor) %d", weft_tensor_dtype(bogus));
  TU_CHECK(weft_tensor_numel(bogus) == 0, "numel(not a tensor)");
  float b6[6];
  TU_STATUS(weft_tensor_read(bogus, b6, 6), WEFT_ERR_INVALID_ARGUMENT, "read(not a tensor)");
  TU_STATUS(weft_tensor_write(bogus, b6, 6), WEFT_ERR_INVALID_ARGUMENT, "write(not a tensor)");
  int32_t i6[6];
  TU_STATUS(weft_tensor_read_i32(bogus, i6, 6), WEFT_ERR_INVALID_ARGUMENT, "read_i32(not a tensor)");
  TU_STATUS(weft_tensor_write_i32(bogus, i6, 6), WEFT_ERR_INVALID_ARGUMENT, "write_i32(not a tensor)");
  TU_STATUS(weft_tensor_read_i32(NULL, i6, 6), WEFT_ERR_INVALID_ARGUMENT, "read_i32(NULL)");
  TU_STATUS(weft_tensor_write_i32(NULL, i6, 6), WEFT_ERR_INVALID_ARGUMENT, "write_i32(NULL)");
  const int64_t d2[2] = {3, 2};
  TU_STATUS(weft_tensor_reshape(NULL, 2, d2), WEFT_ERR_INVALID_ARGUMENT, "reshape(NULL)");
  TU_STATUS(weft_tensor_reshape(bogus, 2, d2), WEFT_ERR_INVALID_ARGUMENT, "reshape(not a tensor)");
  TU_STATUS(weft_tensor_prefetch(NULL, 0), WEFT_ERR_INVALID_ARGUMENT, "prefetch(NULL)");
  TU_STATUS(weft_tensor_prefetch(bogus, 0), WEFT_ERR_INVALID_ARGUMENT, "prefetch(not a tensor)");
  void *addr = (void *)&addr;
  TU_STATUS(weft_tensor_lane_address(NULL, 0, &addr), WEFT_ERR_INVALID_ARGUMENT, "lane_address(NULL)");
  TU_CHECK(addr == NULL, "lane_address(NULL) left *out_address set");
  int nd = 9;
  int64_t dims[4];
  TU_STATUS(weft_tensor_shape(bogus, &nd, dims), WEFT_ERR_INVALID_ARGUMENT, "shape(not a tensor)");
  weft_tensor_destroy(bogus); /* refused quietly: not a tensor */
  TU_CHECK(junk[0] == 0x3737373737373737ull, "destroy(not a tensor) wrote to the handle");
  /* Ops given a NULL or bogus operand where one is required. */
  weft_tensor *o = mk2(F, 3, 2);
  REFUSED(weft_op_relu(F, NULL, NULL, o), WEFT_ERR_INVALID_ARGUMENT, "relu(x NULL)", "x");
  REFUSED(weft_op_relu(F, NULL, K, NULL), WEFT_ERR_INVALID_ARGUMENT, "relu(out NULL)", "out");
  REFUSED(weft_op_relu(F, NULL, bogus, o), WEFT_ERR_INVALID_ARGUMENT, "relu(x not a tensor)", "not a live weft tensor");
  REFUSED(weft_op_gelu(F, NULL, NULL, o), WEFT_ERR_INVALID_ARGUMENT, "gelu(x NULL)", NULL);
  REFUSED(weft_op_scale(F, NULL, 2.0f, K, bogus), WEFT_ERR_INVALID_ARGUMENT, "scale(out not a tensor)", "not a live weft tensor");
  weft_tensor_destroy(o);
}

/* ----------------------------------------------------------------------------------------- create rules */

static void test_create_rules(void) {
  weft_tensor *t = (weft_tensor *)&t;
  const int64_t d2[2] = {2, 3};
  /* create_typed: an unknown dtype. */
  REFUSED(weft_tensor_create_typed(F, WEFT_DTYPE_COUNT, 2, d2, NULL, &t), WEFT_ERR_INVALID_ARGUMENT,
          "create_typed(dtype COUNT)", "dtype");
  TU_CHECK(t == NULL, "create_typed(bad dtype) left *out_tensor set");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_create_typed(F, (weft_dtype)-1, 2, d2, NULL, &t), WEFT_ERR_INVALID_ARGUMENT,
          "create_typed(dtype -1)", "dtype");
  TU_CHECK(t == NULL, "create_typed(bad dtype) left *out_tensor set");
  REFUSED(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d2, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "create_typed(out NULL)", "out_tensor");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, NULL, NULL, &t), WEFT_ERR_INVALID_ARGUMENT,
          "create_typed(dims NULL)", "dims");
  TU_CHECK(t == NULL, "create_typed(dims NULL) left *out_tensor set");
  /* The same overflow rules in create_typed, wrap and reshape as in create. */
  const int64_t big[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, big, NULL, &t), WEFT_ERR_OVERFLOW, "create_typed(2^64)",
          "overflow");
  TU_CHECK(t == NULL, "create_typed(overflow) left *out_tensor set");
  float mem[6] = {0};
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap(F, 2, big, mem, &t), WEFT_ERR_OVERFLOW, "wrap(2^64)", "overflow");
  TU_CHECK(t == NULL, "wrap(overflow) left *out_tensor set");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap(F, 2, d2, NULL, &t), WEFT_ERR_INVALID_ARGUMENT, "wrap(data NULL)", "data");
  TU_CHECK(t == NULL, "wrap(data NULL) left *out_tensor set");
  REFUSED(weft_tensor_wrap(F, 2, d2, mem, NULL), WEFT_ERR_INVALID_ARGUMENT, "wrap(out NULL)", "out_tensor");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap(F, 2, NULL, mem, &t), WEFT_ERR_INVALID_ARGUMENT, "wrap(dims NULL)", "dims");
  const int64_t neg[2] = {2, -3};
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap(F, 2, neg, mem, &t), WEFT_ERR_SHAPE, "wrap([2,-3])", "-3");
  TU_CHECK(t == NULL, "wrap(bad shape) left *out_tensor set");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap(F, 5, d2, mem, &t), WEFT_ERR_SHAPE, "wrap(rank 5)", "rank");
  /* Reading or writing a wrapped tensor through memory that overlaps its own at another address: refused,
   * nothing moved (a copy between them would read what it had overwritten); the same pointer is fine. */
  float ov[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const int64_t d6o[1] = {6};
  weft_tensor *tw = NULL;
  TU_STATUS(weft_tensor_wrap(F, 1, d6o, ov, &tw), WEFT_OK, "wrap ov[0..6)");
  REFUSED(weft_tensor_write(tw, ov + 2, 6), WEFT_ERR_INVALID_ARGUMENT, "write from ov+2 into a wrap of ov", "overlap");
  REFUSED(weft_tensor_read(tw, ov + 1, 6), WEFT_ERR_INVALID_ARGUMENT, "read into ov+1 from a wrap of ov", "overlap");
  for (int i = 0; i < 8; i++) TU_CHECK(ov[i] == (float)i, "a refused overlapping copy moved data (ov[%d] = %g)", i, (double)ov[i]);
  TU_STATUS(weft_tensor_write(tw, ov, 6), WEFT_OK, "write from the wrapped pointer itself");
  TU_STATUS(weft_tensor_read(tw, ov, 6), WEFT_OK, "read into the wrapped pointer itself");
  weft_tensor_destroy(tw);
  TU_CHECK(ov[7] == 7.0f, "destroying a wrap touched the caller's memory");
  /* An empty batch wraps too (the shape rules of create). */
  const int64_t e3[3] = {0, 2, 3};
  t = NULL;
  TU_STATUS(weft_tensor_wrap(F, 3, e3, mem, &t), WEFT_OK, "wrap(empty batch)");
  TU_CHECK(t && weft_tensor_numel(t) == 0, "wrap(empty batch) numel");
  weft_tensor_destroy(t);
  /* wrap_lane on the CPU lane: unsupported, naming the lane; a lane out of range. */
  size_t cpu = 0;
  TU_STATUS(weft_fabric_lane_find(F, "cpu", &cpu), WEFT_OK, "lane_find cpu");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap_lane(F, cpu, 2, d2, mem, &t), WEFT_ERR_UNSUPPORTED, "wrap_lane(cpu)", "cpu");
  TU_CHECK(t == NULL, "wrap_lane(cpu) left *out_tensor set");
  t = (weft_tensor *)&t;
  weft_fabric_sync(F);
  weft_status st = weft_tensor_wrap_lane(F, 999, 2, d2, mem, &t);
  TU_CHECK(st == WEFT_ERR_NOT_FOUND, "wrap_lane(lane 999): %s", weft_status_str(st));
  TU_CHECK(t == NULL, "wrap_lane(lane 999) left *out_tensor set");
  TU_CHECK(weft_fabric_last_error(F)[0] != 0, "wrap_lane(lane 999) left no message");
  t = (weft_tensor *)&t;
  REFUSED(weft_tensor_wrap_lane(F, cpu, 2, d2, NULL, &t), WEFT_ERR_INVALID_ARGUMENT, "wrap_lane(address NULL)",
          "address");
  TU_CHECK(t == NULL, "wrap_lane(address NULL) left *out_tensor set");
  /* Shape: unused dims are 1; dtype of created tensors. */
  weft_tensor *a = NULL;
  const float v6[6] = {1, 2, 3, 4, 5, 6};
  TU_STATUS(weft_tensor_create(F, 2, d2, v6, &a), WEFT_OK, "create 2x3");
  int nd = 0;
  int64_t dims[4] = {9, 9, 9, 9};
  TU_STATUS(weft_tensor_shape(a, &nd, dims), WEFT_OK, "shape");
  TU_CHECK(nd == 2 && dims[0] == 2 && dims[1] == 3 && dims[2] == 1 && dims[3] == 1, "shape: unused dims not 1");
  TU_CHECK(weft_tensor_dtype(a) == WEFT_DTYPE_F32, "create makes f32");
  TU_CHECK(strcmp(weft_tensor_location(a), "host") == 0, "a created tensor starts on the host: '%s'",
           weft_tensor_location(a));
  /* Reading/writing across dtypes: INVALID_ARGUMENT and nothing moves. */
  weft_tensor *ti = NULL;
  const int32_t iv[6] = {1, 2, 3, 4, 5, 6};
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d2, iv, &ti), WEFT_OK, "create_typed i32");
  TU_CHECK(weft_tensor_dtype(ti) == WEFT_DTYPE_I32, "create_typed i32 dtype");
  weft_tensor *tz = NULL;
  int32_t zb[6] = {5, 5, 5, 5, 5, 5};
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d2, NULL, &tz), WEFT_OK, "create_typed i32, data NULL");
  TU_STATUS(weft_tensor_read_i32(tz, zb, 6), WEFT_OK, "read_i32 of zeros");
  TU_CHECK(zb[0] == 0 && zb[5] == 0, "create_typed with data NULL is not zeros");
  weft_tensor_destroy(tz);
  float fb[6] = {-9, -9, -9, -9, -9, -9};
  REFUSED(weft_tensor_read(ti, fb, 6), WEFT_ERR_INVALID_ARGUMENT, "read f32 of an i32 tensor", "i32");
  TU_CHECK(fb[0] == -9 && fb[5] == -9, "read f32 of an i32 tensor moved data");
  REFUSED(weft_tensor_write(ti, fb, 6), WEFT_ERR_INVALID_ARGUMENT, "write f32 into an i32 tensor", "i32");
  int32_t ib[6] = {-9, -9, -9, -9, -9, -9};
  REFUSED(weft_tensor_read_i32(a, ib, 6), WEFT_ERR_INVALID_ARGUMENT, "read_i32 of an f32 tensor", "f32");
  TU_CHECK(ib[0] == -9 && ib[5] == -9, "read_i32 of an f32 tensor moved data");
  REFUSED(weft_tensor_write_i32(a, ib, 6), WEFT_ERR_INVALID_ARGUMENT, "write_i32 into an f32 tensor", "f32");
  TU_STATUS(weft_tensor_read_i32(ti, ib, 6), WEFT_OK, "read_i32");
  TU_CHECK(memcmp(ib, iv, sizeof iv) == 0, "i32 tensor lost its value after refused calls");
  float fa[6];
  TU_STATUS(weft_tensor_read(a, fa, 6), WEFT_OK, "read");
  TU_CHECK(memcmp(fa, v6, sizeof fa) == 0, "f32 tensor changed by a refused write_i32");
  REFUSED(weft_tensor_read_i32(ti, ib, 5), WEFT_ERR_SHAPE, "read_i32(count 5 of 6)", "5");
  REFUSED(weft_tensor_write_i32(ti, NULL, 6), WEFT_ERR_INVALID_ARGUMENT, "write_i32(NULL)", NULL);
  REFUSED(weft_tensor_read_i32(ti, NULL, 6), WEFT_ERR_INVALID_ARGUMENT, "read_i32(NULL)", NULL);
  /* Reshape: same count fine (dtype, value kept); a different count is SHAPE; bad dims, NULL dims,
   * overflow; a failed reshape leaves the shape as it was. */
  const int64_t d6[1] = {6}, d32[2] = {3, 2}, d7[1] = {7};
  TU_STATUS(weft_tensor_reshape(ti, 1, d6), WEFT_OK, "reshape i32 to [6]");
  TU_CHECK(weft_tensor_dtype(ti) == WEFT_DTYPE_I32, "reshape changed the dtype");
  REFUSED(weft_tensor_reshape(a, 1, d7), WEFT_ERR_SHAPE, "reshape 6 -> 7", NULL);
  REFUSED(weft_tensor_reshape(a, 2, NULL), WEFT_ERR_INVALID_ARGUMENT, "reshape(dims NULL)", "dims");
  REFUSED(weft_tensor_reshape(a, 0, d6), WEFT_ERR_SHAPE, "reshape(rank 0)", "rank");
  REFUSED(weft_tensor_reshape(a, 5, d6), WEFT_ERR_SHAPE, "reshape(rank 5)", "rank");
  REFUSED(weft_tensor_reshape(a, 2, neg), WEFT_ERR_SHAPE, "reshape([2,-3])", NULL);
  REFUSED(weft_tensor_reshape(a, 2, big), WEFT_ERR_OVERFLOW, "reshape(2^64)", "overflow");
  const int64_t wrap0[4] = {65536, 65536, 65536, 65536};
  REFUSED(weft_tensor_reshape(a, 4, wrap0), WEFT_ERR_OVERFLOW, "reshape(2^64 wrapping to 0)", "overflow");
  /* A shape that wraps to 6 modulo 2^64 must not pass as 6 elements. */
  const int64_t wrap6[3] = {6, (int64_t)1 << 32, ((int64_t)1 << 32) + 0};
  REFUSED(weft_tensor_reshape(a, 3, wrap6), WEFT_ERR_OVERFLOW, "reshape(6*2^64)", "overflow");
  nd = 0;
  TU_STATUS(weft_tensor_shape(a, &nd, dims), WEFT_OK, "shape after refused reshapes");
  TU_CHECK(nd == 2 && dims[0] == 2 && dims[1] == 3, "a refused reshape changed the shape");
  TU_STATUS(weft_tensor_reshape(a, 2, d32), WEFT_OK, "reshape 2x3 -> 3x2");
  TU_STATUS(weft_tensor_read(a, fa, 6), WEFT_OK, "read after reshape");
  TU_CHECK(memcmp(fa, v6, sizeof fa) == 0, "reshape changed the value");
  /* Reshape to an empty batch: 0 elements is not 6. */
  const int64_t e32[3] = {0, 3, 2};
  REFUSED(weft_tensor_reshape(a, 3, e32), WEFT_ERR_SHAPE, "reshape 6 -> empty batch", NULL);
  weft_tensor_destroy(a);
  weft_tensor_destroy(ti);
  /* Read and write of an empty tensor (count 0 is its element count). */
  weft_tensor *e = NULL;
  TU_STATUS(weft_tensor_create(F, 3, e3, NULL, &e), WEFT_OK, "create empty");
  TU_STATUS(weft_tensor_read(e, fa, 0), WEFT_OK, "read of an empty tensor, count 0");
  TU_STATUS(weft_tensor_write(e, fa, 0), WEFT_OK, "write of an empty tensor, count 0");
  weft_tensor_destroy(e);
}

/* ------------------------------------------------------------------------------------ lanes, prefetch */

static void test_lanes(void) {
  size_t n = weft_fabric_lane_count(F);
  void *addr = (void *)&addr;
  /* prefetch: a lane out of range is INVALID_ARGUMENT (as documented); onto the host lane nothing moves. */
  REFUSED(weft_tensor_prefetch(K, n), WEFT_ERR_INVALID_ARGUMENT, "prefetch(lane = count)", "lane");
  REFUSED(weft_tensor_prefetch(K, (size_t)-1), WEFT_ERR_INVALID_ARGUMENT, "prefetch(lane SIZE_MAX)", "lane");
  weft_tensor *o = mk2(F2, 2, 3);
  TU_STATUS(weft_tensor_prefetch(o, 0), WEFT_OK, "prefetch of F2's tensor onto F2's lane 0");
  weft_tensor_destroy(o);
  TU_STATUS(weft_tensor_prefetch(K, 0), WEFT_OK, "prefetch onto the cpu lane");
  intact("prefetch onto the cpu lane");
  /* lane_address: host lanes cannot hand out memory (UNSUPPORTED); out of range; out NULL. */
  addr = (void *)&addr;
  REFUSED(weft_tensor_lane_address(K, 0, &addr), WEFT_ERR_UNSUPPORTED, "lane_address(cpu)", "cpu");
  TU_CHECK(addr == NULL, "lane_address(cpu) left *out_address set");
  addr = (void *)&addr;
  weft_fabric_sync(F);
  weft_status st = weft_tensor_lane_address(K, n, &addr);
  TU_CHECK(st == WEFT_ERR_NOT_FOUND, "lane_address(lane = count): %s",
           weft_status_str(st));
  TU_CHECK(addr == NULL, "lane_address(bad lane) left *out_address set");
  REFUSED(weft_tensor_lane_address(K, 0, NULL), WEFT_ERR_INVALID_ARGUMENT, "lane_address(out NULL)", "out_address");
  /* lane_find: out NULL, name "". */
  REFUSED(weft_fabric_lane_find(F, "cpu", NULL), WEFT_ERR_INVALID_ARGUMENT, "lane_find(out NULL)", NULL);
  size_t idx = 9;
  REFUSED(weft_fabric_lane_find(F, "", &idx), WEFT_ERR_NOT_FOUND, "lane_find(\"\")", "cpu");
  /* revive: out_up may be NULL; with a cpu lane up, *out_up >= 1. */
  size_t up = 0;
  TU_STATUS(weft_fabric_revive(F, NULL), WEFT_OK, "revive(out_up NULL)");
  TU_STATUS(weft_fabric_revive(F, &up), WEFT_OK, "revive");
  TU_CHECK(up == n, "revive: %zu lanes up of %zu", up, n);
  /* lane info: strings are non-NULL and the cpu lane honours exact, offers every op. */
  weft_lane_info li;
  TU_STATUS(weft_fabric_lane_info(F, 0, &li), WEFT_OK, "lane_info");
  TU_CHECK(li.name && li.kind && li.device && li.driver && li.details, "lane_info has a NULL string");
  TU_CHECK(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT), "cpu lane does not honour exact");
  TU_CHECK(li.ops == WEFT_OPS_ALL, "the cpu lane offers ops %llx, not all", (unsigned long long)li.ops);
  /* absent_info: out_reason NULL; every absent index gives two strings. */
  const char *an = "x", *ar = "x";
  REFUSED(weft_fabric_absent_info(F, 0, &an, NULL), WEFT_ERR_INVALID_ARGUMENT, "absent_info(out_reason NULL)", NULL);
  for (size_t i = 0; i < weft_fabric_absent_count(F); i++) {
    TU_STATUS(weft_fabric_absent_info(F, i, &an, &ar), WEFT_OK, "absent_info");
    TU_CHECK(an && ar && an[0] && ar[0], "absent lane %zu has no name or reason", i);
  }
  /* Stats: out of range, NULL out. */
  weft_lane_stats s;
  memset(&s, 0x5a, sizeof s);
  weft_fabric_sync(F);
  weft_status st2 = weft_fabric_lane_stats(F, n, &s);
  TU_CHECK(st2 == WEFT_ERR_NOT_FOUND, "lane_stats(lane = count): %s",
           weft_status_str(st2));
  TU_CHECK(weft_fabric_last_error(F)[0] != 0, "lane_stats(bad lane) left no message");
  REFUSED(weft_fabric_lane_stats(F, 0, NULL), WEFT_ERR_INVALID_ARGUMENT, "lane_stats(out NULL)", NULL);
}

/* ------------------------------------------------------------------------------------------ exact math */

static void test_math(void) {
  const uint32_t QNAN = 0x7fc00000u;
  TU_CHECK(tu_bits(weft_recipf(0.0f)) == tu_bits(INFINITY), "recip(+0) is not +inf");
  TU_CHECK(tu_bits(weft_recipf(-0.0f)) == tu_bits(-INFINITY), "recip(-0) is not -inf");
  TU_CHECK(tu_bits(weft_recipf(INFINITY)) == tu_bits(0.0f), "recip(+inf) is not +0");
  TU_CHECK(tu_bits(weft_recipf(-INFINITY)) == tu_bits(-0.0f), "recip(-inf) is not -0");
  TU_CHECK(tu_bits(weft_recipf(NAN)) == QNAN, "recip(NaN) is not the canonical NaN");
  TU_CHECK(tu_bits(weft_sqrtf(-0.0f)) == tu_bits(-0.0f), "sqrt(-0) is not -0");
  TU_CHECK(tu_bits(weft_sqrtf(0.0f)) == tu_bits(0.0f), "sqrt(+0) is not +0");
  TU_CHECK(tu_bits(weft_sqrtf(-1.0f)) == QNAN, "sqrt(-1) is not the canonical NaN: %08x", tu_bits(weft_sqrtf(-1.0f)));
  TU_CHECK(tu_bits(weft_sqrtf(-INFINITY)) == QNAN, "sqrt(-inf) is not the canonical NaN");
  TU_CHECK(tu_bits(weft_sqrtf(-NAN)) == QNAN, "sqrt(-NaN) is not the canonical NaN");
  TU_CHECK(weft_sqrtf(4.0f) == 2.0f && weft_sqrtf(INFINITY) == INFINITY, "sqrt(4), sqrt(inf)");
  TU_CHECK(tu_bits(weft_rsqrtf(0.0f)) == tu_bits(INFINITY), "rsqrt(+0) is not +inf");
  TU_CHECK(tu_bits(weft_rsqrtf(-0.0f)) == tu_bits(-INFINITY), "rsqrt(-0) is not -inf");
  TU_CHECK(tu_bits(weft_rsqrtf(-4.0f)) == QNAN, "rsqrt(-4) is not the canonical NaN");
  TU_CHECK(weft_rsqrtf(4.0f) == 0.5f && weft_rsqrtf(INFINITY) == 0.0f, "rsqrt(4), rsqrt(inf)");
  TU_CHECK(tu_bits(weft_tanhf(-0.0f)) == tu_bits(-0.0f), "tanh(-0) is not -0");
  TU_CHECK(weft_tanhf(INFINITY) == 1.0f && weft_tanhf(-INFINITY) == -1.0f, "tanh(+-inf) is not +-1");
  TU_CHECK(tu_bits(weft_tanhf(NAN)) == QNAN, "tanh(NaN) is not the canonical NaN");
  tu_rng r = {tu_seed()};
  for (int i = 0; i < 2000; i++) {
    float x = tu_rng_float(&r, -20, 20);
    TU_CHECK(tu_bits(weft_tanhf(-x)) == (tu_bits(weft_tanhf(x)) ^ 0x80000000u), "tanh is not odd at %a", (double)x);
    if (tu_failures) break;
  }
  TU_CHECK(tu_bits(weft_expf(NAN)) == QNAN && tu_bits(weft_logf(-1.0f)) == QNAN, "exp/log NaN results canonical");
  /* bias correction: step 0 or less gives 0; INT64_MAX returns. */
  TU_CHECK(weft_adamw_bias_correction(0.9f, 0) == 0.0f && weft_adamw_bias_correction(0.9f, -5) == 0.0f &&
               weft_adamw_bias_correction(0.9f, INT64_MIN) == 0.0f,
           "bias_correction(step <= 0) is not 0");
  TU_CHECK(weft_adamw_bias_correction(0.5f, 1) == 0.5f && weft_adamw_bias_correction(0.5f, 2) == 0.75f,
           "bias_correction(0.5, 1..2)");
}

/* ---------------------------------------------------------------------------------------------- npu */

static void test_npu(void) {
  size_t count = 77;
  TU_STATUS(weft_npu_probe(NULL, 0, &count), WEFT_OK, "npu_probe(out NULL, cap 0)");
  TU_CHECK(count != 77, "npu_probe did not set *out_count");
  size_t total = count;
  weft_npu_info info[2];
  TU_STATUS(weft_npu_probe(info, 2, &count), WEFT_OK, "npu_probe(cap 2)");
  TU_CHECK(count == total, "npu_probe counts differ with cap: %zu vs %zu", count, total);
  TU_STATUS(weft_npu_probe(NULL, 4, &count), WEFT_ERR_INVALID_ARGUMENT, "npu_probe(out NULL, cap 4)");
  TU_STATUS(weft_npu_probe(info, 2, NULL), WEFT_ERR_INVALID_ARGUMENT, "npu_probe(out_count NULL)");
  /* A moved /sys (WEFT_SYSFS_ROOT) with three accelerators, one of them driven by ivpu: cap 2 fills two and
   * counts three; a root without an accel class is 0 devices, not an error. */
  char root[] = "/tmp/weft-doc-claims-XXXXXX";
  if (!mkdtemp(root)) {
    TU_CHECK(0, "mkdtemp");
    return;
  }
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "mkdir -p %s/class/accel/accel0/device %s/class/accel/accel1 %s/class/accel/accel2 %s/drv/ivpu && "
           "ln -s %s/drv/ivpu %s/class/accel/accel0/device/driver",
           root, root, root, root, root, root);
  TU_CHECK(system(cmd) == 0, "making the fake sysfs");
  const char *old = getenv("WEFT_SYSFS_ROOT");
  char *saved = old ? strdup(old) : NULL;
  setenv("WEFT_SYSFS_ROOT", root, 1);
  memset(info, 0x41, sizeof info);
  TU_STATUS(weft_npu_probe(info, 2, &count), WEFT_OK, "npu_probe(fake sysfs)");
  TU_CHECK(count == 3, "npu_probe counted %zu accelerators of 3 (cap 2)", count);
  TU_CHECK(strcmp(info[0].device, "accel0") == 0 && strcmp(info[0].driver, "ivpu") == 0 && info[0].reach[0],
           "npu_probe accel0: '%.64s' '%.64s' '%.160s'", info[0].device, info[0].driver, info[0].reach);
  TU_CHECK(strcmp(info[1].device, "accel1") == 0 && info[1].driver[0] == 0, "npu_probe accel1: '%.64s' '%.64s'",
           info[1].device, info[1].driver);
  snprintf(cmd, sizeof cmd, "%s/nothing-here", root);
  setenv("WEFT_SYSFS_ROOT", cmd, 1);
  count = 9;
  TU_STATUS(weft_npu_probe(info, 2, &count), WEFT_OK, "npu_probe(no accel class)");
  TU_CHECK(count == 0, "no accel class is 0 devices, got %zu", count);
  if (saved) setenv("WEFT_SYSFS_ROOT", saved, 1);
  else unsetenv("WEFT_SYSFS_ROOT");
  free(saved);
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  TU_CHECK(system(cmd) == 0, "removing the fake sysfs");
}

/* ------------------------------------------------------------------------------------- the cache path */

static void test_cache_path(void) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char *sx = xdg ? strdup(xdg) : NULL, *sh = home ? strdup(home) : NULL;
  char p[512];
  setenv("XDG_CACHE_HOME", "/nonexistent-cache", 1);
  TU_STATUS(weft_cost_cache_path(p, sizeof p), WEFT_OK, "cost_cache_path(XDG_CACHE_HOME set)");
  TU_CHECK(strcmp(p, "/nonexistent-cache/weft/calibration.json") == 0, "cache path under XDG_CACHE_HOME: '%s'", p);
  /* exactly the room it needs, and one byte less */
  size_t need = strlen("/nonexistent-cache/weft/calibration.json") + 1;
  TU_STATUS(weft_cost_cache_path(p, need), WEFT_OK, "cost_cache_path(exactly long enough)");
  TU_STATUS(weft_cost_cache_path(p, need - 1), WEFT_ERR_IO, "cost_cache_path(one byte short)");
  TU_CHECK(p[0] == 0, "a path that did not fit was left cut: '%s'", p);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/nonexistent-home", 1);
  TU_STATUS(weft_cost_cache_path(p, sizeof p), WEFT_OK, "cost_cache_path(HOME only)");
  TU_CHECK(strcmp(p, "/nonexistent-home/.cache/weft/calibration.json") == 0, "cache path under HOME: '%s'", p);
  unsetenv("HOME");
  TU_STATUS(weft_cost_cache_path(p, sizeof p), WEFT_ERR_IO, "cost_cache_path(no HOME, no XDG)");
  TU_CHECK(p[0] == 0, "cost_cache_path(no HOME) left '%s'", p);
  if (sx) setenv("XDG_CACHE_HOME", sx, 1);
  if (sh) setenv("HOME", sh, 1);
  free(sx), free(sh);
}

/* -------------------------------------------------------------------------------------------- scopes */

static void test_scopes(void) {
  REFUSED(weft_scope_end(F), WEFT_ERR_STATE, "scope_end without a begin", "scope");
  TU_STATUS(weft_scope_begin(F), WEFT_OK, "scope_begin");
  REFUSED(weft_scope_begin(F), WEFT_ERR_STATE, "second scope_begin", "scope");
  TU_STATUS(weft_scope_end(F), WEFT_OK, "scope_end");
  REFUSED(weft_scope_end(F), WEFT_ERR_STATE, "second scope_end", "scope");
  TU_STATUS(weft_fabric_sync(F), WEFT_OK, "sync");
}

/* ----------------------------------------------------------------------------------- cost, route, split */

static void test_cost_route(void) {
  size_t n = weft_fabric_lane_count(F);
  weft_cost_line line;
  memset(&line, 0x5a, sizeof line);
  weft_fabric_sync(F);
  weft_status st = weft_fabric_cost_model(F, n, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
  TU_CHECK(st == WEFT_ERR_NOT_FOUND, "cost_model(lane = count): %s",
           weft_status_str(st));
  TU_CHECK(weft_fabric_last_error(F)[0] != 0, "cost_model(bad lane) left no message");
  intact("cost_model(bad lane)");
  REFUSED(weft_fabric_cost_model(F, 0, WEFT_COST_CLASS_COUNT, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_INVALID_ARGUMENT,
          "cost_model(class COUNT)", NULL);
  REFUSED(weft_fabric_cost_model(F, 0, (weft_cost_class)-1, WEFT_CONTRACT_EXACT, &line), WEFT_ERR_INVALID_ARGUMENT,
          "cost_model(class -1)", NULL);
  REFUSED(weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_COUNT, &line), WEFT_ERR_INVALID_ARGUMENT,
          "cost_model(matmul, contract COUNT)", "contract");
  REFUSED(weft_fabric_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "cost_model(out NULL)", NULL);
  /* "the other classes ignore contract": any contract value reads the same line. */
  weft_cost_line l1, l2;
  TU_STATUS(weft_fabric_cost_model(F, 0, WEFT_COST_UPLOAD, WEFT_CONTRACT_EXACT, &l1), WEFT_OK, "cost_model upload");
  TU_STATUS(weft_fabric_cost_model(F, 0, WEFT_COST_UPLOAD, WEFT_CONTRACT_BF16, &l2), WEFT_OK,
            "cost_model upload, contract ignored");
  st = weft_fabric_cost_model(F, 0, WEFT_COST_UPLOAD, (weft_contract)99, &l2);
  TU_CHECK(st == WEFT_OK, "cost_model(upload, contract 99): the contract is ignored for non-matmul classes, got %s",
           weft_status_str(st));
  /* set_cost_model: bad values are refused, a good one marks the line SET. */
  REFUSED(weft_fabric_set_cost_model(F, n, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 1e9), WEFT_ERR_NOT_FOUND,
          "set_cost_model(lane = count)", "lane");
  REFUSED(weft_fabric_set_cost_model(F, 0, WEFT_COST_CLASS_COUNT, WEFT_CONTRACT_EXACT, 1e-6, 1e9),
          WEFT_ERR_INVALID_ARGUMENT, "set_cost_model(class COUNT)", NULL);
  REFUSED(weft_fabric_set_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, NAN, 1e9), WEFT_ERR_INVALID_ARGUMENT,
          "set_cost_model(alpha NaN)", "alpha");
  REFUSED(weft_fabric_set_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, -1.0, 1e9), WEFT_ERR_INVALID_ARGUMENT,
          "set_cost_model(alpha -1)", "alpha");
  REFUSED(weft_fabric_set_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, -5.0),
          WEFT_ERR_INVALID_ARGUMENT, "set_cost_model(beta -5)", "beta");
  REFUSED(weft_fabric_set_cost_model(F, 0, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, INFINITY),
          WEFT_ERR_INVALID_ARGUMENT, "set_cost_model(beta inf)", "beta");
  TU_STATUS(weft_fabric_set_cost_model(F, 0, WEFT_COST_DOWNLOAD, (weft_contract)99, 1e-6, 0.0), WEFT_OK,
            "set_cost_model(download, beta 0 = free, contract ignored)");
  TU_STATUS(weft_fabric_cost_model(F, 0, WEFT_COST_DOWNLOAD, WEFT_CONTRACT_EXACT, &l1), WEFT_OK, "cost_model download");
  TU_CHECK(l1.source == WEFT_COST_SET && l1.alpha == 1e-6 && l1.beta == 0.0, "set_cost_model not read back as SET");
  /* calibration_wait under OFF returns at once. */
  TU_STATUS(weft_fabric_calibration_wait(F), WEFT_OK, "calibration_wait (OFF)");
  /* cost_cache_path: NULL/0 invalid; too short is IO. */
  char p[4096];
  TU_STATUS(weft_cost_cache_path(NULL, 10), WEFT_ERR_INVALID_ARGUMENT, "cost_cache_path(out NULL)");
  TU_STATUS(weft_cost_cache_path(p, 0), WEFT_ERR_INVALID_ARGUMENT, "cost_cache_path(len 0)");
  TU_STATUS(weft_cost_cache_path(p, 3), WEFT_ERR_IO, "cost_cache_path(len 3)");
  TU_STATUS(weft_cost_cache_path(p, sizeof p), WEFT_OK, "cost_cache_path");
  TU_CHECK(tu_contains(p, "weft") && tu_contains(p, "calibration.json"), "cost_cache_path '%s'", p);
  /* route_last before any auto-routed op: STATE. route_explain: bad queries. */
  weft_route_explanation ex;
  memset(&ex, 0x5a, sizeof ex);
  REFUSED(weft_route_last(F, NULL), WEFT_ERR_INVALID_ARGUMENT, "route_last(out NULL)", NULL);
  weft_route_query q = {WEFT_OP_ADD, WEFT_CONTRACT_EXACT, 0, 0, 0, 0, 4, 4};
  REFUSED(weft_route_explain(F, NULL, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_explain(query NULL)", NULL);
  REFUSED(weft_route_explain(F, &q, NULL), WEFT_ERR_INVALID_ARGUMENT, "route_explain(out NULL)", NULL);
  q.op = WEFT_OP_COUNT;
  REFUSED(weft_route_explain(F, &q, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_explain(op COUNT)", "op");
  q.op = WEFT_OP_ADD;
  q.contract = (weft_contract)7;
  REFUSED(weft_route_explain(F, &q, &ex), WEFT_ERR_INVALID_ARGUMENT, "route_explain(contract 7)", "contract");
  q.contract = WEFT_CONTRACT_EXACT;
  q.rows = -4;
  REFUSED(weft_route_explain(F, &q, &ex), WEFT_ERR_SHAPE, "route_explain(rows -4)", NULL);
  q.rows = INT64_MAX;
  q.cols = INT64_MAX;
  /* A shape past any tensor is still explained, with huge but ordered costs (no integer product overflows:
   * the sanitizer build would stop on one). */
  TU_STATUS(weft_route_explain(F, &q, &ex), WEFT_OK, "route_explain(rows = cols = INT64_MAX)");
  TU_CHECK(ex.nlanes >= 1 && ex.lanes && ex.lanes[0].total > 1.0 && !isnan(ex.lanes[0].total),
           "route_explain(INT64_MAX^2): cost %g", ex.nlanes ? ex.lanes[0].total : -1.0);
  q = (weft_route_query){WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, 0, 0};
  TU_STATUS(weft_route_explain(F, &q, &ex), WEFT_OK, "route_explain(matmul of INT64_MAX everywhere)");
  TU_CHECK(ex.nlanes >= 1 && ex.lanes && ex.lanes[0].total > 1.0 && !isnan(ex.lanes[0].total),
           "route_explain(matmul INT64_MAX): cost %g", ex.nlanes ? ex.lanes[0].total : -1.0);
  q.batch = -1;
  REFUSED(weft_route_explain(F, &q, &ex), WEFT_ERR_SHAPE, "route_explain(batch -1)", NULL);
  q.batch = 1, q.k = 0;
  REFUSED(weft_route_explain(F, &q, &ex), WEFT_ERR_SHAPE, "route_explain(k 0)", NULL);
  q = (weft_route_query){WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, 1, 8, 8, 8, 0, 0};
  TU_STATUS(weft_route_explain(F, &q, &ex), WEFT_OK, "route_explain matmul 8");
  TU_CHECK(ex.nlanes == weft_fabric_lane_count(F) && ex.lanes && ex.chosen >= 0, "explanation: one entry per lane");
  TU_STATUS(weft_route_explain_registered(F, &q, &ex), WEFT_OK, "route_explain_registered matmul 8");
  /* split_last before any split: split 0, or STATE; never garbage. out NULL refused. */
  REFUSED(weft_split_last(F, NULL), WEFT_ERR_INVALID_ARGUMENT, "split_last(out NULL)", NULL);
}

/* ------------------------------------------------------------------------------------------------ ops */

static void test_ops(void) {
  weft_tensor *a = mk2(F, 2, 3), *b = mk2(F, 3, 2), *c = mk2(F, 2, 2), *o = mk2(F2, 2, 3), *x = mk2(F, 2, 3);
  weft_op_desc d = WEFT_OP_DESC_INIT;
  /* desc: a contract out of range; a negative lane other than AUTO; a lane too large. */
  d.contract = (weft_contract)-1;
  REFUSED(weft_op_matmul(F, &d, a, 0, b, 0, c), WEFT_ERR_INVALID_ARGUMENT, "matmul(contract -1)", "contract");
  d = (weft_op_desc)WEFT_OP_DESC_INIT;
  d.lane = -2;
  weft_status st = weft_op_relu(F, &d, a, x);
  TU_CHECK(st == WEFT_ERR_NOT_FOUND, "relu(lane -2): %s", weft_status_str(st));
  intact("relu(lane -2)");
  d.lane = INT_MAX;
  st = weft_op_relu(F, &d, a, x);
  TU_CHECK(st == WEFT_ERR_NOT_FOUND, "relu(lane INT_MAX): %s", weft_status_str(st));
  /* The tensor of another fabric: WRONG_FABRIC, on every op family. */
  REFUSED(weft_op_gelu(F, NULL, o, x), WEFT_ERR_WRONG_FABRIC, "gelu(x of F2)", "fabric");
  REFUSED(weft_op_gelu(F, NULL, a, o), WEFT_ERR_WRONG_FABRIC, "gelu(y of F2)", "fabric");
  REFUSED(weft_op_layernorm(F, NULL, a, o, o, 1e-5f, x, NULL, NULL), WEFT_ERR_WRONG_FABRIC, "layernorm(gamma of F2)",
          "fabric");
  const int64_t d3[1] = {3};
  weft_tensor *g3 = NULL;
  TU_STATUS(weft_tensor_create(F, 1, d3, NULL, &g3), WEFT_OK, "g3");
  weft_tensor *p = mk2(F, 2, 3), *gm = mk2(F, 2, 3), *gv = mk2(F, 2, 3);
  REFUSED(weft_op_adamw(F, NULL, p, o, gm, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_ERR_WRONG_FABRIC,
          "adamw(grad of F2)", "fabric");
  weft_tensor *gl[2] = {a, o};
  float norm = -1;
  REFUSED(weft_grad_clip(F, NULL, gl, 2, 1.0f, &norm), WEFT_ERR_WRONG_FABRIC, "grad_clip(a tensor of F2)", "fabric");
  /* grad_clip: n < 0, grads NULL with n > 0, a NULL entry; n = 0 is a norm of 0. */
  REFUSED(weft_grad_clip(F, NULL, gl, -1, 1.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(n -1)", "n");
  REFUSED(weft_grad_clip(F, NULL, NULL, 2, 1.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(grads NULL)", "grads");
  weft_tensor *gn[2] = {a, NULL};
  REFUSED(weft_grad_clip(F, NULL, gn, 2, 1.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(grads[1] NULL)", NULL);
  norm = -1;
  TU_STATUS(weft_grad_clip(F, NULL, NULL, 0, 1.0f, &norm), WEFT_OK, "grad_clip(n 0)");
  TU_CHECK(norm == 0.0f, "grad_clip(n 0) norm %g", (double)norm);
  TU_STATUS(weft_grad_clip(F, NULL, gl, 1, 0.0f, NULL), WEFT_OK, "grad_clip(max_norm 0, out_norm NULL)");
  /* grad_clip: a gradient named twice (it would count twice and be scaled twice), or two wraps of one buffer. */
  weft_tensor *gd[2] = {a, a};
  float araw[6];
  TU_STATUS(weft_tensor_read(a, araw, 6), WEFT_OK, "read a");
  REFUSED(weft_grad_clip(F, NULL, gd, 2, 0.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(one gradient twice)",
          "grads[1]");
  float wbuf[6] = {3, 4, 0, 0, 0, 0}, wcopy[6];
  weft_tensor *w1 = NULL, *w2 = NULL;
  const int64_t d6w[1] = {6}, d3w[1] = {3};
  TU_STATUS(weft_tensor_wrap(F, 1, d6w, wbuf, &w1), WEFT_OK, "wrap w1");
  TU_STATUS(weft_tensor_wrap(F, 1, d3w, wbuf + 3, &w2), WEFT_OK, "wrap w2 (inside w1)");
  weft_tensor *gw[2] = {w1, w2};
  REFUSED(weft_grad_clip(F, NULL, gw, 2, 0.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(overlapping wraps)",
          "overlap");
  TU_STATUS(weft_tensor_read(w1, wcopy, 6), WEFT_OK, "read w1");
  TU_CHECK(wcopy[0] == 3 && wcopy[1] == 4, "a refused grad_clip scaled a gradient");
  TU_STATUS(weft_grad_clip(F, NULL, gw, 1, 10.0f, &norm), WEFT_OK, "grad_clip(w1 alone)");
  TU_CHECK(norm == 5.0f, "grad_clip norm of (3,4,0..) is %g", (double)norm);
  weft_tensor_destroy(w2);
  weft_tensor_destroy(w1);
  /* grad_clip with an i32 tensor: refused, not read as floats. */
  weft_tensor *ti = mk1i(F, 4);
  weft_tensor *gi[1] = {ti};
  REFUSED(weft_grad_clip(F, NULL, gi, 1, 1.0f, &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip(an i32 tensor)", "i32");
  /* softmax_xent: both outputs NULL. */
  REFUSED(weft_op_softmax_xent(F, NULL, a, x, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT, "softmax_xent(no output)", NULL);
  /* embedding_backward: both tables NULL. */
  const int64_t bt[2] = {1, 2};
  weft_tensor *tok = NULL;
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, bt, NULL, &tok), WEFT_OK, "tok");
  const int64_t btc[3] = {1, 2, 3};
  weft_tensor *dout = NULL;
  TU_STATUS(weft_tensor_create(F, 3, btc, NULL, &dout), WEFT_OK, "dout");
  REFUSED(weft_op_embedding_backward(F, NULL, dout, tok, NULL, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "embedding_backward(no table)", NULL);
  /* adamw: step < 1; param == m; NaN lr; count mismatch. */
  REFUSED(weft_op_adamw(F, NULL, p, a, gm, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), WEFT_ERR_INVALID_ARGUMENT,
          "adamw(step 0)", "step");
  REFUSED(weft_op_adamw(F, NULL, p, a, gm, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, INT64_MIN), WEFT_ERR_INVALID_ARGUMENT,
          "adamw(step INT64_MIN)", "step");
  REFUSED(weft_op_adamw(F, NULL, p, a, p, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_ERR_INVALID_ARGUMENT,
          "adamw(param = m)", NULL);
  REFUSED(weft_op_adamw(F, NULL, p, a, gm, gm, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_ERR_INVALID_ARGUMENT,
          "adamw(m = v)", NULL);
  REFUSED(weft_op_adamw(F, NULL, p, g3, gm, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_ERR_SHAPE,
          "adamw(grad of 3 elements, param of 6)", NULL);
  /* adamw: shapes may differ when counts agree. */
  weft_tensor *p61 = NULL;
  const int64_t d61[1] = {6};
  TU_STATUS(weft_tensor_create(F, 1, d61, NULL, &p61), WEFT_OK, "p61");
  TU_STATUS(weft_op_adamw(F, NULL, p61, a, gm, gv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_OK,
            "adamw(param [6], grad [2,3]: one number of elements)");
  /* permute: perm NULL, not a permutation, out of range; y's shape must match. */
  weft_tensor *y32 = mk2(F, 3, 2), *y23 = mk2(F, 2, 3), *sq0 = mk2(F, 2, 2);
  const int perm_bad[2] = {0, 0}, perm_oob[2] = {1, 2}, perm_neg[2] = {-1, 0}, perm_t[2] = {1, 0};
  REFUSED(weft_op_permute(F, NULL, a, NULL, y32), WEFT_ERR_INVALID_ARGUMENT, "permute(perm NULL)", "perm");
  REFUSED(weft_op_permute(F, NULL, a, perm_bad, y32), WEFT_ERR_INVALID_ARGUMENT, "permute(perm {0,0})", "perm");
  REFUSED(weft_op_permute(F, NULL, a, perm_oob, y32), WEFT_ERR_INVALID_ARGUMENT, "permute(perm {1,2})", "perm");
  REFUSED(weft_op_permute(F, NULL, a, perm_neg, y32), WEFT_ERR_INVALID_ARGUMENT, "permute(perm {-1,0})", "perm");
  REFUSED(weft_op_permute(F, NULL, a, perm_t, y23), WEFT_ERR_SHAPE, "permute(y not x's dims permuted)", NULL);
  REFUSED(weft_op_permute(F, NULL, sq0, perm_t, sq0), WEFT_ERR_INVALID_ARGUMENT, "permute(y = x)", "y");
  weft_tensor *yi = NULL;
  const int64_t d32[2] = {3, 2};
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d32, NULL, &yi), WEFT_OK, "yi");
  REFUSED(weft_op_permute(F, NULL, a, perm_t, yi), WEFT_ERR_INVALID_ARGUMENT, "permute(y's dtype not x's)", "dtype");
  /* permute of an i32 tensor works (any dtype). */
  weft_tensor *xi = NULL;
  const int32_t iv[6] = {1, 2, 3, 4, 5, 6};
  const int64_t d23[2] = {2, 3};
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d23, iv, &xi), WEFT_OK, "xi");
  TU_STATUS(weft_op_permute(F, NULL, xi, perm_t, yi), WEFT_OK, "permute i32");
  int32_t ir[6];
  TU_STATUS(weft_tensor_read_i32(yi, ir, 6), WEFT_OK, "read permuted i32");
  TU_CHECK(ir[0] == 1 && ir[1] == 4 && ir[2] == 2 && ir[5] == 6, "permute i32 wrong: %d %d %d %d", ir[0], ir[1], ir[2],
           ir[5]);
  /* copy_slice: axis out of range; negative offset; offset + extent past dst; INT64_MAX offset; rank
   * mismatch; dtype mismatch. */
  weft_tensor *src = mk2(F, 1, 3), *dst = mk2(F, 4, 3);
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, 2, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice(axis 2)", "axis");
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, -1, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice(axis -1)", "axis");
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, 0, -1), WEFT_ERR_SHAPE, "copy_slice(offset -1)", "offset");
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, 0, 4), WEFT_ERR_SHAPE, "copy_slice(offset 4 of 4)", "offset");
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, 0, INT64_MAX), WEFT_ERR_SHAPE, "copy_slice(offset INT64_MAX)",
          "offset");
  REFUSED(weft_op_copy_slice(F, NULL, src, dst, 0, INT64_MIN), WEFT_ERR_SHAPE, "copy_slice(offset INT64_MIN)",
          "offset");
  REFUSED(weft_op_copy_slice(F, NULL, src, g3, 0, 0), WEFT_ERR_SHAPE, "copy_slice(rank 2 into rank 1)", NULL);
  weft_tensor *srci = NULL;
  const int64_t d13[2] = {1, 3};
  TU_STATUS(weft_tensor_create_typed(F, WEFT_DTYPE_I32, 2, d13, NULL, &srci), WEFT_OK, "srci");
  REFUSED(weft_op_copy_slice(F, NULL, srci, dst, 0, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice(i32 into f32)", NULL);
  REFUSED(weft_op_copy_slice(F, NULL, NULL, dst, 0, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice(src NULL)", NULL);
  TU_STATUS(weft_op_copy_slice(F, NULL, src, dst, 0, 3), WEFT_OK, "copy_slice(offset 3: the last row)");
  /* attention: n_head 0, negative, not dividing C, huge; attention_cached t0 < 0, t0 + Tq > Tmax. */
  const int64_t qd[3] = {1, 2, 12}, od[3] = {1, 2, 4}, ad[4] = {1, 2, 2, 2}, o1[3] = {1, 1, 4};
  weft_tensor *qkv = NULL, *ao = NULL, *att = NULL, *ao1 = NULL;
  TU_STATUS(weft_tensor_create(F, 3, qd, NULL, &qkv), WEFT_OK, "qkv");
  TU_STATUS(weft_tensor_create(F, 3, od, NULL, &ao), WEFT_OK, "ao");
  TU_STATUS(weft_tensor_create(F, 4, ad, NULL, &att), WEFT_OK, "att");
  TU_STATUS(weft_tensor_create(F, 3, o1, NULL, &ao1), WEFT_OK, "ao1");
  const int64_t heads[] = {0, -2, 3, INT64_MAX, INT64_MIN};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "attention(n_head %lld)", (long long)heads[i]);
    st = weft_op_attention(F, NULL, qkv, heads[i], ao, att, NULL);
    TU_CHECK(st == WEFT_ERR_SHAPE, "%s: %s", what, weft_status_str(st));
    intact(what);
    snprintf(what, sizeof what, "attention_cached(n_head %lld)", (long long)heads[i]);
    st = weft_op_attention_cached(F, NULL, qkv, heads[i], 0, ao1, NULL);
    TU_CHECK(st == WEFT_ERR_SHAPE, "%s: %s", what, weft_status_str(st));
    snprintf(what, sizeof what, "attention_backward(n_head %lld)", (long long)heads[i]);
    st = weft_op_attention_backward(F, NULL, ao, qkv, att, heads[i], qkv);
    TU_CHECK(st == WEFT_ERR_SHAPE, "%s: %s", what, weft_status_str(st));
  }
  REFUSED(weft_op_attention_cached(F, NULL, qkv, 2, -1, ao1, NULL), WEFT_ERR_SHAPE, "attention_cached(t0 -1)", "t0");
  REFUSED(weft_op_attention_cached(F, NULL, qkv, 2, 2, ao1, NULL), WEFT_ERR_SHAPE, "attention_cached(t0+Tq > Tmax)",
          NULL);
  TU_STATUS(weft_op_attention_cached(F, NULL, qkv, 2, 1, ao1, NULL), WEFT_OK, "attention_cached(t0 1, Tq 1, Tmax 2)");
  REFUSED(weft_op_attention(F, NULL, qkv, 2, ao, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT, "attention(att NULL)", "att");
  /* op_run: kind out of range; nin/nout out of range; in NULL with nin > 0. */
  weft_tensor *in1[1] = {a}, *out1[1] = {x};
  REFUSED(weft_op_run(F, NULL, WEFT_OP_COUNT, in1, 1, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "op_run(kind COUNT)",
          NULL);
  REFUSED(weft_op_run(F, NULL, (weft_op_kind)-1, in1, 1, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(kind -1)", NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, in1, -1, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "op_run(nin -1)",
          NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, in1, WEFT_OP_MAX_IN + 1, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(nin MAX+1)", NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, in1, 1, out1, WEFT_OP_MAX_OUT + 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(nout MAX+1)", NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, NULL, 1, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "op_run(in NULL)",
          NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, in1, 1, NULL, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, "op_run(out NULL)",
          NULL);
  REFUSED(weft_op_run(F, NULL, WEFT_OP_RELU, in1, 0, out1, 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(relu with no input)", NULL);
  /* An optional operand NULL or left off the end: softmax_xent with only the loss. */
  weft_tensor *loss = NULL;
  const int64_t d1[1] = {1};
  TU_STATUS(weft_tensor_create(F, 1, d1, NULL, &loss), WEFT_OK, "loss");
  weft_tensor *sin[2] = {a, x}, *sout[1] = {loss};
  TU_STATUS(weft_op_run(F, NULL, WEFT_OP_SOFTMAX_XENT, sin, 2, sout, 1, NULL), WEFT_OK,
            "op_run(softmax_xent, grad left off the end)");
  /* op_run's params, hostile: a permutation entry of INT64_MAX, an axis of INT64_MIN, a mean over -5 rows, and
   * attention with params NULL (zero heads). */
  weft_op_params pp;
  memset(&pp, 0, sizeof pp);
  pp.i[0] = INT64_MAX;
  weft_tensor *pin[1] = {a}, *pout[1] = {y32};
  REFUSED(weft_op_run(F, NULL, WEFT_OP_PERMUTE, pin, 1, pout, 1, &pp), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(permute, perm[0] INT64_MAX)", "perm");
  memset(&pp, 0, sizeof pp);
  pp.i[0] = INT64_MIN;
  weft_tensor *cin[1] = {src}, *cout[1] = {dst};
  REFUSED(weft_op_run(F, NULL, WEFT_OP_COPY_SLICE, cin, 1, cout, 1, &pp), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(copy_slice, axis INT64_MIN)", "axis");
  memset(&pp, 0, sizeof pp);
  pp.i[0] = -5;
  weft_tensor *xin[2] = {a, x}, *xout[1] = {loss};
  REFUSED(weft_op_run(F, NULL, WEFT_OP_SOFTMAX_XENT, xin, 2, xout, 1, &pp), WEFT_ERR_INVALID_ARGUMENT,
          "op_run(softmax_xent, mean over -5 rows)", "i[0]");
  weft_tensor *ain[1] = {qkv}, *aout[2] = {ao, att};
  REFUSED(weft_op_run(F, NULL, WEFT_OP_ATTENTION, ain, 1, aout, 2, NULL), WEFT_ERR_SHAPE,
          "op_run(attention, params NULL: 0 heads)", "heads");
  /* matmul_acc: c must not be a or b. */
  weft_tensor *sq = mk2(F, 2, 2);
  REFUSED(weft_op_matmul_acc(F, NULL, sq, 0, c, 0, sq), WEFT_ERR_INVALID_ARGUMENT, "matmul_acc(c = a)", NULL);
  REFUSED(weft_op_matmul_acc(F, NULL, c, 0, sq, 0, sq), WEFT_ERR_INVALID_ARGUMENT, "matmul_acc(c = b)", NULL);
  /* sum_rows: out of shape [n] or [1,n] only. */
  weft_tensor *r3 = g3, *r13 = mk2(F, 1, 3), *r31 = mk2(F, 3, 1);
  TU_STATUS(weft_op_sum_rows(F, NULL, a, r3), WEFT_OK, "sum_rows out [3]");
  TU_STATUS(weft_op_sum_rows(F, NULL, a, r13), WEFT_OK, "sum_rows out [1,3]");
  REFUSED(weft_op_sum_rows(F, NULL, a, r31), WEFT_ERR_SHAPE, "sum_rows out [3,1]", NULL);
  /* add: y a row [n] or [1,n] broadcast; [n,1] is not. */
  TU_STATUS(weft_op_add(F, NULL, a, r3, x), WEFT_OK, "add(bias [3])");
  TU_STATUS(weft_op_add(F, NULL, a, r13, x), WEFT_OK, "add(bias [1,3])");
  REFUSED(weft_op_add(F, NULL, a, r31, x), WEFT_ERR_SHAPE, "add(y [3,1])", NULL);
  /* The last successful op's lane is a lane index. */
  int ll = weft_fabric_last_lane(F);
  TU_CHECK(ll >= 0 && (size_t)ll < weft_fabric_lane_count(F), "last_lane %d after ops", ll);
  weft_route_explanation ex;
  TU_STATUS(weft_route_last(F, &ex), WEFT_OK, "route_last after an auto-routed op");
  weft_tensor *all[] = {a, b, c, o, x, g3, p, gm, gv, ti, tok, dout, p61, y32, y23, yi, xi, src, dst, srci, qkv, ao, att,
                        ao1, loss, sq, r13, r31, sq0};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
}


/* ------------------------------------------------------------------------------------ aliasing, in place */

static weft_tensor *filled(weft_fabric *f, int ndim, const int64_t *dims, uint64_t seed, float lo, float hi) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  float *v = malloc(n * sizeof *v);
  tu_rng r = {seed};
  for (size_t i = 0; i < n; i++) v[i] = tu_rng_float(&r, lo, hi);
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, ndim, dims, v, &t), WEFT_OK, "filled");
  free(v);
  return t;
}

static int same_tensor_bits(weft_tensor *a, weft_tensor *b) {
  size_t n = weft_tensor_numel(a);
  if (n != weft_tensor_numel(b)) return 0;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  int ok = weft_tensor_read(a, x, n) == WEFT_OK && weft_tensor_read(b, y, n) == WEFT_OK;
  for (size_t i = 0; ok && i < n; i++) ok = tu_same_bits(x[i], y[i]);
  free(x), free(y);
  return ok;
}

/* Each "may be" of the transformer ops gives the bits of the op out of place; each output the docs do not
 * allow to be an input is refused, naming both, with nothing written. */
static void test_transformer_aliasing(void) {
  const int64_t nc[2] = {4, 8}, c1[1] = {8}, n1[1] = {4}, tt[3] = {2, 4, 4};
  weft_tensor *x = filled(F, 2, nc, 11, -2, 2), *gam = filled(F, 1, c1, 12, 0.5f, 1.5f),
              *bet = filled(F, 1, c1, 13, -0.5f, 0.5f), *dy = filled(F, 2, nc, 14, -1, 1);
  weft_tensor *y = mk2(F, 4, 8), *mean = NULL, *rstd = NULL;
  TU_STATUS(weft_tensor_create(F, 1, n1, NULL, &mean), WEFT_OK, "mean");
  TU_STATUS(weft_tensor_create(F, 1, n1, NULL, &rstd), WEFT_OK, "rstd");
  /* layernorm: y may be x; mean and rstd may be NULL. */
  TU_STATUS(weft_op_layernorm(F, NULL, x, gam, bet, 1e-5f, y, mean, rstd), WEFT_OK, "layernorm");
  weft_tensor *xi = filled(F, 2, nc, 11, -2, 2);
  TU_STATUS(weft_op_layernorm(F, NULL, xi, gam, bet, 1e-5f, xi, NULL, NULL), WEFT_OK, "layernorm y = x");
  TU_CHECK(same_tensor_bits(xi, y), "layernorm in place differs from out of place");
  REFUSED(weft_op_layernorm(F, NULL, x, gam, bet, 1e-5f, y, mean, mean), WEFT_ERR_INVALID_ARGUMENT,
          "layernorm(mean = rstd)", "mean");
  /* layernorm_backward: dx may be dy; not x, not gamma; dgamma not gamma. */
  weft_tensor *dx = mk2(F, 4, 8), *dg = mk2(F, 1, 8), *db = mk2(F, 1, 8);
  weft_tensor *dg1 = NULL, *db1 = NULL;
  TU_STATUS(weft_tensor_create(F, 1, c1, NULL, &dg1), WEFT_OK, "dg1");
  TU_STATUS(weft_tensor_create(F, 1, c1, NULL, &db1), WEFT_OK, "db1");
  TU_STATUS(weft_op_layernorm_backward(F, NULL, dy, x, mean, rstd, gam, dx, dg1, db1), WEFT_OK, "layernorm_backward");
  weft_tensor *dyi = filled(F, 2, nc, 14, -1, 1);
  TU_STATUS(weft_op_layernorm_backward(F, NULL, dyi, x, mean, rstd, gam, dyi, NULL, NULL), WEFT_OK,
            "layernorm_backward dx = dy");
  TU_CHECK(same_tensor_bits(dyi, dx), "layernorm_backward in place differs from out of place");
  REFUSED(weft_op_layernorm_backward(F, NULL, dy, x, mean, rstd, gam, x, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "layernorm_backward(dx = x)", "dx");
  REFUSED(weft_op_layernorm_backward(F, NULL, dy, x, mean, rstd, gam, dx, gam, NULL), WEFT_ERR_INVALID_ARGUMENT,
          "layernorm_backward(dgamma = gamma)", "dgamma");
  REFUSED(weft_op_layernorm_backward(F, NULL, dy, x, mean, rstd, gam, dx, dg1, dg1), WEFT_ERR_INVALID_ARGUMENT,
          "layernorm_backward(dgamma = dbeta)", "dbeta");
  /* gelu: y may be x. gelu_backward: dx may be x or dy. */
  weft_tensor *g = mk2(F, 4, 8);
  TU_STATUS(weft_op_gelu(F, NULL, x, g), WEFT_OK, "gelu");
  weft_tensor *gi = filled(F, 2, nc, 11, -2, 2);
  TU_STATUS(weft_op_gelu(F, NULL, gi, gi), WEFT_OK, "gelu y = x");
  TU_CHECK(same_tensor_bits(gi, g), "gelu in place differs");
  weft_tensor *gb = mk2(F, 4, 8);
  TU_STATUS(weft_op_gelu_backward(F, NULL, x, dy, gb), WEFT_OK, "gelu_backward");
  weft_tensor *gx = filled(F, 2, nc, 11, -2, 2), *gd = filled(F, 2, nc, 14, -1, 1);
  TU_STATUS(weft_op_gelu_backward(F, NULL, gx, dy, gx), WEFT_OK, "gelu_backward dx = x");
  TU_STATUS(weft_op_gelu_backward(F, NULL, x, gd, gd), WEFT_OK, "gelu_backward dx = dy");
  TU_CHECK(same_tensor_bits(gx, gb) && same_tensor_bits(gd, gb), "gelu_backward in place differs");
  /* causal_softmax: probs may be scores; backward: dscores may be dprobs, not probs. */
  weft_tensor *sc = filled(F, 3, tt, 21, -3, 3), *pr = NULL, *dp = filled(F, 3, tt, 22, -1, 1), *ds = NULL;
  TU_STATUS(weft_tensor_create(F, 3, tt, NULL, &pr), WEFT_OK, "pr");
  TU_STATUS(weft_tensor_create(F, 3, tt, NULL, &ds), WEFT_OK, "ds");
  TU_STATUS(weft_op_causal_softmax(F, NULL, sc, 0.5f, pr), WEFT_OK, "causal_softmax");
  weft_tensor *sci = filled(F, 3, tt, 21, -3, 3);
  TU_STATUS(weft_op_causal_softmax(F, NULL, sci, 0.5f, sci), WEFT_OK, "causal_softmax probs = scores");
  TU_CHECK(same_tensor_bits(sci, pr), "causal_softmax in place differs");
  TU_STATUS(weft_op_causal_softmax_backward(F, NULL, pr, dp, 0.5f, ds), WEFT_OK, "causal_softmax_backward");
  weft_tensor *dpi = filled(F, 3, tt, 22, -1, 1);
  TU_STATUS(weft_op_causal_softmax_backward(F, NULL, pr, dpi, 0.5f, dpi), WEFT_OK, "csb dscores = dprobs");
  TU_CHECK(same_tensor_bits(dpi, ds), "causal_softmax_backward in place differs");
  REFUSED(weft_op_causal_softmax_backward(F, NULL, pr, dp, 0.5f, pr), WEFT_ERR_INVALID_ARGUMENT,
          "causal_softmax_backward(dscores = probs)", "dscores");
  /* Outputs are distinct from inputs unless said otherwise. */
  weft_tensor *acc1 = NULL, *one = NULL;
  const int64_t d1[1] = {1};
  TU_STATUS(weft_tensor_create(F, 1, d1, NULL, &acc1), WEFT_OK, "acc1");
  TU_STATUS(weft_tensor_create(F, 1, d1, NULL, &one), WEFT_OK, "one");
  REFUSED(weft_op_sumsq(F, NULL, one, one), WEFT_ERR_INVALID_ARGUMENT, "sumsq(acc = x)", "acc");
  REFUSED(weft_op_sumsq(F, NULL, x, gam), WEFT_ERR_SHAPE, "sumsq(acc of 8 elements)", "acc");
  weft_tensor *dst = mk2(F, 4, 8);
  REFUSED(weft_op_copy_slice(F, NULL, dst, dst, 0, 0), WEFT_ERR_INVALID_ARGUMENT, "copy_slice(dst = src)", "dst");
  weft_tensor *p = mk2(F, 4, 8), *m = mk2(F, 4, 8), *v = mk2(F, 4, 8);
  REFUSED(weft_op_adamw(F, NULL, p, p, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), WEFT_ERR_INVALID_ARGUMENT,
          "adamw(grad = param)", "param");
  /* sum_rows over a rank-3 x: every leading dimension counts as rows. */
  weft_tensor *sr = NULL;
  const int64_t four[1] = {4};
  TU_STATUS(weft_tensor_create(F, 1, four, NULL, &sr), WEFT_OK, "sr");
  TU_STATUS(weft_op_sum_rows(F, NULL, sc, sr), WEFT_OK, "sum_rows of [2,4,4] into [4]");
  weft_tensor *all[] = {x, gam, bet, dy, y, mean, rstd, xi, dx, dg, db, dg1, db1, dyi, g, gi, gb, gx, gd, sc, pr, dp, ds,
                        sci, dpi, acc1, one, dst, p, m, v, sr};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
}

/* ------------------------------------------------------------------------------------- empty batches */

/* A batch dimension may be 0: ops over such tensors succeed and write nothing; a sum over no rows is 0; a
 * mean over no rows (softmax_xent's loss) is a shape error, not a NaN. */
static void test_empty_batch(void) {
  const int64_t e[3] = {0, 2, 3}, e2[3] = {0, 3, 2}, eo[3] = {0, 2, 2}, r3[1] = {3}, q[3] = {0, 2, 9},
                ab[4] = {0, 1, 2, 2}, one[1] = {1};
  weft_tensor *x = NULL, *y = NULL, *o = NULL, *b = NULL, *c = NULL, *g = NULL, *bb = NULL, *qkv = NULL, *ao = NULL,
              *att = NULL, *loss = NULL;
  TU_STATUS(weft_tensor_create(F, 3, e, NULL, &x), WEFT_OK, "x");
  TU_STATUS(weft_tensor_create(F, 3, e, NULL, &y), WEFT_OK, "y");
  TU_STATUS(weft_tensor_create(F, 3, e, NULL, &o), WEFT_OK, "o");
  TU_STATUS(weft_tensor_create(F, 3, e2, NULL, &b), WEFT_OK, "b");
  TU_STATUS(weft_tensor_create(F, 3, eo, NULL, &c), WEFT_OK, "c");
  const float g0[3] = {7, 8, 9};
  TU_STATUS(weft_tensor_create(F, 1, r3, g0, &g), WEFT_OK, "g");
  TU_STATUS(weft_tensor_create(F, 1, r3, NULL, &bb), WEFT_OK, "bb");
  TU_STATUS(weft_tensor_create(F, 3, q, NULL, &qkv), WEFT_OK, "qkv");
  TU_STATUS(weft_tensor_create(F, 3, e, NULL, &ao), WEFT_OK, "ao");
  TU_STATUS(weft_tensor_create(F, 4, ab, NULL, &att), WEFT_OK, "att");
  TU_STATUS(weft_tensor_create(F, 1, one, NULL, &loss), WEFT_OK, "loss");
  TU_STATUS(weft_op_relu(F, NULL, x, o), WEFT_OK, "relu of an empty batch");
  TU_STATUS(weft_op_add(F, NULL, x, g, o), WEFT_OK, "add (bias) of an empty batch");
  TU_STATUS(weft_op_matmul(F, NULL, x, 0, b, 0, c), WEFT_OK, "matmul of an empty batch");
  TU_STATUS(weft_op_gelu(F, NULL, x, o), WEFT_OK, "gelu of an empty batch");
  TU_STATUS(weft_op_layernorm(F, NULL, x, g, bb, 1e-5f, o, NULL, NULL), WEFT_OK, "layernorm of an empty batch");
  TU_STATUS(weft_op_attention(F, NULL, qkv, 1, ao, att, NULL), WEFT_OK, "attention of an empty batch");
  TU_STATUS(weft_op_sum_rows(F, NULL, x, g), WEFT_OK, "sum_rows of an empty batch");
  float gv[3] = {-1, -1, -1};
  TU_STATUS(weft_tensor_read(g, gv, 3), WEFT_OK, "read sum_rows");
  TU_CHECK(gv[0] == 0 && gv[1] == 0 && gv[2] == 0, "a sum over no rows is %g %g %g, not 0", (double)gv[0],
           (double)gv[1], (double)gv[2]);
  REFUSED(weft_op_softmax_xent(F, NULL, x, y, loss, NULL), WEFT_ERR_SHAPE, "softmax_xent of no rows", "no rows");
  float nv = 0;
  TU_STATUS(weft_tensor_read(x, &nv, 0), WEFT_OK, "read of an empty tensor");
  TU_STATUS(weft_fabric_sync(F), WEFT_OK, "sync after empty ops");
  weft_tensor *all[] = {x, y, o, b, c, g, bb, qkv, ao, att, loss};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_destroy(all[i]);
}

/* ------------------------------------------------------------------------- one fabric per thread */

/* "A fabric is used from one thread at a time": fabrics of their own in two threads at once compute what
 * one thread computes alone. */
typedef struct thread_work {
  float out[16 * 16];
  weft_status st;
} thread_work;

static void *fabric_thread(void *arg) {
  thread_work *w = arg;
  weft_fabric *f = NULL;
  w->st = tu_open("cpu", &f);
  if (w->st != WEFT_OK) return NULL;
  const int64_t d[2] = {16, 16};
  float v[256];
  tu_rng r = {42};
  for (int i = 0; i < 256; i++) v[i] = tu_rng_float(&r, -1, 1);
  weft_tensor *a = NULL, *c = NULL;
  if ((w->st = weft_tensor_create(f, 2, d, v, &a)) == WEFT_OK && (w->st = weft_tensor_create(f, 2, d, NULL, &c)) == WEFT_OK)
    for (int it = 0; it < 200 && w->st == WEFT_OK; it++) {
      w->st = weft_op_matmul(f, NULL, a, 0, a, 1, c);
      if (w->st == WEFT_OK) w->st = weft_op_scale(f, NULL, 0.5f, c, a);
    }
  if (w->st == WEFT_OK) w->st = weft_tensor_read(a, w->out, 256);
  weft_fabric_close(f);
  return NULL;
}

static void test_threads(void) {
  static thread_work w[3];
  fabric_thread(&w[0]);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) TU_CHECK(pthread_create(&th[i], NULL, fabric_thread, &w[i + 1]) == 0, "pthread_create");
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) TU_STATUS(w[i].st, WEFT_OK, "a fabric of its own in a thread");
  TU_CHECK(memcmp(w[0].out, w[1].out, sizeof w[0].out) == 0 && memcmp(w[0].out, w[2].out, sizeof w[0].out) == 0,
           "fabrics in two threads at once computed other bits than one alone");
}

/* ------------------------------------------------------------------------------ fresh fabric, stats */

static void test_fresh_fabric(void) {
  weft_fabric *f = NULL;
  TU_STATUS(tu_open("cpu", &f), WEFT_OK, "open fresh");
  if (!f) return;
  TU_CHECK(weft_fabric_last_lane(f) == -1, "last_lane of a fresh fabric is %d, not -1", weft_fabric_last_lane(f));
  weft_route_explanation ex;
  TU_STATUS(weft_route_last(f, &ex), WEFT_ERR_STATE, "route_last before any routed op");
  TU_CHECK(weft_fabric_last_error(f)[0] != 0, "route_last STATE without a message");
  weft_split_report sr;
  TU_STATUS(weft_split_last(f, &sr), WEFT_ERR_STATE, "split_last before any batched matmul");
  weft_tensor *a = mk2(f, 2, 3), *b = mk2(f, 2, 3);
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = 0;
  weft_fabric_reset_stats(f);
  TU_STATUS(weft_op_relu(f, &d, a, b), WEFT_OK, "relu pinned to lane 0");
  TU_CHECK(weft_fabric_last_lane(f) == 0, "last_lane after a relu on lane 0: %d", weft_fabric_last_lane(f));
  weft_lane_stats st;
  TU_STATUS(weft_fabric_lane_stats(f, 0, &st), WEFT_OK, "lane_stats");
  TU_CHECK(st.ops[WEFT_OP_RELU] == 1, "one relu counted %llu times", (unsigned long long)st.ops[WEFT_OP_RELU]);
  TU_CHECK(st.seconds_measured == 1, "the cpu lane's seconds are measured");
  /* A refused op is not counted and does not move last_lane. */
  weft_tensor *c = mk2(f, 3, 2);
  TU_CHECK(weft_op_relu(f, &d, a, c) == WEFT_ERR_SHAPE, "relu into a wrong shape");
  TU_STATUS(weft_fabric_lane_stats(f, 0, &st), WEFT_OK, "lane_stats");
  TU_CHECK(st.ops[WEFT_OP_RELU] == 1, "a refused relu was counted");
  weft_fabric_reset_stats(f);
  TU_STATUS(weft_fabric_lane_stats(f, 0, &st), WEFT_OK, "lane_stats");
  TU_CHECK(st.ops[WEFT_OP_RELU] == 0, "reset_stats left counts");
  /* Closing with tensors alive destroys them (ASan's leak check sees it). */
  weft_fabric_close(f);
}

/* ------------------------------------------------------------------------- a device lane that is down */

/* A fake device lane (memory behind upload/download), one that starts down and never comes back, and one that
 * is up: prefetch, pinned ops, wrap_lane and lane_address against them. */
typedef struct dev_lane {
  const char *name;
  int down;
  int scales_left; /* >= 0: the scale after this many more runs out of device memory (-1: never) */
  uint64_t ops;    /* what it offers (0: says nothing, so the version-1 ops) */
} dev_lane;
static void dv_describe(void *self, weft_lane_desc *out) {
  const dev_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "fake";
  out->device = "fake device";
  out->driver = "";
  out->details = "test lane";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->flags = l->down ? WEFT_LANE_STARTS_DOWN : 0;
  out->ops = l->ops;
}
static void dv_destroy(void *self) { (void)self; }
static weft_status dv_run(void *self, const weft_op *op) {
  dev_lane *l = self;
  if (op->kind == WEFT_OP_SCALE && l->scales_left >= 0 && l->scales_left-- == 0) return WEFT_ERR_OUT_OF_MEMORY;
  if (op->kind == WEFT_OP_SUMSQ) { /* acc (rw) += x's chunk partials */
    float *acc = op->out[0];
    acc[0] = weft_ref_sumsq(op->in[0], op->iparam[0], acc[0]);
    return WEFT_OK;
  }
  weft_reference_run(op);
  return WEFT_OK;
}
static weft_status dv_revive(void *self) {
  (void)self;
  return WEFT_ERR_LANE_FAILED;
}

static void test_device_lanes(void) {
  weft_fabric *f = NULL;
  TU_STATUS(tu_open("cpu", &f), WEFT_OK, "open");
  if (!f) return;
  static dev_lane up = {"fake-up", 0, -1, WEFT_OPS_V1 | WEFT_OP_BIT(WEFT_OP_SUMSQ)}, down = {"fake-down", 1, -1, 0};
  weft_lane_vtable vt;
  memset(&vt, 0, sizeof vt);
  vt.abi_version = WEFT_LANE_ABI_VERSION;
  vt.size = sizeof vt;
  vt.describe = dv_describe, vt.destroy = dv_destroy, vt.buffer_alloc = tu_fake_alloc, vt.buffer_free = tu_fake_free;
  vt.upload = tu_fake_upload, vt.download = tu_fake_download, vt.run = dv_run, vt.revive = dv_revive;
  TU_STATUS(weft_testing_add_lane(f, &vt, &up), WEFT_OK, "add fake-up");
  TU_STATUS(weft_testing_add_lane(f, &vt, &down), WEFT_OK, "add fake-down");
  size_t iu = 0, id = 0, n_up = 0;
  TU_STATUS(weft_fabric_lane_find(f, "fake-up", &iu), WEFT_OK, "find fake-up");
  TU_STATUS(weft_fabric_lane_find(f, "fake-down", &id), WEFT_OK, "find fake-down");
  weft_lane_info li;
  TU_STATUS(weft_fabric_lane_info(f, id, &li), WEFT_OK, "lane_info fake-down");
  TU_CHECK(li.failed == 1 && li.revivable == 1, "a lane that starts down: failed %d revivable %d", li.failed,
           li.revivable);
  TU_CHECK(li.ops == WEFT_OPS_V1, "a lane that says nothing offers the version-1 ops: %llx",
           (unsigned long long)li.ops);
  TU_STATUS(weft_fabric_revive(f, &n_up), WEFT_OK, "revive");
  TU_CHECK(n_up == 2, "revive counts %zu lanes up, want 2 (cpu, fake-up)", n_up);
  const float v[6] = {1, -2, 3, -4, 5, -6};
  const int64_t d[2] = {2, 3};
  weft_tensor *t = NULL, *o = NULL;
  TU_STATUS(weft_tensor_create(f, 2, d, v, &t), WEFT_OK, "t");
  TU_STATUS(weft_tensor_create(f, 2, d, NULL, &o), WEFT_OK, "o");
  /* prefetch: onto a lane that is up, the value is resident there too; onto one that is down, LANE_FAILED. */
  TU_STATUS(weft_tensor_prefetch(t, iu), WEFT_OK, "prefetch onto fake-up");
  TU_CHECK(strcmp(weft_tensor_location(t), "host,fake-up") == 0, "after prefetch: location '%s', want 'host,fake-up'",
           weft_tensor_location(t));
  TU_STATUS(weft_tensor_prefetch(t, iu), WEFT_OK, "prefetch again: nothing moves");
  weft_fabric_sync(f);
  TU_STATUS(weft_tensor_prefetch(t, id), WEFT_ERR_LANE_FAILED, "prefetch onto a lane that is down");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "fake-down"), "prefetch onto a down lane: '%s' does not name it",
           weft_fabric_last_error(f));
  /* an op pinned to the down lane: LANE_FAILED, nothing written; to the up lane: runs there */
  weft_op_desc dd = WEFT_OP_DESC_INIT;
  dd.lane = (int)id;
  weft_fabric_sync(f);
  TU_STATUS(weft_op_relu(f, &dd, t, o), WEFT_ERR_LANE_FAILED, "relu pinned to a down lane");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "fake-down"), "pinned to a down lane: '%s'", weft_fabric_last_error(f));
  float got[6] = {9, 9, 9, 9, 9, 9};
  TU_STATUS(weft_tensor_read(o, got, 6), WEFT_OK, "read o");
  TU_CHECK(got[0] == 0 && got[5] == 0, "a refused op wrote its output");
  dd.lane = (int)iu;
  TU_STATUS(weft_op_relu(f, &dd, t, o), WEFT_OK, "relu pinned to fake-up");
  TU_CHECK(weft_fabric_last_lane(f) == (int)iu, "last_lane %d, want fake-up's %zu", weft_fabric_last_lane(f), iu);
  TU_STATUS(weft_tensor_read(o, got, 6), WEFT_OK, "read relu");
  TU_CHECK(got[0] == 1 && got[1] == 0 && got[4] == 5 && got[5] == 0, "relu on fake-up wrong");
  /* a device lane without buffer_wrap / buffer_address: UNSUPPORTED, naming it */
  void *addr = (void *)&addr;
  weft_fabric_sync(f);
  TU_STATUS(weft_tensor_lane_address(t, iu, &addr), WEFT_ERR_UNSUPPORTED, "lane_address on a lane without it");
  TU_CHECK(addr == NULL && tu_contains(weft_fabric_last_error(f), "fake-up"), "lane_address refusal: '%s'",
           weft_fabric_last_error(f));
  weft_tensor *w = (weft_tensor *)&w;
  float mem[6];
  TU_STATUS(weft_tensor_wrap_lane(f, iu, 2, d, mem, &w), WEFT_ERR_UNSUPPORTED, "wrap_lane on a lane without it");
  TU_CHECK(w == NULL && tu_contains(weft_fabric_last_error(f), "fake-up"), "wrap_lane refusal: '%s'",
           weft_fabric_last_error(f));
  /* grad_clip whose second scale fails: the error names it and says the first is scaled already */
  const float g0[2] = {3, 4}, g1[2] = {0, 0};
  const int64_t two = 2;
  weft_tensor *gs[2] = {NULL, NULL};
  TU_STATUS(weft_tensor_create(f, 1, &two, g0, &gs[0]), WEFT_OK, "g0");
  TU_STATUS(weft_tensor_create(f, 1, &two, g1, &gs[1]), WEFT_OK, "g1");
  up.scales_left = 1;
  float norm = -1;
  TU_STATUS(weft_grad_clip(f, &dd, gs, 2, 1.0f, &norm), WEFT_ERR_OUT_OF_MEMORY, "grad_clip whose second scale fails");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "scaling grads[1]") &&
               tu_contains(weft_fabric_last_error(f), "grads[0] is scaled already"),
           "grad_clip's partial scale: '%s'", weft_fabric_last_error(f));
  TU_CHECK(norm == 0.0f, "a failed grad_clip left a norm: %g", (double)norm);
  up.scales_left = -1;
  float gg[2] = {0, 0};
  TU_STATUS(weft_tensor_read(gs[0], gg, 2), WEFT_OK, "read g0");
  TU_CHECK(gg[0] == 0.6f && gg[1] == 0.8f, "grads[0] scaled to norm 1: %g %g", (double)gg[0], (double)gg[1]);
  weft_fabric_close(f); /* t and o destroyed with it, copies on fake-up freed */
}

/* ---------------------------------------------------------------------------------------------- mpi */

static void test_mpi_uninit(void) {
  if (weft_mpi_launched()) return; /* only the plain process is checked here */
  TU_CHECK(weft_mpi_rank() == 0 && weft_mpi_size() == 1, "rank/size before init: %d/%d", weft_mpi_rank(),
           weft_mpi_size());
  TU_CHECK(weft_mpi_last_error() != NULL, "weft_mpi_last_error is NULL");
  TU_STATUS(weft_mpi_finalize(), WEFT_OK, "mpi_finalize without init");
  double v[2] = {1, 2};
  /* Without MPI every call says so (UNSUPPORTED); with it, a call before weft_mpi_init is STATE. */
  const weft_status early = weft_mpi_built() ? WEFT_ERR_STATE : WEFT_ERR_UNSUPPORTED;
  weft_status st = weft_mpi_sum_ordered(v, 2);
  TU_STATUS(st, early, "mpi_sum_ordered before init");
  TU_CHECK(weft_mpi_last_error()[0] != 0, "mpi_sum_ordered failed without a weft_mpi_last_error");
  TU_STATUS(weft_mpi_init((weft_mpi_mode)7, NULL, NULL),
            weft_mpi_built() ? WEFT_ERR_INVALID_ARGUMENT : WEFT_ERR_UNSUPPORTED, "mpi_init(mode 7)");
  if (weft_mpi_built())
    TU_CHECK(tu_contains(weft_mpi_last_error(), "mode"), "mpi_init(mode 7): '%s' does not name the mode",
             weft_mpi_last_error());
  TU_CHECK(v[0] == 1 && v[1] == 2, "mpi_sum_ordered of one process changed the values");
  TU_CHECK(weft_mpi_timeout_ms() > 0, "mpi_timeout_ms");
  weft_mpi_grad *g = (weft_mpi_grad *)&g;
  weft_fabric_sync(F);
  TU_STATUS(weft_mpi_grad_begin(F, WEFT_CONTRACT_EXACT, &g), early, "mpi_grad_begin outside a data-parallel job");
  TU_CHECK(g == NULL, "a failed mpi_grad_begin left *out_grad set");
  TU_CHECK(weft_fabric_last_error(F)[0] != 0, "mpi_grad_begin failed without a message");
  g = (weft_mpi_grad *)&g;
  st = weft_mpi_grad_begin(F, WEFT_CONTRACT_TF32, &g);
  TU_CHECK(st != WEFT_OK, "mpi_grad_begin(tf32) succeeded: only exact or fp32");
  TU_CHECK(g == NULL, "a failed mpi_grad_begin left *out_grad set");
  if (st == WEFT_OK) weft_mpi_grad_end(g);
  intact("mpi calls");
}

int main(void) {
  double t0 = tu_now();
  TU_STATUS(tu_open("cpu", &F), WEFT_OK, "open F");
  TU_STATUS(tu_open("cpu", &F2), WEFT_OK, "open F2");
  if (!F || !F2) return tu_finish("doc_claims", t0);
  const int64_t d[2] = {2, 3};
  TU_STATUS(weft_tensor_create(F, 2, d, KV, &K), WEFT_OK, "create K");
  test_names();
  test_open();
  test_null_fabric();
  test_null_tensor();
  test_create_rules();
  test_lanes();
  test_math();
  test_npu();
  test_cache_path();
  test_scopes();
  test_cost_route();
  test_ops();
  test_transformer_aliasing();
  test_fresh_fabric();
  test_empty_batch();
  test_threads();
  test_device_lanes();
  test_mpi_uninit();
  intact("the end");
  weft_fabric_close(F2);
  weft_fabric_close(F); /* destroys K, left over on purpose */
  return tu_finish("doc_claims", t0);
}
