/* weft_lane.h - the interface a lane implements: the built-in lanes (cpu, vulkan, cuda, ...) and, later,
 * plugins built outside weft.
 *
 * A lane is one place an op can run. The core owns tensors, validation and routing; a lane owns memory on
 * its device and kernels. The core calls a lane only with ops it has already validated (shapes agree, sizes
 * fit, buffers are the lane's own), so a lane checks only what is specific to its device.
 *
 * Versioning: the vtable starts with its ABI version and its size and only ever grows at the end. A lane
 * built against an older header gets the slots it knows; the core treats missing trailing slots as NULL. */
#ifndef WEFT_LANE_H
#define WEFT_LANE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2: weft_op holds up to WEFT_OP_MAX_IN inputs and WEFT_OP_MAX_OUT outputs, per-operand dtypes and
 * typed parameters (iparam, fparam); weft_lane_desc.ops lets a lane offer a subset of the ops. A lane of
 * version 1 is refused (its weft_op had two inputs and two outputs). Existing code indexing in[0], in[1],
 * out[0], out[1] and out_host[0], out_host[1] compiles and means the same. */
#define WEFT_LANE_ABI_VERSION 2

/* A lane-owned allocation; what it points to is the lane's business (a host pointer, a VkBuffer record, a
 * device pointer). For lanes with WEFT_LANE_HOST_MEMORY it is a plain float array in host memory. */
typedef void weft_buffer;

/* One op, validated and resolved to the lane's buffers. Sizes are element counts (not bytes). Slots an op
 * does not use are NULL; an optional operand the caller left out is NULL too. Every operand is 4 bytes an
 * element: its dtype (in_dtype, out_dtype) says whether those are fp32 or int32.
 * Which fields an op uses (the version-1 ops):
 *   MATMUL        in[0]=a in[1]=b out[0]=c; batch, m, n, k, trans_a, trans_b, b_batched
 *                 a is [batch,m,k] ([batch,k,m] when trans_a); b is [k,n] ([n,k] when trans_b), or one per
 *                 batch entry when b_batched; c is [batch,m,n]. batch may be 0.
 *   ADD           in[0]=x in[1]=y out[0]=out; rows, cols; y_broadcast (y is one row of cols)
 *   RELU          in[0]=x out[0]=out; rows*cols elements
 *   RELU_BACKWARD in[0]=grad in[1]=x out[0]=out; rows*cols elements
 *   SCALE         in[0]=x out[0]=out; alpha; rows*cols elements
 *   AXPY          in[0]=x out[0]=y (read and written); alpha; rows*cols elements
 *   SUM_ROWS      in[0]=x out[0]=out (cols); rows, cols
 *   SOFTMAX_XENT  in[0]=logits in[1]=targets out[0]=loss (1 element, may be NULL) out[1]=grad (may be NULL);
 *                 rows, cols; inv_rows = 1.0f/rows computed once on the host so no lane divides.
 * The transformer ops (version 2; reference_tx.h defines each, docs/DESIGN.md states its canonical order).
 * "(rw)" marks an output the op reads and writes (an accumulation or an in-place update). rows and cols
 * are only the router's estimate of the op's size (about the elements it writes); kernels use iparam.
 * Index operands (tok, pos, targets) were checked on the host: every index is in range.
 *   EMBEDDING     in[0]=tok (i32 [B,T]) in[1]=pos (i32 [B,T], NULL: pos = t) in[2]=wte [V,C] in[3]=wpe [P,C]
 *                 out[0]=out [B,T,C]; iparam[0..4] = B, T, C, V, P.
 *   EMBEDDING_BACKWARD  in[0]=dout [B,T,C] in[1]=tok in[2]=pos (NULL: t) out[0]=dwte [V,C] (rw, NULL: skip)
 *                 out[1]=dwpe [P,C] (rw, NULL: skip); iparam[0..4] = B, T, C, V, P (V or P is 2^31 when
 *                 that table is not given).
 *   LAYERNORM     in[0]=x [N,C] in[1]=gamma [C] in[2]=beta [C] out[0]=y [N,C] out[1]=mean [N] (NULL: skip)
 *                 out[2]=rstd [N] (NULL: skip); iparam[0]=N iparam[1]=C; fparam[0]=eps.
 *   LAYERNORM_BACKWARD  in[0]=dy [N,C] in[1]=x in[2]=mean [N] in[3]=rstd [N] in[4]=gamma [C]
 *                 out[0]=dx [N,C] out[1]=dgamma [C] (rw, NULL: skip) out[2]=dbeta [C] (rw, NULL: skip);
 *                 iparam[0]=N iparam[1]=C.
 *   GELU          in[0]=x out[0]=y; iparam[0]=n (elements). y may be x.
 *   GELU_BACKWARD in[0]=x in[1]=dy out[0]=dx; iparam[0]=n. dx may be x or dy.
 *   ATTENTION     in[0]=qkv [B,T,3C] out[0]=out [B,T,C] out[1]=att [B,NH,T,T] out[2]=preatt [B,NH,T,T]
 *                 (NULL: skip); iparam[0..3] = B, T, C, NH.
 *   ATTENTION_BACKWARD  in[0]=dout [B,T,C] in[1]=qkv [B,T,3C] in[2]=att [B,NH,T,T] out[0]=dqkv [B,T,3C];
 *                 iparam[0..3] = B, T, C, NH.
 *   ATTENTION_CACHED  in[0]=qkv [B,Tmax,3C] (rows 0 .. t0+Tq-1 read, no others) out[0]=out [B,Tq,C]
 *                 out[1]=att [B,NH,Tq,Tmax] (NULL: skip); iparam[0..5] = B, Tmax, C, NH, t0, Tq (t0+Tq <= Tmax).
 *                 Each (b, h, t = t0 + r) row is ATTENTION's row t: the same bits.
 *   CAUSAL_SOFTMAX  in[0]=scores [R,T,T] out[0]=probs [R,T,T]; iparam[0]=R iparam[1]=T; fparam[0]=scale.
 *   CAUSAL_SOFTMAX_BACKWARD  in[0]=probs in[1]=dprobs out[0]=dscores (all [R,T,T]); iparam[0]=R
 *                 iparam[1]=T; fparam[0]=scale.
 *   CROSSENTROPY  in[0]=logits [N,V] in[1]=targets (i32 [N]) out[0]=losses [N]; iparam[0]=N iparam[1]=V.
 *   CROSSENTROPY_BACKWARD  in[0]=logits [N,V] in[1]=targets (i32 [N]) in[2]=dloss [N] out[0]=dlogits [N,V];
 *                 iparam[0]=N iparam[1]=V.
 *   ADAMW         in[0]=grad out[0]=param (rw) out[1]=m (rw) out[2]=v (rw), n elements each; iparam[0]=n;
 *                 fparam[0..6] = lr, beta1, beta2, eps, weight_decay, bc1, bc2 (bias corrections 1 - beta^t,
 *                 computed on the host: weft_adamw_bias_correction).
 *   SUMSQ         in[0]=x out[0]=acc (1 element, rw); iparam[0]=n. Chunked order (WEFT_SUMSQ_CHUNK): x is
 *                 cut into chunks c = 0, 1, ... of WEFT_SUMSQ_CHUNK elements (the last one shorter); chunk
 *                 c's partial P[c] = 0 + x[i]*x[i] + ... over its i ascending (each product and sum
 *                 rounded); then acc = acc + P[0] + P[1] + ... left to right, starting from acc's current
 *                 value (n = 0 leaves acc). The partials are independent: a lane computes them in parallel
 *                 in any way, then adds them in order. Stored canonical. (The global-norm clip's sum,
 *                 weft_grad_clip: one SUMSQ per tensor, in order, into one accumulator from +0.)
 *   PERMUTE       in[0]=x out[0]=y, the same dtype; iparam[0]=rank (1..4), iparam[1..4] = x's dims (padded
 *                 with 1), iparam[5] = perm packed 2 bits per axis (axis a of y is axis (p >> 2a) & 3 of x).
 *                 A copy: y[idx] = x[idx permuted], bits unchanged.
 *   COPY_SLICE    in[0]=src out[0]=dst (rw: only the slice is written), the same dtype and rank;
 *                 iparam[0]=outer (product of the dims before axis), iparam[1]=src_len (src's extent along
 *                 axis), iparam[2]=dst_len (dst's), iparam[3]=inner (product of the dims after axis),
 *                 iparam[4]=offset: dst[o, offset + i, r] = src[o, i, r].
 * An output buffer may be the same as an input buffer where the public API allows it (elementwise ops). */
/* SUMSQ's chunk: the elements of one independent partial sum (see SUMSQ above). Part of the canonical
 * order: every lane cuts at these boundaries, whatever its threads or vector width. */
#define WEFT_SUMSQ_CHUNK 4096

typedef struct weft_op {
  weft_op_kind kind;
  weft_contract contract;
  weft_buffer *in[WEFT_OP_MAX_IN];
  weft_buffer *out[WEFT_OP_MAX_OUT];
  int64_t batch, m, n, k;
  int trans_a, trans_b, b_batched;
  int64_t rows, cols;
  int y_broadcast;
  float alpha;
  float inv_rows;
  /* Where the core keeps out[i]'s host copy, given only when that memory is registered with this lane
   * (host_register) and the result is expected home (every input came from the host): the lane may write
   * the result straight there as it is computed, so the download that follows moves nothing. NULL
   * otherwise. */
  void *out_host[WEFT_OP_MAX_OUT];
  /* Version 2. The operands' dtypes (WEFT_DTYPE_F32 for every operand of the version-1 ops). */
  weft_dtype in_dtype[WEFT_OP_MAX_IN];
  weft_dtype out_dtype[WEFT_OP_MAX_OUT];
  /* Typed parameters of the version-2 ops (the table above). */
  int64_t iparam[8];
  float fparam[8];
} weft_op;

/* Lane properties. */
#define WEFT_LANE_HOST_MEMORY 1u /* buffers are host float arrays: the core hands the lane host memory */
/* The lane joins the fabric down (not routed) and comes up when its revive slot says so: a browser slot
 * waiting for a tab to attach. */
#define WEFT_LANE_STARTS_DOWN 2u

/* What a lane says about itself. The strings are the lane's and live as long as it does. */
typedef struct weft_lane_desc {
  const char *name;             /* unique in the fabric: "cpu", "vulkan:0" */
  const char *kind;             /* "cpu", "vulkan", "cuda", ... */
  const char *device;           /* the device's own name */
  const char *driver;           /* driver / API version, "" if none */
  const char *details;          /* one line of facts worth printing (ISA, threads, limits) */
  weft_contract_mask contracts; /* contracts honoured */
  uint32_t flags;               /* WEFT_LANE_* properties */
  /* The ops the lane offers: bit k (WEFT_OP_BIT(k)) for weft_op_kind k. 0 means the version-1 set
   * (WEFT_OPS_V1: matmul .. softmax_xent), so a lane that leaves it zero keeps working unchanged. The router
   * never sends a lane an op outside its set; an op pinned to such a lane fails with WEFT_ERR_UNSUPPORTED. */
  uint64_t ops;
} weft_lane_desc;

/* What the core gives a lane: a way to report errors. The lane calls report() with a status and a message
 * a person can act on, and returns the same status. */
typedef struct weft_lane_host {
  void *ctx;
  weft_status (*report)(void *ctx, weft_status status, const char *fmt, va_list args);
} weft_lane_host;

/* Formats a message into the host's last error and returns `status`. */
WEFT_API weft_status weft_lane_report(const weft_lane_host *host, weft_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The vtable. `self` is the lane's own state. Slots marked optional may be NULL. */
typedef struct weft_lane_vtable {
  uint32_t abi_version; /* WEFT_LANE_ABI_VERSION the lane was built against */
  uint32_t size;        /* sizeof(weft_lane_vtable) the lane was built against */
  /* Fills *out with the lane's name, device and contracts. */
  void (*describe)(void *self, weft_lane_desc *out);
  /* Releases everything the lane holds; buffers are freed before this is called. */
  void (*destroy)(void *self);
  /* Allocates `bytes` (>= 4) on the lane; WEFT_ERR_OUT_OF_MEMORY when the device is full. */
  weft_status (*buffer_alloc)(void *self, size_t bytes, weft_buffer **out_buffer);
  /* Frees a buffer from buffer_alloc (waiting for work that uses it if needed). */
  void (*buffer_free)(void *self, weft_buffer *buffer);
  /* Copies host memory into a buffer at byte `offset`; the source may be reused when this returns, unless
   * it lies in memory registered with the lane (host_register), which the copy may still be reading until
   * the lane's next download or sync returns. */
  weft_status (*upload)(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes);
  /* Copies a buffer into host memory; waits for work writing the buffer, flushing an open scope first. */
  weft_status (*download)(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes);
  /* Optional: WEFT_OK if the lane can run this op (beyond its contract mask), else UNSUPPORTED and why. */
  weft_status (*supports)(void *self, const weft_op *op);
  /* Runs (or records, inside a scope) one op. May return before the work is done. */
  weft_status (*run)(void *self, const weft_op *op);
  /* Optional: opens a scope: later runs may be recorded into one submission. */
  weft_status (*scope_begin)(void *self);
  /* Optional: submits what the scope recorded and waits for it. */
  weft_status (*scope_end)(void *self);
  /* Optional: waits until all work given to the lane is done. */
  weft_status (*sync)(void *self);
  /* Optional: starts the work recorded so far (outside a scope) without waiting for it, so the device
   * computes while the caller does other work, e.g. the CPU's share of a split. */
  weft_status (*flush)(void *self);
  /* Optional: asked, while the lane is down (it returned WEFT_ERR_LANE_FAILED, or started down), whether it
   * can serve again: a remote worker reachable again, a browser tab attached. The core asks with backoff
   * (first after 20 ms, doubling to 5 s) and at once on weft_fabric_revive. WEFT_OK brings the lane back,
   * holding no buffers: when it went down the core released each buffer it had there (buffer_free, which
   * must not block on a dead device or connection) and recomputed elsewhere what was lost with them.
   * Anything else leaves it down; the lane says why through weft_lane_report. */
  weft_status (*revive)(void *self);
  /* Optional: the core offers host memory that stays where it is until host_unregister (a tensor's host
   * copy, offered once it has crossed to or from this lane twice, so one-off transfers pay nothing). The
   * lane may pin it and then move data between it and its buffers directly, with no staging copy, and
   * asynchronously: the core keeps its hands off that memory until the lane's next download or sync has
   * returned. WEFT_OK: the lane took it; anything else: it did not, and nothing changes. */
  weft_status (*host_register)(void *self, void *ptr, size_t bytes);
  /* Optional: registered memory is about to be freed or reused: waits for transfers using it, unpins it. */
  void (*host_unregister)(void *self, void *ptr, size_t bytes);
  /* Optional: 1 when every op and transfer given to the lane so far has finished, 0 while some still runs;
   * never blocks. A split polls it while the CPU computes its share, to time each device's share without a
   * thread spinning in a wait on a core the CPU's share needs. */
  int (*idle)(void *self);
  /* Optional: a buffer over `bytes` of this device's memory at `address` that another library allocated (a
   * PyTorch CUDA tensor handed over through DLPack; weft_tensor_wrap_lane). Work the other library queued on
   * it is finished before this returns. buffer_free releases the record, never the memory. */
  weft_status (*buffer_wrap)(void *self, void *address, size_t bytes, weft_buffer **out_buffer);
  /* Optional: the device address of a buffer (a CUdeviceptr for CUDA), once every piece of work on the device,
   * the lane's and any other library's, is finished (weft_tensor_lane_address): what is there may then be read
   * and written by another library. */
  weft_status (*buffer_address)(void *self, weft_buffer *buffer, void **out_address);
  /* Optional: 1 when the buffer's current value is already on its way into host memory in parts (a result
   * streamed home as it is computed), so that a download of a part waits only for that part. The core then
   * brings a large value home in pieces and copies each on to the caller while later ones are still coming. */
  int (*streaming)(void *self, weft_buffer *buffer);
} weft_lane_vtable;

/* A lane provider's probe hands each lane it finds to add_lane and each one it cannot open to add_absent.
 * The sink copies the strings it is given. */
typedef struct weft_lane_sink {
  void *ctx;
  /* Adds a lane; the fabric takes ownership of `self` (destroy is called on close, or at once on failure). */
  weft_status (*add_lane)(void *ctx, const weft_lane_vtable *vtable, void *self);
  /* Records a lane or lane kind that is not available here, and the reason. */
  void (*add_absent)(void *ctx, const char *name, const char *reason);
} weft_lane_sink;

/* What a probe is told. */
typedef struct weft_probe_args {
  const weft_fabric_desc *desc; /* the fabric's options (never NULL) */
  const weft_lane_host *host;   /* the error channel the lane must keep and use */
} weft_probe_args;

/* A lane provider: finds its devices and adds a lane per device to the sink. Returning an error means the
 * provider itself broke; a provider with no device adds an absent entry and returns WEFT_OK. */
typedef weft_status (*weft_lane_probe_fn)(const weft_probe_args *args, const weft_lane_sink *sink);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_LANE_H */
