/* opencl.c - the OpenCL lane, shipped as a plugin (weft_opencl.so) to show the plugin ABI carries a real
 * backend: one lane per OpenCL device ("opencl:0", ...), device buffers, and the OpenCL C kernels of
 * kernels.cl under the exact contract, bit for bit with the CPU lane. Built without -cl-mad-enable and with
 * FP_CONTRACT off. Devices that flush subnormals to zero cannot honour the exact contract and are left out
 * with the reason. The program is built once per lane, when the lane opens (PoCL compiles with LLVM: seconds),
 * and its kernels are kept. */
#include <CL/cl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft_plugin.h"

extern const char weft_ocl_source[]; /* kernels.cl, embedded at build time */

typedef struct ocl_lane {
  const weft_lane_host *host;
  cl_context ctx;
  cl_command_queue queue;
  cl_program program;
  cl_kernel matmul, elementwise, sum_rows, softmax_rows, softmax_loss;
  char name[32];
  char device[256];
  char driver[256];
  char details[512];
} ocl_lane;

static weft_status ocl_fail(ocl_lane *l, weft_status st, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  l->host->report(l->host->ctx, st, fmt, args);
  va_end(args);
  return st;
}

static void ocl_describe(void *self, weft_lane_desc *out) {
  ocl_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "opencl";
  out->device = l->device;
  out->driver = l->driver;
  out->details = l->details;
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT);
  out->flags = 0;
}

static void ocl_destroy(void *self) {
  ocl_lane *l = self;
  if (l->queue) clFinish(l->queue);
  cl_kernel ks[] = {l->matmul, l->elementwise, l->sum_rows, l->softmax_rows, l->softmax_loss};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
    if (ks[i]) clReleaseKernel(ks[i]);
  if (l->program) clReleaseProgram(l->program);
  if (l->queue) clReleaseCommandQueue(l->queue);
  if (l->ctx) clReleaseContext(l->ctx);
  free(l);
}

static weft_status ocl_alloc(void *self, size_t bytes, weft_buffer **out) {
  ocl_lane *l = self;
  cl_int err;
  cl_mem m = clCreateBuffer(l->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (!m)
    return ocl_fail(l, WEFT_ERR_OUT_OF_MEMORY, "%s: clCreateBuffer of %zu bytes failed (OpenCL error %d)", l->name, bytes,
                    (int)err);
  *out = m;
  return WEFT_OK;
}

static void ocl_free(void *self, weft_buffer *b) {
  (void)self;
  clReleaseMemObject((cl_mem)b);
}

static weft_status ocl_upload(void *self, weft_buffer *b, size_t off, const void *src, size_t bytes) {
  ocl_lane *l = self;
  cl_int err = clEnqueueWriteBuffer(l->queue, (cl_mem)b, CL_TRUE, off, bytes, src, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return ocl_fail(l, WEFT_ERR_LANE_FAILED, "%s: clEnqueueWriteBuffer failed (OpenCL error %d)", l->name, (int)err);
  return WEFT_OK;
}

static weft_status ocl_download(void *self, weft_buffer *b, size_t off, void *dst, size_t bytes) {
  ocl_lane *l = self;
  cl_int err = clEnqueueReadBuffer(l->queue, (cl_mem)b, CL_TRUE, off, bytes, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return ocl_fail(l, WEFT_ERR_LANE_FAILED, "%s: clEnqueueReadBuffer failed (OpenCL error %d)", l->name, (int)err);
  return WEFT_OK;
}

/* Sets the kernel's arguments in order: (size, pointer) pairs, then enqueues it over `global`. */
static cl_int launch(ocl_lane *l, cl_kernel k, cl_uint dims, const size_t *global, int nargs, ...) {
  va_list args;
  va_start(args, nargs);
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < nargs && err == CL_SUCCESS; i++) {
    size_t size = va_arg(args, size_t);
    const void *value = va_arg(args, const void *);
    err = clSetKernelArg(k, (cl_uint)i, size, value);
  }
  va_end(args);
  if (err == CL_SUCCESS) err = clEnqueueNDRangeKernel(l->queue, k, dims, NULL, global, NULL, 0, NULL, NULL);
  return err;
}

#define ARG(v) sizeof(v), (const void *)&(v)

static weft_status ocl_run(void *self, const weft_op *op) {
  ocl_lane *l = self;
  cl_mem in0 = (cl_mem)op->in[0], in1 = (cl_mem)op->in[1], out0 = (cl_mem)op->out[0], out1 = (cl_mem)op->out[1];
  cl_long rows = op->rows, cols = op->cols, count = op->rows * op->cols;
  cl_int err = CL_SUCCESS;
  switch (op->kind) {
  case WEFT_OP_MATMUL: {
    if (op->batch == 0 || op->m == 0 || op->n == 0) return WEFT_OK;
    cl_long m = op->m, n = op->n, k = op->k;
    cl_int ta = op->trans_a, tb = op->trans_b, bb = op->b_batched;
    size_t global[3] = {(size_t)op->n, (size_t)op->m, (size_t)op->batch};
    err = launch(l, l->matmul, 3, global, 9, ARG(in0), ARG(in1), ARG(out0), ARG(m), ARG(n), ARG(k), ARG(ta), ARG(tb),
                 ARG(bb));
    break;
  }
  case WEFT_OP_ADD:
  case WEFT_OP_RELU:
  case WEFT_OP_RELU_BACKWARD:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY: {
    if (count == 0) return WEFT_OK;
    cl_mem x = in0, y = in1 ? in1 : in0, out = out0;
    cl_int bcast = op->y_broadcast, kind = (cl_int)op->kind;
    cl_float alpha = op->alpha;
    /* AXPY reads and writes y (out[0]); x is in[0]. */
    size_t global[1] = {(size_t)count};
    err = launch(l, l->elementwise, 1, global, 8, ARG(x), ARG(y), ARG(out), ARG(count), ARG(cols), ARG(bcast), ARG(alpha),
                 ARG(kind));
    break;
  }
  case WEFT_OP_SUM_ROWS: {
    if (cols == 0) return WEFT_OK;
    size_t global[1] = {(size_t)cols};
    err = launch(l, l->sum_rows, 1, global, 4, ARG(in0), ARG(out0), ARG(rows), ARG(cols));
    break;
  }
  case WEFT_OP_SOFTMAX_XENT: {
    if (rows == 0) return WEFT_OK;
    cl_mem row_loss = clCreateBuffer(l->ctx, CL_MEM_READ_WRITE, (size_t)rows * sizeof(float), NULL, &err);
    if (!row_loss) break;
    cl_float inv_rows = op->inv_rows;
    cl_int want_grad = out1 != NULL;
    cl_mem grad = out1 ? out1 : row_loss; /* never written when want_grad is 0 */
    size_t global[1] = {(size_t)rows}, one[1] = {1};
    err = launch(l, l->softmax_rows, 1, global, 8, ARG(in0), ARG(in1), ARG(grad), ARG(row_loss), ARG(rows), ARG(cols),
                 ARG(inv_rows), ARG(want_grad));
    if (err == CL_SUCCESS && out0)
      err = launch(l, l->softmax_loss, 1, one, 4, ARG(row_loss), ARG(out0), ARG(rows), ARG(inv_rows));
    clReleaseMemObject(row_loss); /* freed by OpenCL once the kernels using it are done */
    break;
  }
  default:
    return ocl_fail(l, WEFT_ERR_UNSUPPORTED, "%s: op %d is not one this lane knows", l->name, (int)op->kind);
  }
  if (err != CL_SUCCESS)
    return ocl_fail(l, WEFT_ERR_LANE_FAILED, "%s: op %d failed to launch (OpenCL error %d)", l->name, (int)op->kind,
                    (int)err);
  return WEFT_OK;
}

static weft_status ocl_sync(void *self) {
  ocl_lane *l = self;
  cl_int err = clFinish(l->queue);
  if (err != CL_SUCCESS) return ocl_fail(l, WEFT_ERR_LANE_FAILED, "%s: clFinish failed (OpenCL error %d)", l->name, (int)err);
  return WEFT_OK;
}

static weft_status ocl_flush(void *self) {
  ocl_lane *l = self;
  clFlush(l->queue);
  return WEFT_OK;
}

static const weft_lane_vtable OCL_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = ocl_describe,
    .destroy = ocl_destroy, .buffer_alloc = ocl_alloc, .buffer_free = ocl_free, .upload = ocl_upload,
    .download = ocl_download, .run = ocl_run, .sync = ocl_sync, .flush = ocl_flush,
};

/* Opens device `dev` as lane `index`; on failure writes why and returns NULL. */
static ocl_lane *lane_open(const weft_probe_args *args, cl_platform_id plat, cl_device_id dev, int index, char *why,
                           size_t len) {
  ocl_lane *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(why, len, "out of memory");
    return NULL;
  }
  l->host = args->host;
  snprintf(l->name, sizeof l->name, "opencl:%d", index);
  char plat_name[128] = "", plat_ver[128] = "", dev_ver[128] = "", drv_ver[64] = "";
  clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof plat_name, plat_name, NULL);
  clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof plat_ver, plat_ver, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof l->device, l->device, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof dev_ver, dev_ver, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof drv_ver, drv_ver, NULL);
  snprintf(l->driver, sizeof l->driver, "%s, driver %s", plat_ver, drv_ver);
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
  if (!(fp & CL_FP_DENORM) || !(fp & CL_FP_ROUND_TO_NEAREST)) {
    snprintf(why, len, "%s (%s): no fp32 subnormals or round-to-nearest, so the exact contract cannot hold", l->device,
             plat_name);
    free(l);
    return NULL;
  }
  snprintf(l->details, sizeof l->details, "OpenCL C kernels via plugin weft_opencl.so; platform %s; %s", plat_name,
           dev_ver);
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  l->ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
  if (l->ctx) l->queue = clCreateCommandQueue(l->ctx, dev, 0, &err);
  const char *src = weft_ocl_source;
  if (l->queue) l->program = clCreateProgramWithSource(l->ctx, 1, &src, NULL, &err);
  if (!l->program) {
    snprintf(why, len, "%s: could not create a context, queue or program (OpenCL error %d)", l->device, (int)err);
    ocl_destroy(l);
    return NULL;
  }
  /* No -cl-mad-enable, no -cl-fast-relaxed-math: the exact contract needs every rounding. */
  err = clBuildProgram(l->program, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[400] = "";
    clGetProgramBuildInfo(l->program, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    log[sizeof log - 1] = '\0';
    snprintf(why, len, "%s: the kernels did not build (OpenCL error %d): %s", l->device, (int)err, log);
    ocl_destroy(l);
    return NULL;
  }
  l->matmul = clCreateKernel(l->program, "weft_matmul", &err);
  l->elementwise = clCreateKernel(l->program, "weft_elementwise", &err);
  l->sum_rows = clCreateKernel(l->program, "weft_sum_rows", &err);
  l->softmax_rows = clCreateKernel(l->program, "weft_softmax_rows", &err);
  l->softmax_loss = clCreateKernel(l->program, "weft_softmax_loss", &err);
  if (!l->matmul || !l->elementwise || !l->sum_rows || !l->softmax_rows || !l->softmax_loss) {
    snprintf(why, len, "%s: a kernel is missing from the built program (OpenCL error %d)", l->device, (int)err);
    ocl_destroy(l);
    return NULL;
  }
  return l;
}

static weft_status ocl_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  cl_uint nplat = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &nplat);
  if (err != CL_SUCCESS || nplat == 0) {
    char why[160];
    snprintf(why, sizeof why, "no OpenCL platform (OpenCL error %d; install an ICD, e.g. pocl-opencl-icd)", (int)err);
    sink->add_absent(sink->ctx, "opencl", why);
    return WEFT_OK;
  }
  cl_platform_id plats[16];
  if (nplat > 16) nplat = 16;
  clGetPlatformIDs(nplat, plats, NULL);
  int index = 0;
  for (cl_uint p = 0; p < nplat; p++) {
    cl_uint ndev = 0;
    cl_device_id devs[16];
    if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &ndev) != CL_SUCCESS) continue;
    if (ndev > 16) ndev = 16;
    for (cl_uint d = 0; d < ndev; d++, index++) {
      char why[600], name[32];
      ocl_lane *l = lane_open(args, plats[p], devs[d], index, why, sizeof why);
      snprintf(name, sizeof name, "opencl:%d", index);
      if (!l) {
        sink->add_absent(sink->ctx, name, why);
        continue;
      }
      sink->add_lane(sink->ctx, &OCL_VTABLE, l);
    }
  }
  if (index == 0) sink->add_absent(sink->ctx, "opencl", "the OpenCL platforms list no device");
  return WEFT_OK;
}

static const weft_plugin_desc OCL_PLUGIN = {
    WEFT_PLUGIN_ABI_VERSION, sizeof(weft_plugin_desc), WEFT_LANE_ABI_VERSION, "opencl", "opencl",
    WEFT_PLUGIN_CLAIM_ALL,   ocl_probe,                NULL, NULL,
};

__attribute__((visibility("default"))) const weft_plugin_desc *weft_plugin_entry(void) { return &OCL_PLUGIN; }
