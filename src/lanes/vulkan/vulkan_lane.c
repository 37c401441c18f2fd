/* vulkan_lane.c - the Vulkan lane: one lane `vulkan:N` per physical device. Owns the device, its memory
 * (tensors stay resident; uploads and downloads go through staging memory), and the batching of work:
 * every op and copy is recorded into a pending command buffer that is submitted when a result is read,
 * at weft_fabric_sync or weft_scope_end, or outside a scope when a batch grows large. Inside a scope a batch
 * is submitted once, unless a read flushes it. The kernels and the splitting of ops live in vk_ops.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/hostcopy.h"
#include "vk_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* Drivers set up once-only state when they enumerate devices (lavapipe: LLVM's) and are unloaded with the
 * instance, after which LeakSanitizer can no longer see what pointed to it and reports a leak in an
 * unknown module. What the driver allocates there is its own business; weft allocates nothing inside. */
#define DRIVER_ALLOCS_BEGIN() __lsan_disable()
#define DRIVER_ALLOCS_END() __lsan_enable()
#else
#define DRIVER_ALLOCS_BEGIN() ((void)0)
#define DRIVER_ALLOCS_END() ((void)0)
#endif

/* Outside a scope a batch is submitted (without waiting) once it holds this many commands, so a long loop
 * of ops without a sync keeps the device busy and the recording bounded. */
#define VK_BATCH_MAX_CMDS 512
/* Staging a batch may accumulate before it is submitted, in or out of a scope (host memory is finite). */
#define VK_BATCH_MAX_STAGED ((VkDeviceSize)256 << 20)
/* Staging is carved from chunks of this size; larger copies get a chunk of their own. */
#define VK_STAGE_CHUNK ((VkDeviceSize)8 << 20)
/* How long a wait polls before it blocks. */
#define VK_SPIN_NS 200000L
/* A readback buffer larger than this is given back after the download. */
#define VK_READBACK_KEEP ((VkDeviceSize)64 << 20)

int weft_vk_force_matmul_kernel = 0;
int weft_vk_disable_push_descriptors = 0;
int weft_vk_inject_fault = WEFT_VK_FAULT_NONE;
int weft_vk_ignore_loop_limit = 0;
uint64_t weft_vk_stat_dispatches = 0;
uint64_t weft_vk_stat_fused_ops = 0;

weft_status weft_vk_check(weft_vk_lane *l, VkResult r, const char *what) {
  if (r == VK_SUCCESS) return WEFT_OK;
  if (r == VK_ERROR_DEVICE_LOST) {
    l->lost = 1;
    return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED,
                            "%s: the device was lost during %s (GPU fault, driver reset or hang); the lane has left "
                            "the fabric and its tensors' copies there are gone",
                            l->name, what);
  }
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: %s ran out of %s memory (%s): free tensors or use smaller work",
                            l->name, what, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host",
                            weft_vk_result_str(r));
  return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: %s failed: %s", l->name, what, weft_vk_result_str(r));
}

static weft_status lost_status(weft_vk_lane *l) {
  return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the device was lost earlier; the lane is out of the fabric",
                          l->name);
}

/* ------------------------------------------------------------------------------------------- memory */

/* The memory type for `bits`: all of `need`, preferably all of `want`, preferably none of `avoid`. */
static int pick_memory_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits, VkMemoryPropertyFlags need,
                            VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
    if (!(bits & (1u << i)) || (f & need) != need) continue;
    int score = ((f & want) == want ? 2 : 0) + ((f & avoid) == 0 ? 1 : 0);
    if (score > best_score) best = (int)i, best_score = score;
  }
  return best;
}

static weft_status buf_make(weft_vk_lane *l, VkDeviceSize bytes, VkBufferUsageFlags usage, int host, vk_buf **out_b,
                            void **out_map) {
  *out_b = NULL;
  VkDeviceSize size = (bytes + 15) & ~(VkDeviceSize)15;
  if (size == 0) size = 16;
  vk_buf *b = calloc(1, sizeof *b);
  if (!b) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
  VkBufferCreateInfo bi = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, size, usage, VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
  VkResult r = l->vkCreateBuffer(l->dev, &bi, NULL, &b->buf);
  if (r != VK_SUCCESS) {
    free(b);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY,
                              "%s: cannot create a buffer of %llu bytes (%s): the device's largest buffer may be "
                              "smaller; use smaller tensors",
                              l->name, (unsigned long long)size, weft_vk_result_str(r));
    return weft_vk_check(l, r, "vkCreateBuffer");
  }
  VkMemoryRequirements req;
  l->vkGetBufferMemoryRequirements(l->dev, b->buf, &req);
  VkPhysicalDeviceMemoryProperties mp;
  l->vi->vkGetPhysicalDeviceMemoryProperties(l->phys, &mp);
  int type = host ? pick_memory_type(&mp, req.memoryTypeBits,
                                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                     VK_MEMORY_PROPERTY_HOST_CACHED_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                  : pick_memory_type(&mp, req.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                     VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  if (type < 0) {
    l->vkDestroyBuffer(l->dev, b->buf, NULL);
    free(b);
    return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the device offers no %s memory type for buffers",
                            l->name, host ? "host-visible coherent" : "usable");
  }
  VkMemoryAllocateInfo ai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, (uint32_t)type};
  if (!host && weft_vk_inject_fault == WEFT_VK_FAULT_OOM) {
    weft_vk_inject_fault = WEFT_VK_FAULT_NONE;
    r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  } else {
    r = l->vkAllocateMemory(l->dev, &ai, NULL, &b->mem);
  }
  if (r != VK_SUCCESS) {
    l->vkDestroyBuffer(l->dev, b->buf, NULL);
    free(b);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY,
                              "%s: out of %s memory allocating %.1f MiB: free tensors or use smaller work", l->name,
                              host ? "staging" : "device", (double)req.size / 1048576.0);
    return weft_vk_check(l, r, "vkAllocateMemory");
  }
  r = l->vkBindBufferMemory(l->dev, b->buf, b->mem, 0);
  if (r == VK_SUCCESS && out_map) r = l->vkMapMemory(l->dev, b->mem, 0, VK_WHOLE_SIZE, 0, out_map);
  if (r != VK_SUCCESS) {
    l->vkDestroyBuffer(l->dev, b->buf, NULL);
    l->vkFreeMemory(l->dev, b->mem, NULL);
    free(b);
    return weft_vk_check(l, r, out_map ? "vkMapMemory" : "vkBindBufferMemory");
  }
  b->size = size;
  *out_b = b;
  return WEFT_OK;
}

weft_status weft_vk_buf_create(weft_vk_lane *l, VkDeviceSize bytes, vk_buf **out) {
  return buf_make(l, bytes,
                  VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                  0, out, NULL);
}

void weft_vk_buf_destroy(weft_vk_lane *l, vk_buf *b) {
  if (!b) return;
  l->vkDestroyBuffer(l->dev, b->buf, NULL);
  l->vkFreeMemory(l->dev, b->mem, NULL); /* unmaps too */
  free(b);
}

static void stage_destroy(weft_vk_lane *l, vk_stage *s) {
  l->vkDestroyBuffer(l->dev, s->buf, NULL);
  l->vkFreeMemory(l->dev, s->mem, NULL);
}

/* Carves `bytes` of staging from batch b. */
static weft_status stage_alloc(weft_vk_lane *l, vk_batch *b, VkDeviceSize bytes, vk_stage **out_s, VkDeviceSize *out_off) {
  VkDeviceSize need = (bytes + 15) & ~(VkDeviceSize)15;
  if (b->nstages) {
    vk_stage *s = &b->stages[b->nstages - 1];
    if (s->size - s->used >= need) {
      *out_s = s, *out_off = s->used;
      s->used += need;
      b->staged += need;
      return WEFT_OK;
    }
  }
  if (b->nstages == b->cap_stages) {
    uint32_t cap = b->cap_stages ? b->cap_stages * 2 : 4;
    vk_stage *grown = realloc(b->stages, cap * sizeof *grown);
    if (!grown) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
    b->stages = grown, b->cap_stages = cap;
  }
  vk_buf *tmp;
  void *map = NULL;
  VkDeviceSize size = need > VK_STAGE_CHUNK ? need : VK_STAGE_CHUNK;
  weft_status st =
      buf_make(l, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1, &tmp, &map);
  if (st != WEFT_OK) return st;
  vk_stage *s = &b->stages[b->nstages++];
  s->buf = tmp->buf, s->mem = tmp->mem, s->map = map, s->size = tmp->size, s->used = need;
  free(tmp);
  b->staged += need;
  *out_s = s, *out_off = 0;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ batches */

static void batch_recycle(weft_vk_lane *l, vk_batch *b) {
  for (size_t i = 0; i < b->nfrees; i++) weft_vk_buf_destroy(l, b->frees[i]);
  b->nfrees = 0;
  /* Keep one standard chunk of staging for the next use; larger ones go back. */
  uint32_t kept = 0;
  for (uint32_t i = 0; i < b->nstages; i++) {
    if (kept == 0 && b->stages[i].size == VK_STAGE_CHUNK) {
      b->stages[0] = b->stages[i];
      b->stages[0].used = 0;
      kept = 1;
    } else {
      stage_destroy(l, &b->stages[i]);
    }
  }
  b->nstages = kept;
  b->staged = 0;
  for (uint32_t i = 0; i < b->dpool_cur; i++) l->vkResetDescriptorPool(l->dev, b->dpools[i], 0);
  b->dpool_cur = 0;
  b->dsets_left = 0;
  b->ncmds = 0;
  if (b->serial > l->done_serial) l->done_serial = b->serial;
  b->state = VK_BATCH_FREE;
}

/* Waits for a submitted batch and recycles it. Short work is polled for a moment first: a blocking wait
 * costs a sleep and a wake-up, tens of microseconds on some drivers, which a readback would pay every time. */
static weft_status batch_wait(weft_vk_lane *l, vk_batch *b) {
  VkResult r = VK_NOT_READY;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; r == VK_NOT_READY; i++) {
    r = l->vkGetFenceStatus(l->dev, b->fence);
    if (r != VK_NOT_READY || (i & 63) != 63) continue;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > VK_SPIN_NS) break;
  }
  if (r == VK_NOT_READY) r = l->vkWaitForFences(l->dev, 1, &b->fence, VK_TRUE, UINT64_MAX);
  if (r == VK_SUCCESS && weft_vk_inject_fault == WEFT_VK_FAULT_DEVICE_LOST) {
    weft_vk_inject_fault = WEFT_VK_FAULT_NONE;
    r = VK_ERROR_DEVICE_LOST;
  }
  if (r == VK_SUCCESS) r = l->vkResetFences(l->dev, 1, &b->fence);
  if (r != VK_SUCCESS) {
    l->lost = 1; /* the work's results are unknown: the lane cannot be trusted any more */
    weft_status st = weft_vk_check(l, r, "waiting for submitted work");
    return st == WEFT_ERR_OUT_OF_MEMORY ? WEFT_ERR_LANE_FAILED : st;
  }
  batch_recycle(l, b);
  return WEFT_OK;
}

static vk_batch *oldest_submitted(weft_vk_lane *l) {
  vk_batch *o = NULL;
  for (int i = 0; i < VK_NBATCH; i++)
    if (l->batches[i].state == VK_BATCH_SUBMITTED && (!o || l->batches[i].serial < o->serial)) o = &l->batches[i];
  return o;
}

weft_status weft_vk_batch_get(weft_vk_lane *l, vk_batch **out) {
  *out = NULL;
  if (l->lost) return lost_status(l);
  if (l->cur >= 0) {
    *out = &l->batches[l->cur];
    return WEFT_OK;
  }
  int idx = -1;
  for (int i = 0; i < VK_NBATCH && idx < 0; i++)
    if (l->batches[i].state == VK_BATCH_FREE) idx = i;
  if (idx < 0) {
    vk_batch *o = oldest_submitted(l);
    weft_status st = batch_wait(l, o);
    if (st != WEFT_OK) return st;
    idx = (int)(o - l->batches);
  }
  vk_batch *b = &l->batches[idx];
  VkResult r = l->vkResetCommandPool(l->dev, b->pool, 0);
  VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                 VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
  if (r == VK_SUCCESS) r = l->vkBeginCommandBuffer(b->cmd, &bi);
  if (r != VK_SUCCESS) return weft_vk_check(l, r, "starting a command buffer");
  b->state = VK_BATCH_RECORDING;
  b->serial = l->next_serial++;
  b->ncmds = 0;
  b->bound = VK_NULL_HANDLE;
  /* Work of earlier submissions is made visible by a barrier before this batch's first command. */
  l->epoch += 2;
  l->fresh = 1;
  l->cur = idx;
  *out = b;
  return WEFT_OK;
}

weft_status weft_vk_flush(weft_vk_lane *l) {
  if (l->cur < 0) return WEFT_OK;
  vk_batch *b = &l->batches[l->cur];
  if (b->ncmds == 0 && b->nfrees == 0) return WEFT_OK; /* nothing to run: keep recording into it */
  VkResult r = l->vkEndCommandBuffer(b->cmd);
  VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &b->cmd, 0, NULL};
  if (r == VK_SUCCESS) r = l->vkQueueSubmit(l->queue, 1, &si, b->fence);
  l->cur = -1;
  if (r != VK_SUCCESS) {
    /* Ops already reported as done would silently not happen: the lane cannot go on. */
    l->lost = 1;
    b->state = VK_BATCH_FREE;
    weft_status st = weft_vk_check(l, r, "submitting work");
    return st == WEFT_ERR_OUT_OF_MEMORY ? WEFT_ERR_LANE_FAILED : st;
  }
  b->state = VK_BATCH_SUBMITTED;
  return WEFT_OK;
}

weft_status weft_vk_finish(weft_vk_lane *l) {
  if (l->lost) return lost_status(l);
  weft_status st = weft_vk_flush(l);
  if (st != WEFT_OK) return st;
  vk_batch *o;
  while ((o = oldest_submitted(l)) != NULL)
    if ((st = batch_wait(l, o)) != WEFT_OK) return st;
  return WEFT_OK;
}

void weft_vk_hazard(weft_vk_lane *l, vk_batch *b, vk_buf *const *in, int nin, vk_buf *const *out, int nout,
                    int transfer) {
  int need = l->fresh;
  for (int i = 0; i < nin && !need; i++) need = in[i]->w_epoch == l->epoch;
  for (int i = 0; i < nout && !need; i++) need = out[i]->w_epoch == l->epoch || out[i]->r_epoch == l->epoch;
  VkPipelineStageFlags stage = transfer ? VK_PIPELINE_STAGE_TRANSFER_BIT : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
  if (need) {
    /* Only the stages and writes since the last barrier: a compute-to-compute barrier is what a chain of
     * dispatches pays for, and a narrower one is cheaper on some drivers. The first barrier of a batch
     * covers everything submitted before it. */
    VkPipelineStageFlags src = l->fresh ? VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT
                                        : l->used_stages;
    VkAccessFlags wrote = l->fresh ? VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT : l->written;
    VkAccessFlags dst_access = transfer ? VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT
                                        : VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, wrote, dst_access};
    l->vkCmdPipelineBarrier(b->cmd, src ? src : stage, stage, 0, 1, &mb, 0, NULL, 0, NULL);
    l->epoch++;
    l->fresh = 0;
    l->used_stages = 0;
    l->written = 0;
  }
  l->used_stages |= stage;
  if (nout) l->written |= transfer ? VK_ACCESS_TRANSFER_WRITE_BIT : VK_ACCESS_SHADER_WRITE_BIT;
  for (int i = 0; i < nin; i++) in[i]->r_epoch = l->epoch, in[i]->last_serial = b->serial;
  for (int i = 0; i < nout; i++) out[i]->w_epoch = l->epoch, out[i]->last_serial = b->serial;
}

void weft_vk_buf_release(weft_vk_lane *l, vk_buf *b) {
  if (!b) return;
  vk_batch *newest = l->cur >= 0 ? &l->batches[l->cur] : NULL;
  for (int i = 0; i < VK_NBATCH && !newest; i++)
    if (l->batches[i].state == VK_BATCH_SUBMITTED && (!newest || l->batches[i].serial > newest->serial))
      newest = &l->batches[i];
  if (l->lost || b->last_serial <= l->done_serial || b->last_serial == 0 || !newest) {
    weft_vk_buf_destroy(l, b);
    return;
  }
  if (newest->nfrees == newest->cap_frees) {
    size_t cap = newest->cap_frees ? newest->cap_frees * 2 : 16;
    vk_buf **grown = realloc(newest->frees, cap * sizeof *grown);
    if (!grown) { /* no room to defer: wait for the device instead */
      weft_vk_finish(l);
      weft_vk_buf_destroy(l, b);
      return;
    }
    newest->frees = grown, newest->cap_frees = cap;
  }
  newest->frees[newest->nfrees++] = b;
}

/* ------------------------------------------------------------------------------------------- vtable */

static void vk_describe(void *self, weft_lane_desc *out) {
  weft_vk_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = "vulkan";
  out->device = l->device;
  out->driver = l->driver;
  out->details = l->details;
  out->contracts = WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32);
  out->flags = 0;
  out->ops = weft_vk_ops_offered();
}

static void vk_destroy(void *self) {
  weft_vk_lane *l = self;
  if (!l) return;
  if (l->dev) {
    l->vkDeviceWaitIdle(l->dev); /* a lost device answers at once; nothing more to wait for then */
    for (int i = 0; i < VK_NBATCH; i++) {
      vk_batch *b = &l->batches[i];
      batch_recycle(l, b);
      for (uint32_t s = 0; s < b->nstages; s++) stage_destroy(l, &b->stages[s]);
      for (uint32_t p = 0; p < b->ndpools; p++) l->vkDestroyDescriptorPool(l->dev, b->dpools[p], NULL);
      if (b->fence) l->vkDestroyFence(l->dev, b->fence, NULL);
      if (b->pool) l->vkDestroyCommandPool(l->dev, b->pool, NULL);
      free(b->stages), free(b->frees), free(b->dpools);
    }
    if (l->readback) weft_vk_buf_destroy(l, l->readback);
    weft_vk_ops_destroy(l);
    l->vkDestroyDevice(l->dev, NULL);
  }
  weft_vk_instance_release(l->vi);
  weft_hostcopy_release(l->copier);
  free(l);
}

static weft_status vk_buffer_alloc(void *self, size_t bytes, weft_buffer **out) {
  weft_vk_lane *l = self;
  *out = NULL;
  if (l->lost) return lost_status(l);
  vk_buf *b;
  weft_status st = weft_vk_buf_create(l, bytes, &b);
  if (st == WEFT_OK) *out = b;
  return st;
}

/* ------------------------------------------------------------------------------------------- fusion */

/* Inside a scope ops pass through the fusion window (src/lanes/fuse.h) before they are recorded. Whatever
 * must see them in order empties it first: a download, sync, flush and the end of the scope always; an
 * upload or free only of a buffer a held op uses (anything else is independent of them). */
/* The window's emit. Ops it held were reported done to the core: when recording them fails their results
 * would silently not exist, so the lane goes down (the core then recomputes what it held elsewhere), as it
 * does when a submission fails. */
static weft_status fuse_emit(void *ctx, const weft_fused *f) {
  weft_vk_lane *l = ctx;
  weft_status st = weft_vk_ops_run_fused(l, f);
  if (st == WEFT_OK || f->held == 0 || l->lost) return st;
  l->lost = 1;
  return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED,
                          "%s: recording %s (%d ops held back for fusion) failed (%s); the lane cannot go on "
                          "without them",
                          l->name, f->kind == WEFT_FUSED_SINGLE ? "an op" : "a fused kernel", f->nops,
                          weft_status_str(st));
}

static weft_status fuse_drain(weft_vk_lane *l) {
  if (l->fuse.n == 0) return WEFT_OK;
  if (l->lost) {
    l->fuse.n = 0; /* nothing can run any more; the caller reports the loss */
    return WEFT_OK;
  }
  return weft_fuse_flush(&l->fuse, fuse_emit, l);
}

static void vk_buffer_free(void *self, weft_buffer *buffer) {
  weft_vk_lane *l = self;
  /* A held op's buffer: record it first (a failure takes the lane down; its next call says so) */
  if (weft_fuse_uses(&l->fuse, buffer)) (void)fuse_drain(l);
  weft_vk_buf_release(l, buffer);
}

static weft_status maybe_flush(weft_vk_lane *l) {
  if (l->cur < 0) return WEFT_OK;
  vk_batch *b = &l->batches[l->cur];
  if (b->staged >= VK_BATCH_MAX_STAGED || (!l->in_scope && b->ncmds >= VK_BATCH_MAX_CMDS)) return weft_vk_flush(l);
  return WEFT_OK;
}

/* A copy into or out of mapped staging memory, on several threads when it is large. */
static void stage_copy(weft_vk_lane *l, void *dst, const void *src, size_t bytes) {
  if (bytes >= WEFT_HOSTCOPY_MIN && !l->copier_tried) {
    l->copier_tried = 1;
    l->copier = weft_hostcopy_acquire();
  }
  weft_hostcopy_run(bytes >= WEFT_HOSTCOPY_MIN ? l->copier : NULL, dst, src, bytes);
}

static weft_status vk_upload(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes) {
  weft_vk_lane *l = self;
  vk_buf *dst = buffer;
  if (bytes == 0) return WEFT_OK;
  weft_status st = weft_fuse_uses(&l->fuse, dst) ? fuse_drain(l) : WEFT_OK;
  if (st != WEFT_OK) return st;
  vk_batch *b;
  st = weft_vk_batch_get(l, &b);
  if (st != WEFT_OK) return st;
  vk_stage *s = NULL;
  VkDeviceSize off = 0;
  if ((st = stage_alloc(l, b, bytes, &s, &off)) != WEFT_OK) return st;
  stage_copy(l, (char *)s->map + off, src, bytes);
  weft_vk_hazard(l, b, NULL, 0, &dst, 1, 1);
  VkBufferCopy region = {off, offset, bytes};
  l->vkCmdCopyBuffer(b->cmd, s->buf, dst->buf, 1, &region);
  b->ncmds++;
  return maybe_flush(l);
}

static weft_status vk_download(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes) {
  weft_vk_lane *l = self;
  vk_buf *src = buffer;
  if (bytes == 0) return WEFT_OK;
  weft_status st = fuse_drain(l);
  if (st != WEFT_OK) return st;
  void *map = NULL;
  if (!l->readback || l->readback->size < bytes) {
    /* Downloads wait for their copy, so the old readback buffer is idle. */
    if (l->readback) weft_vk_buf_destroy(l, l->readback), l->readback = NULL;
    st = buf_make(l, bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1, &l->readback, &map);
    if (st != WEFT_OK) return st;
    l->readback_map = map;
  }
  vk_batch *b;
  if ((st = weft_vk_batch_get(l, &b)) != WEFT_OK) return st;
  weft_vk_hazard(l, b, &src, 1, NULL, 0, 1);
  VkBufferCopy region = {offset, 0, bytes};
  l->vkCmdCopyBuffer(b->cmd, src->buf, l->readback->buf, 1, &region);
  VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
  l->vkCmdPipelineBarrier(b->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                          NULL);
  b->ncmds++;
  /* Inside a scope this is the flush a read implies; the scope goes on in a new batch. */
  if ((st = weft_vk_finish(l)) != WEFT_OK) return st;
  stage_copy(l, dst, l->readback_map, bytes);
  if (l->readback->size > VK_READBACK_KEEP) {
    weft_vk_buf_destroy(l, l->readback);
    l->readback = NULL, l->readback_map = NULL;
  }
  return WEFT_OK;
}

static weft_status vk_supports(void *self, const weft_op *op) { return weft_vk_ops_supports(self, op); }

static weft_status vk_run(void *self, const weft_op *op) {
  weft_vk_lane *l = self;
  if (l->lost) return lost_status(l);
  weft_status st;
  if (l->fuse_on && l->in_scope) {
    /* refused now, not when the window lets it go */
    if ((st = weft_vk_ops_supports(l, op)) != WEFT_OK) return st;
    st = weft_fuse_run(&l->fuse, op, fuse_emit, l);
  } else {
    st = weft_vk_ops_run(l, op);
  }
  if (st != WEFT_OK) return st;
  return maybe_flush(l);
}

static weft_status vk_scope_begin(void *self) {
  weft_vk_lane *l = self;
  if (l->lost) return lost_status(l);
  l->in_scope = 1;
  return WEFT_OK;
}

static weft_status vk_scope_end(void *self) {
  weft_vk_lane *l = self;
  weft_status st = fuse_drain(l);
  l->in_scope = 0;
  return st != WEFT_OK ? st : weft_vk_finish(l);
}

static weft_status vk_sync(void *self) {
  weft_vk_lane *l = self;
  weft_status st = fuse_drain(l);
  return st != WEFT_OK ? st : weft_vk_finish(l);
}

static weft_status vk_flush(void *self) {
  weft_vk_lane *l = self;
  if (l->lost) return lost_status(l);
  weft_status st = fuse_drain(l);
  if (st != WEFT_OK) return st;
  return l->in_scope ? WEFT_OK : weft_vk_flush(l);
}

/* Finished everything given so far? Commands recorded but not yet submitted count as unfinished; never
 * blocks (a split polls it while the CPU computes its share). A lost device says yes: its next wait reports
 * the loss. */
static int vk_idle(void *self) {
  weft_vk_lane *l = self;
  if (l->lost) return 1;
  if (l->fuse.n) return 0; /* held by the fusion window: recorded at the next flush or sync */
  if (l->cur >= 0 && (l->batches[l->cur].ncmds || l->batches[l->cur].nfrees)) return 0;
  for (int i = 0; i < VK_NBATCH; i++)
    if (l->batches[i].state == VK_BATCH_SUBMITTED && l->vkGetFenceStatus(l->dev, l->batches[i].fence) != VK_SUCCESS)
      return 0;
  return 1;
}

static const weft_lane_vtable VK_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION, .size = sizeof(weft_lane_vtable), .describe = vk_describe,
    .destroy = vk_destroy, .buffer_alloc = vk_buffer_alloc, .buffer_free = vk_buffer_free, .upload = vk_upload,
    .download = vk_download, .supports = vk_supports, .run = vk_run, .scope_begin = vk_scope_begin,
    .scope_end = vk_scope_end, .sync = vk_sync, .flush = vk_flush, .idle = vk_idle,
};

/* -------------------------------------------------------------------------------------------- probe */

static const char *device_type_str(VkPhysicalDeviceType t) {
  switch (t) {
  case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
  case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
  case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
  case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
  default: return "other device";
  }
}

static void human_bytes(char *buf, size_t len, uint64_t v) {
  if (v >= ((uint64_t)1 << 30) && v % ((uint64_t)1 << 30) == 0) snprintf(buf, len, "%llu GiB", (unsigned long long)(v >> 30));
  else if (v >= ((uint64_t)1 << 20)) snprintf(buf, len, "%.0f MiB", (double)v / 1048576.0);
  else if (v >= 1024) snprintf(buf, len, "%.0f KiB", (double)v / 1024.0);
  else snprintf(buf, len, "%llu B", (unsigned long long)v);
}

static int has_extension(const VkExtensionProperties *ext, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(ext[i].extensionName, name) == 0) return 1;
  return 0;
}

/* Creates the lane for physical device `index`; NULL with `why` filled when it cannot run here. */
static weft_vk_lane *lane_create(weft_vk_instance *vi, VkPhysicalDevice phys, uint32_t index,
                                 const weft_probe_args *args, char *why, size_t why_len) {
  weft_vk_lane *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(why, why_len, "out of host memory");
    return NULL;
  }
  l->host = args->host;
  l->vi = vi;
  vi->refs++;
  l->phys = phys;
  l->cur = -1;
  l->next_serial = 1;
  l->epoch = 1;
  l->fuse_on = weft_fuse_env_enabled();
  weft_fuse_init(&l->fuse, WEFT_FUSE_MATMUL_EPILOGUE | WEFT_FUSE_ADD_LAYERNORM, WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT));
  snprintf(l->name, sizeof l->name, "vulkan:%u", index);
  vi->vkGetPhysicalDeviceProperties(phys, &l->props);
  const VkPhysicalDeviceLimits *lim = &l->props.limits;
  snprintf(l->device, sizeof l->device, "%s", l->props.deviceName);

  /* Driver name and float controls come with Vulkan 1.2 on both sides. */
  VkPhysicalDeviceDriverProperties drv;
  VkPhysicalDeviceFloatControlsProperties fc;
  memset(&drv, 0, sizeof drv), memset(&fc, 0, sizeof fc);
  drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
  int v12 = vi->api_version >= VK_API_VERSION_1_2 && l->props.apiVersion >= VK_API_VERSION_1_2 &&
            vi->vkGetPhysicalDeviceProperties2;
  uint32_t api = l->props.apiVersion;
  if (v12) {
    drv.pNext = &fc;
    VkPhysicalDeviceProperties2 p2;
    memset(&p2, 0, sizeof p2);
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &drv;
    vi->vkGetPhysicalDeviceProperties2(phys, &p2);
    l->denorm_preserve = fc.shaderDenormPreserveFloat32 == VK_TRUE;
    l->nan_preserve = fc.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
    snprintf(l->driver, sizeof l->driver, "%s %s, Vulkan %u.%u.%u", drv.driverName, drv.driverInfo,
             VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api));
  } else {
    snprintf(l->driver, sizeof l->driver, "driver 0x%08x, Vulkan %u.%u.%u", l->props.driverVersion,
             VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api));
  }

  /* llvmpipe's loop limiter (gallivm, LP_MAX_TGSI_LOOP_ITERATIONS): see vk_internal.h. */
  if ((v12 && drv.driverID == VK_DRIVER_ID_MESA_LLVMPIPE) || strstr(l->props.deviceName, "llvmpipe"))
    l->loop_limit = 65535u;

  if (lim->maxComputeWorkGroupInvocations < 256 || lim->maxComputeWorkGroupSize[0] < 256 ||
      lim->maxComputeSharedMemorySize < 16384 || lim->maxPushConstantsSize < 64) {
    snprintf(why, why_len,
             "%s: its compute limits are below what weft's kernels need (256 invocations per workgroup, 16 KiB "
             "shared memory, 64 bytes of push constants)",
             l->device);
    goto fail;
  }

  uint32_t nq = 0;
  vi->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, NULL);
  VkQueueFamilyProperties qf[16];
  if (nq > 16) nq = 16;
  vi->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, qf);
  int family = -1;
  for (uint32_t i = 0; i < nq && family < 0; i++)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && qf[i].queueCount > 0) family = (int)i;
  if (family < 0) {
    snprintf(why, why_len, "%s has no compute queue", l->device);
    goto fail;
  }
  l->queue_family = (uint32_t)family;

  uint32_t next = 0;
  VkResult r = vi->vkEnumerateDeviceExtensionProperties(phys, NULL, &next, NULL);
  VkExtensionProperties *ext = next ? calloc(next, sizeof *ext) : NULL;
  if (r == VK_SUCCESS && ext) r = vi->vkEnumerateDeviceExtensionProperties(phys, NULL, &next, ext);
  if (r != VK_SUCCESS) next = 0;
  const char *enable[2];
  uint32_t nenable = 0;
  int push = !weft_vk_disable_push_descriptors && has_extension(ext, next, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  if (push) enable[nenable++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
  free(ext);

  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, l->queue_family, 1, &prio};
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &qci, 0, NULL, nenable, enable, NULL};
  r = vi->vkCreateDevice(phys, &dci, NULL, &l->dev);
  if (r != VK_SUCCESS) {
    l->dev = VK_NULL_HANDLE;
    snprintf(why, why_len, "%s: vkCreateDevice failed: %s", l->device, weft_vk_result_str(r));
    goto fail;
  }
  int missing = 0;
#define LOAD(name)                                                                                             \
  l->name = (PFN_##name)vi->vkGetDeviceProcAddr(l->dev, #name);                                                \
  if (!l->name && !missing) {                                                                                  \
    snprintf(why, why_len, "%s: the driver lacks %s", l->device, #name);                                       \
    missing = 1;                                                                                               \
  }
  WEFT_VK_DEVICE_FNS(LOAD)
#undef LOAD
  if (missing) {
    PFN_vkDestroyDevice destroy = (PFN_vkDestroyDevice)vi->vkGetDeviceProcAddr(l->dev, "vkDestroyDevice");
    if (destroy) destroy(l->dev, NULL);
    l->dev = VK_NULL_HANDLE;
    goto fail;
  }
  if (push)
    l->vkCmdPushDescriptorSetKHR =
        (PFN_vkCmdPushDescriptorSetKHR)vi->vkGetDeviceProcAddr(l->dev, "vkCmdPushDescriptorSetKHR");
  l->vkGetDeviceQueue(l->dev, l->queue_family, 0, &l->queue);

  l->bind_align = lim->minStorageBufferOffsetAlignment > 16 ? lim->minStorageBufferOffsetAlignment : 16;
  uint64_t maxb = lim->maxStorageBufferRange;
  if (args->desc->vulkan_max_binding && args->desc->vulkan_max_binding < maxb) maxb = args->desc->vulkan_max_binding;
  uint64_t floor_b = l->bind_align + 16 + 64 * 4; /* a binding still holds 64 floats */
  if (maxb < floor_b) maxb = floor_b;
  l->max_binding = maxb & ~(uint64_t)15;

  for (int i = 0; i < VK_NBATCH; i++) {
    vk_batch *b = &l->batches[i];
    VkCommandPoolCreateInfo pci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                   VK_COMMAND_POOL_CREATE_TRANSIENT_BIT, l->queue_family};
    r = l->vkCreateCommandPool(l->dev, &pci, NULL, &b->pool);
    VkCommandBufferAllocateInfo cai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, b->pool,
                                       VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    if (r == VK_SUCCESS) r = l->vkAllocateCommandBuffers(l->dev, &cai, &b->cmd);
    VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
    if (r == VK_SUCCESS) r = l->vkCreateFence(l->dev, &fci, NULL, &b->fence);
    if (r != VK_SUCCESS) {
      snprintf(why, why_len, "%s: creating command buffers failed: %s", l->device, weft_vk_result_str(r));
      goto fail;
    }
  }
  if (weft_vk_ops_init(l) != WEFT_OK) {
    snprintf(why, why_len, "%s: setting up the kernels failed", l->device);
    goto fail;
  }

  char maxs[32], shs[32];
  human_bytes(maxs, sizeof maxs, l->max_binding);
  human_bytes(shs, sizeof shs, lim->maxComputeSharedMemorySize);
  snprintf(l->details, sizeof l->details,
           "%s; largest binding %s%s; workgroup up to %u invocations; %s shared memory; fp32 subnormals %s; "
           "signed zeros, infinities and NaN %s; %s; %s%s",
           device_type_str(l->props.deviceType), maxs,
           args->desc->vulkan_max_binding ? " (capped by vulkan_max_binding)" : "", lim->maxComputeWorkGroupInvocations,
           shs, l->denorm_preserve ? "kept by the driver" : "not guaranteed by the driver (the kernels keep them)",
           l->nan_preserve ? "kept" : "not guaranteed by the driver",
           l->vkCmdPushDescriptorSetKHR ? "push descriptors" : "descriptor pools",
           l->fuse_on ? "fuses matmul epilogues and add+layernorm in scopes" : "fusion off (WEFT_FUSE=0)",
           l->loop_limit ? "; loops end after 65535 iterations per invocation (kernels split to stay below)" : "");
  return l;

fail:
  vk_destroy(l);
  return NULL;
}

weft_status weft_vulkan_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  char why[768];
  weft_vk_instance *vi = weft_vk_instance_create(why, sizeof why);
  if (!vi) {
    sink->add_absent(sink->ctx, "vulkan", why);
    return WEFT_OK;
  }
  uint32_t n = 0;
  DRIVER_ALLOCS_BEGIN();
  VkResult r = vi->vkEnumeratePhysicalDevices(vi->instance, &n, NULL);
  VkPhysicalDevice devs[16];
  if (n > 16) n = 16;
  if (r == VK_SUCCESS || r == VK_INCOMPLETE) r = vi->vkEnumeratePhysicalDevices(vi->instance, &n, devs);
  DRIVER_ALLOCS_END();
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    snprintf(why, sizeof why, "vkEnumeratePhysicalDevices failed: %s", weft_vk_result_str(r));
    sink->add_absent(sink->ctx, "vulkan", why);
  } else if (n == 0) {
    sink->add_absent(sink->ctx, "vulkan",
                     "the Vulkan loader found no device: no driver for this machine's GPU is installed (or "
                     "VK_DRIVER_FILES points elsewhere)");
  }
  for (uint32_t i = 0; i < n && (r == VK_SUCCESS || r == VK_INCOMPLETE); i++) {
    why[0] = '\0';
    weft_vk_lane *l = lane_create(vi, devs[i], i, args, why, sizeof why);
    if (!l) {
      char name[32];
      snprintf(name, sizeof name, "vulkan:%u", i);
      sink->add_absent(sink->ctx, name, why[0] ? why : "the device could not be opened");
      continue;
    }
    sink->add_lane(sink->ctx, &VK_VTABLE, l); /* on failure the sink destroys the lane and says why */
  }
  weft_vk_instance_release(vi);
  return WEFT_OK;
}
