/* test_plugin.c - plugin lanes: loading and admission (a good plugin serves work; another ABI version, wrong
 * bits, a crash or a hang in the self-test, a partial claim not enforced, a crash while loading, fused
 * multiply-adds only for large k, an NPU whose device counter did not advance are refused with the reason
 * and the caller lives on), the self-test run by the helper weft-plugin-check, the file that was tested
 * being the one loaded (verdicts keyed by content, not path and time), the OpenCL plugin, and the NPU probe
 * and NPU admission over a fake /sys/class/accel tree, through the API and `weft devices`. The plugins' paths and the
 * CLI's come in as compile definitions (tests/plugin/CMakeLists.txt). */
#define _GNU_SOURCE /* mkdtemp, setenv */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conformance.h"
#include "core/reference_tx.h"
#include "tutil.h"
#include "weft_plugin.h"

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
    TU_CHECK(li.ops == WEFT_OPS_ALL, "reftest:0 offers ops 0x%llx, want every op (0x%llx): it passed them all",
             (unsigned long long)li.ops, (unsigned long long)WEFT_OPS_ALL);
    const char *note = weft_plugin_admission("reftest:0");
    TU_CHECK(note && tu_contains(note, "of 26 ops") && tu_contains(note, "transformer ops with NaN") &&
                 !tu_contains(note, "refused"),
             "reftest:0 admission note: '%s'", note ? note : "(none)");
    weft_conf_stats s = {0, 0, 0, 0};
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

/* Copies file src to dst (created or overwritten in place: the same inode); 1 on success. */
static int copy_file(const char *src, const char *dst) {
  FILE *in = fopen(src, "rb");
  int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
  FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
  int ok = in && out;
  char buf[65536];
  size_t n;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  if (in) fclose(in);
  if (out) ok &= fclose(out) == 0;
  else if (fd >= 0) close(fd);
  return ok;
}

/* The verdict follows the file's content, and what runs is what was tested: a plugin admitted under a lane
 * filter that leaves it out (so it is tested but not loaded), then overwritten in place by one that calls
 * itself by the same name but gives wrong bits, with its modification time put back to the nanosecond.
 * A cache keyed by path and time reused the old verdict and loaded the new file; keyed by content, the new
 * file is tested and refused. */
static void test_content_key(void) {
  char dir[] = "/tmp/weft-plugin-XXXXXX", path[128];
  if (!mkdtemp(dir)) {
    TU_CHECK(0, "mkdtemp failed");
    return;
  }
  snprintf(path, sizeof path, "%s/swap.so", dir);
  TU_CHECK(copy_file(PLUGIN_GOOD, path), "copy the good plugin");
  struct stat before;
  TU_CHECK(stat(path, &before) == 0, "stat the copy");
  weft_fabric_desc d = tu_desc();
  d.plugins = path;
  d.lanes = "cpu";
  weft_fabric *f = NULL;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open with the copy, filtered out");
  weft_fabric_close(f);
  TU_CHECK(copy_file(PLUGIN_EVIL, path), "overwrite the copy in place");
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  TU_CHECK(utimensat(AT_FDCWD, path, times, 0) == 0, "put the modification time back");
  struct stat after;
  TU_CHECK(stat(path, &after) == 0 && after.st_ino == before.st_ino && after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
               after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
           "same inode and time after the swap");
  f = open_with(path);
  if (f) {
    int lane = find_lane(f, "reftest:0");
    const char *r = absent_reason(f, "reftest:0");
    TU_CHECK(lane < 0, "the swapped-in plugin (wrong bits) was admitted on the old file's verdict");
    TU_CHECK(r && tu_contains(r, "wrong bits"), "swapped plugin: reftest:0 absent because '%s', want 'wrong bits'",
             r ? r : "(none)");
    weft_fabric_close(f);
  }
  unlink(path);
  rmdir(dir);
}

/* The self-test runs in the helper executable, never in a fork of the caller: without the helper there is
 * no self-test, and the plugin is refused saying so (not cached: the next fabric tries again). */
static void test_helper(void) {
  setenv("WEFT_PLUGIN_CHECK", "/nonexistent/weft-plugin-check", 1);
  check_refused(PLUGIN_GOOD, "reftest:0", "plugin:reftest.so", "WEFT_PLUGIN_CHECK");
  unsetenv("WEFT_PLUGIN_CHECK");
  setenv("WEFT_PLUGIN_CHECK", PLUGIN_CHECK, 1);
  weft_fabric *f = open_with(PLUGIN_GOOD);
  if (f) {
    TU_CHECK(find_lane(f, "reftest:0") >= 0, "with WEFT_PLUGIN_CHECK set right the good plugin is admitted (%s)",
             absent_reason(f, "plugin:reftest.so") ? absent_reason(f, "plugin:reftest.so") : "-");
    const char *note = weft_plugin_admission("reftest:0");
    TU_CHECK(note && tu_contains(note, "verified") && tu_contains(note, "k = 4099"), "admission note: '%s'",
             note ? note : "(none)");
    weft_fabric_close(f);
  }
  unsetenv("WEFT_PLUGIN_CHECK");
}

/* Runs `weft devices` with the environment prefix env; the output in out. */
static void run_devices(const char *env, char *out, size_t len) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s '%s' devices --lanes cpu,npu 2>&1", env, WEFT_CLI);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, len - 1, p) : 0;
  out[n] = '\0';
  if (p) pclose(p);
}

/* NPU admission: only when the accel device the lane names advanced its npu_busy_time_us during the
 * self-test (a fake sysfs tree; the npu_counter test plugin advances the counter as it runs, as the driver
 * would). A receipt the plugin writes is shown as claimed and proves nothing. */
static void test_npu_admission(void) {
  char root[] = "/tmp/weft-sysfs-XXXXXX", path[512];
  if (!mkdtemp(root)) {
    TU_CHECK(0, "mkdtemp failed");
    return;
  }
  const char *dirs[] = {"class", "class/accel", "class/accel/accel0", "class/accel/accel0/device"};
  for (size_t i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    mkdir(path, 0755);
  }
  char counter[512], link[512];
  snprintf(counter, sizeof counter, "%s/class/accel/accel0/device/npu_busy_time_us", root);
  snprintf(link, sizeof link, "%s/class/accel/accel0/device/driver", root);
  TU_CHECK(symlink("../../../../bus/pci/drivers/ivpu", link) == 0, "symlink");
  FILE *fp = fopen(counter, "w");
  TU_CHECK(fp && fprintf(fp, "100\n") > 0, "write the counter");
  if (fp) fclose(fp);
  setenv("WEFT_SYSFS_ROOT", root, 1);
  /* advanced: admitted, and the note says what was verified */
  weft_fabric *f = open_with(PLUGIN_NPU_COUNTER);
  if (f) {
    TU_CHECK(find_lane(f, "npu_counter:0") >= 0, "the NPU lane whose counter advanced was refused: %s",
             absent_reason(f, "npu_counter:0") ? absent_reason(f, "npu_counter:0") : "?");
    const char *note = weft_plugin_admission("npu_counter:0");
    TU_CHECK(note && tu_contains(note, "accel0's npu_busy_time_us advanced") && tu_contains(note, "claimed: test receipt"),
             "npu_counter admission note: '%s'", note ? note : "(none)");
    weft_fabric_close(f);
  }
  /* named the device, claimed a receipt, the counter stayed: refused, not verified */
  check_refused(PLUGIN_NPU_STUCK, "npu_stuck:0", "npu_stuck:0", "npu claimed, not verified");
  f = open_with(PLUGIN_NPU_STUCK);
  if (f) {
    const char *r = absent_reason(f, "npu_stuck:0");
    TU_CHECK(r && tu_contains(r, "stayed at") && tu_contains(r, "it claimed: test receipt"), "npu_stuck: '%s'",
             r ? r : "(none)");
    weft_fabric_close(f);
  }
  /* a receipt but no device named: what the old evidence slot took as proof */
  check_refused(PLUGIN_NPU_EVIDENCE, "npu_evidence:0", "npu_evidence:0", "npu claimed, not verified");
  check_refused(PLUGIN_NPU_NO_EVIDENCE, "npu_noevidence:0", "npu_noevidence:0", "npu claimed, not verified");
  /* `weft devices` says what was verified and what was only claimed */
  char env[1400], out[16384];
  snprintf(env, sizeof env, "WEFT_SYSFS_ROOT='%s' WEFT_PLUGIN_PATH='%s'", root, PLUGIN_NPU_COUNTER);
  run_devices(env, out, sizeof out);
  TU_CHECK(strstr(out, "verified: ") && strstr(out, "npu_busy_time_us advanced") &&
               strstr(out, "served by plugin lane npu_counter:0 (verified"),
           "weft devices with an NPU lane whose counter advanced said:\n%s", out);
  snprintf(env, sizeof env, "WEFT_SYSFS_ROOT='%s' WEFT_PLUGIN_PATH='%s'", root, PLUGIN_NPU_STUCK);
  run_devices(env, out, sizeof out);
  TU_CHECK(strstr(out, "npu claimed, not verified") && !strstr(out, "served by plugin lane"),
           "weft devices with an NPU lane whose counter stayed said:\n%s", out);
  unsetenv("WEFT_SYSFS_ROOT");
  unlink(counter);
  unlink(link);
  for (int i = 3; i >= 0; i--) {
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    rmdir(path);
  }
  rmdir(root);
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

/* A plugin lane that gets one transformer op wrong is admitted without that op: it is not in the lane's
 * op set, an op pinned there is refused, the router runs it elsewhere with the reference's bits, and the
 * admission note (and `weft devices`) names the op and why. */
static void test_tx_refused_op(const char *plugin, const char *lane, weft_op_kind bad, const char *why) {
  weft_fabric *f = open_with(plugin);
  if (!f) return;
  const int li_ = find_lane(f, lane);
  TU_CHECK(li_ >= 0, "%s: lane %s was refused as a whole (%s); want it admitted without %s", plugin, lane,
           absent_reason(f, lane) ? absent_reason(f, lane) : "-", weft_op_kind_str(bad));
  if (li_ < 0) {
    weft_fabric_close(f);
    return;
  }
  weft_lane_info li;
  TU_STATUS(weft_fabric_lane_info(f, (size_t)li_, &li), WEFT_OK, "lane info");
  TU_CHECK(li.ops == (WEFT_OPS_ALL & ~WEFT_OP_BIT(bad)), "%s offers 0x%llx, want every op but %s", lane,
           (unsigned long long)li.ops, weft_op_kind_str(bad));
  const char *note = weft_plugin_admission(lane);
  char want[96];
  snprintf(want, sizeof want, "refused ops: %s (", weft_op_kind_str(bad));
  TU_CHECK(note && tu_contains(note, want) && tu_contains(note, why), "%s admission note: '%s', want '%s' and '%s'",
           lane, note ? note : "(none)", want, why);
  if (note) printf("admitted without %s: %s: %s\n", weft_op_kind_str(bad), lane, note);
  /* The other ops serve: the suite's edge cases on the lane (the refused op's family is skipped). */
  weft_conf_stats s = {0, 0, 0, 0};
  weft_conf_run(f, li_, WEFT_CONTRACT_EXACT, 1, 1, tu_seed(), &s);
  TU_CHECK(s.cases > 0 && s.failed == 0, "conformance on %s: %ld of %ld cases failed", lane, s.failed, s.cases);
  if (bad == WEFT_OP_GELU) {
    /* pinned there: refused, naming the op; routed: the cpu's bits */
    const int64_t d[1] = {4};
    const float x[4] = {-1.5f, 0.25f, 3.0f, -0.0f};
    float got[4], want_y[4];
    weft_tensor *tx = NULL, *ty = NULL;
    TU_STATUS(weft_tensor_create(f, 1, d, x, &tx), WEFT_OK, "create x");
    TU_STATUS(weft_tensor_create(f, 1, d, NULL, &ty), WEFT_OK, "create y");
    weft_op_desc pin = {WEFT_CONTRACT_EXACT, li_};
    TU_STATUS(weft_op_gelu(f, &pin, tx, ty), WEFT_ERR_UNSUPPORTED, "gelu pinned to a lane admitted without it");
    TU_CHECK(tu_contains(weft_fabric_last_error(f), "gelu"), "the refusal does not name the op: '%s'",
             weft_fabric_last_error(f));
    TU_STATUS(weft_op_gelu(f, NULL, tx, ty), WEFT_OK, "gelu routed");
    TU_STATUS(weft_tensor_read(ty, got, 4), WEFT_OK, "read y");
    weft_ref_gelu_forward(want_y, x, 4);
    TU_CHECK(memcmp(got, want_y, sizeof got) == 0, "routed gelu differs from the reference");
    weft_tensor_destroy(tx), weft_tensor_destroy(ty);
  }
  weft_fabric_close(f);
  /* `weft devices` says so */
  char env[1400], out[16384];
  snprintf(env, sizeof env, "WEFT_PLUGIN_PATH='%s'", plugin);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s '%s' devices --lanes cpu,reftest 2>&1", env, WEFT_CLI);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = '\0';
  if (p) pclose(p);
  TU_CHECK(strstr(out, want) != NULL, "weft devices with %s does not say '%s':\n%s", plugin, want, out);
}

/* A lane offering an op its plugin does not claim, which its supports slot declines: admitted without it. */
static void test_declined_op(void) {
  weft_fabric *f = open_with(PLUGIN_DECLINE);
  if (!f) return;
  const int lane = find_lane(f, "reftest_decline:0");
  TU_CHECK(lane >= 0, "reftest_decline:0 was refused: %s",
           absent_reason(f, "reftest_decline:0") ? absent_reason(f, "reftest_decline:0") : "-");
  weft_lane_info li;
  if (lane >= 0 && weft_fabric_lane_info(f, (size_t)lane, &li) == WEFT_OK)
    TU_CHECK(li.ops == (WEFT_OPS_ALL & ~WEFT_OP_BIT(WEFT_OP_ATTENTION_CACHED)),
             "reftest_decline:0 offers 0x%llx, want every op but attention_cached", (unsigned long long)li.ops);
  weft_fabric_close(f);
}

/* The OpenCL example plugin: admitted wherever an OpenCL platform is present, with every op, and then exact
 * under the suite's edge cases; with no platform, skipped with the reason (never refused at admission). The whole
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
    /* every op, the transformer ops included, passed its admission */
    /* every op but matmul_acc, which the plugin does not offer (no accumulating kernel yet) */
    const uint64_t want = WEFT_OPS_ALL & ~WEFT_OP_BIT(WEFT_OP_MATMUL_ACC);
    TU_CHECK(li.ops == want, "opencl:0 offers ops 0x%llx, want every op but matmul_acc (0x%llx); admission said: %s",
             (unsigned long long)li.ops, (unsigned long long)want,
             weft_plugin_admission("opencl:0") ? weft_plugin_admission("opencl:0") : "(none)");
    weft_conf_stats s = {0, 0, 0, 0};
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
  unsetenv("WEFT_PLUGIN_CHECK");
  test_helper();
  test_good();
  test_content_key();
  /* Exact on small k, fused multiply-adds past k = 2000: the large-k cases catch it. */
  check_refused(PLUGIN_FMA, "reftest_fma:0", "reftest_fma:0", "wrong bits");
  check_refused(PLUGIN_ABI, "reftest_abi:0", "plugin:" PLUGIN_ABI_FILE, "ABI version 99");
  /* a plugin of the previous ABI: refused, naming its version and this weft's */
  check_refused(PLUGIN_ABI_V1, "reftest_abiv1:0", "plugin:reftest_abiv1.so", "ABI version 1; this weft speaks version 2");
  check_refused(PLUGIN_WRONG_BITS, "reftest_bits:0", "reftest_bits:0", "wrong bits");
  check_refused(PLUGIN_CRASH, "reftest_crash:0", "plugin:reftest_crash", "self-test crashed");
  setenv("WEFT_PLUGIN_TIMEOUT", "2", 1);
  check_refused(PLUGIN_HANG, "reftest_hang:0", "plugin:reftest_hang", "did not finish within 2 s");
  unsetenv("WEFT_PLUGIN_TIMEOUT");
  /* The caller never loads a plugin before its self-test passed, so not even a crashing constructor reaches it. */
  check_refused(PLUGIN_LOAD, "reftest_load:0", "plugin:reftest_load.so", "crashed");
  check_refused(PLUGIN_CLAIMS, "reftest_claims:0", "reftest_claims:0", "does not claim softmax_xent");
  /* a transformer op wrong: that op refused, the lane admitted */
  test_tx_refused_op(PLUGIN_TX_NAN, "reftest_txnan:0", WEFT_OP_GELU, "every NaN stored must be 0x7fc00000");
  test_declined_op();
  test_tx_refused_op(PLUGIN_TX_ORDER, "reftest_txorder:0", WEFT_OP_EMBEDDING_BACKWARD, "wrong bits at output dwte");
  test_npu_admission();
  test_npu_probe();
  test_opencl();
  return tu_finish("plugin", start);
}
