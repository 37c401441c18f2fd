/* cuda_lane.c - the CUDA lanes: cuda:N runs weft's own kernels (exact contract, bit-identical to the CPU
 * lane; fp32 through cuBLAS sgemm) and cuda:N.tensor runs matmul on the tensor units through cuBLAS (tf32,
 * bf16). Both share one device record: the primary context, the embedded module, three streams (compute,
 * host-to-device, device-to-host), cuBLAS and pinned staging memory.
 *
 * Transfers: the core's host copies are ordinary (pageable) memory, which the GPU reads at a fraction of the
 * bus speed. An upload copies into pinned slots on several threads and the copy engine moves each slot while
 * the next one fills; the upload returns once the caller's memory has been read. A matmul whose inputs came
 * straight from the host is run in row blocks and each block's result is streamed back into pinned memory
 * while the next block computes, so the read that usually follows finds the result mostly home already.
 *
 * Scopes: launches are recorded and run at the scope's end (or when something needs their results). A
 * sequence seen before is replayed as a CUDA graph: a decode step's hundred kernels cost one graph launch
 * and one synchronisation. WEFT_CUDA_SCOPE_CHUNK=N (a developer's switch) starts them in runs of N as they
 * are recorded instead, so the GPU works while the caller records the rest: on the H200 a decode step ran
 * no faster so (923-992 against 933-963 tokens/s, alternating), and one submission stays the default.
 *
 * Failures: out of device memory is WEFT_ERR_OUT_OF_MEMORY and the lane goes on; an error that leaves the
 * context unusable (illegal address, trapped kernel, lost device) fails both lanes of the device with
 * WEFT_ERR_LANE_FAILED. The driver then fails every other GPU of the process too, at its next call: their
 * lanes leave the fabric as well, saying whose fault they follow. Nothing aborts. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/hostcopy.h"
#include "cuda_internal.h"

const char *const weft_cu_kernel_names[WEFT_CUK_COUNT] = {
    [WEFT_CUK_MM128_NN] = "weft_mm128_nn",     [WEFT_CUK_MM128_NT] = "weft_mm128_nt",
    [WEFT_CUK_MM128_TN] = "weft_mm128_tn",     [WEFT_CUK_MM128_TT] = "weft_mm128_tt",
    [WEFT_CUK_MM64_NN] = "weft_mm64_nn",       [WEFT_CUK_MM64_NT] = "weft_mm64_nt",
    [WEFT_CUK_MM64_TN] = "weft_mm64_tn",       [WEFT_CUK_MM64_TT] = "weft_mm64_tt",
    [WEFT_CUK_MM64T8_NN] = "weft_mm64t8_nn",   [WEFT_CUK_MM64T8_NT] = "weft_mm64t8_nt",
    [WEFT_CUK_MM64T8_TN] = "weft_mm64t8_tn",   [WEFT_CUK_MM64T8_TT] = "weft_mm64t8_tt",
    [WEFT_CUK_MM32_NN] = "weft_mm32_nn",       [WEFT_CUK_MM32_NT] = "weft_mm32_nt",
    [WEFT_CUK_MM32_TN] = "weft_mm32_tn",       [WEFT_CUK_MM32_TT] = "weft_mm32_tt",
    [WEFT_CUK_ELEMENTWISE] = "weft_elementwise", [WEFT_CUK_SUM_ROWS] = "weft_sum_rows",
    [WEFT_CUK_SOFTMAX_ROWS] = "weft_softmax_rows", [WEFT_CUK_SOFTMAX_LOSS] = "weft_softmax_loss",
    [WEFT_CUK_TO_BF16] = "weft_to_bf16",       [WEFT_CUK_TRAP] = "weft_trap",
    [WEFT_CUK_EW_BATCH] = "weft_ew_batch",
    [WEFT_CUK_TX_EMBED_FWD] = "weft_tx_embedding_fwd",
    [WEFT_CUK_TX_EMBED_BWD_COUNT] = "weft_tx_embed_bwd_count",
    [WEFT_CUK_TX_EMBED_BWD_SCAN] = "weft_tx_embed_bwd_scan",
    [WEFT_CUK_TX_EMBED_BWD_FILL] = "weft_tx_embed_bwd_fill",
    [WEFT_CUK_TX_EMBED_BWD_SORT] = "weft_tx_embed_bwd_sort",
    [WEFT_CUK_TX_EMBED_BWD_ACCUM] = "weft_tx_embed_bwd_accum",
    [WEFT_CUK_TX_LN_FWD] = "weft_tx_layernorm_fwd",
    [WEFT_CUK_TX_LN_BWD_DX] = "weft_tx_layernorm_bwd_dx",
    [WEFT_CUK_TX_LN_BWD_DGB] = "weft_tx_layernorm_bwd_dgb",
    [WEFT_CUK_TX_GELU_FWD] = "weft_tx_gelu_fwd",
    [WEFT_CUK_TX_GELU_BWD] = "weft_tx_gelu_bwd",
    [WEFT_CUK_TX_SOFTMAX_FWD] = "weft_tx_softmax_fwd",
    [WEFT_CUK_TX_SOFTMAX_BWD] = "weft_tx_softmax_bwd",
    [WEFT_CUK_TX_ATTN_FWD] = "weft_tx_attn_fwd",
    [WEFT_CUK_TX_ATTN_BWD_DS] = "weft_tx_attn_bwd_ds",
    [WEFT_CUK_TX_ATTN_BWD_DQKV] = "weft_tx_attn_bwd_dqkv",
    [WEFT_CUK_TX_ATTN_CACHED] = "weft_tx_attn_cached",
    [WEFT_CUK_TX_XENT_FWD] = "weft_tx_xent_fwd",
    [WEFT_CUK_TX_XENT_BWD] = "weft_tx_xent_bwd",
    [WEFT_CUK_TX_ADAMW] = "weft_tx_adamw",
    [WEFT_CUK_TX_SUMSQ_CHUNKS] = "weft_tx_sumsq_chunks",
    [WEFT_CUK_TX_SUMSQ_ADD] = "weft_tx_sumsq_add",
    [WEFT_CUK_TX_PERMUTE] = "weft_tx_permute",
    [WEFT_CUK_TX_COPY_SLICE] = "weft_tx_copy_slice",
    [WEFT_CUK_MV_NN] = "weft_mv_nn",           [WEFT_CUK_MV_NT] = "weft_mv_nt",
    [WEFT_CUK_MV1_NN] = "weft_mv1_nn",         [WEFT_CUK_MV1_NT] = "weft_mv1_nt",
    [WEFT_CUK_TX_LN_FWD_ROW] = "weft_tx_layernorm_fwd_row",
    [WEFT_CUK_TX_ATTN_CACHED_BLK] = "weft_tx_attn_cached_blk",
    [WEFT_CUK_TX_LN_FWD_F32] = "weft_tx_layernorm_fwd_f32",
    [WEFT_CUK_TX_LN_BWD_DX_F32] = "weft_tx_layernorm_bwd_dx_f32",
    [WEFT_CUK_TX_LN_BWD_DGB_PART] = "weft_tx_layernorm_bwd_dgb_part",
    [WEFT_CUK_TX_LN_BWD_DGB_SUM] = "weft_tx_layernorm_bwd_dgb_sum",
    [WEFT_CUK_TX_SUMSQ_F32] = "weft_tx_sumsq_f32",
    [WEFT_CUK_TX_ATTN_FWD_F32] = "weft_tx_attn_fwd_f32",
    [WEFT_CUK_TX_ATTN_BWD_DS_F32] = "weft_tx_attn_bwd_ds_f32",
    [WEFT_CUK_TX_ATTN_BWD_DQKV_F32] = "weft_tx_attn_bwd_dqkv_f32",
    [WEFT_CUK_TX_XENT_FWD_F32] = "weft_tx_xent_fwd_f32",
    [WEFT_CUK_TX_GELU_FWD_F32] = "weft_tx_gelu_fwd_f32",
    [WEFT_CUK_TX_GELU_BWD_F32] = "weft_tx_gelu_bwd_f32",
    [WEFT_CUK_TX_XENT_BWD_F32] = "weft_tx_xent_bwd_f32",
    [WEFT_CUK_TX_EMBED_BWD_ROWS] = "weft_tx_embed_bwd_rows",
    [WEFT_CUK_TX_EMBED_BWD_POS] = "weft_tx_embed_bwd_pos",
};

/* ------------------------------------------------------------------------------------------- errors */

/* The first device whose context was lost, plus one (0: none yet): the process's CUDA state is lost with it. */
static atomic_int first_lost;

/* Errors after which the context cannot be used again. */
static int context_lost(CUresult r) {
  switch (r) {
  case CUDA_ERROR_NOT_INITIALIZED:
  case CUDA_ERROR_DEINITIALIZED:
  case CUDA_ERROR_DEVICE_UNAVAILABLE:
  case CUDA_ERROR_NO_DEVICE:
  case CUDA_ERROR_INVALID_CONTEXT:
  case CUDA_ERROR_ECC_UNCORRECTABLE:
  case CUDA_ERROR_NVLINK_UNCORRECTABLE:
  case CUDA_ERROR_ILLEGAL_ADDRESS:
  case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_CONTEXT_IS_DESTROYED:
  case CUDA_ERROR_ASSERT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR:
  case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS:
  case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC:
  case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_SYSTEM_NOT_READY:
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
  case CUDA_ERROR_EXTERNAL_DEVICE:
  case CUDA_ERROR_UNKNOWN:
    return 1;
  default:
    return 0;
  }
}

weft_status weft_cu_check(weft_cu_dev *d, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return WEFT_OK;
  const char *name = NULL, *desc = NULL;
  if (d->cu->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "CUDA error";
  if (d->cu->cuGetErrorString(r, &desc) != CUDA_SUCCESS || !desc) desc = "";
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total_b = 0;
    d->cu->cuMemGetInfo(&free_b, &total_b);
    return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY,
                            "cuda:%d: %s: out of device memory (%.1f of %.1f GiB free); free tensors on this lane or "
                            "use smaller work",
                            d->ordinal, what, (double)free_b / (1u << 30), (double)total_b / (1u << 30));
  }
  if (context_lost(r)) {
    /* The driver stops every GPU of the process once one has faulted: on two H200s, after a trap on one, the
     * other's next allocation, launch and wait all failed with the same error. A later failure says whose
     * fault it follows, so a healthy GPU is not taken for a faulty one. */
    int none = 0;
    atomic_compare_exchange_strong(&first_lost, &none, d->ordinal + 1);
    const int first = atomic_load(&first_lost) - 1;
    char after[96] = "";
    if (first != d->ordinal)
      snprintf(after, sizeof after, " after cuda:%d's fault (the driver stops every GPU of a process then)", first);
    if (!d->failed)
      snprintf(d->failure, sizeof d->failure, "%s failed with %s (%s)%s", what, name, desc, after);
    d->failed = 1;
    return weft_lane_report(d->host, WEFT_ERR_LANE_FAILED,
                            "cuda:%d: %s failed: %s (%s)%s; the GPU's context is lost, so its lanes leave the fabric "
                            "(data that lived only there is gone)",
                            d->ordinal, what, name, desc, after);
  }
  return weft_lane_report(d->host, WEFT_ERR_INTERNAL, "cuda:%d: %s failed: %s (%s)", d->ordinal, what, name, desc);
}

weft_status weft_cu_blas_check(weft_cu_dev *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return WEFT_OK;
  const char *name = d->bl->cublasGetStatusName(s);
  switch (s) {
  case CUBLAS_STATUS_ALLOC_FAILED:
    return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY, "cuda:%d: %s: cuBLAS ran out of memory (%s)",
                            d->ordinal, what, name);
  case CUBLAS_STATUS_EXECUTION_FAILED:
  case CUBLAS_STATUS_INTERNAL_ERROR:
    /* usually a launch that failed underneath; whether the context survived shows at the next sync */
    return weft_lane_report(d->host, WEFT_ERR_INTERNAL, "cuda:%d: %s failed: %s", d->ordinal, what, name);
  case CUBLAS_STATUS_NOT_SUPPORTED:
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return weft_lane_report(d->host, WEFT_ERR_UNSUPPORTED, "cuda:%d: %s: not supported by cuBLAS here (%s)",
                            d->ordinal, what, name);
  default:
    return weft_lane_report(d->host, WEFT_ERR_INTERNAL, "cuda:%d: %s failed: %s", d->ordinal, what, name);
  }
}

/* Every entry point: a failed device stays failed, and the device's context is made current (a caller's own
 * CUDA code may have changed it). */
weft_status weft_cu_enter(weft_cu_dev *d) {
  if (d->failed)
    return weft_lane_report(d->host, WEFT_ERR_LANE_FAILED, "cuda:%d failed earlier and left the fabric: %s",
                            d->ordinal, d->failure);
  CUcontext cur = NULL;
  if (d->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != d->ctx) {
    CUresult r = d->cu->cuCtxSetCurrent(d->ctx);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "making the context current");
  }
  return WEFT_OK;
}

/* --------------------------------------------------------------------------------------- ordering */

weft_status weft_cu_order(weft_cu_dev *d, int s, int t) {
  if (d->seen[s][t] == d->work[t] || d->synced[t] == d->work[t]) return WEFT_OK;
  CUresult r = d->cu->cuEventRecord(d->ev[t], d->stream[t]);
  if (r == CUDA_SUCCESS) r = d->cu->cuStreamWaitEvent(d->stream[s], d->ev[t], 0);
  if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "ordering streams");
  d->seen[s][t] = d->work[t];
  return WEFT_OK;
}

weft_status weft_cu_sync_all(weft_cu_dev *d) {
  for (int s = 0; s < WEFT_CU_NSTREAMS; s++) {
    if (d->synced[s] == d->work[s]) continue;
    CUresult r = d->cu->cuStreamSynchronize(d->stream[s]);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "waiting for the GPU");
    d->synced[s] = d->work[s];
  }
  return WEFT_OK;
}

/* ---------------------------------------------------------------------------------------- staging */

/* The pinned slots and the copy threads, made on the first transfer (pinning memory takes milliseconds). */
static void staging_init(weft_cu_dev *d) {
  if (!d->ring_tried) {
    d->ring_tried = 1;
    void *p = NULL;
    if (d->cu->cuMemHostAlloc(&p, WEFT_CU_SLOTS * WEFT_CU_SLOT_BYTES, 0) == CUDA_SUCCESS) d->ring = p;
  }
  if (!d->copier_tried) {
    d->copier_tried = 1;
    d->copier = weft_hostcopy_acquire();
  }
}

static weft_status slot_take(weft_cu_dev *d, int *out_slot) {
  int s = d->next_slot;
  *out_slot = s;
  d->next_slot = (s + 1) % WEFT_CU_SLOTS;
  if (d->slot_busy[s]) {
    CUresult r = d->cu->cuEventSynchronize(d->slot_ev[s]);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "waiting for a staging copy");
    d->slot_busy[s] = 0;
  }
  *out_slot = s;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ pinning */

/* Pinning a range takes the driver about as long as copying it: 64 MiB cost the second host-to-host call
 * on the H200 9 ms more than the first for three arrays. A large range is therefore pinned by a thread of
 * the device's own while the caller goes on; its transfers are staged as before until it is done. */
static void *pin_main(void *arg) {
  weft_cu_dev *d = arg;
  int have_ctx = d->cu->cuCtxSetCurrent(d->ctx) == CUDA_SUCCESS;
  pthread_mutex_lock(&d->pin_mu);
  for (;;) {
    while (!d->pin_head && !d->pin_stop) pthread_cond_wait(&d->pin_cv, &d->pin_mu);
    if (!d->pin_head) break;
    weft_cu_pin *p = d->pin_head;
    d->pin_head = p->next;
    if (!d->pin_head) d->pin_tail = NULL;
    p->state = WEFT_CU_PIN_RUNNING;
    pthread_mutex_unlock(&d->pin_mu);
    CUresult r = have_ctx ? d->cu->cuMemHostRegister(p->ptr, p->bytes, CU_MEMHOSTREGISTER_PORTABLE)
                          : CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&d->pin_mu);
    p->result = r;
    p->state = WEFT_CU_PIN_DONE;
    pthread_cond_broadcast(&d->pin_cv);
  }
  pthread_mutex_unlock(&d->pin_mu);
  return NULL;
}

/* Hands a range to the pinning thread (started on first use). NULL when there is no thread. */
static weft_cu_pin *pin_away(weft_cu_dev *d, void *ptr, size_t bytes) {
  if (!d->pin_started) {
    pthread_mutex_init(&d->pin_mu, NULL);
    pthread_cond_init(&d->pin_cv, NULL);
    d->pin_started = pthread_create(&d->pin_thread, NULL, pin_main, d) == 0 ? 1 : -1;
  }
  if (d->pin_started < 0) return NULL;
  weft_cu_pin *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->ptr = ptr, p->bytes = bytes, p->state = WEFT_CU_PIN_QUEUED;
  pthread_mutex_lock(&d->pin_mu);
  if (d->pin_tail) d->pin_tail->next = p;
  else d->pin_head = p;
  d->pin_tail = p;
  pthread_cond_signal(&d->pin_cv);
  pthread_mutex_unlock(&d->pin_mu);
  return p;
}

/* Takes the pinning thread's outcome into the record once it is there (waits for it when `wait`; a range
 * still queued is then taken off the queue, unpinned). Returns 1 when the record is settled. */
static int reg_settle(weft_cu_dev *d, weft_cu_reg *g, int wait) {
  weft_cu_pin *p = g->pin;
  if (!p) return 1;
  pthread_mutex_lock(&d->pin_mu);
  if (wait && p->state == WEFT_CU_PIN_QUEUED) {
    weft_cu_pin **at = &d->pin_head, *prev = NULL;
    while (*at && *at != p) prev = *at, at = &(*at)->next;
    if (*at) *at = p->next;
    if (d->pin_tail == p) d->pin_tail = prev;
    p->state = WEFT_CU_PIN_DONE;
    p->result = CUDA_ERROR_NOT_PERMITTED; /* never pinned */
  }
  while (wait && p->state != WEFT_CU_PIN_DONE) pthread_cond_wait(&d->pin_cv, &d->pin_mu);
  int done = p->state == WEFT_CU_PIN_DONE;
  pthread_mutex_unlock(&d->pin_mu);
  if (!done) return 0;
  g->owned = p->result == CUDA_SUCCESS;
  g->unpinned = p->result != CUDA_SUCCESS && p->result != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  g->pin = NULL;
  free(p);
  return 1;
}

static void pin_stop(weft_cu_dev *d) {
  if (d->pin_started <= 0) return;
  for (int i = 0; i < d->nregs; i++) reg_settle(d, &d->regs[i], 1);
  pthread_mutex_lock(&d->pin_mu);
  d->pin_stop = 1;
  pthread_cond_broadcast(&d->pin_cv);
  pthread_mutex_unlock(&d->pin_mu);
  pthread_join(d->pin_thread, NULL);
  pthread_mutex_destroy(&d->pin_mu);
  pthread_cond_destroy(&d->pin_cv);
  d->pin_started = 0;
}

/* The registered host range that holds [p, p + bytes) and is pinned now, or NULL. */
static weft_cu_reg *reg_find(weft_cu_dev *d, const void *p, size_t bytes) {
  const unsigned char *c = p;
  for (int i = 0; i < d->nregs; i++) {
    weft_cu_reg *g = &d->regs[i];
    if (c >= g->ptr && c + bytes <= g->ptr + g->bytes) return reg_settle(d, g, 0) && !g->unpinned ? g : NULL;
  }
  return NULL;
}

static int reg_covers(weft_cu_dev *d, const void *p, size_t bytes) { return reg_find(d, p, bytes) != NULL; }

/* Registered (pinned, or being pinned) already? */
static int reg_known(const weft_cu_dev *d, const void *p, size_t bytes) {
  const unsigned char *c = p;
  for (int i = 0; i < d->nregs; i++)
    if (c >= d->regs[i].ptr && c + bytes <= d->regs[i].ptr + d->regs[i].bytes) return 1;
  return 0;
}

/* Host -> device through the slots: each slot is filled (on several threads) while the previous one is on
 * the bus. Returns once `src` has been read; the copies finish on the upload stream. */
static weft_status to_device(weft_cu_dev *d, weft_cu_buf *b, size_t offset, const void *src, size_t bytes,
                             int wait_d2h) {
  CUdeviceptr dst = b->ptr + offset;
  staging_init(d);
  weft_status st = weft_cu_order(d, WEFT_CU_S_H2D, WEFT_CU_S_COMPUTE); /* kernels still reading dst */
  if (st == WEFT_OK && wait_d2h) st = weft_cu_order(d, WEFT_CU_S_H2D, WEFT_CU_S_D2H);
  if (st != WEFT_OK) return st;
  CUstream s = d->stream[WEFT_CU_S_H2D];
  d->work[WEFT_CU_S_H2D]++;
  b->up_work = d->work[WEFT_CU_S_H2D];
  b->up_chunks = 0;
  weft_cu_reg *reg = reg_find(d, src, bytes);
  if (reg) {
    reg->h2d_work = d->work[WEFT_CU_S_H2D];
    /* Pinned in place: copies straight from the caller's memory, left running (the core waits for them
     * before it writes that memory again). A whole large buffer goes in parts, each marked by an event. */
    int parts = offset == 0 && bytes >= ((size_t)8 << 20) ? WEFT_CU_UP_CHUNKS : 1;
    size_t per = ((bytes / (size_t)parts) + 4095) & ~(size_t)4095;
    for (int c = 0; c < parts; c++) {
      size_t lo = per * (size_t)c, hi = lo + per < bytes ? lo + per : bytes;
      if (lo >= hi) break;
      CUresult r = d->cu->cuMemcpyHtoDAsync(dst + lo, (const char *)src + lo, hi - lo, s);
      if (r == CUDA_SUCCESS && parts > 1) {
        int e = d->up_next;
        d->up_next = (e + 1) % WEFT_CU_UP_EVENTS;
        if (!d->up_evs[e]) r = d->cu->cuEventCreate(&d->up_evs[e], CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS) r = d->cu->cuEventRecord(d->up_evs[e], s);
        d->up_owner[e] = b;
        b->up_ev[c] = e;
        b->up_end[c] = hi;
        b->up_chunks = c + 1;
      }
      if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying to the GPU");
    }
    return WEFT_OK;
  }
  if (!d->ring) { /* no pinned memory: the driver stages pageable copies itself, synchronously */
    if ((st = weft_cu_sync_all(d)) != WEFT_OK) return st;
    CUresult r = d->cu->cuMemcpyHtoD(dst, src, bytes);
    return r == CUDA_SUCCESS ? WEFT_OK : weft_cu_check(d, r, "copying to the GPU");
  }
  for (size_t off = 0; off < bytes; off += WEFT_CU_SLOT_BYTES) {
    size_t len = bytes - off < WEFT_CU_SLOT_BYTES ? bytes - off : WEFT_CU_SLOT_BYTES;
    int slot;
    if ((st = slot_take(d, &slot)) != WEFT_OK) return st;
    unsigned char *stage = d->ring + (size_t)slot * WEFT_CU_SLOT_BYTES;
    weft_hostcopy_run(d->copier, stage, (const char *)src + off, len);
    CUresult r = d->cu->cuMemcpyHtoDAsync(dst + off, stage, len, s);
    if (r == CUDA_SUCCESS) r = d->cu->cuEventRecord(d->slot_ev[slot], s);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying to the GPU");
    d->slot_busy[slot] = 1;
  }
  return WEFT_OK;
}

/* Device -> host through the slots, up to WEFT_CU_SLOTS copies in flight while earlier slots are copied out. */
static weft_status to_host(weft_cu_dev *d, void *dst, CUdeviceptr src, size_t bytes) {
  staging_init(d);
  weft_status st = weft_cu_order(d, WEFT_CU_S_D2H, WEFT_CU_S_COMPUTE);
  if (st == WEFT_OK) st = weft_cu_order(d, WEFT_CU_S_D2H, WEFT_CU_S_H2D);
  if (st != WEFT_OK) return st;
  if (!d->ring) {
    if ((st = weft_cu_sync_all(d)) != WEFT_OK) return st;
    CUresult r = d->cu->cuMemcpyDtoH(dst, src, bytes);
    return r == CUDA_SUCCESS ? WEFT_OK : weft_cu_check(d, r, "copying from the GPU");
  }
  CUstream s = d->stream[WEFT_CU_S_D2H];
  if (reg_covers(d, dst, bytes)) {
    d->work[WEFT_CU_S_D2H]++;
    CUresult r = d->cu->cuMemcpyDtoHAsync(dst, src, bytes, s);
    if (r == CUDA_SUCCESS) r = d->cu->cuStreamSynchronize(s);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying from the GPU");
    d->synced[WEFT_CU_S_D2H] = d->work[WEFT_CU_S_D2H];
    return WEFT_OK;
  }
  size_t nchunks = (bytes + WEFT_CU_SLOT_BYTES - 1) / WEFT_CU_SLOT_BYTES;
  int slots[WEFT_CU_SLOTS];
  size_t issued = 0;
  d->work[WEFT_CU_S_D2H]++;
  for (size_t c = 0; c < nchunks; c++) {
    while (issued < nchunks && issued < c + WEFT_CU_SLOTS) {
      int slot;
      if ((st = slot_take(d, &slot)) != WEFT_OK) return st;
      size_t off = issued * WEFT_CU_SLOT_BYTES;
      size_t len = bytes - off < WEFT_CU_SLOT_BYTES ? bytes - off : WEFT_CU_SLOT_BYTES;
      CUresult r = d->cu->cuMemcpyDtoHAsync(d->ring + (size_t)slot * WEFT_CU_SLOT_BYTES, src + off, len, s);
      if (r == CUDA_SUCCESS) r = d->cu->cuEventRecord(d->slot_ev[slot], s);
      if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying from the GPU");
      d->slot_busy[slot] = 1;
      slots[issued % WEFT_CU_SLOTS] = slot;
      issued++;
    }
    int slot = slots[c % WEFT_CU_SLOTS];
    CUresult r = d->cu->cuEventSynchronize(d->slot_ev[slot]);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying from the GPU");
    d->slot_busy[slot] = 0;
    size_t off = c * WEFT_CU_SLOT_BYTES;
    size_t len = bytes - off < WEFT_CU_SLOT_BYTES ? bytes - off : WEFT_CU_SLOT_BYTES;
    weft_hostcopy_run(d->copier, (char *)dst + off, d->ring + (size_t)slot * WEFT_CU_SLOT_BYTES, len);
  }
  if (issued == nchunks) d->synced[WEFT_CU_S_D2H] = d->work[WEFT_CU_S_D2H];
  return WEFT_OK;
}

/* The buffer streaming into the write-back area no longer does. */
static void wb_drop(weft_cu_dev *d, weft_cu_buf *b) {
  if (b && d->wb_owner == b) {
    b->wb_chunks = 0;
    d->wb_owner = NULL;
  }
}

/* ------------------------------------------------------------------------------------- vtable: both */

static void lane_describe(void *self, weft_lane_desc *out) {
  weft_cu_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "cuda";
  out->device = l->dev->name;
  out->driver = l->dev->driver;
  out->details = l->details;
  /* cuda:N also honours tf32/bf16 for its matmuls (cuBLAS on the same tensor units cuda:N.tensor drives), so
   * work pinned to cuda:N under those contracts keeps its data in one lane's memory instead of crossing to
   * cuda:N.tensor's through the host at every matmul; its other ops are exact whatever the contract,
   * but for layernorm, sumsq, attention and cross-entropy, which have fp32 kernels (emit_tx) */
  const weft_contract_mask tc = WEFT_CONTRACT_BIT(WEFT_CONTRACT_TF32) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_BF16);
  out->contracts = l->tensor ? tc
                             : WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32) |
                                   (l->dev->bl ? tc : 0);
  out->flags = 0;
  /* cuda:N runs every op (the transformer ops on cuda_tx.cu's kernels, matmul_acc on the exact matmul kernels
   * continuing from c); cuda:N.tensor matmul only, which its supports() says (0: the version-1 set) */
  out->ops = l->tensor ? 0 : WEFT_OPS_ALL;
}

/* Finished everything given so far? (Recorded launches not yet started count as unfinished.) */
static int lane_idle(void *self) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  if (d->failed) return 1;
  if (d->nitems || weft_cu_enter(d) != WEFT_OK) return 0;
  for (int s = 0; s < WEFT_CU_NSTREAMS; s++) {
    if (d->synced[s] == d->work[s]) continue;
    CUresult r = d->cu->cuStreamQuery(d->stream[s]);
    if (r != CUDA_SUCCESS) return 0; /* not ready, or an error the next wait reports */
    d->synced[s] = d->work[s];
  }
  return 1;
}

/* Frees the allocations kept for reuse. */
static void cache_clear(weft_cu_dev *d) {
  for (int i = 0; i < d->ncache; i++) d->cu->cuMemFree(d->cache[i].ptr);
  d->ncache = 0, d->cached_bytes = 0;
}

static void profile_print(const weft_cu_dev *d) {
  double total = 0;
  for (int i = 0; i < d->nprof; i++) total += d->prof[i].ms;
  fprintf(stderr, "cuda:%d profile: %.3f ms of kernels (each launch timed alone: a few us of it are the timing)\n",
          d->ordinal, total);
  for (int i = 0; i < d->nprof; i++)
    fprintf(stderr, "  %-28s grid %6u x %-5u %9.3f ms %8llu launches %9.2f us each\n",
            d->prof[i].fn < WEFT_CUK_COUNT ? weft_cu_kernel_names[d->prof[i].fn] : "cublas", d->prof[i].gx,
            d->prof[i].gy, d->prof[i].ms, (unsigned long long)d->prof[i].n, 1e3 * d->prof[i].ms / (double)d->prof[i].n);
}

static void dev_release(weft_cu_dev *d) {
  if (--d->refs > 0) return;
  const weft_cuda_api *cu = d->cu;
  if (d->profile) profile_print(d);
  if (cu->cuCtxSetCurrent(d->ctx) == CUDA_SUCCESS && !d->failed) weft_cu_sync_all(d);
  pin_stop(d);
  for (int i = 0; i < d->nregs; i++) /* left registered (a lane's owner did not unregister): unpinned here */
    if (d->regs[i].owned && !d->failed) cu->cuMemHostUnregister(d->regs[i].ptr);
  weft_hostcopy_release(d->copier);
  for (int i = 0; i < WEFT_CU_GRAPHS; i++) weft_cu_graph_clear(d, &d->graphs[i]);
  free(d->items);
  free(d->plan);
  free(d->plan_ewb);
  if (d->blas) d->bl->cublasDestroy(d->blas);
  if (d->blas_ws) cu->cuMemFree(d->blas_ws);
  if (d->scratch) cu->cuMemFree(d->scratch);
  if (d->eb_scratch) cu->cuMemFree(d->eb_scratch);
  if (!d->failed) cache_clear(d);
  if (d->ring) cu->cuMemFreeHost(d->ring);
  if (d->wb) cu->cuMemFreeHost(d->wb);
  for (int i = 0; i < WEFT_CU_SLOTS; i++)
    if (d->slot_ev[i]) cu->cuEventDestroy(d->slot_ev[i]);
  for (int i = 0; i < WEFT_CU_UP_EVENTS; i++)
    if (d->up_evs[i]) cu->cuEventDestroy(d->up_evs[i]);
  for (int i = 0; i < WEFT_CU_WB_CHUNKS; i++) {
    if (d->wb_ev[i]) cu->cuEventDestroy(d->wb_ev[i]);
    if (d->chunk_ev[i]) cu->cuEventDestroy(d->chunk_ev[i]);
  }
  for (int s = 0; s < WEFT_CU_NSTREAMS; s++) {
    if (d->ev[s]) cu->cuEventDestroy(d->ev[s]);
    if (d->stream[s]) cu->cuStreamDestroy(d->stream[s]);
  }
  if (d->module) cu->cuModuleUnload(d->module);
  if (d->ctx) cu->cuDevicePrimaryCtxRelease(d->device);
  free(d);
}

static void lane_destroy(void *self) {
  weft_cu_lane *l = self;
  dev_release(l->dev);
  free(l);
}

static weft_status lane_alloc(void *self, size_t bytes, weft_buffer **out) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  *out = NULL;
  weft_status st = weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  weft_cu_buf *b = calloc(1, sizeof *b);
  if (!b) return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
  size_t want = bytes ? bytes : 4;
  /* a freed allocation of about this size (at most a quarter larger) serves as it is */
  int pick = -1;
  for (int i = 0; i < d->ncache; i++)
    if (d->cache[i].bytes >= want && d->cache[i].bytes - want <= want / 4 &&
        (pick < 0 || d->cache[i].bytes < d->cache[pick].bytes))
      pick = i;
  CUresult r = CUDA_SUCCESS;
  if (pick >= 0) {
    b->ptr = d->cache[pick].ptr, b->cap = d->cache[pick].bytes;
    d->cached_bytes -= b->cap;
    memmove(&d->cache[pick], &d->cache[pick + 1], (size_t)(d->ncache - pick - 1) * sizeof d->cache[0]);
    d->ncache--;
  } else {
    r = d->cu->cuMemAlloc(&b->ptr, want);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && d->ncache) { /* what the cache holds may make the room */
      cache_clear(d);
      r = d->cu->cuMemAlloc(&b->ptr, want);
    }
    b->cap = want;
  }
  if (r != CUDA_SUCCESS) {
    free(b);
    char what[96];
    snprintf(what, sizeof what, "allocating %.1f MiB", (double)bytes / (1u << 20));
    return weft_cu_check(d, r, what);
  }
  b->bytes = bytes;
  b->gen = 1;
  *out = b;
  return WEFT_OK;
}

static void lane_free(void *self, weft_buffer *buffer) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_cu_buf *b = buffer;
  if (!b) return;
  wb_drop(d, b);
  /* recorded or running work may still use it; a failed device has nothing left to wait for */
  if (!d->failed && weft_cu_enter(d) == WEFT_OK && weft_cu_flush(d) == WEFT_OK) weft_cu_sync_all(d);
  if (!d->failed) {
    if (b->foreign) {
      /* another library's memory: it frees it */
    } else if (b->cap >= WEFT_CU_CACHE_MIN && b->cap <= WEFT_CU_CACHE_MAX) {
      /* kept for the next allocation of its size; the oldest go first to make room */
      while (d->ncache && (d->ncache == WEFT_CU_CACHE || d->cached_bytes + b->cap > WEFT_CU_CACHE_MAX)) {
        d->cu->cuMemFree(d->cache[0].ptr);
        d->cached_bytes -= d->cache[0].bytes;
        memmove(&d->cache[0], &d->cache[1], (size_t)(--d->ncache) * sizeof d->cache[0]);
      }
      d->cache[d->ncache].ptr = b->ptr, d->cache[d->ncache].bytes = b->cap;
      d->ncache++, d->cached_bytes += b->cap;
    } else {
      d->cu->cuMemFree(b->ptr);
    }
    if (b->bf16) d->cu->cuMemFree(b->bf16);
  }
  free(b);
}

static weft_status lane_upload(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_cu_buf *b = buffer;
  weft_status st = weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  /* launches recorded before this upload read the old contents: they run first */
  if ((st = weft_cu_flush(d)) != WEFT_OK) return st;
  int streaming = d->wb_owner == b;
  wb_drop(d, b);
  b->gen++;
  b->from_host = 1;
  return to_device(d, b, offset, src, bytes, streaming);
}

static weft_status lane_download(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_cu_buf *b = buffer;
  weft_status st = weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  if ((st = weft_cu_flush(d)) != WEFT_OK) return st;
  if (d->wb_owner == b && b->wb_chunks && b->wb_gen == b->gen && offset + bytes <= b->wb_end[b->wb_chunks - 1]) {
    /* the result is streaming home already: take each part as it lands */
    size_t lo = 0;
    for (int c = 0; c < b->wb_chunks; c++) {
      size_t hi = b->wb_end[c];
      if (hi > offset && lo < offset + bytes) {
        CUresult r = d->cu->cuEventSynchronize(d->wb_ev[c]);
        if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "copying a result from the GPU");
        size_t a = lo > offset ? lo : offset, e = hi < offset + bytes ? hi : offset + bytes;
        /* streamed straight into the destination (registered memory): nothing left to copy */
        if ((char *)dst + (a - offset) != (char *)b->wb_dst + a)
          weft_hostcopy_run(d->copier, (char *)dst + (a - offset), b->wb_dst + a, e - a);
      }
      lo = hi;
    }
    return WEFT_OK;
  }
  return to_host(d, dst, b->ptr + offset, bytes);
}

/* The result of a matmul on fresh host inputs comes home in row blocks as they are computed (run_stream_back):
 * a download of a part waits for that part alone. */
static int lane_streaming(void *self, weft_buffer *buffer) {
  weft_cu_dev *d = ((weft_cu_lane *)self)->dev;
  const weft_cu_buf *b = buffer;
  return !d->failed && d->wb_owner == b && b->wb_chunks > 0 && b->wb_gen == b->gen;
}

static weft_status lane_scope_begin(void *self) {
  weft_cu_lane *l = self;
  weft_status st = weft_cu_enter(l->dev);
  if (st == WEFT_OK) l->dev->scope_depth++;
  return st;
}

static weft_status lane_sync(void *self) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_status st = weft_cu_enter(d);
  if (st == WEFT_OK) st = weft_cu_flush(d);
  if (st == WEFT_OK) st = weft_cu_sync_all(d);
  return st;
}

/* Ending a scope submits what it recorded and waits for it: a sync. */
static weft_status lane_scope_end(void *self) {
  weft_cu_lane *l = self;
  if (l->dev->scope_depth > 0) l->dev->scope_depth--;
  return lane_sync(self);
}

/* Starts recorded launches without waiting for them. */
static weft_status lane_flush(void *self) {
  weft_cu_lane *l = self;
  weft_status st = weft_cu_enter(l->dev);
  return st == WEFT_OK ? weft_cu_flush(l->dev) : st;
}

static weft_status lane_host_register(void *self, void *ptr, size_t bytes) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_status st = weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  if (reg_known(d, ptr, bytes)) return WEFT_OK; /* the other lane of this GPU took it already */
  if (d->nregs == WEFT_CU_REGS) return WEFT_ERR_UNSUPPORTED;
  weft_cu_reg *g = &d->regs[d->nregs];
  memset(g, 0, sizeof *g);
  g->ptr = ptr;
  g->bytes = bytes;
  /* large: pinned off the caller's path, staged meanwhile */
  if (bytes > WEFT_CU_PIN_AWAY && (g->pin = pin_away(d, ptr, bytes)) != NULL) {
    d->nregs++;
    return WEFT_OK;
  }
  /* portable: pinned for every context, so each GPU of the process moves it directly */
  CUresult r = d->cu->cuMemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    return WEFT_ERR_UNSUPPORTED; /* e.g. memory the driver cannot pin: stage it */
  g->owned = r == CUDA_SUCCESS;
  d->nregs++;
  return WEFT_OK;
}

static void lane_host_unregister(void *self, void *ptr, size_t bytes) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  (void)bytes;
  for (int i = 0; i < d->nregs; i++) {
    if (d->regs[i].ptr != ptr) continue;
    reg_settle(d, &d->regs[i], 1); /* still being pinned: wait for that (taken off the queue if not begun) */
    /* transfers may still use it; a failed device has nothing left to wait for */
    if (!d->failed && weft_cu_enter(d) == WEFT_OK) {
      if (weft_cu_flush(d) == WEFT_OK) weft_cu_sync_all(d);
      if (d->regs[i].owned) d->cu->cuMemHostUnregister(ptr);
    }
    if (d->wb_owner && d->wb_owner->wb_dst == ptr) wb_drop(d, d->wb_owner);
    d->regs[i] = d->regs[--d->nregs];
    return;
  }
}

/* A matmul on fresh host inputs, run in row blocks, each block's result streamed into pinned memory as soon
 * as it is computed. Returns 0 (nothing done) when the op does not fit that plan. */
static int plan_stream_back(weft_cu_lane *l, const weft_op *op, int64_t *rows, int *nchunks, int64_t bounds[]) {
  weft_cu_dev *d = l->dev;
  const weft_cu_buf *a = op->in[0], *b = op->in[1];
  if (op->kind != WEFT_OP_MATMUL || d->scope_depth > 0 || !a->from_host || !b->from_host || op->batch == 0) return 0;
  size_t cbytes = (size_t)op->batch * (size_t)op->m * (size_t)op->n * sizeof(float);
  if (cbytes < WEFT_CU_WB_MIN || (cbytes > WEFT_CU_WB_MAX && !(op->out_host[0] && reg_covers(d, op->out_host[0], cbytes))))
    return 0;
  int split;
  int64_t r = weft_cu_matmul_rows(op, &split);
  if (!split) return 0;
  /* Blocks of whole waves of 128x128 tiles (two blocks per SM run at once), so that splitting adds no
   * partly filled wave; at most WEFT_CU_WB_CHUNKS blocks. */
  int64_t tiles_n = (op->n + 127) / 128, tiles_m = (r + 127) / 128;
  int64_t base = (2 * (int64_t)d->sms) / tiles_n;
  if (base < 1) base = 1;
  while ((tiles_m + base - 1) / base > WEFT_CU_WB_CHUNKS) base *= 2;
  int64_t n = (tiles_m + base - 1) / base;
  for (int64_t i = 0; i <= n; i++) {
    int64_t t = i * base < tiles_m ? i * base : tiles_m;
    bounds[i] = t * 128 < r ? t * 128 : r;
  }
  *rows = r;
  *nchunks = (int)n;
  return 1;
}

static weft_status run_stream_back(weft_cu_lane *l, const weft_op *op, int nchunks, const int64_t *bounds) {
  weft_cu_dev *d = l->dev;
  weft_cu_buf *c = op->out[0];
  const weft_cuda_api *cu = d->cu;
  size_t row_bytes = (size_t)op->n * sizeof(float);
  size_t need = (size_t)bounds[nchunks] * row_bytes;
  unsigned char *direct = op->out_host[0] && reg_covers(d, op->out_host[0], need) ? op->out_host[0] : NULL;
  if (!direct && d->wb_bytes < need) {
    /* grow the area; copies still landing in the old one finish first */
    weft_status st = weft_cu_sync_all(d);
    if (st != WEFT_OK) return st;
    if (d->wb) cu->cuMemFreeHost(d->wb);
    d->wb = NULL, d->wb_bytes = 0;
    if (d->wb_owner) d->wb_owner->wb_chunks = 0, d->wb_owner = NULL;
    void *p = NULL;
    if (cu->cuMemHostAlloc(&p, need, 0) != CUDA_SUCCESS) return WEFT_ERR_UNSUPPORTED; /* run it plainly */
    d->wb = p;
    d->wb_bytes = need;
  }
  int streaming = d->wb_owner == c;
  if (d->wb_owner) d->wb_owner->wb_chunks = 0, d->wb_owner = NULL;
  /* `a` still coming in parts, after `b`: each block waits only for the part of `a` it reads (the upload
   * stream is in order, so that part's event also covers `b` and everything before). The tensor lane
   * converts all of `a` at once, and a transposed `a` is read across parts: those wait for everything. */
  const weft_cu_buf *A = op->in[0], *Bm = op->in[1];
  int by_part = !l->tensor && !op->trans_a && A->up_chunks > 0 && A != Bm && Bm->up_work < A->up_work;
  for (int p = 0; by_part && p < A->up_chunks; p++) by_part = d->up_owner[A->up_ev[p]] == A;
  weft_status st = by_part ? WEFT_OK : weft_cu_order(d, WEFT_CU_S_COMPUTE, WEFT_CU_S_H2D);
  if (st == WEFT_OK && streaming) st = weft_cu_order(d, WEFT_CU_S_COMPUTE, WEFT_CU_S_D2H);
  /* The blocks' copies home wait for their blocks only, so results flow down while `a` still flows up
   * (the bus carries both ways at once). Written straight into registered memory, they also wait for
   * uploads still reading that memory; the write-back area is the lane's own, which no upload reads. */
  weft_cu_reg *dst_reg = direct ? reg_find(d, direct, need) : NULL;
  if (st == WEFT_OK && dst_reg && dst_reg->h2d_work > d->seen[WEFT_CU_S_D2H][WEFT_CU_S_H2D])
    st = weft_cu_order(d, WEFT_CU_S_D2H, WEFT_CU_S_H2D);
  if (st != WEFT_OK) return st;
  d->work[WEFT_CU_S_COMPUTE]++;
  d->work[WEFT_CU_S_D2H]++;
  for (int i = 0; i < nchunks; i++) {
    if (by_part) {
      size_t need = (size_t)bounds[i + 1] * (size_t)op->k * sizeof(float); /* rows of a this block reads */
      int p = 0;
      while (p < A->up_chunks - 1 && A->up_end[p] < need) p++;
      CUresult r = cu->cuStreamWaitEvent(d->stream[WEFT_CU_S_COMPUTE], d->up_evs[A->up_ev[p]], 0);
      if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "ordering a block after its rows");
    }
    if ((st = weft_cu_emit(l, op, bounds[i], bounds[i + 1])) != WEFT_OK) return st;
    st = weft_cu_launch(d, d->items, d->nitems);
    d->nitems = 0;
    if (st != WEFT_OK) return st;
    size_t off = (size_t)bounds[i] * row_bytes, len = (size_t)(bounds[i + 1] - bounds[i]) * row_bytes;
    CUresult r = cu->cuEventRecord(d->chunk_ev[i], d->stream[WEFT_CU_S_COMPUTE]);
    if (r == CUDA_SUCCESS) r = cu->cuStreamWaitEvent(d->stream[WEFT_CU_S_D2H], d->chunk_ev[i], 0);
    if (r == CUDA_SUCCESS)
      r = cu->cuMemcpyDtoHAsync((direct ? direct : d->wb) + off, c->ptr + off, len, d->stream[WEFT_CU_S_D2H]);
    if (r == CUDA_SUCCESS) r = cu->cuEventRecord(d->wb_ev[i], d->stream[WEFT_CU_S_D2H]);
    if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "streaming a result back");
    c->wb_end[i] = off + len;
  }
  d->seen[WEFT_CU_S_D2H][WEFT_CU_S_COMPUTE] = d->work[WEFT_CU_S_COMPUTE];
  c->gen++;
  c->from_host = 0;
  c->wb_chunks = nchunks;
  c->wb_gen = c->gen;
  c->wb_dst = direct ? direct : d->wb;
  d->wb_owner = c;
  return WEFT_OK;
}

/* Inputs an op has read are no longer "fresh from the host": a matmul over them again (a resident loop,
 * calibration's repeats) is device work whose result need not be streamed home. */
static void consume_inputs(const weft_op *op) {
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) {
    weft_cu_buf *b = op->in[i];
    if (b) b->from_host = 0;
  }
}

static weft_status lane_run(void *self, const weft_op *op) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  /* Inside a scope an op is only recorded: no driver call, so no context to check (what allocates checks). */
  weft_status st = d->scope_depth > 0 && !d->failed ? WEFT_OK : weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  if (d->fault_at > 0 && ++d->runs == d->fault_at) {
    weft_cu_item it;
    memset(&it, 0, sizeof it);
    it.kind = WEFT_CU_IT_KERNEL, it.fn = WEFT_CUK_TRAP;
    it.grid[0] = it.grid[1] = it.grid[2] = 1, it.block[0] = it.block[1] = it.block[2] = 1;
    if ((st = weft_cu_flush(d)) != WEFT_OK) return st;
    d->work[WEFT_CU_S_COMPUTE]++;
    return weft_cu_launch(d, &it, 1);
  }
  int64_t rows, bounds[WEFT_CU_WB_CHUNKS + 1];
  int nchunks;
  if (d->nitems == 0 && plan_stream_back(l, op, &rows, &nchunks, bounds)) {
    st = run_stream_back(l, op, nchunks, bounds);
    if (st != WEFT_ERR_UNSUPPORTED) {
      consume_inputs(op);
      return st;
    }
  }
  /* an op writing the buffer that is streaming home must wait for that copy */
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++)
    if (op->out[o] && op->out[o] == d->wb_owner) {
      wb_drop(d, op->out[o]);
      d->wait_d2h = 1;
    }
  if (d->fuse_on && !l->tensor && d->scope_depth > 0 && !d->failed) {
    /* held back when it may start or extend a pattern; what can no longer fuse is recorded, in order */
    d->fuse_lane = l;
    st = weft_fuse_run(&d->fuse, op, weft_cu_fuse_emit, l);
  } else {
    /* cuda:N's held ops come first (the tensor lane's op may read what they write) */
    if ((st = weft_cu_fuse_drain(d)) != WEFT_OK) return st;
    st = weft_cu_emit(l, op, 0, weft_cu_is_matmul(op) ? weft_cu_matmul_rows(op, NULL) : 0);
  }
  if (st != WEFT_OK) return st;
  consume_inputs(op);
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++) {
    weft_cu_buf *b = op->out[o];
    if (b) b->gen++, b->from_host = 0;
  }
  /* WEFT_CUDA_SCOPE_CHUNK: inside a scope the launches start in runs of that many (each replayed from its own
   * graph from the second time on); never in the middle of a pattern the fusion window holds. */
  if (d->scope_depth > 0)
    return d->scope_chunk > 0 && d->nitems >= (size_t)d->scope_chunk && d->fuse.n == 0 ? weft_cu_flush(d) : WEFT_OK;
  return weft_cu_flush(d);
}

/* ------------------------------------------------------------------------------------------ supports */

/* Another library's device memory as a buffer (DLPack): what it queued on the memory, on its own streams of
 * the same (primary) context, is waited for, since weft's streams do not wait for other streams. */
static weft_status lane_wrap(void *self, void *address, size_t bytes, weft_buffer **out) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  *out = NULL;
  weft_status st = weft_cu_enter(d);
  if (st != WEFT_OK) return st;
  CUresult r = d->cu->cuCtxSynchronize();
  if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "waiting for the device before taking another library's memory");
  weft_cu_buf *b = calloc(1, sizeof *b);
  if (!b) return weft_lane_report(d->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
  b->ptr = (CUdeviceptr)(uintptr_t)address;
  b->bytes = b->cap = bytes;
  b->gen = 1;
  b->foreign = 1;
  *out = b;
  return WEFT_OK;
}

/* A buffer's address for another library: everything on the device finished first (weft's streams and
 * the other library's), so it may read and write there at once. */
static weft_status lane_address(void *self, weft_buffer *buffer, void **out) {
  weft_cu_lane *l = self;
  weft_cu_dev *d = l->dev;
  weft_cu_buf *b = buffer;
  *out = NULL;
  weft_status st = weft_cu_enter(d);
  if (st == WEFT_OK) st = weft_cu_flush(d);
  if (st == WEFT_OK) st = weft_cu_sync_all(d);
  if (st != WEFT_OK) return st;
  CUresult r = d->cu->cuCtxSynchronize();
  if (r != CUDA_SUCCESS) return weft_cu_check(d, r, "waiting for the device before handing out memory");
  b->gen++; /* the other library may write it: what was derived from it (its bf16 copy) is stale */
  *out = (void *)(uintptr_t)b->ptr;
  return WEFT_OK;
}

static weft_status lane_supports(void *self, const weft_op *op) {
  weft_cu_lane *l = self;
  if (l->tensor && op->kind != WEFT_OP_MATMUL)
    return weft_lane_report(l->dev->host, WEFT_ERR_UNSUPPORTED,
                            "%s runs matmul only (the tensor units); %s runs on cuda:%d or another lane", l->name,
                            weft_op_kind_str(op->kind), l->dev->ordinal);
  if (weft_cu_is_matmul(op)) {
    int64_t rows = weft_cu_matmul_rows(op, NULL);
    if (rows > INT_MAX || op->n > INT_MAX || op->k > INT_MAX || op->m * op->k > ((int64_t)1 << 40))
      return weft_lane_report(l->dev->host, WEFT_ERR_UNSUPPORTED,
                              "%s: matmul dimensions above 2^31-1 are not supported (m=%lld n=%lld k=%lld)", l->name,
                              (long long)op->m, (long long)op->n, (long long)op->k);
    if (!l->tensor && ((op->m + 127) / 128) * ((op->n + 127) / 128) > INT_MAX)
      return weft_lane_report(l->dev->host, WEFT_ERR_UNSUPPORTED, "%s: matmul output too large for one grid",
                              l->name);
  }
  return WEFT_OK;
}

static const weft_lane_vtable CUDA_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = lane_describe,
    .destroy = lane_destroy, .buffer_alloc = lane_alloc, .buffer_free = lane_free, .upload = lane_upload,
    .download = lane_download, .supports = lane_supports, .run = lane_run, .scope_begin = lane_scope_begin,
    .scope_end = lane_scope_end, .sync = lane_sync, .flush = lane_flush, .host_register = lane_host_register,
    .host_unregister = lane_host_unregister, .idle = lane_idle, .buffer_wrap = lane_wrap,
    .buffer_address = lane_address, .streaming = lane_streaming,
};

/* -------------------------------------------------------------------------------------------- probe */

static weft_status dev_init(weft_cu_dev *d, char *why, size_t why_len, char *blas_why, size_t blas_why_len) {
  const weft_cuda_api *cu = d->cu;
  CUresult r;
#define TRY(call, what)                                                                                            \
  if ((r = (call)) != CUDA_SUCCESS) {                                                                              \
    const char *n_ = NULL;                                                                                         \
    cu->cuGetErrorName(r, &n_);                                                                                    \
    snprintf(why, why_len, "%s failed: %s", what, n_ ? n_ : "?");                                                  \
    return WEFT_ERR_UNSUPPORTED;                                                                                   \
  }
  TRY(cu->cuDeviceGet(&d->device, d->ordinal), "cuDeviceGet");
  TRY(cu->cuDeviceGetName(d->name, (int)sizeof d->name, d->device), "cuDeviceGetName");
  TRY(cu->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->device),
      "cuDeviceGetAttribute");
  TRY(cu->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->device),
      "cuDeviceGetAttribute");
  TRY(cu->cuDeviceGetAttribute(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->device), "cuDeviceGetAttribute");
  TRY(cu->cuDeviceTotalMem(&d->total_mem, d->device), "cuDeviceTotalMem");
  if (d->cc_major * 10 + d->cc_minor < 75) {
    snprintf(why, why_len, "%s is compute capability %d.%d; weft's kernels need 7.5 or newer", d->name, d->cc_major,
             d->cc_minor);
    return WEFT_ERR_UNSUPPORTED;
  }
  TRY(cu->cuDevicePrimaryCtxRetain(&d->ctx, d->device), "creating the context (cuDevicePrimaryCtxRetain)");
  TRY(cu->cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
  r = cu->cuModuleLoadData(&d->module, weft_cuda_fatbin);
  if (r != CUDA_SUCCESS) {
    const char *n = NULL;
    cu->cuGetErrorName(r, &n);
    snprintf(why, why_len,
             "weft's kernels (built for sm_80/sm_90 with PTX for compute_75) do not load on %s (sm_%d%d): %s",
             d->name, d->cc_major, d->cc_minor, n ? n : "?");
    d->module = NULL;
    return WEFT_ERR_UNSUPPORTED;
  }
  for (int k = 0; k < WEFT_CUK_COUNT; k++) TRY(cu->cuModuleGetFunction(&d->fn[k], d->module, weft_cu_kernel_names[k]), weft_cu_kernel_names[k]);
  for (int s = 0; s < WEFT_CU_NSTREAMS; s++) {
    TRY(cu->cuStreamCreate(&d->stream[s], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    TRY(cu->cuEventCreate(&d->ev[s], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  for (int i = 0; i < WEFT_CU_SLOTS; i++) TRY(cu->cuEventCreate(&d->slot_ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  for (int i = 0; i < WEFT_CU_WB_CHUNKS; i++) {
    TRY(cu->cuEventCreate(&d->wb_ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    TRY(cu->cuEventCreate(&d->chunk_ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
#undef TRY
  int dv = 0;
  cu->cuDriverGetVersion(&dv);
  snprintf(d->driver, sizeof d->driver, "CUDA driver %d.%d", dv / 1000, dv % 1000 / 10);

  /* cuBLAS: the fp32 matmul and the whole tensor lane. Without it cuda:N stays, with exact kernels only. */
  const char *bwhy = "";
  const weft_cublas_api *bl = weft_cublas_api_load(&bwhy);
  if (!bl) {
    snprintf(blas_why, blas_why_len, "%s", bwhy);
    return WEFT_OK;
  }
  cublasHandle_t h = NULL;
  cublasStatus_t bs = bl->cublasCreate(&h);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(blas_why, blas_why_len, "cublasCreate failed: %s", bl->cublasGetStatusName(bs));
    return WEFT_OK;
  }
  CUdeviceptr ws = 0;
  if (cu->cuMemAlloc(&ws, WEFT_CU_BLAS_WORKSPACE) != CUDA_SUCCESS) ws = 0;
  /* a workspace of our own lets cuBLAS be captured into graphs without allocating */
  if (bl->cublasSetStream(h, d->stream[WEFT_CU_S_COMPUTE]) != CUBLAS_STATUS_SUCCESS ||
      bl->cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
      (ws && bl->cublasSetWorkspace(h, (void *)(uintptr_t)ws, WEFT_CU_BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS)) {
    bl->cublasDestroy(h);
    if (ws) cu->cuMemFree(ws);
    snprintf(blas_why, blas_why_len, "cuBLAS could not be set up on this device's stream");
    return WEFT_OK;
  }
  d->bl = bl;
  d->blas = h;
  d->blas_ws = ws;
  int maj = 0, min = 0, pat = 0;
  bl->cublasGetProperty(MAJOR_VERSION, &maj);
  bl->cublasGetProperty(MINOR_VERSION, &min);
  bl->cublasGetProperty(PATCH_LEVEL, &pat);
  snprintf(d->driver + strlen(d->driver), sizeof d->driver - strlen(d->driver), ", cuBLAS %d.%d.%d", maj, min, pat);
  return WEFT_OK;
}

static long env_long(const char *name, const char *prefix) {
  const char *v = getenv(name);
  if (!v) return 0;
  size_t pl = strlen(prefix);
  if (strncmp(v, prefix, pl) != 0) return 0;
  return strtol(v + pl, NULL, 10);
}

weft_status weft_cuda_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *why = "";
  const weft_cuda_api *cu = weft_cuda_api_load(&why);
  if (!cu) {
    sink->add_absent(sink->ctx, "cuda", why);
    return WEFT_OK;
  }
  CUresult r = cu->cuInit(0);
  int count = 0;
  if (r == CUDA_SUCCESS) r = cu->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0) {
    const char *n = NULL;
    if (r != CUDA_SUCCESS) cu->cuGetErrorName(r, &n);
    char msg[256];
    if (r != CUDA_SUCCESS)
      snprintf(msg, sizeof msg, "the NVIDIA driver is installed but cuInit failed: %s (no usable GPU here?)",
               n ? n : "?");
    else snprintf(msg, sizeof msg, "the NVIDIA driver found no CUDA device");
    sink->add_absent(sink->ctx, "cuda", msg);
    return WEFT_OK;
  }
  for (int i = 0; i < count; i++) {
    weft_cu_dev *d = calloc(1, sizeof *d);
    if (!d) return WEFT_ERR_OUT_OF_MEMORY;
    d->cu = cu;
    d->host = args->host;
    d->ordinal = i;
    d->refs = 1;
    d->fault_at = i == 0 ? env_long("WEFT_CUDA_FAULT", "trap:") : 0;
    d->profile = getenv("WEFT_CUDA_PROFILE") && atoi(getenv("WEFT_CUDA_PROFILE")) > 0;
    d->fuse_on = weft_fuse_env_enabled();
    d->scope_chunk = WEFT_CU_SCOPE_CHUNK;
    if (getenv("WEFT_CUDA_SCOPE_CHUNK")) d->scope_chunk = (int)env_long("WEFT_CUDA_SCOPE_CHUNK", "");
    weft_fuse_init(&d->fuse, WEFT_FUSE_MATMUL_EPILOGUE, WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT));
    char name[32], why_dev[512] = "", why_blas[768] = "";
    snprintf(name, sizeof name, "cuda:%d", i);
    if (dev_init(d, why_dev, sizeof why_dev, why_blas, sizeof why_blas) != WEFT_OK) {
      sink->add_absent(sink->ctx, name, why_dev);
      dev_release(d);
      continue;
    }
    weft_cu_lane *simt = calloc(1, sizeof *simt);
    weft_cu_lane *tens = d->blas ? calloc(1, sizeof *tens) : NULL;
    if (!simt || (d->blas && !tens)) {
      free(simt), free(tens);
      dev_release(d);
      return WEFT_ERR_OUT_OF_MEMORY;
    }
    d->refs = tens ? 2 : 1;
    double gib = (double)d->total_mem / (double)(1u << 30);
    simt->dev = d;
    snprintf(simt->name, sizeof simt->name, "cuda:%d", i);
    snprintf(simt->details, sizeof simt->details,
             "sm_%d%d, %d SMs, %.0f GiB; exact: own kernels (128x128 tiles, no FMA); fp32: %s; scopes as graphs; %s",
             d->cc_major, d->cc_minor, d->sms, gib, d->blas ? "cuBLAS sgemm" : "the exact kernels (no cuBLAS)",
             d->fuse_on ? "fuses matmul epilogues in scopes" : "fusion off (WEFT_FUSE=0)");
    if (!tens) {
      char tname[40];
      snprintf(tname, sizeof tname, "cuda:%d.tensor", i);
      sink->add_absent(sink->ctx, tname, why_blas);
    }
    sink->add_lane(sink->ctx, &CUDA_VTABLE, simt);
    if (tens) {
      tens->dev = d;
      tens->tensor = 1;
      snprintf(tens->name, sizeof tens->name, "cuda:%d.tensor", i);
      snprintf(tens->details, sizeof tens->details,
               "sm_%d%d tensor units through cuBLAS: tf32 and bf16 inputs, fp32 accumulation; matmul only",
               d->cc_major, d->cc_minor);
      sink->add_lane(sink->ctx, &CUDA_VTABLE, tens);
    }
  }
  return WEFT_OK;
}
