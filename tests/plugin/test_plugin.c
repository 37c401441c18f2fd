/* test_plugin.c - plugin lanes: loading and admission (a good plugin serves work; another ABI version, wrong
 * bits, a crash or a hang in the self-test, a partial claim not enforced, a crash while loading, an NPU
 * without evidence are refused with the reason and the caller lives on), the OpenCL plugin, and the NPU
 * probe over a fake /sys/class/accel tree, through the API and `weft devices`. The plugins' paths and the
 * CLI's come in as compile definitions (tests/plugin/CMakeLists.txt). */
#define _GNU_SOURCE /* mkdtemp, setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conformance.h"
#include "tutil.h"

/* Opens a fabric with only `plugin` as its plugin; lanes "cpu" plus the plugin's kind. */
static weft_fabric *open_with(const char *plugin) {
  weft_fabric_desc d = tu_desc();
  d.plugins = plugin;
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&d, &f);
  TU_CHECK(st == WEFT_OK, "open with %s: %s: %s", plugin, weft_status_str(st), weft_open_error());
  return f;
}

/* The reason an absent entry gives, or NULL. */
static const char *absent_reason(weft_fabric *f, const char *name) {
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *n, *r;
    if (weft_fabric_absent_info(f, i, &n, &r) == WEFT_OK && strcmp(n, name) == 0) return r;
  }
  return NULL;
}

static int find_lane(weft_fabric *f, const char *name) {
  size_t i;
  return weft_fabric_lane_find(f, name, &i) == WEFT_OK ? (int)i : -1;
}

/* A refused plugin: no lane of that name, an absent entry whose reason says `why`. */
static void check_refused(const char *plugin, const char *lane, const char *absent, const char *why) {
  weft_fabric *f = open_with(plugin);
  if (!f) return;
  TU_CHECK(find_lane(f, lane) < 0, "%s: lane %s was admitted, want refused", plugin, lane);
  const char *r = absent_reason(f, absent);
  TU_CHECK(r && tu_contains(r, why), "%s: absent %s says '%s', want it to say '%s'", plugin, absent, r ? r : "(none)",
           why);
  if (r) printf("refused as expected: %s: %s\n", absent, r);
  /* the caller is alive and its own lanes still work */
  int64_t dims[2] = {2, 3};
  float x[6] = {-1, 2, -3, 4, -5, 6}, y[6];
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, 2, dims, x, &t), WEFT_OK, "create after a refusal");
  TU_STATUS(weft_op_relu(f, NULL, t, t), WEFT_OK, "relu after a refusal");
  TU_STATUS(weft_tensor_read(t, y, 6), WEFT_OK, "read after a refusal");
  TU_CHECK(y[0] == 0 && y[1] == 2, "relu after a refusal gave %g %g", (double)y[0], (double)y[1]);
  weft_tensor_destroy(t);
  weft_fabric_close(f);
}

static void test_good(void) {
  weft_fabric *f = open_with(PLUGIN_GOOD);
  if (!f) return;
  int lane = find_lane(f, "reftest:0");
  TU_CHECK(lane >= 0, "the good plugin's lane reftest:0 is not in the fabric (%s)",
           absent_reason(f, "plugin:reftest") ? absent_reason(f, "plugin:reftest") : "no absent entry");
  if (lane >= 0) {
    weft_lane_info li;
    TU_STATUS(weft_fabric_lane_info(f, (size_t)lane, &li), WEFT_OK, "lane info");
    TU_CHECK(strcmp(li.kind, "reftest") == 0, "kind %s, want reftest", li.kind);
    weft_conf_stats s = {0, 0, 0};
    weft_conf_run(f, lane, WEFT_CONTRACT_EXACT, 1, 1, tu_seed(), &s);
    printf("reftest:0 exact (edge cases): %ld cases, %ld failed\n", s.cases, s.failed);
    TU_CHECK(s.cases > 0 && s.failed == 0, "conformance on the plugin lane: %ld of %ld cases failed", s.failed, s.cases);
  }
  weft_fabric_close(f);
  /* A second fabric reuses the verdict; the lane filter can leave the plugin out. */
  weft_fabric_desc d = tu_desc();
  d.plugins = PLUGIN_GOOD;
  d.lanes = "cpu";
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open cpu only");
  if (f) {
    TU_CHECK(find_lane(f, "reftest:0") < 0, "the filter 'cpu' let the plugin's lane in");
    const char *r = absent_reason(f, "plugin:reftest");
    TU_CHECK(r && tu_contains(r, "not requested"), "filtered plugin: '%s'", r ? r : "(none)");
    weft_fabric_close(f);
  }
  /* WEFT_PLUGIN_PATH as a directory loads every *.so in it; a path that does not exist is reported. */
  weft_fabric_desc d2 = tu_desc();
  d2.plugins = "/nonexistent/weft-plugin.so";
  TU_STATUS(weft_fabric_open(&d2, &f), WEFT_OK, "open with a missing plugin");
  if (f) {
    const char *r = absent_reason(f, "plugin:/nonexistent/weft-plugin.so");
    TU_CHECK(r && tu_contains(r, "no such file"), "missing plugin: '%s'", r ? r : "(none)");
    weft_fabric_close(f);
  }
}

static void test_npu_probe(void) {
  char root[] = "/tmp/weft-sysfs-XXXXXX";
  if (!mkdtemp(root)) {
    TU_CHECK(0, "mkdtemp failed");
    return;
  }
  char path[512];
  setenv("WEFT_SYSFS_ROOT", root, 1);
  weft_npu_info npu[4];
  size_t count = 99;
  TU_STATUS(weft_npu_probe(npu, 4, &count), WEFT_OK, "probe without a class/accel");
  TU_CHECK(count == 0, "no class/accel: %zu devices, want 0", count);
  const char *dirs[] = {"class", "class/accel", "class/accel/accel0", "class/accel/accel0/device"};
  for (size_t i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    mkdir(path, 0755);
  }
  snprintf(path, sizeof path, "%s/class/accel/accel0/device/driver", root);
  TU_CHECK(symlink("../../../../bus/pci/drivers/ivpu", path) == 0, "symlink");
  TU_STATUS(weft_npu_probe(npu, 4, &count), WEFT_OK, "probe the fake tree");
  TU_CHECK(count == 1, "fake tree: %zu devices, want 1", count);
  if (count == 1) {
    TU_CHECK(strcmp(npu[0].device, "accel0") == 0, "device '%s', want accel0", npu[0].device);
    TU_CHECK(strcmp(npu[0].driver, "ivpu") == 0, "driver '%s', want ivpu", npu[0].driver);
    TU_CHECK(tu_contains(npu[0].reach, "OpenVINO"), "reach '%s', want OpenVINO named", npu[0].reach);
  }
  TU_STATUS(weft_npu_probe(NULL, 0, &count), WEFT_OK, "count only");
  TU_CHECK(count == 1, "count only: %zu", count);
  TU_STATUS(weft_npu_probe(NULL, 0, NULL), WEFT_ERR_INVALID_ARGUMENT, "NULL count");
  /* `weft devices` says what it found, in text and JSON */
  char cmd[1024], out[8192];
  snprintf(cmd, sizeof cmd, "WEFT_SYSFS_ROOT=%s '%s' devices --lanes cpu 2>&1", root, WEFT_CLI);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = '\0';
  if (p) pclose(p);
  TU_CHECK(strstr(out, "NPU: accel0 (ivpu) present, no plugin loaded") != NULL, "weft devices said:\n%s", out);
  snprintf(cmd, sizeof cmd, "WEFT_SYSFS_ROOT=%s '%s' devices --json --lanes cpu 2>&1", root, WEFT_CLI);
  p = popen(cmd, "r");
  n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = '\0';
  if (p) pclose(p);
  TU_CHECK(strstr(out, "\"npus\"") && strstr(out, "\"ivpu\""), "weft devices --json said:\n%s", out);
  snprintf(cmd, sizeof cmd, "WEFT_SYSFS_ROOT=%s/none '%s' devices --lanes cpu 2>&1", root, WEFT_CLI);
  p = popen(cmd, "r");
  n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = '\0';
  if (p) pclose(p);
  TU_CHECK(strstr(out, "NPU: none found") != NULL, "weft devices (no accel) said:\n%s", out);
  unlink(path);
  for (int i = 3; i >= 0; i--) {
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    rmdir(path);
  }
  rmdir(root);
  unsetenv("WEFT_SYSFS_ROOT");
}

/* The OpenCL example plugin: admitted wherever an OpenCL platform is present, and then exact under the
 * suite's edge cases; with no platform, skipped with the reason (never refused at admission). The whole
 * suite runs on it in the conformance_opencl test. */
static void test_opencl(void) {
#ifdef PLUGIN_OPENCL
  weft_fabric *f = open_with(PLUGIN_OPENCL);
  if (!f) return;
  int lane = find_lane(f, "opencl:0");
  if (lane < 0) {
    const char *r = absent_reason(f, "opencl");
    TU_CHECK(r != NULL, "no opencl:0 lane and no reason given (opencl:0: %s; plugin:opencl: %s)",
             absent_reason(f, "opencl:0") ? absent_reason(f, "opencl:0") : "-",
             absent_reason(f, "plugin:opencl") ? absent_reason(f, "plugin:opencl") : "-");
    printf("SKIP opencl: %s\n", r ? r : "?");
  } else {
    weft_lane_info li;
    TU_STATUS(weft_fabric_lane_info(f, (size_t)lane, &li), WEFT_OK, "opencl lane info");
    TU_CHECK(strcmp(li.kind, "opencl") == 0, "kind %s, want opencl", li.kind);
    TU_CHECK(li.contracts == WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT), "opencl contracts 0x%x, want exact only",
             (unsigned)li.contracts);
    weft_conf_stats s = {0, 0, 0};
    weft_conf_run(f, lane, WEFT_CONTRACT_EXACT, 1, 1, tu_seed(), &s);
    printf("opencl:0 (%s) exact (edge cases): %ld cases, %ld failed\n", li.device, s.cases, s.failed);
    TU_CHECK(s.cases > 0 && s.failed == 0, "conformance on opencl:0: %ld of %ld cases failed", s.failed, s.cases);
  }
  weft_fabric_close(f);
#else
  printf("SKIP opencl: weft was configured without the OpenCL plugin (no OpenCL headers or libOpenCL)\n");
#endif
}

int main(void) {
  const double start = tu_now();
  unsetenv("WEFT_PLUGIN_PATH"); /* only the plugins each case names */
  test_good();
  check_refused(PLUGIN_ABI, "reftest_abi:0", "plugin:" PLUGIN_ABI_FILE, "ABI version 99");
  check_refused(PLUGIN_WRONG_BITS, "reftest_bits:0", "reftest_bits:0", "wrong bits");
  check_refused(PLUGIN_CRASH, "reftest_crash:0", "plugin:reftest_crash", "self-test crashed");
  setenv("WEFT_PLUGIN_TIMEOUT", "2", 1);
  check_refused(PLUGIN_HANG, "reftest_hang:0", "plugin:reftest_hang", "did not finish within 2 s");
  unsetenv("WEFT_PLUGIN_TIMEOUT");
  /* The caller never loads a plugin before its self-test passed, so not even a crashing constructor reaches it. */
  check_refused(PLUGIN_LOAD, "reftest_load:0", "plugin:reftest_load.so", "crashed");
  check_refused(PLUGIN_CLAIMS, "reftest_claims:0", "reftest_claims:0", "does not claim softmax_xent");
  check_refused(PLUGIN_NPU_NO_EVIDENCE, "npu_noevidence:0", "npu_noevidence:0", "no evidence that the NPU ran the work");
  /* With a receipt the NPU-kind lane is admitted (the test's receipt is the lane's own op count). */
  weft_fabric *f = open_with(PLUGIN_NPU_EVIDENCE);
  if (f) {
    TU_CHECK(find_lane(f, "npu_evidence:0") >= 0, "the NPU-kind plugin with evidence was refused: %s",
             absent_reason(f, "npu_evidence:0") ? absent_reason(f, "npu_evidence:0") : "?");
    weft_fabric_close(f);
  }
  test_npu_probe();
  test_opencl();
  return tu_finish("plugin", start);
}
