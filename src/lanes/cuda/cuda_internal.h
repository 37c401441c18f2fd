/* cuda_internal.h - the CUDA lane's state, shared by its files: one device record per GPU (context, module,
 * streams, cuBLAS, staging memory, the scope's recorded launches and their graphs) and the two lanes that
 * use it, cuda:N (SIMT kernels) and cuda:N.tensor (cuBLAS tensor ops). */
#ifndef WEFT_CUDA_INTERNAL_H
#define WEFT_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"
#include "cuda_args.h"
#include "cuda_tx_args.h"
#include "../fuse.h"
#include "weft_lane.h"

#define WEFT_CU_SLOTS 4                               /* pinned staging slots for uploads and downloads */
#define WEFT_CU_SLOT_BYTES ((size_t)8 << 20)          /* each */
#define WEFT_CU_WB_CHUNKS 8                           /* a streamed-back result comes in at most this many parts */
#define WEFT_CU_WB_MIN ((size_t)1 << 20)              /* results smaller than this are not streamed back early */
#define WEFT_CU_WB_MAX ((size_t)512 << 20)            /* nor larger than this (pinned memory is precious) */
#define WEFT_CU_GRAPHS 64                             /* recorded launch sequences kept as graphs */
#define WEFT_CU_SCOPE_CHUNK 0                         /* >0: a scope's launches go to the GPU in runs of this many */
#define WEFT_CU_BLAS_WORKSPACE ((size_t)32 << 20)
#define WEFT_CU_REGS 64                               /* host ranges registered (pinned in place) at once */
#define WEFT_CU_PIN_AWAY ((size_t)32 << 20)           /* ranges larger than this are pinned off the caller's path */
#define WEFT_CU_UP_CHUNKS 8                           /* a large upload from registered memory, in parts */
#define WEFT_CU_UP_EVENTS 32                          /* events marking those parts, reused in turn */
#define WEFT_CU_CACHE 8                               /* freed device allocations kept for reuse ... */
#define WEFT_CU_CACHE_MIN ((size_t)1 << 20)           /* ... of at least this size ... */
#define WEFT_CU_CACHE_MAX ((size_t)1 << 30)           /* ... up to this many bytes in all */

enum { WEFT_CU_S_COMPUTE, WEFT_CU_S_H2D, WEFT_CU_S_D2H, WEFT_CU_NSTREAMS };

/* A lane buffer: device memory plus what the lane knows about its contents. */
typedef struct weft_cu_buf {
  CUdeviceptr ptr;
  size_t bytes;
  size_t cap;         /* bytes allocated at ptr (a cached allocation may be larger) */
  int foreign;        /* ptr is another library's memory (buffer_wrap): never freed or cached here */
  uint64_t gen;       /* bumped whenever the contents change (an upload, an op writing it) */
  int from_host;      /* the contents came straight from an upload (not from an op) */
  CUdeviceptr bf16;   /* the contents rounded to bf16 for the tensor lane; current when bf16_gen == gen */
  uint64_t bf16_gen;
  int wb_chunks;      /* > 0: this buffer is being streamed into the write-back area, in that many parts */
  uint64_t wb_gen;    /* ... as it was at this gen */
  size_t wb_end[WEFT_CU_WB_CHUNKS]; /* byte offset where part i ends */
  unsigned char *wb_dst; /* where it streams: the write-back area, or registered host memory (op->out_host) */
  /* Its last upload: the upload stream's work count then, and for a large one from registered memory the
   * parts it came in (byte offset where each ends, and the event marking it), so a matmul can start on the
   * first rows of `a` while the rest is on the bus. */
  uint64_t up_work;
  int up_chunks;
  size_t up_end[WEFT_CU_UP_CHUNKS];
  int up_ev[WEFT_CU_UP_CHUNKS];
} weft_cu_buf;

/* A range the device's pinning thread pins (cuMemHostRegister) while the caller goes on. */
typedef struct weft_cu_pin {
  void *ptr;
  size_t bytes;
  int state;       /* WEFT_CU_PIN_QUEUED, _RUNNING, _DONE (under the device's pin_mu) */
  CUresult result; /* once done */
  struct weft_cu_pin *next;
} weft_cu_pin;
enum { WEFT_CU_PIN_QUEUED, WEFT_CU_PIN_RUNNING, WEFT_CU_PIN_DONE };

/* Host memory the core registered (host_register), pinned in place: transfers skip the staging copies.
 * A large range is pinned by the pinning thread: until that is done its transfers are staged as before. */
typedef struct weft_cu_reg {
  unsigned char *ptr;
  size_t bytes;
  int owned; /* this device pinned it (another GPU's lane may have, first): unpin it when done */
  uint64_t h2d_work; /* the upload stream's work that last read from it (a result streamed in waits for it) */
  weft_cu_pin *pin;  /* being pinned; NULL: settled */
  int unpinned;      /* the pinning failed: the range stays on record, its transfers staged */
} weft_cu_reg;

/* cuBLAS strided-batched gemm, column-major as cuBLAS sees it. */
typedef struct weft_cu_gemm {
  uint64_t a, b, c;
  int64_t sa, sb, sc;
  int32_t opa, opb, m, n, k, lda, ldb, ldc, batch;
  int32_t atype, btype, compute; /* cudaDataType / cublasComputeType_t; unused by sgemm */
} weft_cu_gemm;

enum { WEFT_CU_IT_KERNEL, WEFT_CU_IT_SGEMM, WEFT_CU_IT_GEMMEX };

/* One launch, fully resolved (device pointers and sizes), so a recorded sequence can be replayed as a graph
 * and compared byte for byte with a later one. Always built from a zeroed struct. */
typedef struct weft_cu_item {
  int32_t kind, fn;
  uint32_t grid[3], block[3];
  union {
    weft_cu_mm_args mm;
    weft_cu_ew_args ew;
    weft_cu_sr_args sr;
    weft_cu_sx_args sx;
    weft_cu_cv_args cv;
    weft_cu_gemm g;
    /* the transformer ops (cuda_tx_args.h) */
    weft_tx_embed_args emb;
    weft_tx_embed_bwd_args ebw;
    weft_tx_ln_args ln;
    weft_tx_gelu_args ge;
    weft_tx_softmax_args sm;
    weft_tx_attn_args at;
    weft_tx_xent_args xe;
    weft_tx_adamw_args ad;
    weft_tx_clip_args cl;
    weft_tx_permute_args pm;
    weft_tx_copy_args cp;
  } a;
} weft_cu_item;

/* One kernel launch or cuBLAS call of a recorded sequence, after consecutive small elementwise items were
 * merged into one batch launch: what a graph holds a node for. */
typedef struct weft_cu_launch_t {
  int32_t fn, blas;
  uint32_t grid[3], block[3];
  const void *args; /* the kernel's argument block: an item's, or a batch block */
  size_t args_size;
  size_t item; /* the (first) item it comes from */
} weft_cu_launch_t;

/* A launch sequence seen before: after its second appearance it is made a graph and replayed. A sequence
 * of kernels only is built node by node and keeps its nodes, so a later sequence of the same kernels and
 * grids whose arguments differ (a decode step's position, a new token's index tensor) updates the nodes
 * that changed and replays; one with cuBLAS calls is captured from the stream and replayed only when equal. */
typedef struct weft_cu_graph {
  weft_cu_item *items;
  size_t n;
  CUgraphExec exec; /* NULL until built */
  int no_graph;     /* building failed once: run it directly */
  uint64_t used;    /* for eviction */
  CUgraph graph;    /* kept while nodes are (updates name nodes of it) */
  CUgraphNode *nodes;
  weft_cu_launch_t *launches; /* their arguments point into items and ewb */
  weft_cu_ewb_args *ewb;
  size_t nlaunch, newb;
} weft_cu_graph;

typedef struct weft_hostcopy weft_hostcopy;

typedef struct weft_cu_dev {
  const weft_cuda_api *cu;
  const weft_cublas_api *bl; /* NULL: no cuBLAS (no tensor lane, fp32 matmul uses the exact kernel) */
  const weft_lane_host *host;
  int ordinal, refs;
  CUdevice device;
  CUcontext ctx;
  int sms, cc_major, cc_minor;
  size_t total_mem;
  char name[128];
  char driver[160];
  CUmodule module;
  CUfunction fn[WEFT_CUK_COUNT];
  CUstream stream[WEFT_CU_NSTREAMS];
  CUevent ev[WEFT_CU_NSTREAMS];
  uint64_t work[WEFT_CU_NSTREAMS];                   /* per stream: batches of work issued */
  uint64_t seen[WEFT_CU_NSTREAMS][WEFT_CU_NSTREAMS]; /* seen[s][t]: stream s is ordered after t's work up to this */
  uint64_t synced[WEFT_CU_NSTREAMS];                 /* the host has waited for each stream up to this */
  cublasHandle_t blas;
  CUdeviceptr blas_ws;
  int failed;
  char failure[512];
  /* staging */
  unsigned char *ring; /* WEFT_CU_SLOTS slots of WEFT_CU_SLOT_BYTES, pinned; NULL: pageable copies */
  int ring_tried;
  CUevent slot_ev[WEFT_CU_SLOTS];
  int slot_busy[WEFT_CU_SLOTS];
  int next_slot;
  unsigned char *wb; /* write-back area, pinned */
  size_t wb_bytes;
  weft_cu_buf *wb_owner;
  CUevent wb_ev[WEFT_CU_WB_CHUNKS], chunk_ev[WEFT_CU_WB_CHUNKS];
  weft_hostcopy *copier; /* the process's host copier (core/hostcopy.c), for the staging copies */
  int copier_tried;
  weft_cu_reg regs[WEFT_CU_REGS];
  int nregs;
  /* the pinning thread (started by the first large registration) and its queue */
  pthread_t pin_thread;
  int pin_started, pin_stop;
  pthread_mutex_t pin_mu;
  pthread_cond_t pin_cv;
  weft_cu_pin *pin_head, *pin_tail;
  /* freed allocations kept for the next of a similar size (cuMemAlloc and cuMemFree take hundreds of
   * microseconds on large ones; a split allocates its slices anew each time), oldest first */
  struct {
    CUdeviceptr ptr;
    size_t bytes;
  } cache[WEFT_CU_CACHE];
  int ncache;
  size_t cached_bytes;
  CUevent up_evs[WEFT_CU_UP_EVENTS];
  weft_cu_buf *up_owner[WEFT_CU_UP_EVENTS]; /* the buffer whose upload part each event marks now */
  int up_next;
  /* scopes: launches recorded until the scope ends or something needs them done */
  int scope_depth;
  weft_cu_item *items;
  size_t nitems, items_cap;
  weft_cu_graph graphs[WEFT_CU_GRAPHS];
  uint64_t graph_clock;
  uint64_t graph_updates, graph_replays; /* nodes updated in place, graphs launched (for tests and bench) */
  weft_cu_launch_t *plan;                  /* a flush's launches, and their batch blocks */
  weft_cu_ewb_args *plan_ewb;
  size_t plan_cap;
  int wait_d2h; /* a recorded op writes the buffer being streamed back: the flush must wait for that */
  /* fusion (src/lanes/fuse.h): inside a scope cuda:N's exact ops pass through this window before they are
   * recorded; every flush empties it first, so whatever must see their effects (a download, an upload, a
   * free, a sync, the scope's end, the tensor lane's next op) finds them recorded in order */
  int scope_chunk; /* a scope's launches start in runs of this many (0: all at its end); WEFT_CUDA_SCOPE_CHUNK */
  int fuse_on;
  weft_fuse fuse;
  struct weft_cu_lane *fuse_lane; /* the lane whose ops the window holds (cuda:N) */
  int fuse_draining;              /* a flush inside the window's emit records and launches, nothing more */
  uint64_t fused_ops;             /* ops that ran inside fused kernels (for tests and weft devices) */
  /* scratch: softmax's per-row losses, attention backward's ds [B,NH,T,T] (each op's use ends with it) */
  CUdeviceptr scratch;
  size_t scratch_bytes;
  /* embedding backward's int32 scratch: count[rows + 1] (zero between ops: the sequence leaves it so), then
   * start[rows + 1], then list[BT]; eb_rows and eb_bt are the capacities */
  CUdeviceptr eb_scratch;
  int64_t eb_rows, eb_bt;
  /* fault injection for the tests: WEFT_CUDA_FAULT=trap:N makes the Nth run on device 0 launch a trapping
   * kernel (device 0 only: a second GPU stays up, as it would when one device faults) */
  long fault_at, runs;
  /* WEFT_CUDA_PROFILE=1: every flush runs its launches directly, each timed with events, and the device
   * prints the time per kernel when it closes (a developer's tool: it serialises the host with the GPU) */
  int profile;
  struct {
    int32_t fn; /* WEFT_CUK_COUNT: cuBLAS */
    uint32_t gx, gy;
    double ms;
    uint64_t n;
  } prof[128]; /* per kernel and grid */
  int nprof;
} weft_cu_dev;

typedef struct weft_cu_lane {
  weft_cu_dev *dev;
  int tensor; /* 1: cuda:N.tensor */
  char name[32];
  char details[384];
} weft_cu_lane;

/* Maps a driver result to a status (reporting it): out of memory stays OUT_OF_MEMORY, errors that leave the
 * context unusable (illegal access, a trapped kernel, a lost device) mark the device failed and give
 * LANE_FAILED, anything else is INTERNAL. */
weft_status weft_cu_check(weft_cu_dev *d, CUresult r, const char *what);
/* Fails fast on a failed device and makes the device's context current on this thread. */
weft_status weft_cu_enter(weft_cu_dev *d);
weft_status weft_cu_blas_check(weft_cu_dev *d, cublasStatus_t s, const char *what);

/* Appends an op's launches for output rows [r0, r1) of a matmul (the whole op for the others) to the
 * recorded list; may allocate (bf16 copies, scratch) and may execute what was recorded before when scratch
 * must be replaced. */
weft_status weft_cu_emit(weft_cu_lane *l, const weft_op *op, int64_t r0, int64_t r1);
/* Records what the fusion window hands out: one op as weft_cu_emit would, or a fused kernel. */
weft_status weft_cu_emit_fused(weft_cu_lane *l, const weft_fused *f);
/* The fusion window's emit (ctx: the lane whose ops it holds). A fused kernel that fails to record after its
 * ops were accepted marks the device failed. */
weft_status weft_cu_fuse_emit(void *ctx, const weft_fused *f);
/* Records every op the fusion window holds (a no-op when it holds none). */
weft_status weft_cu_fuse_drain(weft_cu_dev *d);
/* matmul or matmul_acc (the ops weft_cu_emit takes a row range of) */
static inline int weft_cu_is_matmul(const weft_op *op) {
  return op->kind == WEFT_OP_MATMUL || op->kind == WEFT_OP_MATMUL_ACC;
}
/* Rows of the matmul's output as the lane sees them (batch folded into rows where it can be), and whether
 * rows may be split (one batch entry after folding). */
int64_t weft_cu_matmul_rows(const weft_op *op, int *out_splittable);
/* The kernels' names (cuda_lane.c). */
extern const char *const weft_cu_kernel_names[WEFT_CUK_COUNT];
/* Frees a remembered sequence and its graph. */
void weft_cu_graph_clear(weft_cu_dev *d, weft_cu_graph *g);
/* Runs launches on the compute stream, in order. */
weft_status weft_cu_launch(weft_cu_dev *d, const weft_cu_item *items, size_t n);
/* Executes what was recorded (a graph when the same sequence was seen before). */
weft_status weft_cu_flush(weft_cu_dev *d);
/* Makes stream s wait for the work issued so far on stream t. */
weft_status weft_cu_order(weft_cu_dev *d, int s, int t);
/* Waits for every stream. */
weft_status weft_cu_sync_all(weft_cu_dev *d);
/* Appends one item to the recorded list. */
weft_status weft_cu_push(weft_cu_dev *d, const weft_cu_item *it);

/* The embedded kernels (generated at build time from cuda_kernels.cu). */
extern const unsigned char weft_cuda_fatbin[];
extern const size_t weft_cuda_fatbin_size;

#endif /* WEFT_CUDA_INTERNAL_H */
