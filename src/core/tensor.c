/* tensor.c - tensors: shape checks, the host copy, the per-lane copies and which of them is current.
 *
 * Large host copies move on several threads (hostcopy.c), and in pieces where a lane moves the same memory
 * directly (registered with it): a write sends each piece to the lane the value lived on as soon as it is
 * copied in, and a read copies out each piece of a result streaming home as soon as it has landed, so the
 * copies a caller's own arrays need overlap the bus instead of adding to it.
 *
 * A write on a device lane leaves a recipe (the op and its inputs' versions, below); a value lost with its
 * lane is computed again from it by the scheduler (sched/recover.c), which the core asks through the
 * fabric's recover hooks: running ops is above the core. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hostcopy.h"
#include "internal.h"
#include "optable.h"

/* Host copies this large are pages of their own (mmap): zero until touched, so a tensor made without data
 * costs no memset and the first writer's threads fault its pages in together; and never sharing a page
 * with other memory, so registering it with a lane pins nothing else. */
#define WEFT_HOST_MAP_MIN ((size_t)1 << 20)
/* ... and from this size on, aligned to 2 MiB and offered to the kernel as huge pages (fewer faults, fewer
 * pages for a lane to pin and map). */
#define WEFT_HOST_HUGE_MIN ((size_t)4 << 20)
#define WEFT_HUGE ((size_t)2 << 20)
/* Transfers this large go in pieces, so a lane moves one piece while the next is copied: up to 16 pieces,
 * none under 4 MiB (a piece's copy still runs on every copy thread: hostcopy.h's threshold is 2 MiB). */
#define WEFT_PIECED_MIN ((size_t)8 << 20)
#define WEFT_PIECES 16
#define WEFT_PIECE_MIN ((size_t)4 << 20)

static float *host_alloc(size_t bytes, size_t *out_mapped) {
  *out_mapped = 0;
  if (bytes >= WEFT_HOST_MAP_MIN) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    size_t len = (bytes + page - 1) & ~(page - 1);
    int huge = bytes >= WEFT_HOST_HUGE_MIN && page <= WEFT_HUGE;
    size_t extra = huge ? WEFT_HUGE : 0;
    char *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      if (huge) { /* keep the 2 MiB-aligned part */
        char *a = (char *)(((uintptr_t)p + WEFT_HUGE - 1) & ~(uintptr_t)(WEFT_HUGE - 1));
        if (a > p) munmap(p, (size_t)(a - p));
        if (a + len < p + len + extra) munmap(a + len, (size_t)(p + len + extra - (a + len)));
        p = a;
#ifdef MADV_HUGEPAGE
        madvise(p, len, MADV_HUGEPAGE); /* advice: refused (THP off) changes nothing */
#endif
      }
      *out_mapped = len;
      return (float *)(void *)p;
    }
  }
  return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* The caller's memory that weft is about to fill whole (a read's destination, a wrapped array): the kernel is
 * advised to back its 2 MiB-aligned inside with huge pages, as weft's own host copies are (and as numpy's large
 * arrays are). A fresh malloc'ed 64 MiB array otherwise takes 16,384 page faults on the first write, which
 * on the H200 machine cost a read into it 30 ms; pages already there stay as they are. Advice only: a range
 * the kernel refuses (THP off, not anonymous memory) changes nothing, and errno is left as it was. */
static void host_advise(const void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  if (bytes < WEFT_HOST_HUGE_MIN) return;
  const uintptr_t a = ((uintptr_t)p + WEFT_HUGE - 1) & ~(uintptr_t)(WEFT_HUGE - 1);
  const uintptr_t e = ((uintptr_t)p + bytes) & ~(uintptr_t)(WEFT_HUGE - 1);
  if (e <= a) return;
  const int saved = errno;
  madvise((void *)a, (size_t)(e - a), MADV_HUGEPAGE);
  errno = saved;
#else
  (void)p, (void)bytes;
#endif
}

static void host_free(float *p, size_t mapped) {
  if (mapped) munmap(p, mapped);
  else free(p);
}

void weft_host_copy(weft_fabric *f, void *dst, const void *src, size_t bytes) {
  if (bytes >= WEFT_HOSTCOPY_MIN && !f->copier_tried) {
    f->copier_tried = 1;
    f->copier = weft_hostcopy_acquire();
  }
  weft_hostcopy_run(bytes >= WEFT_HOSTCOPY_MIN ? f->copier : NULL, dst, src, bytes);
}

/* The size of a transfer's pieces: at most WEFT_PIECES of them, none under WEFT_PIECE_MIN, whole 64 KiB each. */
static size_t piece_bytes(size_t bytes) {
  size_t per = (bytes / WEFT_PIECES + 65535) & ~(size_t)65535;
  return per < WEFT_PIECE_MIN ? WEFT_PIECE_MIN : per;
}

weft_status weft_tensor_check(weft_fabric *f, const weft_tensor *t, const char *what) {
  if (!t) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (t->magic != WEFT_TENSOR_MAGIC)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s is not a live weft tensor (destroyed, or not a tensor)", what);
  if (f && t->fabric != f)
    return weft_fail(f, WEFT_ERR_WRONG_FABRIC, "%s belongs to another fabric; tensors cannot be shared between fabrics",
                     what);
  return WEFT_OK;
}

/* The one way tensors are made: `wrap` non-NULL borrows that memory as the host copy, else `data` (or
 * zeros) is copied into memory of our own. */
/* The shape rules every tensor's dims follow; the element count into *out_numel. */
static weft_status check_dims(weft_fabric *f, const char *fn, int ndim, const int64_t *dims, size_t *out_numel) {
  if (ndim < 1 || ndim > WEFT_MAX_DIMS)
    return weft_fail(f, WEFT_ERR_SHAPE, "%s: rank %d; a tensor has 1 to %d dimensions", fn, ndim, WEFT_MAX_DIMS);
  if (!dims) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "%s: dims is NULL", fn);
  size_t numel = 1, extent = 1;
  for (int d = 0; d < ndim; d++) {
    int batch_dim = ndim >= 3 && d < ndim - 2;
    if (dims[d] < 0 || (dims[d] == 0 && !batch_dim))
      return weft_fail(f, WEFT_ERR_SHAPE,
                       "%s: dimension %d is %lld; dimensions must be >= 1 (only batch dimensions, before the last "
                       "two of a rank-3 or rank-4 tensor, may be 0)",
                       fn, d, (long long)dims[d]);
    if (__builtin_mul_overflow(extent, dims[d] ? (size_t)dims[d] : 1, &extent) || extent > ((size_t)1 << 40))
      return weft_fail(f, WEFT_ERR_OVERFLOW,
                       "%s: the element count overflows at dimension %d (%lld); a tensor holds at most 2^40 elements "
                       "(empty batch dimensions counted as 1)",
                       fn, d, (long long)dims[d]);
    numel *= (size_t)dims[d];
  }
  *out_numel = numel;
  return WEFT_OK;
}

static weft_status tensor_new(weft_fabric *f, weft_dtype dtype, int ndim, const int64_t *dims, const void *data,
                              float *wrap, weft_tensor **out_tensor) {
  if (out_tensor) *out_tensor = NULL;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out_tensor) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_create: out_tensor is NULL");
  size_t numel = 0;
  weft_status st = check_dims(f, "weft_tensor_create", ndim, dims, &numel);
  if (st != WEFT_OK) return st;
  weft_tensor *t = calloc(1, sizeof *t);
  if (!t) return weft_fail(f, WEFT_ERR_OUT_OF_MEMORY, "weft_tensor_create: out of host memory");
  t->numel = numel;
  t->dtype = dtype;
  t->bytes = (numel ? numel : 1) * sizeof(float);
  t->borrowed = wrap != NULL;
  t->host = wrap ? wrap : host_alloc(t->bytes, &t->mapped);
  t->buf = calloc(f->nlanes ? f->nlanes : 1, sizeof *t->buf);
  t->valid = calloc(f->nlanes ? f->nlanes : 1, 1);
  if (!t->host || !t->buf || !t->valid) {
    if (!t->borrowed && t->host) host_free(t->host, t->mapped);
    free(t->buf), free(t->valid), free(t);
    return weft_fail(f, WEFT_ERR_OUT_OF_MEMORY, "weft_tensor_create: out of host memory for %zu floats", numel);
  }
  if (wrap) {
    host_advise(wrap, numel * sizeof(float)); /* the caller's memory is the value (results land in it) */
  } else if (data) weft_host_copy(f, t->host, data, numel * 4);
  else if (!t->mapped) memset(t->host, 0, t->bytes); /* mapped pages are zero until written */
  t->magic = WEFT_TENSOR_MAGIC;
  t->fabric = f;
  t->ndim = ndim;
  for (int d = 0; d < WEFT_MAX_DIMS; d++) t->dims[d] = d < ndim ? dims[d] : 1;
  t->host_valid = 1;
  t->where = 1;
  t->id = ++f->next_tensor_id;
  t->version = t->host_version = 1;
  t->next = f->tensors;
  if (f->tensors) f->tensors->prev = t;
  f->tensors = t;
  *out_tensor = t;
  return WEFT_OK;
}

weft_status weft_tensor_create(weft_fabric *f, int ndim, const int64_t *dims, const float *data,
                               weft_tensor **out_tensor) {
  return tensor_new(f, WEFT_DTYPE_F32, ndim, dims, data, NULL, out_tensor);
}

weft_status weft_tensor_create_typed(weft_fabric *f, weft_dtype dtype, int ndim, const int64_t *dims, const void *data,
                                     weft_tensor **out_tensor) {
  if (out_tensor) *out_tensor = NULL;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if ((unsigned)dtype >= WEFT_DTYPE_COUNT)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_create_typed: dtype %d is not a weft_dtype", (int)dtype);
  return tensor_new(f, dtype, ndim, dims, data, NULL, out_tensor);
}

weft_dtype weft_tensor_dtype(const weft_tensor *t) {
  return t && t->magic == WEFT_TENSOR_MAGIC ? t->dtype : WEFT_DTYPE_COUNT;
}

weft_status weft_tensor_reshape(weft_tensor *t, int ndim, const int64_t *dims) {
  weft_status st = weft_tensor_check(NULL, t, "tensor");
  if (st != WEFT_OK) return st;
  weft_fabric *f = t->fabric;
  size_t numel = 0;
  if ((st = check_dims(f, "weft_tensor_reshape", ndim, dims, &numel)) != WEFT_OK) return st;
  if (numel != t->numel)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_tensor_reshape: the new shape holds %zu elements, the tensor %zu", numel,
                     t->numel);
  t->ndim = ndim;
  for (int d = 0; d < WEFT_MAX_DIMS; d++) t->dims[d] = d < ndim ? dims[d] : 1;
  return WEFT_OK;
}

weft_status weft_tensor_wrap(weft_fabric *f, int ndim, const int64_t *dims, float *data, weft_tensor **out_tensor) {
  if (out_tensor) *out_tensor = NULL;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!data) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_wrap: data is NULL (use weft_tensor_create for zeros)");
  return tensor_new(f, WEFT_DTYPE_F32, ndim, dims, NULL, data, out_tensor);
}

/* The lane slot for weft_tensor_wrap_lane and weft_tensor_lane_address, or a failure naming why not. */
static weft_status device_lane(weft_fabric *f, const char *fn, size_t lane, int want_wrap) {
  if (lane >= f->nlanes)
    return weft_fail(f, WEFT_ERR_NOT_FOUND, "%s: lane %zu does not exist (the fabric has %zu lanes)", fn, lane, f->nlanes);
  weft_lane_slot *s = &f->lanes[lane];
  if (weft_lane_is_host(f, (int)lane))
    return weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: %s computes in host memory; weft_tensor_wrap shares host memory", fn,
                     s->desc.name);
  if (want_wrap ? !s->vt.buffer_wrap : !s->vt.buffer_address)
    return weft_fail(f, WEFT_ERR_UNSUPPORTED, "%s: %s cannot %s its device memory", fn, s->desc.name,
                     want_wrap ? "take another library's memory as" : "hand out");
  if (s->failed) return weft_fail(f, WEFT_ERR_LANE_FAILED, "%s: %s is down", fn, s->desc.name);
  return WEFT_OK;
}

weft_status weft_tensor_wrap_lane(weft_fabric *f, size_t lane, int ndim, const int64_t *dims, void *address,
                                  weft_tensor **out_tensor) {
  if (out_tensor) *out_tensor = NULL;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!address) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_wrap_lane: address is NULL");
  weft_status st = device_lane(f, "weft_tensor_wrap_lane", lane, 1);
  if (st != WEFT_OK) return st;
  weft_tensor *t = NULL;
  if ((st = tensor_new(f, WEFT_DTYPE_F32, ndim, dims, NULL, NULL, &t)) != WEFT_OK) return st;
  weft_lane_slot *s = &f->lanes[lane];
  st = s->vt.buffer_wrap(s->self, address, t->bytes, &t->buf[lane]);
  if (st != WEFT_OK) {
    t->buf[lane] = NULL;
    if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, (int)lane);
    weft_tensor_destroy(t);
    return st;
  }
  weft_tensor_mark_written(t, (int)lane); /* the lane's copy is the value */
  *out_tensor = t;
  return WEFT_OK;
}

weft_status weft_tensor_lane_address(weft_tensor *t, size_t lane, void **out_address) {
  if (out_address) *out_address = NULL;
  weft_status st = weft_tensor_check(NULL, t, "tensor");
  if (st != WEFT_OK) return st;
  weft_fabric *f = t->fabric;
  if (!out_address) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_lane_address: out_address is NULL");
  if ((st = device_lane(f, "weft_tensor_lane_address", lane, 0)) != WEFT_OK) return st;
  if ((st = weft_tensor_make_valid(t, (int)lane)) != WEFT_OK) return st;
  if ((st = weft_tensor_wait_users(t)) != WEFT_OK) return st;
  if ((st = weft_tensor_failure(t)) != WEFT_OK) return st; /* the op that was to make it failed */
  weft_lane_slot *s = &f->lanes[lane];
  void *addr = NULL;
  st = s->vt.buffer_address(s->self, t->buf[lane], &addr);
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, (int)lane);
  if (st != WEFT_OK) return st;
  weft_tensor_mark_written(t, (int)lane); /* the caller may write there: that copy is the value now */
  *out_address = addr;
  return WEFT_OK;
}

void weft_tensor_destroy(weft_tensor *t) {
  if (!t || t->magic != WEFT_TENSOR_MAGIC) return;
  weft_fabric *f = t->fabric;
  if (f->lost) weft_fabric_recover_all(f); /* a lost value may have been made from this one */
  weft_tensor_wait_users(t); /* queued host work must be done with its memory */
  /* Finished jobs that used it still hold its pointer until they are drained (their outcome is settled on
   * the tensors they wrote): drain them now, before the memory goes. */
  if (t->q_read || t->q_write) weft_hostq_drain(f);
  /* every lane that may move this memory finishes first: one lane's unpinning may be another's pinning */
  for (size_t i = 0; i < f->nlanes && t->reg_mask; i++)
    if (weft_lane_bit(t->reg_mask, i) && !f->lanes[i].failed && f->lanes[i].vt.sync) f->lanes[i].vt.sync(f->lanes[i].self);
  for (size_t i = 0; i < f->nlanes && t->reg_mask; i++)
    if (weft_lane_bit(t->reg_mask, i)) {
      weft_lane_slot *s = &f->lanes[i];
      if (s->vt.host_unregister) s->vt.host_unregister(s->self, t->host, t->bytes);
    }
  for (size_t i = 0; i < f->nlanes; i++)
    if (t->buf[i]) f->lanes[i].vt.buffer_free(f->lanes[i].self, t->buf[i]);
  if (t->prev) t->prev->next = t->next;
  else f->tensors = t->next;
  if (t->next) t->next->prev = t->prev;
  t->magic = 0;
  if (!t->borrowed) host_free(t->host, t->mapped);
  free(t->recipe);
  free(t->errmsg);
  free(t->buf), free(t->valid), free(t);
}

void weft_tensor_set_error(weft_tensor *t, uint64_t version, weft_status err, uint64_t ticket, const char *msg) {
  size_t n = strlen(msg) + 1;
  char *m = realloc(t->errmsg, n);
  if (m) memcpy(m, msg, n), t->errmsg = m;
  t->err = err;
  t->err_version = version;
  t->err_ticket = ticket;
}

weft_status weft_tensor_failure(weft_tensor *t) {
  if (!t->err || t->err_version != t->version) return WEFT_OK;
  weft_hostq_reported(t->fabric, t->err_ticket);
  return weft_fail(t->fabric, t->err, "%s", t->errmsg ? t->errmsg : weft_status_str(t->err));
}

weft_status weft_tensor_lane_buffer(weft_tensor *t, int lane, weft_buffer **out_buffer) {
  weft_fabric *f = t->fabric;
  if (weft_lane_is_host(f, lane)) {
    *out_buffer = t->host;
    return WEFT_OK;
  }
  if (!t->buf[lane]) {
    weft_lane_slot *s = &f->lanes[lane];
    weft_status st = s->vt.buffer_alloc(s->self, t->bytes, &t->buf[lane]);
    if (st != WEFT_OK) {
      t->buf[lane] = NULL;
      if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, lane);
      return st;
    }
  }
  *out_buffer = t->buf[lane];
  return WEFT_OK;
}

/* Makes the host copy current, downloading from a lane that holds the value. A lane that goes down under
 * the download takes its copy with it: the value is then computed again elsewhere, or taken from another
 * lane that holds it. `sink` (may be NULL): where the caller wants the value too; when the lane is
 * streaming it home, each piece is copied there as soon as it has landed, and *out_sunk says so (else the
 * caller copies the host memory itself). */
static weft_status make_host_valid(weft_tensor *t, void *sink, int *out_sunk) {
  weft_fabric *f = t->fabric;
  if (out_sunk) *out_sunk = 0;
  for (size_t attempt = 0;; attempt++) {
    if (t->host_valid) return WEFT_OK;
    weft_status st;
    if (t->lost) {
      if ((st = weft_tensor_recover(t, 0)) != WEFT_OK) return st;
      continue;
    }
    size_t i = 0;
    while (i < f->nlanes && !(t->valid[i] && t->buf[i])) i++;
    if (i == f->nlanes) return weft_fail(f, WEFT_ERR_INTERNAL, "tensor has no current copy anywhere (please report this)");
    weft_lane_slot *s = &f->lanes[i];
    if ((st = weft_tensor_wait_users(t)) != WEFT_OK) return st; /* queued host work still uses the memory */
    if (t->dma_lane && t->dma_lane != (int)i + 1 && (st = weft_tensor_wait_dma(t)) != WEFT_OK) return st;
    weft_tensor_offer_host(t, (int)i);
    const size_t bytes = t->numel * sizeof(float);
    /* (not when the host memory holds the value an in-place op started from: a replay may need it whole) */
    int keep = 0;
    for (int k = 0; t->recipe && k < t->recipe->nin + t->recipe->self_read; k++)
      keep |= t->recipe->in_id[k] == t->id && t->recipe->in_version[k] == t->host_version;
    /* streaming home as it is computed (into this host memory itself, op->out_host, or the lane's own): each
     * piece waits only for its own part, and is copied on while later ones are still coming */
    if (sink && sink != (void *)t->host && bytes >= WEFT_PIECED_MIN && !keep && s->vt.streaming &&
        s->vt.streaming(s->self, t->buf[i])) {
      const size_t per = piece_bytes(bytes);
      size_t off = 0;
      for (; off < bytes && st == WEFT_OK; off += per) {
        const size_t len = bytes - off < per ? bytes - off : per;
        st = s->vt.download(s->self, t->buf[i], off, (char *)t->host + off, len);
        if (st == WEFT_OK) weft_host_copy(f, (char *)sink + off, (const char *)t->host + off, len);
      }
      /* pieces of the new value landed before one failed: the host memory holds no whole version now (an
       * in-place op is not replayed from it) */
      if (st != WEFT_OK && off > per) t->host_version = 0;
      if (st == WEFT_OK && out_sunk) *out_sunk = 1;
    } else {
      st = s->vt.download(s->self, t->buf[i], 0, t->host, bytes);
    }
    if (st == WEFT_ERR_LANE_FAILED) {
      weft_lane_mark_failed(f, (int)i);
      if (out_sunk) *out_sunk = 0;
      if (attempt <= f->nlanes) continue;
    }
    if (st != WEFT_OK) return st;
    weft_lane_caught_up(f, (int)i); /* a lane works in order: what it was given before is done too */
    s->stats.bytes_down += bytes;
    t->host_valid = 1;
    t->host_version = t->version;
    t->where |= 1;
    if (t->dma_lane == (int)i + 1) t->dma_lane = 0; /* the download waited for the lane's transfers */
    return WEFT_OK;
  }
}

weft_status weft_tensor_make_valid(weft_tensor *t, int lane) {
  weft_fabric *f = t->fabric;
  weft_status st = WEFT_OK;
  if (weft_lane_is_host(f, lane)) return make_host_valid(t, NULL, NULL);
  if (t->valid[lane]) return WEFT_OK;
  if ((st = make_host_valid(t, NULL, NULL)) != WEFT_OK) return st;
  weft_buffer *b;
  if ((st = weft_tensor_lane_buffer(t, lane, &b)) != WEFT_OK) return st;
  weft_lane_slot *s = &f->lanes[lane];
  if ((st = weft_tensor_wait_writer(t)) != WEFT_OK) return st; /* the host value may still be computing */
  weft_tensor_offer_host(t, lane);
  if (t->numel) st = s->vt.upload(s->self, b, 0, t->host, t->numel * sizeof(float));
  if (st == WEFT_OK && lane >= 0 && weft_lane_bit(t->reg_mask | t->cover_mask, (size_t)lane))
    t->dma_lane = lane + 1; /* may still be reading it */
  if (st == WEFT_OK) s->stats.bytes_up += t->numel * sizeof(float);
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, lane);
  if (st == WEFT_OK) {
    t->valid[lane] = 1;
    if (lane < 63) t->where |= (uint64_t)1 << (lane + 1);
  }
  return st;
}

void weft_tensor_mark_written(weft_tensor *t, int lane) {
  weft_fabric *f = t->fabric;
  memset(t->valid, 0, f->nlanes);
  t->version++;
  t->lost = 0;
  if (weft_lane_is_host(f, lane)) {
    t->host_valid = 1;
    t->host_version = t->version;
    t->where = 1;
  } else {
    t->host_valid = 0;
    t->valid[lane] = 1;
    t->where = lane < 63 ? (uint64_t)1 << (lane + 1) : 0;
  }
}

/* The device lane a write should send the new value to as it copies it in: one the old value lived on and
 * that moves this host memory directly (registered there), so each piece's transfer is the bus's work
 * alone and overlaps the copy of the next. -1: none (the value stays on the host until an op needs it). */
static int write_through_lane(const weft_tensor *t) {
  const weft_fabric *f = t->fabric;
  if (t->bytes < WEFT_PIECED_MIN || !t->reg_mask) return -1;
  for (size_t i = 0; i < f->nlanes && i < WEFT_LANE_BITS; i++)
    if (t->valid[i] && t->buf[i] && weft_lane_bit(t->reg_mask, i) && !f->lanes[i].failed &&
        !weft_lane_is_host(f, (int)i))
      return (int)i;
  return -1;
}

/* Copies `data` into the host memory in pieces, each sent on to lane `lane` once it is in place. Returns 1
 * when the lane received all of it. A lane that refuses a piece gets no more; the host copy is complete
 * either way, and a lane that went down under it is marked down (its message stays its own: the write
 * itself succeeds). */
static int write_through(weft_tensor *t, const void *data, int lane) {
  weft_fabric *f = t->fabric;
  weft_lane_slot *s = &f->lanes[lane];
  const size_t bytes = t->numel * sizeof(float), per = piece_bytes(bytes);
  weft_status st = WEFT_OK;
  char saved[WEFT_ERR_LEN];
  memcpy(saved, f->err, sizeof saved);
  for (size_t off = 0; off < bytes; off += per) {
    const size_t len = bytes - off < per ? bytes - off : per;
    weft_host_copy(f, (char *)t->host + off, (const char *)data + off, len);
    if (st == WEFT_OK) st = s->vt.upload(s->self, t->buf[lane], off, (const char *)t->host + off, len);
  }
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, lane);
  memcpy(f->err, saved, sizeof saved);
  return st == WEFT_OK;
}

/* 1 when the caller's count floats at p overlap the tensor's host memory without being it (a wrapped tensor's
 * buffer seen from another offset): a copy between them would read what it has already overwritten. */
static int overlaps_host(const weft_tensor *t, const void *p, size_t count) {
  const uintptr_t a = (uintptr_t)p, h = (uintptr_t)t->host;
  return count && p != (const void *)t->host && a < h + count * 4 && h < a + count * 4;
}

static weft_status tensor_write(weft_tensor *t, weft_dtype dtype, const void *data, size_t count) {
  weft_status st = weft_tensor_check(NULL, t, "tensor");
  if (st != WEFT_OK) return st;
  weft_fabric *f = t->fabric;
  if (t->dtype != dtype)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write%s: the tensor is %s; use weft_tensor_write%s",
                     dtype == WEFT_DTYPE_I32 ? "_i32" : "", weft_dtype_str(t->dtype),
                     t->dtype == WEFT_DTYPE_I32 ? "_i32" : "");
  if (!data) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write: data is NULL");
  if (count != t->numel)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_tensor_write: %zu floats given, the tensor holds %zu", count, t->numel);
  if (overlaps_host(t, data, count))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_write: data overlaps the tensor's own (wrapped) memory "
                     "at another address; pass that same pointer, or memory apart from it");
  if (f->lost) weft_fabric_recover_all(f); /* a lost value may have been made from the old one */
  if ((st = weft_tensor_wait_users(t)) != WEFT_OK) return st;
  if ((st = weft_tensor_wait_dma(t)) != WEFT_OK) return st;
  int through = -1;
  if (data != (const void *)t->host) { /* a wrapped tensor's own memory: no copy */
    const int lane = write_through_lane(t);
    if (lane < 0) weft_host_copy(f, t->host, data, count * 4);
    else if (write_through(t, data, lane)) through = lane;
  }
  weft_tensor_mark_written(t, -1);
  if (through >= 0) { /* the lane holds the new value too, and may still be reading the host memory */
    t->valid[through] = 1;
    if (through < 63) t->where |= (uint64_t)1 << (through + 1);
    t->dma_lane = through + 1;
    f->lanes[through].stats.bytes_up += count * 4;
  }
  return WEFT_OK;
}

static weft_status tensor_read(weft_tensor *t, weft_dtype dtype, void *out_data, size_t count) {
  weft_status st = weft_tensor_check(NULL, t, "tensor");
  if (st != WEFT_OK) return st;
  weft_fabric *f = t->fabric;
  if (t->dtype != dtype)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read%s: the tensor is %s; use weft_tensor_read%s",
                     dtype == WEFT_DTYPE_I32 ? "_i32" : "", weft_dtype_str(t->dtype),
                     t->dtype == WEFT_DTYPE_I32 ? "_i32" : "");
  if (!out_data) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read: out_data is NULL");
  if (count != t->numel)
    return weft_fail(f, WEFT_ERR_SHAPE, "weft_tensor_read: room for %zu floats given, the tensor holds %zu", count,
                     t->numel);
  if (overlaps_host(t, out_data, count))
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_read: out_data overlaps the tensor's own (wrapped) "
                     "memory at another address; pass that same pointer, or memory apart from it");
  int sunk = 0;
  if (out_data != (void *)t->host) host_advise(out_data, count * 4);
  if (!t->host_valid && !t->lost) {
    /* a value made on a device lane: its failure, if any, is known before anything reaches out_data */
    if ((st = weft_tensor_wait_writer(t)) != WEFT_OK) return st;
    if ((st = weft_tensor_failure(t)) != WEFT_OK) return st;
  }
  if ((st = make_host_valid(t, out_data, &sunk)) != WEFT_OK) return st;
  if ((st = weft_tensor_wait_writer(t)) != WEFT_OK) return st;
  /* the op that was to make this value failed: its failure, and nothing copied */
  if ((st = weft_tensor_failure(t)) != WEFT_OK) return st;
  if (!sunk && out_data != (void *)t->host) weft_host_copy(f, out_data, t->host, count * 4);
  return WEFT_OK;
}

weft_status weft_tensor_write(weft_tensor *t, const float *data, size_t count) {
  return tensor_write(t, WEFT_DTYPE_F32, data, count);
}
weft_status weft_tensor_write_i32(weft_tensor *t, const int32_t *data, size_t count) {
  return tensor_write(t, WEFT_DTYPE_I32, data, count);
}
weft_status weft_tensor_read(weft_tensor *t, float *out_data, size_t count) {
  return tensor_read(t, WEFT_DTYPE_F32, out_data, count);
}
weft_status weft_tensor_read_i32(weft_tensor *t, int32_t *out_data, size_t count) {
  return tensor_read(t, WEFT_DTYPE_I32, out_data, count);
}

weft_status weft_tensor_shape(const weft_tensor *t, int *out_ndim, int64_t *out_dims) {
  if (out_ndim) *out_ndim = 0;
  if (!t || t->magic != WEFT_TENSOR_MAGIC) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out_ndim || !out_dims)
    return weft_fail(t->fabric, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_shape: out_ndim or out_dims is NULL");
  *out_ndim = t->ndim;
  memcpy(out_dims, t->dims, sizeof t->dims);
  return WEFT_OK;
}

size_t weft_tensor_numel(const weft_tensor *t) { return t && t->magic == WEFT_TENSOR_MAGIC ? t->numel : 0; }

weft_status weft_tensor_prefetch(weft_tensor *t, size_t lane) {
  weft_status st = weft_tensor_check(NULL, t, "weft_tensor_prefetch: tensor");
  if (st != WEFT_OK) return st;
  weft_fabric *f = t->fabric;
  if (lane >= f->nlanes)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_tensor_prefetch: lane %zu is not one of the fabric's %zu lanes",
                     lane, f->nlanes);
  if (f->lanes[lane].failed)
    return weft_fail(f, WEFT_ERR_LANE_FAILED, "weft_tensor_prefetch: lane %s is down", f->lanes[lane].desc.name);
  if ((st = weft_tensor_make_valid(t, (int)lane)) == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, (int)lane);
  return st;
}

const char *weft_tensor_location(const weft_tensor *tc) {
  if (!tc || tc->magic != WEFT_TENSOR_MAGIC) return "";
  weft_tensor *t = (weft_tensor *)tc;
  weft_fabric *f = t->fabric;
  size_t used = 0;
  t->location[0] = '\0';
  if (t->host_valid) used = (size_t)snprintf(t->location, sizeof t->location, "host");
  for (size_t i = 0; i < f->nlanes && used < sizeof t->location; i++)
    if (t->valid[i])
      used += (size_t)snprintf(t->location + used, sizeof t->location - used, "%s%s", used ? "," : "",
                               f->lanes[i].desc.name);
  return t->location;
}

/* ------------------------------------------------------------------------------ registered host memory */

/* Tensors smaller than this are cheap to stage; pinning them would cost more than it saves. */
#define WEFT_REGISTER_MIN_BYTES ((size_t)1 << 20)

void weft_tensor_offer_host(weft_tensor *t, int lane) {
  weft_fabric *f = t->fabric;
  if (lane < 0 || lane >= WEFT_LANE_BITS || weft_lane_bit(t->reg_mask, (size_t)lane) || t->bytes < WEFT_REGISTER_MIN_BYTES)
    return;
  weft_lane_slot *s = &f->lanes[lane];
  if (!s->vt.host_register || ++t->xfers < 2) return;
  char saved[WEFT_ERR_LEN];
  memcpy(saved, f->err, sizeof saved); /* a refusal is not an error the caller should see */
  if (s->vt.host_register(s->self, t->host, t->bytes) == WEFT_OK) {
    t->reg_mask |= (uint64_t)1 << lane;
    weft_route_forget(f); /* its transfers cost less now (splits key what they measured on it too) */
  }
  memcpy(f->err, saved, sizeof saved);
}

weft_status weft_tensor_wait_dma(weft_tensor *t) {
  if (!t->dma_lane) return WEFT_OK;
  weft_fabric *f = t->fabric;
  weft_lane_slot *s = &f->lanes[t->dma_lane - 1];
  weft_status st = WEFT_OK;
  if (!s->failed && s->vt.sync && (st = s->vt.sync(s->self)) == WEFT_OK) weft_lane_caught_up(f, t->dma_lane - 1);
  if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, t->dma_lane - 1);
  t->dma_lane = 0; /* a failed lane's transfers are over too */
  return st == WEFT_ERR_LANE_FAILED ? WEFT_OK : st;
}

/* ------------------------------------------------------------------------------------------- recovery */

void weft_tensor_note_recipe(weft_tensor **in, int nin, weft_tensor **out, int nout, const weft_op *op,
                             const weft_op_params *params, int lane) {
  weft_fabric *f = NULL;
  for (int o = 0; o < nout && !f; o++)
    if (out[o]) f = out[o]->fabric;
  if (!f) return;
  const weft_optable_entry *e = &weft_optable[op->kind];
  for (int o = 0; o < nout; o++) {
    weft_tensor *t = out[o];
    if (!t) continue;
    /* replayable for this output alone: no other output is read by the op (required ones get scratch) */
    int alone = 1;
    for (int q = 0; q < nout; q++)
      if (q != o && ((e->out_reads >> q) & 1) && out[q]) alone = 0;
    if (weft_lane_is_host(f, lane) || !alone) {
      /* host memory does not go down with a lane: nothing to recompute (or no way to recompute one output) */
      free(t->recipe);
      t->recipe = NULL;
      continue;
    }
    if (!t->recipe && !(t->recipe = malloc(sizeof *t->recipe))) continue; /* no record: not recoverable */
    weft_recipe *r = t->recipe;
    memset(r, 0, sizeof *r);
    r->kind = op->kind;
    r->contract = op->contract;
    if (params) r->params = *params;
    r->out_slot = o;
    r->nin = nin;
    for (int i = 0; i < nin; i++)
      if (in[i]) r->in_id[i] = in[i]->id, r->in_version[i] = in[i]->version;
    if ((e->out_reads >> o) & 1) r->in_id[nin] = t->id, r->in_version[nin] = t->version, r->self_read = 1;
    r->nout = nout;
    for (int q = 0; q < nout; q++)
      if (q != o && out[q] && !((e->out_optional >> q) & 1)) {
        r->out_ndim[q] = out[q]->ndim, r->out_dtype[q] = out[q]->dtype;
        memcpy(r->out_dims[q], out[q]->dims, sizeof r->out_dims[q]);
      }
  }
}
