/* weft.h - the public API of weft, a heterogeneous compute fabric.
 *
 * One header, one prefix. Handles are opaque; every call that can fail returns a weft_status, writes its
 * outputs last (through out_* pointers, cleared first) and leaves a message a person can act on in the
 * fabric's last error (weft_fabric_last_error). The library never aborts and never exits on bad input.
 *
 * Ownership: a tensor belongs to the fabric that created it and must be destroyed before that fabric is
 * closed (weft_fabric_close destroys any left over). A destroyed tensor must not be passed again: a handle
 * that does not carry a live tensor's mark is refused with WEFT_ERR_INVALID_ARGUMENT ("not a live weft
 * tensor"), but once destroyed its memory may be reused, so that check is a help, not a guarantee. Strings
 * returned by the library live as long as the object they were read from. A fabric is used from one thread
 * at a time. */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define WEFT_API __declspec(dllexport)
#else
#define WEFT_API __attribute__((visibility("default")))
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_STRING "0.1.0"
/* One number that orders versions: major * 10000 + minor * 100 + patch. */
#define WEFT_VERSION_NUMBER (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)

/* The version of the library actually loaded, "MAJOR.MINOR.PATCH"; compare with WEFT_VERSION_STRING. */
WEFT_API const char *weft_version(void);
/* The loaded library's WEFT_VERSION_NUMBER. */
WEFT_API int weft_version_number(void);

/* ---------------------------------------------------------------------------------------------- status */

/* What went wrong, chosen so that a caller can act on it. Codes only grow at the end. */
typedef enum weft_status {
  WEFT_OK = 0,
  WEFT_ERR_INVALID_ARGUMENT = 1, /* a NULL, an unknown enum value, a bad option, not a live tensor: fix the call */
  WEFT_ERR_SHAPE = 2,            /* shapes or ranks do not agree, or a dimension is out of range: fix the call */
  WEFT_ERR_OVERFLOW = 3,         /* a size product does not fit: the tensor is too large to describe */
  WEFT_ERR_WRONG_FABRIC = 4,     /* a tensor from another fabric was passed: use tensors of this fabric */
  WEFT_ERR_OUT_OF_MEMORY = 5,    /* host or device memory ran out: free tensors or use smaller work */
  WEFT_ERR_UNSUPPORTED = 6,      /* no lane honours this op under this contract (or the named lane does not) */
  WEFT_ERR_LANE_FAILED = 7,      /* the lane failed (device lost, driver error) and is out of the fabric */
  WEFT_ERR_NOT_FOUND = 8,        /* a lane name or index that does not exist */
  WEFT_ERR_STATE = 9,            /* the call is not valid now (no scope open, one already open, nothing routed yet) */
  WEFT_ERR_IO = 10,              /* a file or socket could not be read or written */
  WEFT_ERR_INTERNAL = 11,        /* a bug in weft: please report it with the message */
} weft_status;

/* A short, fixed description of a status code ("invalid argument"); never NULL. */
WEFT_API const char *weft_status_str(weft_status status);

/* ------------------------------------------------------------------------------------ precision contract */

/* What an op allows. The router never weakens a contract silently: an op runs only on a lane that honours
 * its contract, or fails with WEFT_ERR_UNSUPPORTED. */
typedef enum weft_contract {
  WEFT_CONTRACT_EXACT = 0, /* the canonical order: every exact lane returns the same bits (the default) */
  WEFT_CONTRACT_FP32 = 1,  /* fp32 arithmetic in any accumulation order (vendor BLAS, fused multiply-add) */
  WEFT_CONTRACT_TF32 = 2,  /* tensor units with tf32 inputs: opt-in only */
  WEFT_CONTRACT_BF16 = 3,  /* tensor units with bf16 inputs, fp32 accumulation: opt-in only */
  WEFT_CONTRACT_COUNT
} weft_contract;

/* "exact", "fp32", "tf32", "bf16"; "?" for a value out of range. */
WEFT_API const char *weft_contract_str(weft_contract contract);
/* Parses a contract name; WEFT_ERR_INVALID_ARGUMENT for an unknown name. */
WEFT_API weft_status weft_contract_parse(const char *name, weft_contract *out_contract);

/* ---------------------------------------------------------------------------------------------- fabric */

typedef struct weft_fabric weft_fabric;
typedef struct weft_tensor weft_tensor;

/* How to open a fabric. Start from WEFT_FABRIC_DESC_INIT and change what you need. */
typedef struct weft_fabric_desc {
  /* Comma-separated lane kinds or names to open ("cpu", "cpu,vulkan", "vulkan:0"); NULL or "" opens every
   * lane found. A lane left out is listed as absent with the reason "not requested". */
  const char *lanes;
  /* Threads the CPU lane may use; 0 = one per CPU this process may run on (its affinity mask). At most 4096
   * are started; the lane's details say when it started fewer than asked. */
  int cpu_threads;
  /* Test hook: caps the Vulkan lane's largest storage-buffer binding in bytes (0 = the device's own), so the
   * row-chunking of large tensors can be exercised on small data. */
  uint64_t vulkan_max_binding;
  /* When the cost model is measured: WEFT_CALIBRATION_AUTO (default) reads the on-disk cache and measures
   * lanes missing from it (off the caller's path: weft_fabric_calibration_wait) the first time routing has to
   * choose between lanes; WEFT_CALIBRATION_FORCE measures
   * every lane at open and rewrites the cache; WEFT_CALIBRATION_OFF uses built-in priors and never touches
   * the disk (tests, or callers who set models with weft_fabric_set_cost_model). */
  int calibration;
  /* Receives one line per calibration step and note ("calibrating cpu: matmul n=256 ..."). NULL: notes
   * (cache mismatches, recalibration) go to stderr and progress is silent. */
  void (*on_note)(void *ctx, const char *line);
  void *note_ctx;
  /* Plugin lanes to load (weft_plugin.h): ':'-separated shared objects or directories of *.so, loaded in
   * addition to those in the environment variable WEFT_PLUGIN_PATH. NULL: only WEFT_PLUGIN_PATH. */
  const char *plugins;
  /* Workers whose lanes join the fabric as remote:<host:port>/<lane> (`weft worker`): "host:port,...";
   * an entry "host:port=IDENTITY" pins the identity that worker must prove with the shared secret (one that
   * proves another is refused; WEFT_REMOTE_IDENTITY pins the entries that name none). NULL or "": those
   * named in the environment variable WEFT_REMOTE, if any. */
  const char *remote;
  /* Where to listen for browser tabs that offer their GPU as lanes browser:0, browser:1, ... ("host:port";
   * `weft serve`). NULL or "": the environment variable WEFT_BROWSER, if set; otherwise no browser lanes.
   * Any address but loopback needs a shared secret, as for `weft worker`. */
  const char *browser;
} weft_fabric_desc;

enum { WEFT_CALIBRATION_AUTO = 0, WEFT_CALIBRATION_FORCE = 1, WEFT_CALIBRATION_OFF = 2 };

#define WEFT_FABRIC_DESC_INIT {NULL, 0, 0, WEFT_CALIBRATION_AUTO, NULL, NULL, NULL, NULL, NULL}

/* Opens a fabric over every lane found (or those desc->lanes asks for). desc may be NULL for defaults.
 * Lanes that cannot run here are recorded as absent with a reason; that is not an error. */
WEFT_API weft_status weft_fabric_open(const weft_fabric_desc *desc, weft_fabric **out_fabric);
/* Closes the fabric, destroying any tensors still alive. NULL is ignored. */
WEFT_API void weft_fabric_close(weft_fabric *fabric);
/* The message of the last failed call on this fabric ("" if none); valid until the next call. */
WEFT_API const char *weft_fabric_last_error(const weft_fabric *fabric);
/* The message of the last weft_fabric_open that failed on this thread (it has no fabric to hold it); every
 * failure of weft_fabric_open sets it, and a successful open clears it. */
WEFT_API const char *weft_open_error(void);

/* -------------------------------------------------------------------------------------------- lanes */

/* Bit i set: the lane honours weft_contract i. */
typedef uint32_t weft_contract_mask;
#define WEFT_CONTRACT_BIT(c) ((weft_contract_mask)1u << (c))

/* A lane as the fabric sees it. Strings live as long as the fabric. */
typedef struct weft_lane_info {
  const char *name;              /* "cpu", "vulkan:0", "cuda:0.tensor" */
  const char *kind;              /* "cpu", "vulkan", "cuda", "remote", "browser", "plugin" */
  const char *device;            /* what the hardware calls itself ("AMD EPYC", "llvmpipe (LLVM 15.0.6, 256 bits)") */
  const char *driver;            /* driver and API version where the lane has one; "" otherwise */
  const char *details;           /* one line of lane-specific facts: ISA, threads, limits */
  weft_contract_mask contracts;  /* the contracts this lane honours */
  int failed;                    /* 1 while the lane is down: it failed (or started down, waiting) */
  int revivable;                 /* 1 if a down lane may come back (it is asked with backoff) */
  uint64_t ops;                  /* the ops it offers (WEFT_OP_BIT(kind) bits) */
} weft_lane_info;

/* Number of lanes present in the fabric (failed ones included, marked). */
WEFT_API size_t weft_fabric_lane_count(const weft_fabric *fabric);
/* Describes lane `index` (0 .. count-1). */
WEFT_API weft_status weft_fabric_lane_info(const weft_fabric *fabric, size_t index, weft_lane_info *out_info);
/* Finds a lane by name; WEFT_ERR_NOT_FOUND (with the names that exist in the message) if there is none. */
WEFT_API weft_status weft_fabric_lane_find(weft_fabric *fabric, const char *name, size_t *out_index);
/* Asks every down lane that can come back (a remote worker restarted, a browser tab attached) whether it
 * is up, now rather than at its next backoff; *out_up (may be NULL) is set to the number of lanes up. */
WEFT_API weft_status weft_fabric_revive(weft_fabric *fabric, size_t *out_up);
/* Number of lanes that were looked for and are absent. */
WEFT_API size_t weft_fabric_absent_count(const weft_fabric *fabric);
/* Names an absent lane (or lane kind) and why it is absent ("no Vulkan loader: libvulkan.so.1 not found"). */
WEFT_API weft_status weft_fabric_absent_info(const weft_fabric *fabric, size_t index, const char **out_name,
                                             const char **out_reason);

/* NPUs the operating system knows of (Linux: /sys/class/accel, the compute-accelerator subsystem; the root
 * /sys can be moved with the environment variable WEFT_SYSFS_ROOT). weft reaches an NPU only through a
 * plugin lane of kind "npu" built on its vendor's runtime; this says what is there and how it could be. */
typedef struct weft_npu_info {
  char device[64];  /* "accel0" */
  char driver[64];  /* the kernel driver: "ivpu", "amdxdna", "habanalabs", "" if unknown */
  char reach[160];  /* how a plugin could reach it ("OpenVINO NPU plugin / Level Zero") */
} weft_npu_info;

/* Fills out[0 .. cap-1] with the accelerators found and sets *out_count to how many exist (which may be
 * more than cap). No accel class (another OS, an older kernel) is 0 devices, not an error. */
WEFT_API weft_status weft_npu_probe(weft_npu_info *out, size_t cap, size_t *out_count);

/* ------------------------------------------------------------------------------------------- tensors */

#define WEFT_MAX_DIMS 4

/* Creates an fp32 tensor of `ndim` (1..4) dimensions. Every dimension must be >= 1, except batch
 * dimensions (all but the last two of a tensor of rank 3 or 4), which may be 0: an empty batch. A tensor holds
 * at most 2^40 elements (empty batch dimensions counted as 1): a shape past that, or whose product overflows,
 * is WEFT_ERR_OVERFLOW; a rank outside 1..4 or a dimension out of range is WEFT_ERR_SHAPE.
 * `data` (row-major, dims[0] slowest) is copied in; NULL gives zeros. The tensor starts on the host. */
WEFT_API weft_status weft_tensor_create(weft_fabric *fabric, int ndim, const int64_t *dims, const float *data,
                                        weft_tensor **out_tensor);
/* Creates a tensor over the caller's own memory, with no copy: `data` (row-major, as many floats as the
 * shape holds) becomes the tensor's host copy. Ops on host lanes (the CPU) read and write it in place
 * (possibly after the op call has returned: see "Ops are asynchronous" below);
 * weft_tensor_write and weft_tensor_read given this same pointer copy nothing (a read still brings the value
 * home from a device lane, straight into `data`); given memory that overlaps `data` at another address they
 * are WEFT_ERR_INVALID_ARGUMENT and move nothing. After changing `data` yourself, call weft_tensor_write(t,
 * data, n) so the lanes' copies are dropped; after an op on any lane, `data` is current only once
 * weft_tensor_read(t, data, n) (or weft_fabric_sync) has returned. `data` must stay valid until the tensor is destroyed, which does not
 * free it. The same shape rules as weft_tensor_create apply. Where `data` spans at least 4 MiB, weft advises
 * the kernel to back it with huge pages (madvise MADV_HUGEPAGE on its 2 MiB-aligned inside; pages already
 * there stay as they are), as for its own host copies: results then land in fresh memory without a page
 * fault every 4 KiB. */
WEFT_API weft_status weft_tensor_wrap(weft_fabric *fabric, int ndim, const int64_t *dims, float *data,
                                      weft_tensor **out_tensor);
/* Creates an fp32 tensor over memory of lane `lane` that the caller owns, with no copy: another library's
 * device allocation (a PyTorch CUDA tensor through DLPack). That memory is the tensor's copy on the lane, and
 * it holds the value; the host copy is made when something reads it. The lane must offer this (cuda:N
 * does; weft_lane_vtable.buffer_wrap): WEFT_ERR_UNSUPPORTED names the lane otherwise. Work the other library
 * queued on the memory is finished first. The memory must stay valid until the tensor is destroyed, which
 * does not free it. After changing it yourself, call weft_tensor_lane_address again so weft takes the lane's
 * copy as the value. The shape rules of weft_tensor_create apply. */
WEFT_API weft_status weft_tensor_wrap_lane(weft_fabric *fabric, size_t lane, int ndim, const int64_t *dims,
                                           void *address, weft_tensor **out_tensor);
/* The device address of the tensor's copy on lane `lane` (a CUdeviceptr for cuda:N), for handing it to
 * another library with no copy: the value is made current there first (from the host or another lane), every
 * piece of work on the device is finished, and that copy becomes the only current one, so what the caller
 * writes there is the tensor's value for the next op. Valid until the tensor is destroyed or the lane's copy
 * is replaced (a write from the host, an op on another lane); call again before each hand-over.
 * WEFT_ERR_UNSUPPORTED for a lane that cannot hand out its memory (host lanes: use weft_tensor_wrap). */
WEFT_API weft_status weft_tensor_lane_address(weft_tensor *tensor, size_t lane, void **out_address);
/* Destroys a tensor and every copy of it on every lane. NULL is ignored. */
WEFT_API void weft_tensor_destroy(weft_tensor *tensor);
/* Copies `count` floats (must equal the element count) from host memory into the tensor; `data` may be
 * reused when this returns. The tensor's host copy holds the value; a large tensor whose old value lived on a
 * GPU lane that moves its host memory directly is sent there too, piece by piece as it is copied in, so an
 * op there finds it in place (a lane that refuses a piece just does not get it: the write still succeeds). */
WEFT_API weft_status weft_tensor_write(weft_tensor *tensor, const float *data, size_t count);
/* Copies the tensor into host memory; `count` must equal the element count. Waits for pending work and
 * flushes an open scope on the lane that holds the data; the tensor's host copy is current afterwards. A
 * large result still streaming home is copied on in pieces as they land; should the lane fail part way and
 * the value not be computed again, the error is returned and `out_data` may hold part of the value. An
 * `out_data` of at least 4 MiB is advised huge pages first, as weft_tensor_wrap's memory is. */
WEFT_API weft_status weft_tensor_read(weft_tensor *tensor, float *out_data, size_t count);
/* Rank and dimensions (out_dims needs WEFT_MAX_DIMS entries; unused ones are set to 1). */
WEFT_API weft_status weft_tensor_shape(const weft_tensor *tensor, int *out_ndim, int64_t *out_dims);
/* Number of elements. */
WEFT_API size_t weft_tensor_numel(const weft_tensor *tensor);
/* What a tensor's elements are. Both are 4 bytes, so a tensor's storage on every lane is the same size. */
typedef enum weft_dtype {
  WEFT_DTYPE_F32 = 0, /* fp32: every tensor made by weft_tensor_create or weft_tensor_wrap */
  WEFT_DTYPE_I32 = 1, /* int32: token ids, positions, targets */
  WEFT_DTYPE_COUNT
} weft_dtype;

/* "f32", "i32"; "?" otherwise. */
WEFT_API const char *weft_dtype_str(weft_dtype dtype);
/* Creates a tensor of `dtype` (the shape rules of weft_tensor_create). `data` holds numel elements of that
 * dtype (float or int32_t), copied in; NULL gives zeros. */
WEFT_API weft_status weft_tensor_create_typed(weft_fabric *fabric, weft_dtype dtype, int ndim, const int64_t *dims,
                                              const void *data, weft_tensor **out_tensor);
/* The tensor's dtype; WEFT_DTYPE_COUNT for NULL or a handle without a live tensor's mark (see Ownership at
 * the top: a destroyed tensor is not reliably one). */
WEFT_API weft_dtype weft_tensor_dtype(const weft_tensor *tensor);
/* weft_tensor_write and weft_tensor_read for int32 tensors. Reading or writing an int32 tensor as floats
 * (weft_tensor_read/write), or an fp32 tensor as int32, is WEFT_ERR_INVALID_ARGUMENT and moves nothing. */
WEFT_API weft_status weft_tensor_write_i32(weft_tensor *tensor, const int32_t *data, size_t count);
WEFT_API weft_status weft_tensor_read_i32(weft_tensor *tensor, int32_t *out_data, size_t count);
/* Gives the tensor a new shape of the same element count (the shape rules of weft_tensor_create), in
 * place and without a copy: a zero-copy relabel of the same tensor, not a second view of it - every holder
 * of the handle sees the new shape, and ops already given the tensor keep the shape they were given. Its
 * value, where it lives and its dtype do not change. WEFT_ERR_SHAPE when the counts differ. */
WEFT_API weft_status weft_tensor_reshape(weft_tensor *tensor, int ndim, const int64_t *dims);
/* Where the tensor's current value lives: "host", a lane name, or several joined by ','
 * ("host,vulkan:0"). Valid until the tensor is next used. */
WEFT_API const char *weft_tensor_location(const weft_tensor *tensor);
/* Makes the tensor's current value resident on lane `lane` as well (an upload now, once), so ops routed
 * there find it in place and the router counts no transfer for it: model weights, a cache, anything used
 * many times on one device. Where it already lives nothing moves; its other copies stay current. A lane
 * index from weft_fabric_lane_find; WEFT_ERR_INVALID_ARGUMENT for one out of range, WEFT_ERR_LANE_FAILED for
 * a lane that is down. */
WEFT_API weft_status weft_tensor_prefetch(weft_tensor *tensor, size_t lane);

/* ----------------------------------------------------------------------------------------------- ops */

/* The ops of the fabric. Numbers are stable; new ops are added at the end. */
typedef enum weft_op_kind {
  WEFT_OP_MATMUL = 0,
  WEFT_OP_ADD = 1,
  WEFT_OP_RELU = 2,
  WEFT_OP_RELU_BACKWARD = 3,
  WEFT_OP_SCALE = 4,
  WEFT_OP_AXPY = 5,
  WEFT_OP_SUM_ROWS = 6,
  WEFT_OP_SOFTMAX_XENT = 7,
  /* the transformer ops (weft_lane.h's table says which operand is which) */
  WEFT_OP_EMBEDDING = 8,
  WEFT_OP_EMBEDDING_BACKWARD = 9,
  WEFT_OP_LAYERNORM = 10,
  WEFT_OP_LAYERNORM_BACKWARD = 11,
  WEFT_OP_GELU = 12,
  WEFT_OP_GELU_BACKWARD = 13,
  WEFT_OP_ATTENTION = 14,
  WEFT_OP_ATTENTION_BACKWARD = 15,
  WEFT_OP_CAUSAL_SOFTMAX = 16,
  WEFT_OP_CAUSAL_SOFTMAX_BACKWARD = 17,
  WEFT_OP_CROSSENTROPY = 18,
  WEFT_OP_CROSSENTROPY_BACKWARD = 19,
  WEFT_OP_ADAMW = 20,
  WEFT_OP_SUMSQ = 21,
  WEFT_OP_PERMUTE = 22,
  WEFT_OP_COPY_SLICE = 23,
  /* decode: attention of a few query positions over a KV cache (weft_op_attention_cached) */
  WEFT_OP_ATTENTION_CACHED = 24,
  /* c += op(a) . op(b), continuing each sum from the value in c (weft_op_matmul_acc): a chained sum split over
   * k (lanes, MPI ranks) keeps the canonical order */
  WEFT_OP_MATMUL_ACC = 25,
  WEFT_OP_COUNT
} weft_op_kind;

/* The ops of lane ABI version 1 (matmul .. softmax_xent): what a lane offers when it says nothing. */
#define WEFT_OP_V1_COUNT 8
/* Bit for op kind k in an op set (weft_lane_desc.ops, weft_lane_info.ops). */
#define WEFT_OP_BIT(k) ((uint64_t)1u << (k))
#define WEFT_OPS_V1 (WEFT_OP_BIT(WEFT_OP_V1_COUNT) - 1u)
#define WEFT_OPS_ALL (WEFT_OP_BIT(WEFT_OP_COUNT) - 1u)

/* Most operands an op has (weft_op_run): inputs and outputs. */
#define WEFT_OP_MAX_IN 6
#define WEFT_OP_MAX_OUT 4

/* The op's name ("matmul", "layernorm", "copy_slice", ...: the table in optable.c); "?" otherwise. */
WEFT_API const char *weft_op_kind_str(weft_op_kind kind);
/* Parses an op name; WEFT_ERR_INVALID_ARGUMENT for an unknown name. */
WEFT_API weft_status weft_op_kind_parse(const char *name, weft_op_kind *out_kind);

/* Run on whichever lane the fabric chooses. */
#define WEFT_LANE_AUTO (-1)

/* Options every op takes. Start from WEFT_OP_DESC_INIT. */
typedef struct weft_op_desc {
  weft_contract contract; /* default WEFT_CONTRACT_EXACT */
  int lane;               /* a lane index to pin the op to, or WEFT_LANE_AUTO (default) */
} weft_op_desc;

#define WEFT_OP_DESC_INIT {WEFT_CONTRACT_EXACT, WEFT_LANE_AUTO}

/* Ops are asynchronous: each returns once its work is given to a lane (a GPU's stream, the host lanes'
 * queue thread), so independent work on different lanes overlaps. Dependencies are tracked through the
 * tensors ops read and write; weft_tensor_read waits only for what produced that tensor, weft_fabric_sync
 * for everything. Short host ops, with nothing queued ahead of them, run on the caller's thread.
 *
 * Errors of queued ops: an op that fails after its call returned OK leaves its failure (status and message)
 * on the tensors it writes. weft_tensor_read of such a tensor returns that failure and copies nothing; an
 * op that reads it fails with it (or, queued behind the failed op, passes the failure on to what it
 * writes); a later successful write of the tensor (weft_tensor_write, or an op) clears it. weft_fabric_sync
 * returns the first such failure that no read or op has reported yet, once. Calls that touch none of the
 * failed op's outputs are not failed by it.
 *
 * In-place ops: add, relu, relu_backward and scale may be given one of their inputs as `out` (the same
 * tensor), on every lane, with the same bits as out of place; axpy is in place by definition. matmul,
 * sum_rows and softmax_xent refuse an output that is an input (WEFT_ERR_INVALID_ARGUMENT). The transformer
 * ops below say for each which output may be which input; adamw, sumsq and copy_slice update outputs in
 * place by definition; two outputs are never one tensor. Different
 * tensors whose host memory overlaps (weft_tensor_wrap of the same or overlapping memory) may not be an
 * input and an output of one op, nor two outputs: WEFT_ERR_INVALID_ARGUMENT, and nothing changes. */

/* Batched matmul: c[p] = op(a[p]) . op(b[p]) for each batch entry p, op(x) = x or x transposed.
 * a: [m,k] or [batch..,m,k] ([..,k,m] when trans_a); b: [k,n] (shared by the batch) or [batch..,k,n]
 * ([..,n,k] when trans_b); c: [m,n] or [batch..,m,n], created by the caller. A rank-2 b with a batched a is
 * the "[b,m,k].[k,n]" form. Canonical order: for each c[i,j]: acc = 0; for k ascending
 * acc = acc + a[i,k]*b[k,j], multiply and add rounded separately. desc may be NULL for defaults. */
WEFT_API weft_status weft_op_matmul(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *a, int trans_a,
                                    weft_tensor *b, int trans_b, weft_tensor *c);
/* The accumulating matmul: c[p] += op(a[p]) . op(b[p]), shapes as weft_op_matmul's. Canonical order: for each
 * c[i,j]: acc = c[i,j] (its value before the op); for k ascending acc = acc + a[i,k]*b[k,j], each multiply and
 * add rounded separately. So a sum over k cut into consecutive ranges k0 < k1 < ... and run as one matmul
 * over [0, k1) followed by matmul_acc over [k1, k2), ... gives the bits of one matmul over all of k (from a c
 * of +0, matmul_acc is matmul): how a weight gradient summed over a batch split across lanes or MPI ranks
 * stays the gradient of one lane ("chained accumulation", docs/DESIGN.md). c is read and written; it must
 * not be a or b. Offered by the CPU lane and workers' CPU lanes; lanes without it (vulkan, cuda, browser tabs,
 * plugins) are not routed it, and an op pinned to one fails with WEFT_ERR_UNSUPPORTED. */
WEFT_API weft_status weft_op_matmul_acc(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *a, int trans_a,
                                        weft_tensor *b, int trans_b, weft_tensor *c);
/* out = x + y, where y has x's shape or is a row [n] / [1,n] broadcast over every row of x (a bias).
 * out may be x. */
WEFT_API weft_status weft_op_add(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x, weft_tensor *y,
                                 weft_tensor *out);
/* out = max(x, 0) (a NaN stays NaN). out may be x. */
WEFT_API weft_status weft_op_relu(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x, weft_tensor *out);
/* out = x > 0 ? grad : 0, the gradient through relu given the relu's input x. out may be grad or x. */
WEFT_API weft_status weft_op_relu_backward(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *grad,
                                           weft_tensor *x, weft_tensor *out);
/* out = alpha * x. out may be x. */
WEFT_API weft_status weft_op_scale(weft_fabric *fabric, const weft_op_desc *desc, float alpha, weft_tensor *x,
                                   weft_tensor *out);
/* y = alpha * x + y, in place (the product rounded, then the sum). */
WEFT_API weft_status weft_op_axpy(weft_fabric *fabric, const weft_op_desc *desc, float alpha, weft_tensor *x,
                                  weft_tensor *y);
/* out[j] = sum over rows i of x[i,j], i ascending; x is [.., n] (every leading dimension counts as rows),
 * out has n elements (shape [n] or [1,n]). The gradient of a bias. */
WEFT_API weft_status weft_op_sum_rows(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x,
                                      weft_tensor *out);
/* Softmax cross-entropy of logits [r,c] against target probabilities [r,c] (one-hot labels or soft ones):
 * loss (1 element) = mean over rows of -sum_j t[i,j] * log_softmax(z)[i,j];
 * grad [r,c] = (softmax(z) - t) / r, the gradient of that mean loss. Either output may be NULL, not both.
 * Logits of no rows (an empty batch) are WEFT_ERR_SHAPE: a mean over nothing.
 * exp and log are weft's own (weft_expf, weft_logf: multiplies and adds only), so every exact lane agrees. */
WEFT_API weft_status weft_op_softmax_xent(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *logits,
                                          weft_tensor *targets, weft_tensor *out_loss, weft_tensor *out_grad);

/* ------------------------------------------------------------------------------- any op, by its kind */

/* An op's scalar parameters, for weft_op_run. Start from zeros; which entries an op reads:
 *   matmul, matmul_acc            i[0] = trans_a, i[1] = trans_b
 *   softmax_xent                  i[0] = the rows the mean is over, when the logits are one share of a
 *                                 larger batch (data-parallel ranks); 0 = the logits' rows
 *   scale, axpy                   f[0] = alpha
 *   layernorm                     f[0] = eps
 *   attention, attention_backward i[0] = number of heads (NH)
 *   attention_cached              i[0] = number of heads (NH), i[1] = t0 (the first query position)
 *   causal_softmax(_backward)     f[0] = scale
 *   adamw                         f[0..6] = lr, beta1, beta2, eps, weight_decay, bc1, bc2 (bias corrections:
 *                                 weft_adamw_bias_correction(beta1, step), (beta2, step))
 *   permute                       i[0..rank-1] = perm: y's axis a is x's axis perm[a]
 *   copy_slice                    i[0] = axis, i[1] = offset
 *   the others                    nothing */
typedef struct weft_op_params {
  int64_t i[8];
  float f[8];
} weft_op_params;

/* Runs op `kind` on in[0 .. nin-1] and out[0 .. nout-1] (at most WEFT_OP_MAX_IN and WEFT_OP_MAX_OUT; the
 * operands in the order of the op's typed function below, an optional operand NULL or left off the end).
 * The typed functions (weft_op_matmul, weft_op_layernorm, ...) are this with the operands named; this is
 * the one path every op takes: validation from the op table (operand count, dtypes, shapes, which output
 * may be which input), routing among the lanes that offer the op, and the run. params may be NULL (zeros). */
WEFT_API weft_status weft_op_run(weft_fabric *fabric, const weft_op_desc *desc, weft_op_kind kind,
                                 weft_tensor *const *in, int nin, weft_tensor *const *out, int nout,
                                 const weft_op_params *params);

/* ------------------------------------------------------------------------------- the transformer ops */

/* GPT-2's op set (after llm.c), forward and backward. The canonical order of each is its reference
 * kernel's (src/core/reference_tx.c; docs/DESIGN.md states each in words): every exact lane returns those
 * bits. Gradients of parameters (dwte, dwpe, dgamma, dbeta) are ACCUMULATED into the tensor given (zero it
 * for a fresh gradient); gradients of activations are written. "[..]" is any leading dimensions. Index
 * tensors are int32 (weft_tensor_create_typed); an index out of range is WEFT_ERR_INVALID_ARGUMENT and
 * nothing is written. Outputs are distinct from inputs unless said otherwise. The CPU lane and cuda:N offer
 * all of them, vulkan:N all but sumsq, the OpenCL plugin's opencl:N all of them (each admitted by its
 * self-test; a plugin lane offers only the ops that passed), remote lanes what their worker's lane offers,
 * browser tabs what their self-test proved: every op through weft.wasm, and large matmuls, gelus,
 * layernorms and causal softmaxes (with their backwards) on the tab's WebGPU where its GPU passed the
 * self-test for them (weft_lane_info.ops says which lane offers what; the router goes around the others). */

/* out[b,t,:] = wte[tok[b,t],:] + wpe[pos[b,t],:]. tok, pos: i32 [B,T]; pos NULL means pos[b,t] = t;
 * wte [V,C]; wpe [P,C]; out [B,T,C]. */
WEFT_API weft_status weft_op_embedding(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *tok,
                                       weft_tensor *pos, weft_tensor *wte, weft_tensor *wpe, weft_tensor *out);
/* dwte[tok[b,t],:] += dout[b,t,:], dwpe[pos[b,t],:] += dout[b,t,:], (b,t) ascending; either table may be
 * NULL (not both). Shapes as for weft_op_embedding. */
WEFT_API weft_status weft_op_embedding_backward(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *dout,
                                                weft_tensor *tok, weft_tensor *pos, weft_tensor *dwte,
                                                weft_tensor *dwpe);
/* y = (x - mean) * rstd * gamma + beta over the last dimension. x, y [..,C] (N rows); gamma, beta [C];
 * mean, rstd: N elements (either may be NULL). y may be x. */
WEFT_API weft_status weft_op_layernorm(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x,
                                       weft_tensor *gamma, weft_tensor *beta, float eps, weft_tensor *y,
                                       weft_tensor *mean, weft_tensor *rstd);
/* dx written; dgamma, dbeta [C] accumulated (either may be NULL). dy, x, dx [..,C]; mean, rstd from the
 * forward (N elements). dx may be dy. */
WEFT_API weft_status weft_op_layernorm_backward(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *dy,
                                                weft_tensor *x, weft_tensor *mean, weft_tensor *rstd,
                                                weft_tensor *gamma, weft_tensor *dx, weft_tensor *dgamma,
                                                weft_tensor *dbeta);
/* GPT-2's GELU, tanh form, elementwise; y has x's shape and may be x. */
WEFT_API weft_status weft_op_gelu(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x, weft_tensor *y);
/* dx = gelu'(x) * dy; x, dy, dx one shape; dx may be x or dy. */
WEFT_API weft_status weft_op_gelu_backward(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x,
                                           weft_tensor *dy, weft_tensor *dx);
/* Causal self-attention, fused: qkv [B,T,3C] (q, k, v side by side; n_head heads of C/n_head) -> out
 * [B,T,C], att [B,NH,T,T] (probabilities, needed by the backward), preatt [B,NH,T,T] (scaled scores, -inf
 * above the diagonal; may be NULL). n_head must divide C. */
WEFT_API weft_status weft_op_attention(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *qkv,
                                       int64_t n_head, weft_tensor *out, weft_tensor *att, weft_tensor *preatt);
/* Attention of Tq query positions t0 .. t0+Tq-1 over a KV cache (decode): qkv [B,Tmax,3C] in the layout
 * weft_op_attention takes, rows 0 .. t0+Tq-1 filled (rows after them are never read) -> out [B,Tq,C] and
 * att [B,NH,Tq,Tmax] (may be NULL; row t holds the probabilities of columns <= t, zeros after). Row r of
 * out is bit for bit row t0+r of weft_op_attention's out over qkv's first t0+Tq positions: each (b, h, t)
 * runs the fused forward's per-row computation. Tq comes from out's shape; t0 + Tq must not exceed Tmax. */
WEFT_API weft_status weft_op_attention_cached(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *qkv,
                                              int64_t n_head, int64_t t0, weft_tensor *out, weft_tensor *att);
/* dqkv [B,T,3C] from dout [B,T,C], the forward's qkv and att. */
WEFT_API weft_status weft_op_attention_backward(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *dout,
                                                weft_tensor *qkv, weft_tensor *att, int64_t n_head,
                                                weft_tensor *dqkv);
/* probs [..,T,T]: row t a softmax of scale*scores over columns <= t, zeros beyond. probs may be scores. */
WEFT_API weft_status weft_op_causal_softmax(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *scores,
                                            float scale, weft_tensor *probs);
/* dscores [..,T,T] from probs and dprobs (one shape). dscores may be dprobs. */
WEFT_API weft_status weft_op_causal_softmax_backward(weft_fabric *fabric, const weft_op_desc *desc,
                                                     weft_tensor *probs, weft_tensor *dprobs, float scale,
                                                     weft_tensor *dscores);
/* losses[n] = -log softmax(logits[n,:])[targets[n]]; logits [..,V] (N rows), targets i32 and losses f32 of
 * N elements each. */
WEFT_API weft_status weft_op_crossentropy(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *logits,
                                          weft_tensor *targets, weft_tensor *losses);
/* dlogits [..,V] = (softmax(logits[n,:]) - onehot(targets[n])) * dloss[n]; dloss f32 of N elements. */
WEFT_API weft_status weft_op_crossentropy_backward(weft_fabric *fabric, const weft_op_desc *desc,
                                                   weft_tensor *logits, weft_tensor *targets, weft_tensor *dloss,
                                                   weft_tensor *dlogits);
/* 1 - beta^step (beta^step by repeated multiplication from 1: `step` multiplications), step >= 1 (0 or less
 * gives 0): AdamW's bias correction. Returns at once for any step (the product's period is detected). */
WEFT_API float weft_adamw_bias_correction(float beta, int64_t step);
/* One AdamW step (decoupled weight decay, bias-corrected, llm.c's form) at step `step` (1, 2, ...; less is
 * WEFT_ERR_INVALID_ARGUMENT): param, m and v updated in place from grad; all four hold one number of elements
 * (their shapes may differ), and param, m and v are three different tensors. A NaN or infinite lr, eps or
 * weight_decay, or a beta outside [0, 1) (a beta of 1 has a bias correction of 0), is
 * WEFT_ERR_INVALID_ARGUMENT naming it, before anything is written. */
WEFT_API weft_status weft_op_adamw(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *param,
                                   weft_tensor *grad, weft_tensor *m, weft_tensor *v, float lr, float beta1,
                                   float beta2, float eps, float weight_decay, int64_t step);
/* acc (one element) = acc + P[0] + P[1] + ... in order, P[c] the ascending sum from 0 of x[i]*x[i] over
 * chunk c (chunks of WEFT_SUMSQ_CHUNK = 4096 elements, the last one shorter; weft_lane.h): the sum the
 * global norm is made of. */
WEFT_API weft_status weft_op_sumsq(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x, weft_tensor *acc);
/* Global-norm gradient clip over grads[0 .. n-1], in that order: norm = sqrt of the sum of every element's
 * square (weft_op_sumsq of each tensor in order into one accumulator from 0: the chunk partials of every
 * tensor in parameter order, added left to right), and when norm > max_norm every gradient is scaled in
 * place by max_norm / norm (weft_op_scale). A negative or NaN max_norm is WEFT_ERR_INVALID_ARGUMENT (0 is
 * allowed: every gradient is clipped to 0), and so is a gradient named twice (or two over overlapping memory):
 * it would count twice. n = 0 is a norm of 0. A host-side helper: it waits for the sum (the decision is the
 * host's). *out_norm (may be NULL) receives the norm (0 on failure). The bits are those of reference_tx's
 * weft_ref_grad_clip. When a scale fails (a lane it is pinned to is down), the gradients before it stay scaled
 * and the message names the one that failed. */
WEFT_API weft_status weft_grad_clip(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *const *grads,
                                    int n, float max_norm, float *out_norm);
/* y = x with its axes permuted: y's axis a is x's axis perm[a] (rank 1..4, perm a permutation of 0..rank-1;
 * y's shape must be x's dims in that order). Any dtype (y's must be x's). [B,T,H,D] -> [B,H,T,D] is perm
 * {0,2,1,3}. */
WEFT_API weft_status weft_op_permute(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *x,
                                     const int *perm, weft_tensor *y);
/* Writes src into dst at `offset` along `axis`: dst[.., offset + i, ..] = src[.., i, ..]; the rest of dst
 * is kept (a KV-cache append). src and dst have one rank and dtype and agree on every other axis;
 * offset + src's extent must not pass dst's. An axis that is not one of theirs is WEFT_ERR_INVALID_ARGUMENT;
 * ranks, extents or an offset that do not fit are WEFT_ERR_SHAPE. */
WEFT_API weft_status weft_op_copy_slice(weft_fabric *fabric, const weft_op_desc *desc, weft_tensor *src,
                                        weft_tensor *dst, int axis, int64_t offset);

/* The lane the last successful op on this fabric ran on (an index), or -1 if none ran yet. */
WEFT_API int weft_fabric_last_lane(const weft_fabric *fabric);

/* What a lane has done since the fabric opened (or the last weft_fabric_reset_stats). */
typedef struct weft_lane_stats {
  uint64_t ops[WEFT_OP_COUNT]; /* ops run on the lane, per kind (failed ones not counted) */
  double seconds;              /* time in those ops: measured around each op on lanes that finish an op
                                * before returning (the CPU); the cost model's prediction on lanes that
                                * queue work (GPUs), whose own timing is not visible per op */
  int seconds_measured;        /* 1 when `seconds` is measured, 0 when predicted */
  uint64_t bytes_up, bytes_down; /* host -> lane and lane -> host transfers */
  uint64_t recovered;          /* of those ops, runs that computed again a value lost with a lane that went down */
} weft_lane_stats;

/* Reads lane `lane`'s counters. */
WEFT_API weft_status weft_fabric_lane_stats(const weft_fabric *fabric, size_t lane, weft_lane_stats *out_stats);
/* Zeroes every lane's counters. */
WEFT_API void weft_fabric_reset_stats(weft_fabric *fabric);

/* ------------------------------------------------------------------------------- data-parallel splits */

/* A batched matmul routed automatically ([b,m,k].[k,n] or [b,m,k].[b,k,n], b >= 2, inputs on the host) may
 * be split across lanes: the batch entries are shared out so that the predicted makespan - each lane's
 * wait, fixed cost, transfers and compute - is least, a lane whose fixed cost outweighs its share gets
 * nothing, and the split is tried only when it is predicted to beat the best single lane by 10%. The lanes
 * run at once (device lanes are started first, the CPU's share runs meanwhile); under the exact contract
 * the result is bit-identical to a single lane's. What each lane measured as it ran beside the others
 * corrects its shares next time. Measurement decides: the split and the lanes near the best are each timed
 * for the shape, the fastest is kept (the split only while it measures at least 3% faster than the fastest
 * lane alone), and the others are timed again now and then (docs/DESIGN.md says when). */
#define WEFT_SPLIT_CANDIDATES 4

typedef struct weft_split_share {
  const char *lane;  /* lane name */
  int64_t first;     /* first batch entry of its share */
  int64_t entries;   /* batch entries it computed */
  double predicted;  /* seconds the plan predicted for this share */
  double seconds;    /* measured: from the share's start to its result being on the host */
} weft_split_share;

typedef struct weft_split_report {
  int split;                      /* 1 when the last auto-routed batched matmul was split */
  int64_t batch;
  double predicted;               /* the plan's makespan (seconds) */
  double predicted_single;        /* the best single lane's predicted time */
  const char *single_lane;        /* that lane */
  double seconds;                 /* the whole op, measured */
  size_t nshares;                 /* lanes that got entries */
  const weft_split_share *shares; /* owned by the fabric; valid until the next split */
  double measured_split;          /* this signature split: its typical time (see below; 0: not run yet) */
  double measured_single;         /* the same, on the single lane alone (0: not measured yet) */
  /* What the fabric measures for this shape: "split" or a lane name, each with the median of its last
   * five timings, each the median of three runs in a row (seconds; 0: not measured yet). None when the
   * models left nothing to choose between. */
  size_t ncandidates;
  const char *candidate[WEFT_SPLIT_CANDIDATES];
  double candidate_seconds[WEFT_SPLIT_CANDIDATES];
} weft_split_report;

/* Reports the last split the fabric made (or considered: split = 0 then says it ran on one lane). An auto-routed
 * matmul of one matrix on host data, where the models put lanes within 3x of each other, is measured the same
 * way and reported with batch 1 and split 0. */
WEFT_API weft_status weft_split_last(weft_fabric *fabric, weft_split_report *out_report);

/* -------------------------------------------------------------------------------------------- scopes */

/* Opens a scope: until weft_scope_end, the fabric's lanes may batch their dispatches into one submission
 * and one synchronisation. Reading a tensor inside the scope flushes it, so results are always right.
 * Scopes do not nest: a second begin is WEFT_ERR_STATE. */
WEFT_API weft_status weft_scope_begin(weft_fabric *fabric);
/* Submits what the scope recorded and waits for it. */
WEFT_API weft_status weft_scope_end(weft_fabric *fabric);
/* Waits for every lane to finish what it was given. */
WEFT_API weft_status weft_fabric_sync(weft_fabric *fabric);

/* -------------------------------------------------------------------------------- cost model, routing */

/* What a cost line measures. t = alpha + work / beta, where work is flops for matmul, elements for the
 * elementwise ops (softmax_xent counts 8 per element) and bytes for transfers. */
typedef enum weft_cost_class {
  WEFT_COST_MATMUL = 0,
  WEFT_COST_ELEMENTWISE = 1,
  WEFT_COST_UPLOAD = 2,   /* host -> lane */
  WEFT_COST_DOWNLOAD = 3, /* lane -> host */
  WEFT_COST_CLASS_COUNT
} weft_cost_class;

/* "matmul", "elementwise", "upload", "download". */
WEFT_API const char *weft_cost_class_str(weft_cost_class cls);

/* Where a cost line came from. */
enum { WEFT_COST_PRIOR = 0, WEFT_COST_MEASURED = 1, WEFT_COST_CACHED = 2, WEFT_COST_SET = 3 };

typedef struct weft_cost_line {
  double alpha;   /* fixed cost per op in seconds (dispatch, submit, synchronise) */
  double beta;    /* work per second: flop/s, elements/s or bytes/s; 0 means "free" (no transfer needed) */
  double refine;  /* the online correction factor applied to predictions (median of observed/predicted) */
  int source;     /* WEFT_COST_PRIOR, _MEASURED, _CACHED or _SET */
  int points;     /* measurements the fit used */
} weft_cost_line;

/* Reads lane `lane`'s cost line for `cls`. Matmul lines are kept per contract (a lane's exact and fp32
 * kernels differ); the other classes ignore `contract`. */
WEFT_API weft_status weft_fabric_cost_model(const weft_fabric *fabric, size_t lane, weft_cost_class cls,
                                            weft_contract contract, weft_cost_line *out_line);
/* Replaces a cost line (alpha in seconds, beta in work per second; beta 0 = free). Marks it WEFT_COST_SET.
 * For the non-matmul classes `contract` is ignored. An alpha outside 0 .. 1e6, a beta outside 0 .. 1e30 or a
 * NaN is WEFT_ERR_INVALID_ARGUMENT; a lane index out of range is WEFT_ERR_NOT_FOUND (here and in
 * weft_fabric_cost_model). */
WEFT_API weft_status weft_fabric_set_cost_model(weft_fabric *fabric, size_t lane, weft_cost_class cls,
                                                weft_contract contract, double alpha, double beta);
/* Measures every live lane now (a short sweep per lane and class, medians of repeats) and writes the cache
 * unless calibration is OFF. Progress lines go to desc.on_note. WEFT_ERR_IO (with the path in the message)
 * when the lanes were measured but the cache could not be written; a lane whose measurement failed returns
 * that failure (the other lanes are still measured). */
WEFT_API weft_status weft_fabric_calibrate(weft_fabric *fabric);
/* Under WEFT_CALIBRATION_AUTO, the first time routing chooses between lanes that have no model, the lanes
 * are measured by a thread of their own (in a second fabric over the same devices) while ops go on, routed
 * on built-in estimates; where an op runs changes its speed, never its bits. One note beginning "weft:
 * measuring" goes to desc.on_note when that starts (nothing is printed without on_note). This waits for
 * that measurement, and measures on the caller's thread any lane that still has no model, so that routing
 * from here on uses measured lines; it returns at once when every lane has one or calibration is OFF.
 * Set WEFT_CALIBRATE_IN_BACKGROUND=0 to measure on the caller's thread at the first choice instead. */
WEFT_API weft_status weft_fabric_calibration_wait(weft_fabric *fabric);
/* The cache file weft reads and writes ("$XDG_CACHE_HOME/weft/calibration.json" or "~/.cache/weft/...").
 * Written into out (len bytes); WEFT_ERR_IO when no home or cache directory is known or the path does not fit
 * in len bytes (out is then ""); WEFT_ERR_INVALID_ARGUMENT for out NULL or len 0. */
WEFT_API weft_status weft_cost_cache_path(char *out, size_t len);

/* An op described by its shape, to ask the router about it without running it. */
typedef struct weft_route_query {
  weft_op_kind op;
  weft_contract contract;
  int64_t batch, m, n, k; /* matmul: [batch,m,k].[k,n] */
  int64_t rows, cols;     /* the other ops: a [rows, cols] operand */
} weft_route_query;

/* One lane's predicted cost for an op, split into its parts (seconds). */
typedef struct weft_route_cost {
  const char *lane;    /* lane name */
  int eligible;        /* 0: the lane cannot run it; why_not says why */
  const char *why_not; /* "" when eligible */
  double wait;         /* until the lane is free */
  double transfer;     /* moving inputs that are not resident there (and the result home, see DESIGN) */
  double alpha;        /* the fixed dispatch cost */
  double compute;      /* work / beta */
  double total;        /* wait + transfer + alpha + compute, times the refinement factor */
} weft_route_cost;

/* The router's reasoning for one op. `lanes` has one entry per lane of the fabric (failed ones included). */
typedef struct weft_route_explanation {
  weft_op_kind op;
  weft_contract contract;
  double work;   /* flops or elements */
  int chosen;    /* lane index, or -1 when no lane can run it */
  size_t nlanes;
  const weft_route_cost *lanes; /* owned by the fabric; valid until the next op or explain call */
} weft_route_explanation;

/* Explains where an op of this shape would run, with inputs on the host, and why. A query: it measures no
 * lane and writes no cache; a lane never measured is explained from its built-in prior (its cost line's
 * source, weft_fabric_cost_model, is WEFT_COST_PRIOR). A size below 1 (a batch below 0) is WEFT_ERR_SHAPE; a
 * shape larger than any tensor can be is still explained (costs are worked out in doubles: what it would take). */
WEFT_API weft_status weft_route_explain(weft_fabric *fabric, const weft_route_query *query,
                                        weft_route_explanation *out_explanation);
/* The same for operands whose host memory is registered with the lanes, as a tensor's is once it has crossed
 * to a device twice: transfers are priced on the registered lines (weft_route_explain: staged, as on a
 * tensor's first use). `weft bench` predicts its steady-state points with it. */
WEFT_API weft_status weft_route_explain_registered(weft_fabric *fabric, const weft_route_query *query,
                                                   weft_route_explanation *out_explanation);
/* Explains the last op the fabric routed (WEFT_LANE_AUTO): every lane's predicted cost and the choice. Not
 * every op goes through the router: one pinned to a lane does not, nor, on a fabric of several lanes, a matmul
 * on host data that runs where weft measured that shape fastest or is shared out across lanes
 * (weft_fabric_last_lane says where the last op ran; weft_split_last explains a split). WEFT_ERR_STATE
 * before any op was routed. */
WEFT_API weft_status weft_route_last(weft_fabric *fabric, weft_route_explanation *out_explanation);

/* ---------------------------------------------------------------------------------------------- MPI */

/* Beyond one machine on MPI (built with -DWEFT_MPI=AUTO|ON and an MPI library such as Debian's OpenMPI;
 * without it weft_mpi_built() is 0, weft_mpi_init, weft_mpi_sum_ordered and the weft_mpi_grad_* calls return
 * WEFT_ERR_UNSUPPORTED, weft_mpi_last_error says what to install, and weft_mpi_finalize and weft_mpi_grad_end,
 * with nothing to end, return WEFT_OK). Two ways to use a job that mpirun started:
 *   WEFT_MPI_LANES          rank 0 runs the program; every other rank serves its lanes (weft_cli: `weft`
 *                           does it by itself) and rank 0's fabrics get them as mpi:<rank>/<lane>, carried
 *                           by the wire protocol's frames (docs/PROTOCOL.md) over MPI point-to-point
 *                           messages, until rank 0 calls weft_mpi_finalize.
 *   WEFT_MPI_DATA_PARALLEL  every rank runs the program on its share of each batch; weft_mpi_grad_* combine
 *                           the gradients (under the exact contract with the bits of one process).
 * MPI has no authentication: every process of the job is trusted with everything. Reach machines you do not
 * manage through `weft worker` (a shared secret, mutual proof, TLS), never through MPI. */
typedef enum weft_mpi_mode { WEFT_MPI_LANES = 0, WEFT_MPI_DATA_PARALLEL = 1 } weft_mpi_mode;

/* 1 when weft was built with MPI. */
WEFT_API int weft_mpi_built(void);
/* 1 when this process was started by an MPI launcher (mpirun's environment: OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE or PMIX_RANK), whether or not weft was built with MPI. */
WEFT_API int weft_mpi_launched(void);
/* Initializes MPI (MPI_Init_thread, asking for MPI_THREAD_MULTIPLE) with errors returned rather than fatal,
 * for `mode`. argc and argv may be NULL. Once per process. */
WEFT_API weft_status weft_mpi_init(weft_mpi_mode mode, int *argc, char ***argv);
/* This process's rank and the job's size (0 and 1 before weft_mpi_init or without MPI). */
WEFT_API int weft_mpi_rank(void);
WEFT_API int weft_mpi_size(void);
/* The last MPI failure in words (a rank that stopped answering, a message out of step); "" if none (in a
 * build without MPI: what to install). */
WEFT_API const char *weft_mpi_last_error(void);
/* WEFT_MPI_LANES, rank 0: tells the serving ranks to stop. Then MPI_Finalize. NULL-safe to call when
 * weft_mpi_init was not. */
WEFT_API weft_status weft_mpi_finalize(void);
/* Ends the whole job now (MPI_Abort): after a failure one rank cannot recover from (a rank that died leaves
 * the others waiting on it). */
WEFT_API void weft_mpi_abort(int code);
/* Adds n doubles over the ranks in rank order (each rank's values in, the sums out on every rank): the same
 * result for a given job size, for progress reports (losses, counts). */
WEFT_API weft_status weft_mpi_sum_ordered(double *values, int n);
/* How long a rank waits for another before it reports it dead (WEFT_MPI_TIMEOUT_MS, default 60000). */
WEFT_API int weft_mpi_timeout_ms(void);

/* Data-parallel gradients for one training step (WEFT_MPI_DATA_PARALLEL). Every rank calls the same
 * sequence, each with its own share of the batch: rank r the samples after rank r-1's, in batch order.
 *
 * Under the exact contract the reduction is chained, not an all-reduce: a weight gradient is a sum over the
 * batch's samples in ascending order, so rank r continues rank r-1's running sum over its own samples
 * (matmul_acc, which continues from the value in its output) and passes it on to rank r+1 in chunks of
 * rows as each is done (the chain costs bandwidth, not latency); each chunk the last rank finishes goes
 * straight back down the chain to every rank. After weft_mpi_grad_end every rank holds, bit for bit, the
 * gradient one process computes over the whole batch, whatever the number of ranks; until then a gradient's
 * host memory is the chain's (the running sum and the final value travel in it: read it only after the
 * end). Under fp32 each rank sums its own samples and weft_mpi_grad_end adds the ranks' sums with
 * MPI_Allreduce, whose order depends on the number of ranks: the weights then differ in their last bits
 * between jobs of different sizes (and from one process).
 *
 * Every wait is bounded: a rank that hears nothing from another within weft_mpi_timeout_ms() checks whether
 * it is alive, and one that does not answer within another timeout is reported (naming it), never waited on
 * forever; the caller then ends the job (weft_mpi_abort). */
typedef struct weft_mpi_grad weft_mpi_grad;
/* Starts a step's reduction over the fabric's ops under `contract` (exact or fp32). */
WEFT_API weft_status weft_mpi_grad_begin(weft_fabric *fabric, weft_contract contract, weft_mpi_grad **out_grad);
/* c is accumulated by `passes` ops this step, each over the whole batch (GPT-2's tied token table: the
 * head's matmul, then the embedding's backward): its running sum goes along the ranks once per op (the last
 * rank hands it back to rank 0 between passes). Default 1. Call before c's first op. */
WEFT_API weft_status weft_mpi_grad_passes(weft_mpi_grad *grad, weft_tensor *c, int passes);
/* c = op(a) . op(b) summed over the job's samples, k = this rank's samples (a weight gradient, e.g.
 * x^T . dy: a = x with trans_a). Shapes as weft_op_matmul's, rank 2. */
WEFT_API weft_status weft_mpi_grad_matmul(weft_mpi_grad *grad, const weft_op_desc *desc, weft_tensor *a,
                                          int trans_a, weft_tensor *b, int trans_b, weft_tensor *c);
/* out = the sum over the job's rows of x (weft_op_sum_rows over the whole batch: a bias gradient). */
WEFT_API weft_status weft_mpi_grad_sum_rows(weft_mpi_grad *grad, const weft_op_desc *desc, weft_tensor *x,
                                            weft_tensor *out);
/* An op that accumulates into outputs it reads and writes (layernorm_backward's dgamma and dbeta,
 * embedding_backward's tables): bit o of `chained` marks out[o] as a running sum over the batch, which
 * arrives from the rank before the op and leaves for the next after it. The other outputs are this rank's
 * own (layernorm_backward's dx). */
WEFT_API weft_status weft_mpi_grad_op(weft_mpi_grad *grad, const weft_op_desc *desc, weft_op_kind kind,
                                      weft_tensor *const *in, int nin, weft_tensor *const *out, int nout,
                                      const weft_op_params *params, uint32_t chained);
/* Ends the step: every gradient named above holds the whole batch's sum on every rank. Frees grad (also on
 * failure); NULL is ignored. */
WEFT_API weft_status weft_mpi_grad_end(weft_mpi_grad *grad);

/* --------------------------------------------------------------------------- reference and exact math */

/* weft's exp and log: range reduction and polynomials in separately rounded fp32 multiplies and adds, so
 * the same bits come out on every lane (no libm, no fused multiply-add). Accurate to a few ulp. */
WEFT_API float weft_expf(float x);
WEFT_API float weft_logf(float x);
/* weft's reciprocal, square root, reciprocal square root and tanh, built the same way (exponent bits,
 * Newton steps in separately rounded multiplies and adds: no division, no sqrt instruction), since GPU
 * languages do not round division and sqrt exactly. Every NaN they return is the quiet NaN 0x7fc00000. */
WEFT_API float weft_recipf(float x); /* 1/x; +-0 -> +-inf, +-inf -> +-0 */
WEFT_API float weft_sqrtf(float x);  /* sqrt(x); -0 -> -0, x < 0 -> NaN */
WEFT_API float weft_rsqrtf(float x); /* 1/sqrt(x); +0 -> +inf, -0 -> -inf, x < 0 -> NaN */
WEFT_API float weft_tanhf(float x);  /* tanh(x); odd, -0 -> -0, +-inf -> +-1 */

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
