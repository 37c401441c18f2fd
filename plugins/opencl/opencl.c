/* opencl.c - the OpenCL lane, shipped as a plugin (weft_opencl.so) to show the plugin ABI carries a real
 * backend: one lane per OpenCL device ("opencl:0", ...), device buffers, and the OpenCL C kernels of
 * kernels.cl under the exact contract, bit for bit with the CPU lane: the version-1 ops and every
 * transformer op (embedding, layernorm, gelu, attention and its cached form, causal softmax, cross-entropy,
 * each with its backward, adamw, sumsq, permute, copy_slice; int32 index and data operands). Built without
 * -cl-mad-enable and with FP_CONTRACT off; nothing divides or takes a square root in hardware (the kernels
 * carry weft's own recip, rsqrt, sqrt, exp, log and tanh). Devices that flush subnormals to zero cannot
 * honour the exact contract and are left out with the reason. The program is built once per lane, when the
 * lane opens (PoCL compiles with LLVM: seconds, cached on disk after the first time), and its kernels are
 * kept. Scratch an op needs (attention's score rows, cross-entropy's row statistics, sumsq's chunk
 * partials, the embedding backward's position links) is a buffer made for that op and released as soon as
 * it is enqueued: OpenCL keeps it until the kernels using it are done. */
#include <CL/cl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft_plugin.h"

extern const char weft_ocl_source[]; /* kernels.cl, embedded at build time */

/* The kernels of kernels.cl, by role. */
enum {
  K_MATMUL, K_ELEMENTWISE, K_SUM_ROWS, K_SOFTMAX_ROWS, K_SOFTMAX_LOSS,
  K_EMBEDDING, K_EMBED_LINKS, K_EMBED_BWD, K_LAYERNORM, K_LAYERNORM_DX, K_LAYERNORM_DGB, K_GELU, K_GELU_BWD,
  K_SOFTMAX, K_SOFTMAX_BWD, K_ATTENTION, K_ATTENTION_DS, K_ATTENTION_DQKV, K_XENT_ROWS, K_XENT_GRAD, K_ADAMW,
  K_SUMSQ_CHUNKS, K_SUMSQ_ADD, K_PERMUTE, K_COPY_SLICE, K_COUNT
};
static const char *const KERNEL_NAMES[K_COUNT] = {
    "weft_matmul", "weft_elementwise", "weft_sum_rows", "weft_softmax_rows", "weft_softmax_loss",
    "weft_tx_embedding", "weft_tx_embed_links", "weft_tx_embed_bwd", "weft_tx_layernorm", "weft_tx_layernorm_dx",
    "weft_tx_layernorm_dgb", "weft_tx_gelu", "weft_tx_gelu_backward", "weft_tx_softmax", "weft_tx_softmax_backward",
    "weft_tx_attention", "weft_tx_attention_ds", "weft_tx_attention_dqkv", "weft_tx_xent_rows", "weft_tx_xent_grad",
    "weft_tx_adamw", "weft_tx_sumsq_chunks", "weft_tx_sumsq_add", "weft_tx_permute", "weft_tx_copy_slice"};

typedef struct ocl_lane {
  const weft_lane_host *host;
  cl_context ctx;
  cl_command_queue queue;
  cl_program program;
  cl_kernel k[K_COUNT];
  cl_mem dummy; /* bound where an optional operand is not given (never read or written then) */
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
  out->ops = WEFT_OPS_ALL & ~WEFT_OP_BIT(WEFT_OP_MATMUL_ACC); /* no accumulating matmul kernel yet */
}

static void ocl_destroy(void *self) {
  ocl_lane *l = self;
  if (l->queue) clFinish(l->queue);
  for (int i = 0; i < K_COUNT; i++)
    if (l->k[i]) clReleaseKernel(l->k[i]);
  if (l->dummy) clReleaseMemObject(l->dummy);
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
  size_t total = 1;
  for (cl_uint d = 0; d < dims; d++) total *= global[d];
  if (err == CL_SUCCESS && total) err = clEnqueueNDRangeKernel(l->queue, k, dims, NULL, global, NULL, 0, NULL, NULL);
  return err;
}

#define ARG(v) sizeof(v), (const void *)&(v)

/* A buffer of `bytes` (at least 4) for one op's scratch; NULL and *err set when it cannot be had. */
static cl_mem scratch(ocl_lane *l, size_t bytes, cl_int *err) {
  return clCreateBuffer(l->ctx, CL_MEM_READ_WRITE, bytes < 4 ? 4 : bytes, NULL, err);
}

/* The buffer of an operand, or the dummy where it is not given. */
static cl_mem opnd(ocl_lane *l, weft_buffer *b) { return b ? (cl_mem)b : l->dummy; }

/* One table of the embedding backward: the links of the positions' rows, then the accumulation. */
static cl_int embed_bwd_table(ocl_lane *l, cl_mem dout, weft_buffer *idx, weft_buffer *table, cl_long n, cl_long T,
                              cl_long C, cl_long rows) {
  cl_int err = CL_SUCCESS;
  cl_mem links = scratch(l, (size_t)(2 * n) * sizeof(cl_int), &err);
  if (!links) return err;
  cl_mem ix = opnd(l, idx), tab = (cl_mem)table;
  cl_int has_idx = idx != NULL;
  size_t g1[1] = {(size_t)n}, g2[1] = {(size_t)(n * C)};
  err = launch(l, l->k[K_EMBED_LINKS], 1, g1, 5, ARG(ix), ARG(links), ARG(n), ARG(T), ARG(has_idx));
  if (err == CL_SUCCESS)
    err = launch(l, l->k[K_EMBED_BWD], 1, g2, 9, ARG(ix), ARG(links), ARG(dout), ARG(tab), ARG(n), ARG(T), ARG(C),
                 ARG(rows), ARG(has_idx));
  clReleaseMemObject(links);
  return err;
}

/* The transformer ops (weft_lane.h's table: which operand is which, iparam and fparam). */
static cl_int run_tx(ocl_lane *l, const weft_op *op) {
  const int64_t *ip = op->iparam;
  const float *fp = op->fparam;
  cl_mem in0 = opnd(l, op->in[0]), in1 = opnd(l, op->in[1]), in2 = opnd(l, op->in[2]), in3 = opnd(l, op->in[3]),
         in4 = opnd(l, op->in[4]);
  cl_mem out0 = opnd(l, op->out[0]), out1 = opnd(l, op->out[1]), out2 = opnd(l, op->out[2]);
  cl_int err = CL_SUCCESS;
  switch (op->kind) {
  case WEFT_OP_EMBEDDING: {
    cl_long BT = ip[0] * ip[1], T = ip[1], C = ip[2], V = ip[3], P = ip[4];
    cl_int has_pos = op->in[1] != NULL;
    size_t g[1] = {(size_t)(BT * C)};
    return launch(l, l->k[K_EMBEDDING], 1, g, 11, ARG(in0), ARG(in1), ARG(in2), ARG(in3), ARG(out0), ARG(BT), ARG(T),
                  ARG(C), ARG(V), ARG(P), ARG(has_pos));
  }
  case WEFT_OP_EMBEDDING_BACKWARD: {
    const cl_long BT = ip[0] * ip[1], T = ip[1], C = ip[2];
    if (BT == 0 || C == 0) return CL_SUCCESS;
    if (op->out[0]) err = embed_bwd_table(l, in0, op->in[1], op->out[0], BT, T, C, ip[3]);
    if (err == CL_SUCCESS && op->out[1]) err = embed_bwd_table(l, in0, op->in[2], op->out[1], BT, T, C, ip[4]);
    return err;
  }
  case WEFT_OP_LAYERNORM: {
    cl_long N = ip[0], C = ip[1];
    cl_float eps = fp[0];
    cl_int flags = (op->out[1] ? 1 : 0) | (op->out[2] ? 2 : 0);
    size_t g[1] = {(size_t)N};
    return launch(l, l->k[K_LAYERNORM], 1, g, 10, ARG(in0), ARG(in1), ARG(in2), ARG(out0), ARG(out1), ARG(out2), ARG(N),
                  ARG(C), ARG(eps), ARG(flags));
  }
  case WEFT_OP_LAYERNORM_BACKWARD: {
    cl_long N = ip[0], C = ip[1];
    cl_int flags = (op->out[1] ? 1 : 0) | (op->out[2] ? 2 : 0);
    size_t gc[1] = {(size_t)C}, gn[1] = {(size_t)N};
    /* dgamma and dbeta first: dx may be dy, and they read dy */
    if (flags)
      err = launch(l, l->k[K_LAYERNORM_DGB], 1, gc, 9, ARG(in0), ARG(in1), ARG(in2), ARG(in3), ARG(out1), ARG(out2),
                   ARG(N), ARG(C), ARG(flags));
    if (err == CL_SUCCESS)
      err = launch(l, l->k[K_LAYERNORM_DX], 1, gn, 8, ARG(in0), ARG(in1), ARG(in2), ARG(in3), ARG(in4), ARG(out0), ARG(N),
                   ARG(C));
    return err;
  }
  case WEFT_OP_GELU: {
    cl_long n = ip[0];
    size_t g[1] = {(size_t)n};
    return launch(l, l->k[K_GELU], 1, g, 3, ARG(in0), ARG(out0), ARG(n));
  }
  case WEFT_OP_GELU_BACKWARD: {
    cl_long n = ip[0];
    size_t g[1] = {(size_t)n};
    return launch(l, l->k[K_GELU_BWD], 1, g, 4, ARG(in0), ARG(in1), ARG(out0), ARG(n));
  }
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: {
    cl_long rows = ip[0] * ip[1], T = ip[1];
    cl_float scale = fp[0];
    size_t g[1] = {(size_t)rows};
    if (op->kind == WEFT_OP_CAUSAL_SOFTMAX)
      return launch(l, l->k[K_SOFTMAX], 1, g, 5, ARG(in0), ARG(out0), ARG(rows), ARG(T), ARG(scale));
    return launch(l, l->k[K_SOFTMAX_BWD], 1, g, 6, ARG(in0), ARG(in1), ARG(out0), ARG(rows), ARG(T), ARG(scale));
  }
  case WEFT_OP_ATTENTION:
  case WEFT_OP_ATTENTION_CACHED: {
    const int cached = op->kind == WEFT_OP_ATTENTION_CACHED;
    cl_long BNH = ip[0] * ip[3], T = ip[1], C = ip[2], NH = ip[3], t0 = cached ? ip[4] : 0, Tq = cached ? ip[5] : ip[1];
    cl_int flags = !cached && op->out[2] ? 1 : 0;
    if (BNH * Tq == 0) return CL_SUCCESS;
    cl_mem att = out1, rows = NULL;
    if (!op->out[1]) { /* the cached op without att: the score rows in scratch */
      rows = scratch(l, (size_t)(BNH * Tq * T) * sizeof(float), &err);
      if (!rows) return err;
      att = rows;
    }
    size_t g[1] = {(size_t)(BNH * Tq)};
    err = launch(l, l->k[K_ATTENTION], 1, g, 11, ARG(in0), ARG(out0), ARG(att), ARG(out2), ARG(BNH), ARG(T), ARG(C),
                 ARG(NH), ARG(t0), ARG(Tq), ARG(flags));
    if (rows) clReleaseMemObject(rows);
    return err;
  }
  case WEFT_OP_ATTENTION_BACKWARD: {
    cl_long BNH = ip[0] * ip[3], T = ip[1], C = ip[2], NH = ip[3];
    if (BNH * T == 0 || C == 0) return CL_SUCCESS;
    cl_mem ds = scratch(l, (size_t)(BNH * T * T) * sizeof(float), &err);
    if (!ds) return err;
    size_t g1[1] = {(size_t)(BNH * T)}, g2[1] = {(size_t)(BNH * T * (C / NH))};
    err = launch(l, l->k[K_ATTENTION_DS], 1, g1, 8, ARG(in1), ARG(in0), ARG(in2), ARG(ds), ARG(BNH), ARG(T), ARG(C), ARG(NH));
    if (err == CL_SUCCESS)
      err = launch(l, l->k[K_ATTENTION_DQKV], 1, g2, 9, ARG(in1), ARG(in0), ARG(in2), ARG(ds), ARG(out0), ARG(BNH), ARG(T),
                   ARG(C), ARG(NH));
    clReleaseMemObject(ds);
    return err;
  }
  case WEFT_OP_CROSSENTROPY:
  case WEFT_OP_CROSSENTROPY_BACKWARD: {
    cl_long N = ip[0], V = ip[1];
    if (N == 0) return CL_SUCCESS;
    const int back = op->kind == WEFT_OP_CROSSENTROPY_BACKWARD;
    cl_mem stats = scratch(l, (size_t)(2 * N) * sizeof(float), &err);
    if (!stats) return err;
    cl_int want_loss = !back;
    cl_mem loss = back ? l->dummy : out0;
    size_t g1[1] = {(size_t)N}, g2[1] = {(size_t)(N * V)};
    err = launch(l, l->k[K_XENT_ROWS], 1, g1, 7, ARG(in0), ARG(in1), ARG(stats), ARG(loss), ARG(N), ARG(V), ARG(want_loss));
    if (err == CL_SUCCESS && back)
      err = launch(l, l->k[K_XENT_GRAD], 1, g2, 7, ARG(in0), ARG(in1), ARG(stats), ARG(in2), ARG(out0), ARG(N), ARG(V));
    clReleaseMemObject(stats);
    return err;
  }
  case WEFT_OP_ADAMW: {
    cl_long n = ip[0];
    cl_float lr = fp[0], b1 = fp[1], b2 = fp[2], eps = fp[3], wd = fp[4], bc1 = fp[5], bc2 = fp[6];
    size_t g[1] = {(size_t)n};
    return launch(l, l->k[K_ADAMW], 1, g, 12, ARG(in0), ARG(out0), ARG(out1), ARG(out2), ARG(n), ARG(lr), ARG(b1), ARG(b2),
                  ARG(eps), ARG(wd), ARG(bc1), ARG(bc2));
  }
  case WEFT_OP_SUMSQ: {
    cl_long n = ip[0], nch = (ip[0] + 4095) / 4096; /* WEFT_SUMSQ_CHUNK */
    cl_mem part = scratch(l, (size_t)nch * sizeof(float), &err);
    if (!part) return err;
    size_t g1[1] = {(size_t)nch}, one[1] = {1};
    err = launch(l, l->k[K_SUMSQ_CHUNKS], 1, g1, 3, ARG(in0), ARG(part), ARG(n));
    /* also for n = 0: acc is stored canonical */
    if (err == CL_SUCCESS) err = launch(l, l->k[K_SUMSQ_ADD], 1, one, 3, ARG(part), ARG(out0), ARG(nch));
    clReleaseMemObject(part);
    return err;
  }
  case WEFT_OP_PERMUTE: {
    const int64_t *xd = ip + 1;
    int64_t xs[4], yd[4], st[4];
    xs[3] = 1;
    for (int a = 2; a >= 0; a--) xs[a] = xs[a + 1] * xd[a + 1];
    for (int a = 0; a < 4; a++) {
      const int p = (int)((ip[5] >> (2 * a)) & 3);
      yd[a] = xd[p], st[a] = xs[p];
    }
    cl_long count = yd[0] * yd[1] * yd[2] * yd[3], d1 = yd[1], d2 = yd[2], d3 = yd[3];
    cl_long s0 = st[0], s1 = st[1], s2 = st[2], s3 = st[3];
    size_t g[1] = {(size_t)count};
    return launch(l, l->k[K_PERMUTE], 1, g, 10, ARG(in0), ARG(out0), ARG(count), ARG(d1), ARG(d2), ARG(d3), ARG(s0),
                  ARG(s1), ARG(s2), ARG(s3));
  }
  case WEFT_OP_COPY_SLICE: {
    cl_long outer = ip[0], src_len = ip[1], dst_len = ip[2], inner = ip[3], offset = ip[4];
    size_t g[1] = {(size_t)(outer * src_len * inner)};
    return launch(l, l->k[K_COPY_SLICE], 1, g, 7, ARG(in0), ARG(out0), ARG(outer), ARG(src_len), ARG(dst_len), ARG(inner),
                  ARG(offset));
  }
  default: return CL_INVALID_OPERATION;
  }
}

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
    err = launch(l, l->k[K_MATMUL], 3, global, 9, ARG(in0), ARG(in1), ARG(out0), ARG(m), ARG(n), ARG(k), ARG(ta), ARG(tb),
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
    err = launch(l, l->k[K_ELEMENTWISE], 1, global, 8, ARG(x), ARG(y), ARG(out), ARG(count), ARG(cols), ARG(bcast), ARG(alpha),
                 ARG(kind));
    break;
  }
  case WEFT_OP_SUM_ROWS: {
    if (cols == 0) return WEFT_OK;
    size_t global[1] = {(size_t)cols};
    err = launch(l, l->k[K_SUM_ROWS], 1, global, 4, ARG(in0), ARG(out0), ARG(rows), ARG(cols));
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
    err = launch(l, l->k[K_SOFTMAX_ROWS], 1, global, 8, ARG(in0), ARG(in1), ARG(grad), ARG(row_loss), ARG(rows), ARG(cols),
                 ARG(inv_rows), ARG(want_grad));
    if (err == CL_SUCCESS && out0)
      err = launch(l, l->k[K_SOFTMAX_LOSS], 1, one, 4, ARG(row_loss), ARG(out0), ARG(rows), ARG(inv_rows));
    clReleaseMemObject(row_loss); /* freed by OpenCL once the kernels using it are done */
    break;
  }
  default:
    if ((unsigned)op->kind >= WEFT_OP_COUNT)
      return ocl_fail(l, WEFT_ERR_UNSUPPORTED, "%s: op %d is not one this lane knows", l->name, (int)op->kind);
    err = run_tx(l, op);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
      return ocl_fail(l, WEFT_ERR_OUT_OF_MEMORY, "%s: op %d: no memory for its scratch or launch (OpenCL error %d)",
                      l->name, (int)op->kind, (int)err);
    break;
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
  for (int i = 0; i < K_COUNT; i++) {
    l->k[i] = clCreateKernel(l->program, KERNEL_NAMES[i], &err);
    if (!l->k[i]) {
      snprintf(why, len, "%s: kernel %s is missing from the built program (OpenCL error %d)", l->device, KERNEL_NAMES[i],
               (int)err);
      ocl_destroy(l);
      return NULL;
    }
  }
  l->dummy = clCreateBuffer(l->ctx, CL_MEM_READ_WRITE, 16, NULL, &err);
  if (!l->dummy) {
    snprintf(why, len, "%s: no 16-byte buffer could be made (OpenCL error %d)", l->device, (int)err);
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
