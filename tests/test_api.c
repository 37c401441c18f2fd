/* test_api.c - the public API's basics: versions, status and contract names, the lane list and absent
 * lanes, the lane filter, tensor shape/numel/location and data round trips, scopes, several fabrics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"
#include "weft_lane.h"

static void test_version(void) {
  TU_CHECK(strcmp(weft_version(), WEFT_VERSION_STRING) == 0, "weft_version() '%s' != WEFT_VERSION_STRING '%s'",
           weft_version(), WEFT_VERSION_STRING);
  TU_CHECK(weft_version_number() == WEFT_VERSION_NUMBER, "weft_version_number() %d != %d", weft_version_number(),
           WEFT_VERSION_NUMBER);
  int maj = -1, min = -1, pat = -1;
  TU_CHECK(sscanf(weft_version(), "%d.%d.%d", &maj, &min, &pat) == 3, "weft_version() '%s' is not MAJOR.MINOR.PATCH",
           weft_version());
  TU_CHECK(maj == WEFT_VERSION_MAJOR && min == WEFT_VERSION_MINOR && pat == WEFT_VERSION_PATCH,
           "weft_version() '%s' disagrees with the version macros", weft_version());
  TU_CHECK(WEFT_VERSION_NUMBER == maj * 10000 + min * 100 + pat, "WEFT_VERSION_NUMBER is not major*10000+minor*100+patch");
}

static void test_status_names(void) {
  const char *names[WEFT_ERR_INTERNAL + 1];
  for (int s = 0; s <= WEFT_ERR_INTERNAL; s++) {
    const char *n = weft_status_str((weft_status)s);
    TU_CHECK(n && n[0], "weft_status_str(%d) is NULL or empty", s);
    names[s] = n ? n : "";
    for (int t = 0; t < s; t++)
      TU_CHECK(strcmp(names[s], names[t]) != 0, "weft_status_str(%d) == weft_status_str(%d) = '%s'", s, t, names[s]);
  }
  static const int bogus[] = {-1, WEFT_ERR_INTERNAL + 1, 1000};
  for (size_t i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
    const char *n = weft_status_str((weft_status)bogus[i]);
    TU_CHECK(n && n[0], "weft_status_str(%d) is NULL or empty", bogus[i]);
    for (int s = 0; n && s <= WEFT_ERR_INTERNAL; s++)
      TU_CHECK(strcmp(n, names[s]) != 0, "weft_status_str(%d) reads like a real code: '%s'", bogus[i], n);
  }
}

static void test_contract_names(void) {
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) {
    const char *n = weft_contract_str((weft_contract)c);
    TU_CHECK(n && n[0] && strcmp(n, "?") != 0, "weft_contract_str(%d) = '%s'", c, n ? n : "(null)");
    weft_contract back = (weft_contract)-1;
    TU_STATUS(weft_contract_parse(n, &back), WEFT_OK, "weft_contract_parse(weft_contract_str(c))");
    TU_CHECK(back == (weft_contract)c, "weft_contract_parse('%s') = %d, want %d", n, (int)back, c);
    for (int d = 0; d < c; d++)
      TU_CHECK(strcmp(n, weft_contract_str((weft_contract)d)) != 0, "contracts %d and %d share the name '%s'", c, d, n);
  }
  TU_CHECK(strcmp(weft_contract_str(WEFT_CONTRACT_COUNT), "?") == 0, "weft_contract_str(COUNT) is not '?'");
  TU_CHECK(strcmp(weft_contract_str((weft_contract)-1), "?") == 0, "weft_contract_str(-1) is not '?'");
  static const char *const bad[] = {"", "EXACT", "exact ", "fp", "fp321", "tf"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    weft_contract c = WEFT_CONTRACT_FP32;
    TU_STATUS(weft_contract_parse(bad[i], &c), WEFT_ERR_INVALID_ARGUMENT, bad[i]);
    TU_CHECK(c == WEFT_CONTRACT_EXACT, "a failed parse of '%s' left %d, not the cleared default", bad[i], (int)c);
  }
  weft_contract c;
  TU_STATUS(weft_contract_parse(NULL, &c), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(NULL)");
  TU_STATUS(weft_contract_parse("exact", NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_contract_parse(out NULL)");
  for (int k = 0; k < WEFT_OP_COUNT; k++) {
    const char *n = weft_op_kind_str((weft_op_kind)k);
    TU_CHECK(n && n[0] && strcmp(n, "?") != 0, "weft_op_kind_str(%d) = '%s'", k, n ? n : "(null)");
    for (int j = 0; j < k; j++)
      TU_CHECK(strcmp(n, weft_op_kind_str((weft_op_kind)j)) != 0, "op kinds %d and %d share the name '%s'", k, j, n);
  }
  TU_CHECK(strcmp(weft_op_kind_str(WEFT_OP_COUNT), "?") == 0, "weft_op_kind_str(COUNT) is not '?'");
  for (int k = 0; k < WEFT_OP_COUNT; k++) {
    weft_op_kind back = WEFT_OP_COUNT;
    TU_STATUS(weft_op_kind_parse(weft_op_kind_str((weft_op_kind)k), &back), WEFT_OK, "weft_op_kind_parse");
    TU_CHECK(back == (weft_op_kind)k, "weft_op_kind_parse('%s') = %d, want %d", weft_op_kind_str((weft_op_kind)k),
             (int)back, k);
  }
  weft_op_kind kind;
  TU_STATUS(weft_op_kind_parse("gemm", &kind), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse('gemm')");
  TU_STATUS(weft_op_kind_parse(NULL, &kind), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(NULL)");
  TU_STATUS(weft_op_kind_parse("matmul", NULL), WEFT_ERR_INVALID_ARGUMENT, "weft_op_kind_parse(out NULL)");
}

static void test_lanes(void) {
  weft_fabric *f = NULL;
  TU_STATUS(weft_fabric_open(NULL, &f), WEFT_OK, "weft_fabric_open(NULL desc)");
  if (!f) return;
  TU_CHECK(weft_open_error()[0] == '\0', "weft_open_error() after a good open is '%s'", weft_open_error());
  TU_CHECK(weft_fabric_last_error(f)[0] == '\0', "a fresh fabric has the last error '%s'", weft_fabric_last_error(f));
  TU_CHECK(weft_fabric_last_lane(f) == -1, "a fresh fabric's last lane is %d", weft_fabric_last_lane(f));
  size_t n = weft_fabric_lane_count(f), ncpu = 0, non_cpu = 0;
  TU_CHECK(n >= 1, "the fabric has no lanes");
  for (size_t i = 0; i < n; i++) {
    weft_lane_info li;
    TU_STATUS(weft_fabric_lane_info(f, i, &li), WEFT_OK, "weft_fabric_lane_info");
    TU_CHECK(li.name && li.kind && li.device && li.driver && li.details, "lane %zu has a NULL string", i);
    if (!li.name || !li.kind || !li.device || !li.driver || !li.details) continue;
    printf("lane %zu: name '%s' kind '%s' device '%s' driver '%s' details '%s' contracts 0x%x\n", i, li.name, li.kind,
           li.device, li.driver, li.details, (unsigned)li.contracts);
    TU_CHECK(li.name[0] && li.kind[0] && li.device[0], "lane %zu has an empty name, kind or device", i);
    TU_CHECK(li.contracts != 0, "lane %s honours no contract", li.name);
    TU_CHECK((li.contracts >> WEFT_CONTRACT_COUNT) == 0, "lane %s claims contracts that do not exist: 0x%x", li.name,
             (unsigned)li.contracts);
    TU_CHECK(!li.failed, "lane %s is failed in a fresh fabric", li.name);
    size_t idx = 999;
    TU_STATUS(weft_fabric_lane_find(f, li.name, &idx), WEFT_OK, "weft_fabric_lane_find(own name)");
    TU_CHECK(idx == i, "weft_fabric_lane_find('%s') = %zu, want %zu", li.name, idx, i);
    if (strcmp(li.kind, "cpu") == 0) {
      ncpu++;
      TU_CHECK((li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)) &&
                   (li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32)),
               "the CPU lane does not honour exact and fp32 (0x%x)", (unsigned)li.contracts);
    } else {
      non_cpu++;
    }
  }
  TU_CHECK(ncpu == 1, "%zu CPU lanes, want exactly one", ncpu);
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name = NULL, *reason = NULL;
    TU_STATUS(weft_fabric_absent_info(f, i, &name, &reason), WEFT_OK, "weft_fabric_absent_info");
    TU_CHECK(name && name[0] && reason && reason[0], "absent entry %zu has no name or no reason", i);
    if (name && reason) printf("absent %s: %s\n", name, reason);
  }
  weft_fabric_close(f);

  /* The filter: only the CPU; every other lane (and provider) is listed absent as not requested. */
  weft_fabric_desc d = tu_desc();
  d.lanes = " cpu ";
  d.cpu_threads = 1;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "weft_fabric_open(lanes ' cpu ', 1 thread)");
  if (!f) return;
  TU_CHECK(weft_fabric_lane_count(f) == 1, "lanes ' cpu ' opened %zu lanes", weft_fabric_lane_count(f));
  weft_lane_info li;
  TU_CHECK(weft_fabric_lane_info(f, 0, &li) == WEFT_OK && strcmp(li.kind, "cpu") == 0, "lanes 'cpu' opened a %s lane",
           li.kind ? li.kind : "(null)");
  size_t not_requested = 0;
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name = NULL, *reason = NULL;
    weft_fabric_absent_info(f, i, &name, &reason);
    not_requested += tu_contains(reason, "not requested");
  }
  TU_CHECK(not_requested >= (non_cpu ? 1 : 0), "a filtered-out lane is not listed as absent 'not requested'");
  weft_fabric_close(f);
}

/* Tensors: shapes, element counts, where they live, and data that comes back with the bits it went in with. */
static void test_tensors(void) {
  weft_fabric *f = NULL;
  TU_STATUS(tu_open(NULL, &f), WEFT_OK, "weft_fabric_open");
  if (!f) return;
  static const int64_t shapes[][4] = {{7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}, {0, 3, 4}, {3, 0, 2, 2}, {1, 1, 1, 1}};
  static const int ranks[] = {1, 2, 3, 4, 3, 4, 4};
  for (size_t s = 0; s < sizeof ranks / sizeof ranks[0]; s++) {
    const int r = ranks[s];
    size_t n = 1;
    for (int d = 0; d < r; d++) n *= (size_t)shapes[s][d];
    float *data = malloc((n ? n : 1) * sizeof(float)), *back = malloc((n ? n : 1) * sizeof(float));
    /* Bits a careless copy could change: NaN payloads, -0, subnormals. */
    static const uint32_t pattern[] = {0x7fc01234u, 0xffa00001u, 0x80000000u, 0x00000001u, 0x3f800000u, 0xff800000u};
    for (size_t e = 0; e < n; e++) data[e] = tu_float(pattern[e % 6] + (e / 6 > 0 && pattern[e % 6] == 0x3f800000u ? (uint32_t)e : 0));
    weft_tensor *t = NULL;
    TU_STATUS(weft_tensor_create(f, r, shapes[s], data, &t), WEFT_OK, "weft_tensor_create");
    if (t) {
      int nd = 0;
      int64_t dims[WEFT_MAX_DIMS];
      TU_STATUS(weft_tensor_shape(t, &nd, dims), WEFT_OK, "weft_tensor_shape");
      TU_CHECK(nd == r, "shape %zu: rank %d, want %d", s, nd, r);
      for (int d = 0; d < WEFT_MAX_DIMS; d++)
        TU_CHECK(dims[d] == (d < r ? shapes[s][d] : 1), "shape %zu: dims[%d] = %lld, want %lld", s, d,
                 (long long)dims[d], (long long)(d < r ? shapes[s][d] : 1));
      TU_CHECK(weft_tensor_numel(t) == n, "shape %zu: numel %zu, want %zu", s, weft_tensor_numel(t), n);
      TU_CHECK(strcmp(weft_tensor_location(t), "host") == 0, "a new tensor lives at '%s', not host",
               weft_tensor_location(t));
      TU_STATUS(weft_tensor_read(t, back, n), WEFT_OK, "weft_tensor_read");
      TU_CHECK(memcmp(back, data, n * sizeof(float)) == 0, "shape %zu: the data did not come back bit for bit", s);
      for (size_t e = 0; e < n; e++) data[e] = (float)e * 0.25f - 1.0f;
      TU_STATUS(weft_tensor_write(t, data, n), WEFT_OK, "weft_tensor_write");
      TU_CHECK(strcmp(weft_tensor_location(t), "host") == 0, "after a write the tensor lives at '%s'",
               weft_tensor_location(t));
      TU_STATUS(weft_tensor_read(t, back, n), WEFT_OK, "weft_tensor_read after write");
      TU_CHECK(memcmp(back, data, n * sizeof(float)) == 0, "shape %zu: written data did not come back", s);
      weft_tensor_destroy(t);
    }
    /* NULL data: zeros, and +0 ones. */
    TU_STATUS(weft_tensor_create(f, r, shapes[s], NULL, &t), WEFT_OK, "weft_tensor_create(NULL data)");
    if (t) {
      memset(back, 0xff, (n ? n : 1) * sizeof(float));
      TU_STATUS(weft_tensor_read(t, back, n), WEFT_OK, "weft_tensor_read");
      size_t nonzero = 0;
      for (size_t e = 0; e < n; e++) nonzero += tu_bits(back[e]) != 0;
      TU_CHECK(nonzero == 0, "shape %zu: a tensor created without data has %zu elements that are not +0", s, nonzero);
    }
    /* t is left alive on purpose: weft_fabric_close must free it (ASan's leak check watches). */
    free(data), free(back);
  }
  weft_fabric_close(f);
  weft_fabric_close(NULL);
  weft_tensor_destroy(NULL);
  TU_CHECK(weft_tensor_numel(NULL) == 0, "weft_tensor_numel(NULL) != 0");
  TU_CHECK(weft_tensor_location(NULL) && weft_tensor_location(NULL)[0] == '\0', "weft_tensor_location(NULL) is not \"\"");
  TU_CHECK(weft_fabric_last_error(NULL) != NULL, "weft_fabric_last_error(NULL) is NULL");
  TU_CHECK(weft_fabric_lane_count(NULL) == 0 && weft_fabric_absent_count(NULL) == 0, "counts of a NULL fabric");
  TU_CHECK(weft_fabric_last_lane(NULL) == -1, "weft_fabric_last_lane(NULL) != -1");
}

/* Ops on each lane report where they ran; scopes and sync succeed and reads inside a scope see results. */
static void test_ops_and_scopes(void) {
  weft_fabric *f = NULL;
  TU_STATUS(tu_open(NULL, &f), WEFT_OK, "weft_fabric_open");
  if (!f) return;
  const int64_t d[2] = {2, 3};
  const float xv[6] = {-1, 2, -3, 4, -5, 6};
  weft_tensor *x = NULL, *y = NULL;
  weft_tensor_create(f, 2, d, xv, &x);
  weft_tensor_create(f, 2, d, NULL, &y);
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li; /* a tensor-unit lane (tf32/bf16 matmul only) runs no exact relu */
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || !(li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) continue;
    weft_op_desc od = {WEFT_CONTRACT_EXACT, (int)i};
    TU_STATUS(weft_scope_begin(f), WEFT_OK, "weft_scope_begin");
    TU_STATUS(weft_op_relu(f, &od, x, y), WEFT_OK, "weft_op_relu in a scope");
    TU_CHECK(weft_fabric_last_lane(f) == (int)i, "the op pinned to lane %zu reports lane %d", i, weft_fabric_last_lane(f));
    float got[6];
    TU_STATUS(weft_tensor_read(y, got, 6), WEFT_OK, "weft_tensor_read in a scope");
    TU_CHECK(got[0] == 0 && got[1] == 2 && got[2] == 0 && got[3] == 4 && got[4] == 0 && got[5] == 6,
             "relu read inside a scope on lane %zu is wrong: %g %g %g %g %g %g", i, got[0], got[1], got[2], got[3], got[4],
             got[5]);
    TU_STATUS(weft_op_scale(f, &od, -2.0f, y, y), WEFT_OK, "weft_op_scale in a scope");
    TU_STATUS(weft_scope_end(f), WEFT_OK, "weft_scope_end");
    TU_STATUS(weft_fabric_sync(f), WEFT_OK, "weft_fabric_sync");
    TU_STATUS(weft_tensor_read(y, got, 6), WEFT_OK, "weft_tensor_read after the scope");
    TU_CHECK(got[1] == -4 && got[5] == -12 && tu_bits(got[0]) == 0x80000000u,
             "scale recorded in a scope on lane %zu is wrong: %g %g %g", i, got[0], got[1], got[5]);
  }
  /* An empty scope is fine. */
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "weft_scope_begin (empty)");
  TU_STATUS(weft_scope_end(f), WEFT_OK, "weft_scope_end (empty)");
  /* Closing with a scope open and recorded work pending, tensors alive: everything is released (ASan
   * watches for leaks and use after free). */
  TU_STATUS(weft_scope_begin(f), WEFT_OK, "weft_scope_begin before close");
  TU_STATUS(weft_op_relu(f, NULL, x, y), WEFT_OK, "weft_op_relu before close");
  weft_fabric_close(f);
}

/* Two fabrics at once keep to themselves. */
static void test_two_fabrics(void) {
  weft_fabric *f1 = NULL, *f2 = NULL;
  TU_STATUS(tu_open(NULL, &f1), WEFT_OK, "weft_fabric_open #1");
  TU_STATUS(tu_open(NULL, &f2), WEFT_OK, "weft_fabric_open #2");
  if (!f1 || !f2) {
    weft_fabric_close(f1), weft_fabric_close(f2);
    return;
  }
  const int64_t d[1] = {4};
  const float v1[4] = {1, 2, 3, 4}, v2[4] = {-1, -2, -3, -4};
  weft_tensor *a1 = NULL, *a2 = NULL;
  weft_tensor_create(f1, 1, d, v1, &a1);
  weft_tensor_create(f2, 1, d, v2, &a2);
  TU_STATUS(weft_op_scale(f1, NULL, 2.0f, a1, a1), WEFT_OK, "scale on fabric 1");
  weft_fabric_close(f2);
  float got[4];
  TU_STATUS(weft_tensor_read(a1, got, 4), WEFT_OK, "read on fabric 1 after closing fabric 2");
  TU_CHECK(got[0] == 2 && got[3] == 8, "fabric 1's tensor changed when fabric 2 closed: %g %g", got[0], got[3]);
  weft_fabric_close(f1);
}

int main(void) {
  const double start = tu_now();
  test_version();
  test_status_names();
  test_contract_names();
  test_lanes();
  test_tensors();
  test_ops_and_scopes();
  test_two_fabrics();
  return tu_finish("api", start);
}
