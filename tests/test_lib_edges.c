/* test_lib_edges.c - edges of the library that a review found:
 *   memo      the router's remembered decisions are keyed by the transposes too: a lane that declines a
 *             transposed operand is not given one because the untransposed op chose it;
 *   explain   weft_route_explain is a query: it measures no lane and writes no cache, even where routing
 *             would calibrate (calibration AUTO, lanes unmeasured); it explains from the priors;
 *   cache     the calibration cache keeps every writer's entries when fabrics in two threads and two
 *             processes save at once (a lock, a temporary file of each writer's own);
 *   lanes64   a fabric of more than 64 lanes: per-lane bit masks are never shifted by 64 or more (UBSan
 *             would stop the test), and only the lane that registered a tensor's memory is asked to
 *             unregister it.
 * Run with "--writer NAME COUNT" it is the other process of the cache check. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/reference.h"
#include "core/testing.h"
#include "tutil.h"
#include "weft.h"

/* ------------------------------------------------------------------------------------------ fake lanes */

typedef struct fake {
  char name[48];
  int decline_trans; /* supports() refuses a transposed operand */
  int runs, trans_runs;
  int registered, unregistered;
} fake;

static void fk_describe(void *self, weft_lane_desc *out) {
  fake *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "fake";
  out->device = "fake device";
  out->driver = "";
  out->details = "test lane";
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
}
static void fk_destroy(void *self) { (void)self; }
static weft_status fk_supports(void *self, const weft_op *op) {
  fake *l = self;
  return l->decline_trans && (op->trans_a || op->trans_b) ? WEFT_ERR_UNSUPPORTED : WEFT_OK;
}
static weft_status fk_run(void *self, const weft_op *op) {
  fake *l = self;
  l->runs++;
  if (op->trans_a || op->trans_b) l->trans_runs++;
  weft_reference_run(op);
  return WEFT_OK;
}
static weft_status fk_register(void *self, void *p, size_t n) {
  (void)p, (void)n;
  ((fake *)self)->registered++;
  return WEFT_OK;
}
static void fk_unregister(void *self, void *p, size_t n) {
  (void)p, (void)n;
  ((fake *)self)->unregistered++;
}

static weft_lane_vtable fake_vt(void) {
  weft_lane_vtable vt;
  memset(&vt, 0, sizeof vt);
  vt.abi_version = WEFT_LANE_ABI_VERSION;
  vt.size = sizeof vt;
  vt.describe = fk_describe, vt.destroy = fk_destroy, vt.buffer_alloc = tu_fake_alloc, vt.buffer_free = tu_fake_free;
  vt.upload = tu_fake_upload, vt.download = tu_fake_download, vt.run = fk_run, vt.supports = fk_supports;
  vt.host_register = fk_register, vt.host_unregister = fk_unregister;
  return vt;
}

static weft_fabric *open_cpu(int calibration) {
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu";
  d.calibration = calibration;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&d, &f) != WEFT_OK) return NULL;
  return f;
}

/* ------------------------------------------------------------------------------------------------ memo */

static void test_memo_transposes(void) {
  weft_fabric *f = open_cpu(WEFT_CALIBRATION_OFF);
  TU_CHECK(f != NULL, "open");
  if (!f) return;
  static fake dev = {"fake-no-trans", 1, 0, 0, 0, 0};
  weft_lane_vtable vt = fake_vt();
  TU_STATUS(weft_testing_add_lane(f, &vt, &dev), WEFT_OK, "add lane");
  size_t cpu = 0, fk = 0;
  weft_fabric_lane_find(f, "cpu", &cpu);
  weft_fabric_lane_find(f, "fake-no-trans", &fk);
  /* the fake lane is far faster and its transfers free: it wins every matmul it will run */
  weft_fabric_set_cost_model(f, cpu, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-3, 1e6);
  weft_fabric_set_cost_model(f, fk, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, 1e-6, 1e15);
  weft_fabric_set_cost_model(f, fk, WEFT_COST_UPLOAD, WEFT_CONTRACT_EXACT, 0, 0);
  weft_fabric_set_cost_model(f, fk, WEFT_COST_DOWNLOAD, WEFT_CONTRACT_EXACT, 0, 0);
  int64_t dims[2] = {8, 8};
  weft_tensor *a = NULL, *b = NULL, *c = NULL;
  weft_tensor_create(f, 2, dims, NULL, &a);
  weft_tensor_create(f, 2, dims, NULL, &b);
  weft_tensor_create(f, 2, dims, NULL, &c);
  for (int round = 0; round < 3; round++) {
    /* twice: the second decision is remembered with the operands where the first left them (host and the
     * fake lane), which is where the transposed op below finds them too */
    TU_STATUS(weft_op_matmul(f, NULL, a, 0, b, 0, c), WEFT_OK, "matmul");
    TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync");
    TU_STATUS(weft_op_matmul(f, NULL, a, 0, b, 0, c), WEFT_OK, "matmul");
    /* (later rounds may measure the CPU against it, once the CPU's own timings refine its model) */
    if (round == 0)
      TU_CHECK(weft_fabric_last_lane(f) == (int)fk, "untransposed matmul ran on lane %d, want the fake lane",
               weft_fabric_last_lane(f));
    TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync"); /* every lane idle: decisions are remembered */
    weft_status st = weft_op_matmul(f, NULL, a, 0, b, 1, c);
    TU_CHECK(st == WEFT_OK && weft_fabric_last_lane(f) == (int)cpu,
             "matmul with b transposed: %s on lane %d, want the CPU (the fake lane declines transposes)",
             weft_status_str(st), weft_fabric_last_lane(f));
    weft_route_explanation e;
    TU_STATUS(weft_route_last(f, &e), WEFT_OK, "route_last");
    TU_CHECK(e.chosen == (int)cpu && e.nlanes > fk && !e.lanes[fk].eligible,
             "route_last after the transposed matmul: chosen %d, the fake lane %s", e.chosen,
             e.nlanes > fk && e.lanes[fk].eligible ? "eligible" : "not eligible");
    TU_STATUS(weft_op_matmul(f, NULL, a, 1, b, 0, c), WEFT_OK, "matmul with a transposed");
    TU_CHECK(weft_fabric_last_lane(f) == (int)cpu, "matmul with a transposed ran on lane %d", weft_fabric_last_lane(f));
    TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync");
  }
  TU_CHECK(dev.trans_runs == 0, "the fake lane was given %d transposed matmuls it declines", dev.trans_runs);
  weft_fabric_close(f);
}

/* --------------------------------------------------------------------------------------------- explain */

static int dir_is_empty(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 1;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n == 0;
}

static void test_explain_is_a_query(const char *cache_home) {
  weft_fabric *f = open_cpu(WEFT_CALIBRATION_AUTO);
  TU_CHECK(f != NULL, "open (calibration auto)");
  if (!f) return;
  static fake dev = {"fake-explain", 0, 0, 0, 0, 0};
  weft_lane_vtable vt = fake_vt();
  TU_STATUS(weft_testing_add_lane(f, &vt, &dev), WEFT_OK, "add lane");
  weft_route_query q;
  memset(&q, 0, sizeof q);
  q.op = WEFT_OP_MATMUL, q.contract = WEFT_CONTRACT_EXACT, q.batch = 1, q.m = 64, q.n = 64, q.k = 64;
  weft_route_explanation e;
  double t0 = tu_now();
  TU_STATUS(weft_route_explain(f, &q, &e), WEFT_OK, "explain");
  double took = tu_now() - t0;
  TU_CHECK(e.chosen >= 0 && e.nlanes == 2, "explain chose lane %d of %zu", e.chosen, e.nlanes);
  for (size_t l = 0; l < weft_fabric_lane_count(f); l++) {
    weft_cost_line line;
    weft_fabric_cost_model(f, l, WEFT_COST_MATMUL, WEFT_CONTRACT_EXACT, &line);
    TU_CHECK(line.source == WEFT_COST_PRIOR, "lane %zu's matmul model after explain: source %d, want the prior (%d)",
             l, line.source, WEFT_COST_PRIOR);
  }
  TU_CHECK(dev.runs == 0, "explain ran %d ops on the fake lane (a calibration)", dev.runs);
  TU_CHECK(dir_is_empty(cache_home), "explain wrote into the cache directory");
  /* not a timing assertion on behaviour: a calibration sweep takes about 1.5 s, a query microseconds */
  printf("lib_edges: explain took %.1f ms\n", took * 1e3);
  weft_fabric_close(f);
}

/* ----------------------------------------------------------------------------------------------- cache */

#define WRITES 12

/* Adds `count` lanes named "<prefix>-<i>", saving the cache after each (a new measured line each time). */
static int write_entries(const char *prefix, int count) {
  weft_fabric *f = open_cpu(WEFT_CALIBRATION_OFF);
  if (!f) return 1;
  fake *lanes = calloc((size_t)count, sizeof *lanes);
  weft_lane_vtable vt = fake_vt();
  int bad = 0;
  for (int i = 0; i < count; i++) {
    snprintf(lanes[i].name, sizeof lanes[i].name, "%s-%d", prefix, i);
    size_t idx = 0;
    if (weft_testing_add_lane(f, &vt, &lanes[i]) != WEFT_OK || weft_fabric_lane_find(f, lanes[i].name, &idx) != WEFT_OK ||
        weft_testing_cache_store(f, idx, 1e-5 * (i + 1), 1e9) != WEFT_OK)
      bad++;
  }
  weft_fabric_close(f);
  free(lanes);
  return bad;
}

static void *writer_thread(void *arg) {
  return (void *)(intptr_t)write_entries(arg, WRITES);
}

static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
  fclose(fp);
  if (buf) buf[n] = 0;
  return buf;
}

static void test_cache_writers(const char *self, const char *cache_home) {
  /* two processes and two threads of this one, all at once */
  pid_t pid[2];
  for (int p = 0; p < 2; p++) {
    pid[p] = fork();
    if (pid[p] == 0) {
      char name[16], count[16];
      snprintf(name, sizeof name, "proc%d", p);
      snprintf(count, sizeof count, "%d", WRITES);
      execl("/proc/self/exe", self, "--writer", name, count, (char *)NULL);
      _exit(127);
    }
  }
  pthread_t th[2];
  char *names[2] = {"thread0", "thread1"};
  for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, writer_thread, names[t]);
  for (int t = 0; t < 2; t++) {
    void *r = NULL;
    pthread_join(th[t], &r);
    TU_CHECK(r == NULL, "thread writer %d: %d saves failed", t, (int)(intptr_t)r);
  }
  for (int p = 0; p < 2; p++) {
    int status = 0;
    waitpid(pid[p], &status, 0);
    TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process writer %d: status 0x%x", p, status);
  }
  char path[1024];
  TU_STATUS(weft_cost_cache_path(path, sizeof path), WEFT_OK, "cache path");
  char *text = slurp(path);
  TU_CHECK(text != NULL, "no cache at %s", path);
  if (!text) return;
  const char *prefixes[4] = {"proc0", "proc1", "thread0", "thread1"};
  int missing = 0;
  for (int p = 0; p < 4; p++)
    for (int i = 0; i < WRITES; i++) {
      char want[64];
      snprintf(want, sizeof want, "\"%s-%d|", prefixes[p], i);
      if (!strstr(text, want)) {
        if (missing++ < 8) printf("lib_edges: the cache lost %s-%d\n", prefixes[p], i);
      }
    }
  TU_CHECK(missing == 0, "the cache lost %d of %d writers' entries", missing, 4 * WRITES);
  free(text);
  /* no temporary file is left behind */
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/weft", cache_home);
  DIR *d = opendir(dir);
  int stray = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, "calibration.json.") && !strstr(e->d_name, ".lock")) stray++, printf("lib_edges: left %s\n", e->d_name);
  if (d) closedir(d);
  TU_CHECK(stray == 0, "%d temporary files left in the cache directory", stray);
}

/* ---------------------------------------------------------------------------------------------- lanes64 */

static void test_many_lanes(void) {
  weft_fabric *f = open_cpu(WEFT_CALIBRATION_OFF);
  TU_CHECK(f != NULL, "open");
  if (!f) return;
  enum { EXTRA = 70 };
  static fake lanes[EXTRA];
  weft_lane_vtable vt = fake_vt();
  for (int i = 0; i < EXTRA; i++) {
    snprintf(lanes[i].name, sizeof lanes[i].name, "many-%d", i);
    TU_STATUS(weft_testing_add_lane(f, &vt, &lanes[i]), WEFT_OK, "add lane");
  }
  TU_CHECK(weft_fabric_lane_count(f) == EXTRA + 1, "lanes: %zu", weft_fabric_lane_count(f));
  size_t first = 0, last = 0;
  weft_fabric_lane_find(f, "many-0", &first);
  weft_fabric_lane_find(f, "many-69", &last);
  /* a tensor large enough to be registered with a lane that moves it twice */
  int64_t dims[2] = {512, 1024};
  weft_tensor *x = NULL, *y = NULL;
  TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &x), WEFT_OK, "create x");
  TU_STATUS(weft_tensor_create(f, 2, dims, NULL, &y), WEFT_OK, "create y");
  weft_op_desc d = WEFT_OP_DESC_INIT;
  float *buf = malloc(512 * 1024 * sizeof(float));
  for (int rep = 0; rep < 3; rep++) {
    d.lane = (int)first;
    TU_STATUS(weft_op_relu(f, &d, x, y), WEFT_OK, "relu on the first fake lane");
    TU_STATUS(weft_tensor_read(y, buf, 512 * 1024), WEFT_OK, "read y");
    weft_tensor_write(x, buf, 512 * 1024);
    d.lane = (int)last; /* lane 70: past any 64-bit mask */
    TU_STATUS(weft_op_relu(f, &d, x, y), WEFT_OK, "relu on lane 70");
    TU_STATUS(weft_tensor_read(y, buf, 512 * 1024), WEFT_OK, "read y");
    weft_tensor_write(x, buf, 512 * 1024);
  }
  TU_STATUS(weft_op_relu(f, NULL, x, y), WEFT_OK, "a routed relu among 71 lanes");
  weft_tensor_destroy(x);
  weft_tensor_destroy(y);
  int others = 0;
  for (int i = 0; i < EXTRA; i++)
    if (i) others += lanes[i].unregistered;
  TU_CHECK(lanes[0].registered > 0, "the first fake lane never had memory registered (the test needs it)");
  TU_CHECK(lanes[0].unregistered == lanes[0].registered, "the first lane: %d registered, %d unregistered",
           lanes[0].registered, lanes[0].unregistered);
  TU_CHECK(others == 0 && lanes[EXTRA - 1].registered == 0,
           "lanes that registered nothing were asked to unregister %d times (lane 70 registered %d)", others,
           lanes[EXTRA - 1].registered);
  free(buf);
  weft_fabric_close(f);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--writer") == 0) return write_entries(argv[2], atoi(argv[3])) ? 1 : 0;
  double start = tu_now();
  /* a cache directory of this run's own, empty */
  char home[] = "/tmp/weft-lib-edges-XXXXXX";
  if (!mkdtemp(home)) {
    printf("lib_edges: no temporary directory\n");
    return 1;
  }
  setenv("XDG_CACHE_HOME", home, 1);
  test_memo_transposes();
  test_explain_is_a_query(home);
  test_cache_writers(argv[0], home);
  test_many_lanes();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
  if (system(cmd) != 0) printf("lib_edges: could not remove %s\n", home);
  return tu_finish("lib_edges", start);
}
