/* cpu_lane.c - the CPU lane: host memory, the blocked matmul framework (gemm.c), the other ops
 * (elementwise.c: the reference kernels, threaded when large), the transformer ops (tx.c: vectorised and
 * threaded; the op table's host kernels for PERMUTE and COPY_SLICE), the lane's worker threads. Honours the exact
 * and fp32 contracts. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/fpenv.h"
#include "../../core/optable.h"
#include "cpu.h"
#include "tx.h"

/* The most threads the lane starts, whatever cpu_threads asks (the CLI's --cpu-threads limit too). */
#define WEFT_CPU_MAX_THREADS 4096
#define WEFT_CPU_MAX_THREADS_STR "4096"

static void cpu_describe(void *self, weft_lane_desc *out) {
  weft_cpu_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = "cpu";
  out->kind = "cpu";
  out->device = l->device;
  out->driver = "";
  out->details = l->details;
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
  out->flags = WEFT_LANE_HOST_MEMORY;
  out->ops = WEFT_OPS_ALL; /* the version-2 ops run on tx.c's threaded kernels (a few on the op table's) */
}

static void cpu_destroy(void *self) {
  weft_cpu_lane *l = self;
  weft_cpu_pool_destroy(l->pool);
  weft_cpu_scratch_free(l);
  free(l);
}

static weft_status cpu_alloc(void *self, size_t bytes, weft_buffer **out) {
  weft_cpu_lane *l = self;
  *out = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!*out) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "cpu: out of host memory for %zu bytes", bytes);
  return WEFT_OK;
}

static void cpu_free(void *self, weft_buffer *b) {
  (void)self;
  free(b);
}

static weft_status cpu_upload(void *self, weft_buffer *b, size_t off, const void *src, size_t bytes) {
  (void)self;
  memcpy((char *)b + off, src, bytes);
  return WEFT_OK;
}

static weft_status cpu_download(void *self, weft_buffer *b, size_t off, void *dst, size_t bytes) {
  (void)self;
  memcpy(dst, (const char *)b + off, bytes);
  return WEFT_OK;
}

/* Runs on the caller's thread (tiny ops) or the host queue's: either way under the clean floating-point
 * environment (fpenv.h), and the caller's own is put back afterwards. The pool's threads keep theirs clean. */
static weft_status cpu_run(void *self, const weft_op *op) {
  weft_cpu_lane *l = self;
  weft_fpenv env;
  weft_fpenv_enter(&env);
  weft_status st = WEFT_OK;
  if (op->kind == WEFT_OP_MATMUL || op->kind == WEFT_OP_MATMUL_ACC) st = weft_cpu_matmul(l, op);
  else if (op->kind >= WEFT_OP_V1_COUNT) {
    st = weft_cpu_tx_run(l->pool, op);
    if (st == WEFT_ERR_UNSUPPORTED) st = weft_optable_host_run(op, l->host);
    else if (st != WEFT_OK)
      st = weft_lane_report(l->host, st, "cpu: %s: %s", weft_optable[op->kind].name,
                            st == WEFT_ERR_OUT_OF_MEMORY ? "out of host memory for the kernel's scratch"
                            : st == WEFT_ERR_INVALID_ARGUMENT ? "an index is out of range (or an operand is missing)"
                                                              : "the shapes do not fit the kernel");
  }
  else weft_cpu_elementwise(l, op);
  weft_fpenv_leave(&env);
  return st;
}

static const weft_lane_vtable CPU_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = cpu_describe,
    .destroy = cpu_destroy, .buffer_alloc = cpu_alloc, .buffer_free = cpu_free, .upload = cpu_upload,
    .download = cpu_download, .run = cpu_run,
};

/* The processor's name from /proc/cpuinfo, or a plain word where that is not readable. */
static void cpu_model_name(char *buf, size_t len) {
  snprintf(buf, len, "host CPU");
  FILE *fp = fopen("/proc/cpuinfo", "r");
  if (!fp) return;
  char line[512];
  while (fgets(line, sizeof line, fp)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) {
        colon++;
        while (*colon == ' ') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
      }
      break;
    }
  }
  fclose(fp);
}

/* The CPUs this process may run on: a process confined to some cores (taskset, a container's cpuset) gets
 * one thread per core it has, not per core the machine has. */
static int usable_cpus(void) {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
}

weft_status weft_cpu_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  weft_cpu_lane *l = calloc(1, sizeof *l);
  if (!l) return WEFT_ERR_OUT_OF_MEMORY;
  l->host = args->host;
  /* as many threads as asked, up to WEFT_CPU_MAX_THREADS (the CLI's limit too): each one reserves a stack,
   * and past a few thousand the process runs out of address space before anything is gained */
  const int asked = args->desc->cpu_threads > 0 ? args->desc->cpu_threads : usable_cpus();
  l->threads = asked > WEFT_CPU_MAX_THREADS ? WEFT_CPU_MAX_THREADS : asked;
  l->kernels = weft_cpu_kernels_select();
  /* The pool is started here, not on first use, so a failure to start threads shows in the details. */
  if (l->threads > 1) {
    weft_cpu_pool_create(l->threads, &l->pool);
    l->threads = weft_cpu_pool_threads(l->pool);
  }
  cpu_model_name(l->device, sizeof l->device);
  int n = snprintf(l->details, sizeof l->details, "%s kernels (%dx%d tiles), %d thread%s", l->kernels->isa,
                   l->kernels->mr, l->kernels->nr, l->threads, l->threads == 1 ? "" : "s");
  if (l->threads < asked && n > 0 && (size_t)n < sizeof l->details)
    n += snprintf(l->details + n, sizeof l->details - (size_t)n, " (%d asked; %s)", asked,
                  asked > WEFT_CPU_MAX_THREADS ? "the limit is " WEFT_CPU_MAX_THREADS_STR : "no more could start");
  const char *isa = getenv("WEFT_CPU_ISA");
  if (weft_cpu_isa_request_unknown() && n > 0 && (size_t)n < sizeof l->details)
    snprintf(l->details + n, sizeof l->details - (size_t)n,
             " (WEFT_CPU_ISA='%.24s' ignored: it takes portable, avx2 or avx512)", isa);
  return sink->add_lane(sink->ctx, &CPU_VTABLE, l);
}
