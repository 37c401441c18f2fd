/* vk_internal.h - the Vulkan lane's own structures, shared by its files: the loader's function tables
 * (vk_loader.c), the lane, its buffers and submission batches (vulkan_lane.c), and the kernels and the way
 * ops are split into dispatches (vk_ops.c). Not installed. */
#ifndef WEFT_VK_INTERNAL_H
#define WEFT_VK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <vulkan/vulkan.h>

#include "weft_lane.h"
#include "../fuse.h"

/* ------------------------------------------------------------------------------------------- loader */

/* Entry points, loaded at run time so one weft binary runs where no Vulkan is installed. */
#define WEFT_VK_INSTANCE_FNS(X)                                                                                \
  X(vkDestroyInstance)                                                                                         \
  X(vkEnumeratePhysicalDevices)                                                                                \
  X(vkGetPhysicalDeviceProperties)                                                                             \
  X(vkGetPhysicalDeviceQueueFamilyProperties)                                                                  \
  X(vkGetPhysicalDeviceMemoryProperties)                                                                       \
  X(vkEnumerateDeviceExtensionProperties)                                                                      \
  X(vkCreateDevice)                                                                                            \
  X(vkGetDeviceProcAddr)

#define WEFT_VK_DEVICE_FNS(X)                                                                                  \
  X(vkDestroyDevice)                                                                                           \
  X(vkGetDeviceQueue)                                                                                          \
  X(vkDeviceWaitIdle)                                                                                          \
  X(vkCreateBuffer)                                                                                            \
  X(vkDestroyBuffer)                                                                                           \
  X(vkGetBufferMemoryRequirements)                                                                             \
  X(vkAllocateMemory)                                                                                          \
  X(vkFreeMemory)                                                                                              \
  X(vkBindBufferMemory)                                                                                        \
  X(vkMapMemory)                                                                                               \
  X(vkCreateCommandPool)                                                                                       \
  X(vkDestroyCommandPool)                                                                                      \
  X(vkResetCommandPool)                                                                                        \
  X(vkAllocateCommandBuffers)                                                                                  \
  X(vkBeginCommandBuffer)                                                                                      \
  X(vkEndCommandBuffer)                                                                                        \
  X(vkQueueSubmit)                                                                                             \
  X(vkCreateFence)                                                                                             \
  X(vkDestroyFence)                                                                                            \
  X(vkResetFences)                                                                                             \
  X(vkWaitForFences)                                                                                           \
  X(vkGetFenceStatus)                                                                                          \
  X(vkCreateDescriptorSetLayout)                                                                               \
  X(vkDestroyDescriptorSetLayout)                                                                              \
  X(vkCreatePipelineLayout)                                                                                    \
  X(vkDestroyPipelineLayout)                                                                                   \
  X(vkCreateShaderModule)                                                                                      \
  X(vkDestroyShaderModule)                                                                                     \
  X(vkCreateComputePipelines)                                                                                  \
  X(vkDestroyPipeline)                                                                                         \
  X(vkCreateDescriptorPool)                                                                                    \
  X(vkDestroyDescriptorPool)                                                                                   \
  X(vkResetDescriptorPool)                                                                                     \
  X(vkAllocateDescriptorSets)                                                                                  \
  X(vkUpdateDescriptorSets)                                                                                    \
  X(vkCmdBindPipeline)                                                                                         \
  X(vkCmdBindDescriptorSets)                                                                                   \
  X(vkCmdPushConstants)                                                                                        \
  X(vkCmdDispatch)                                                                                             \
  X(vkCmdPipelineBarrier)                                                                                      \
  X(vkCmdCopyBuffer)

#define WEFT_VK_DECLARE(name) PFN_##name name;

/* One VkInstance, shared by the lanes of one fabric; the last lane to go destroys it. */
typedef struct weft_vk_instance {
  int refs;
  VkInstance instance;
  uint32_t api_version; /* what the instance was created with */
  PFN_vkGetInstanceProcAddr get_proc;
  WEFT_VK_INSTANCE_FNS(WEFT_VK_DECLARE)
  PFN_vkGetPhysicalDeviceProperties2 vkGetPhysicalDeviceProperties2; /* NULL before Vulkan 1.1 */
} weft_vk_instance;

/* Opens the loader and creates an instance. On failure returns NULL and writes why into `why`. */
weft_vk_instance *weft_vk_instance_create(char *why, size_t why_len);
void weft_vk_instance_release(weft_vk_instance *vi);
/* A readable name for a VkResult ("VK_ERROR_DEVICE_LOST"). */
const char *weft_vk_result_str(VkResult r);

/* ------------------------------------------------------------------------------------------- lane */

/* A lane-owned allocation. Sizes are rounded up to 16 bytes so that every binding is whole vec4s. */
typedef struct vk_buf {
  VkBuffer buf;
  VkDeviceMemory mem;
  VkDeviceSize size;
  uint64_t last_serial; /* the newest batch that used it: freeing waits for that one */
  uint64_t r_epoch;     /* barrier epoch of its last read / write, for hazards inside a batch */
  uint64_t w_epoch;
} vk_buf;

/* A host-visible staging allocation owned by a batch. */
typedef struct vk_stage {
  VkBuffer buf;
  VkDeviceMemory mem;
  void *map;
  VkDeviceSize size, used;
} vk_stage;

enum { VK_BATCH_FREE = 0, VK_BATCH_RECORDING = 1, VK_BATCH_SUBMITTED = 2 };

/* One command buffer's worth of work and what must live until the device has done it. */
typedef struct vk_batch {
  int state;
  uint64_t serial;
  VkCommandPool pool;
  VkCommandBuffer cmd;
  VkFence fence;
  uint32_t ncmds;       /* dispatches and copies recorded */
  VkPipeline bound;     /* the pipeline last bound in it */
  VkDescriptorPool *dpools;
  uint32_t ndpools;     /* descriptor pools owned (the pool path only) */
  uint32_t dpool_cur;   /* pools in use this time; sets come from dpools[dpool_cur - 1] */
  uint32_t dsets_left;  /* sets left in that pool */
  vk_stage *stages;
  uint32_t nstages, cap_stages;
  VkDeviceSize staged;  /* staging bytes in use */
  vk_buf **frees;       /* buffers freed while this batch (or an earlier one) may still use them */
  size_t nfrees, cap_frees;
} vk_batch;

#define VK_NBATCH 3

/* Shader modules, by index into the embedded SPIR-V table. */
enum {
  VK_SH_EW = 0,
  VK_SH_SUM_ROWS,
  VK_SH_SOFTMAX_ROWS,
  VK_SH_SOFTMAX_LOSS,
  VK_SH_MATMUL_SIMPLE,
  VK_SH_MATMUL_T88,
  VK_SH_MATMUL_T44,
  VK_SH_MATMUL_T88K16,
  VK_SH_MATMUL_T88_FP32,
  VK_SH_MATMUL_T44_FP32,
  /* the transformer ops (tx_*.comp) */
  VK_SH_TX_EMBED_FWD,
  VK_SH_TX_EMBED_LINKS,
  VK_SH_TX_EMBED_BWD,
  VK_SH_TX_LN_FWD,
  VK_SH_TX_LN_ADD_FWD,
  VK_SH_TX_LN_BWD_DX,
  VK_SH_TX_LN_BWD_DGB,
  VK_SH_TX_GELU_FWD,
  VK_SH_TX_GELU_BWD,
  VK_SH_TX_SOFTMAX_FWD,
  VK_SH_TX_SOFTMAX_BWD,
  VK_SH_TX_ATT_FWD,
  VK_SH_TX_ATT_DS,
  VK_SH_TX_ATT_DQKV,
  VK_SH_TX_XENT_ROWS,
  VK_SH_TX_XENT_GRAD,
  VK_SH_TX_ADAMW,
  VK_SH_TX_PERMUTE,
  VK_SH_TX_COPY_SLICE,
  VK_SH_COUNT
};

typedef struct vk_pipe {
  int shader;
  uint32_t spec[3];
  VkPipeline pipe;
} vk_pipe;

#define VK_MAX_PIPES 64
/* Storage-buffer bindings of set 0 (the transformer kernels use up to 6; int32 arrays bind alike). */
#define VK_NBIND 8

typedef struct weft_vk_lane {
  const weft_lane_host *host;
  struct weft_hostcopy *copier; /* the process's host copier (core/hostcopy.c), taken at the first large copy */
  int copier_tried;
  weft_vk_instance *vi;
  VkPhysicalDevice phys;
  VkDevice dev;
  VkQueue queue;
  uint32_t queue_family;
  WEFT_VK_DEVICE_FNS(WEFT_VK_DECLARE)
  PFN_vkCmdPushDescriptorSetKHR vkCmdPushDescriptorSetKHR; /* NULL: descriptor pools instead */

  char name[32], device[256], driver[600], details[768];
  VkPhysicalDeviceProperties props;
  uint32_t mem_device, mem_host; /* memory type indices: tensors, staging */
  uint64_t max_binding;          /* bytes one storage-buffer binding may span (a forced cap included) */
  uint64_t bind_align;           /* offset alignment of a binding, at least 16 */
  int denorm_preserve, nan_preserve; /* the float-control modes the shaders keep */
  int lost;                      /* the device was lost: every call fails from now on */
  /* Loop iterations one invocation may run in all, 0 for no limit. llvmpipe (lavapipe) ends an invocation's
   * loops silently once it has run LP_MAX_TGSI_LOOP_ITERATIONS (65535) iterations of them together (one
   * counter per invocation, shared by every loop of the shader); the kernels are split or refused so that
   * no invocation gets there (vk_ops.c, "the loop limit"). */
  uint32_t loop_limit;

  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
  VkShaderModule modules[VK_SH_COUNT];
  vk_pipe pipes[VK_MAX_PIPES];
  int npipes;
  vk_buf *dummy;   /* bound to the bindings a kernel does not use */
  vk_buf *scratch; /* softmax row losses, grown on demand */
  /* Scratch of the transformer ops, grown on demand: the embedding backward's links (2*B*T int32), the
   * attention backward's ds ([nbh, T, T] of one (b, h) block), the cross-entropy backward's row stats. */
  vk_buf *s_links, *s_ds, *s_stats;

  vk_batch batches[VK_NBATCH];
  int cur;              /* the batch being recorded, -1 if none */
  uint64_t next_serial; /* serial of the next batch to start recording */
  uint64_t done_serial; /* every batch up to this serial has completed */
  uint64_t epoch;       /* barrier epoch inside the recording batch */
  int fresh;            /* the recording batch has no barrier yet: its first command gets one */
  VkPipelineStageFlags used_stages; /* stages of the commands since the last barrier */
  VkAccessFlags written;            /* write accesses since the last barrier */
  vk_buf *readback;     /* host-visible target of downloads, grown on demand */
  void *readback_map;
  int in_scope;
  /* Fusion (src/lanes/fuse.h): inside a scope, matmul epilogues and add + layernorm; off under WEFT_FUSE=0. */
  int fuse_on;
  weft_fuse fuse;
} weft_vk_lane;

/* Records a failed Vulkan call: device loss marks the lane lost (WEFT_ERR_LANE_FAILED), exhausted memory is
 * WEFT_ERR_OUT_OF_MEMORY, anything else WEFT_ERR_LANE_FAILED; the message names the call and the lane. */
weft_status weft_vk_check(weft_vk_lane *l, VkResult r, const char *what);

/* Allocates / frees a device buffer directly (no deferral: the caller knows it is idle). */
weft_status weft_vk_buf_create(weft_vk_lane *l, VkDeviceSize bytes, vk_buf **out);
void weft_vk_buf_destroy(weft_vk_lane *l, vk_buf *b);
/* Frees b once the work that may use it has completed. */
void weft_vk_buf_release(weft_vk_lane *l, vk_buf *b);

/* The batch being recorded, starting one if needed (may wait for the oldest to finish). */
weft_status weft_vk_batch_get(weft_vk_lane *l, vk_batch **out);
/* Submits the recording batch without waiting. */
weft_status weft_vk_flush(weft_vk_lane *l);
/* Submits the recording batch and waits for everything submitted. */
weft_status weft_vk_finish(weft_vk_lane *l);

/* Records the barrier a command touching these buffers needs (reads `in`, writes `out`), then marks them.
 * `transfer`: the command is a copy rather than a dispatch. */
void weft_vk_hazard(weft_vk_lane *l, vk_batch *b, vk_buf *const *in, int nin, vk_buf *const *out, int nout,
                    int transfer);

/* vk_ops.c: creates the layouts (on lane creation), records an op, frees kernel state. */
weft_status weft_vk_ops_init(weft_vk_lane *l);
void weft_vk_ops_destroy(weft_vk_lane *l);
weft_status weft_vk_ops_supports(weft_vk_lane *l, const weft_op *op);
weft_status weft_vk_ops_run(weft_vk_lane *l, const weft_op *op);
/* Runs what the fusion window hands over (a weft_fuse_emit_fn; ctx is the lane). */
weft_status weft_vk_ops_run_fused(void *ctx, const weft_fused *fused);
/* The ops this lane offers (weft_lane_desc.ops). */
uint64_t weft_vk_ops_offered(void);

/* Test and benchmark hooks (process-wide, not part of the API): pin the matmul kernel (0 automatic,
 * 1 simple, 2 tiled 128x128, 3 tiled 64x64, 4 tiled 128x128 with k steps of 16) and turn push descriptors off to exercise the descriptor-pool path. */
extern int weft_vk_force_matmul_kernel;
extern int weft_vk_disable_push_descriptors;
/* Test hook: nonzero makes the lane ignore its loop limit (dispatch as on a driver without one), so a test
 * can show what the limit does to unsplit kernels. */
extern int weft_vk_ignore_loop_limit;
/* Fault injection for the failure tests: the next device allocation reports VK_ERROR_OUT_OF_DEVICE_MEMORY,
 * the next pipeline creation VK_ERROR_INITIALIZATION_FAILED, or the next wait VK_ERROR_DEVICE_LOST. Each
 * fires once and clears itself. */
enum { WEFT_VK_FAULT_NONE = 0, WEFT_VK_FAULT_OOM, WEFT_VK_FAULT_PIPELINE, WEFT_VK_FAULT_DEVICE_LOST };
extern int weft_vk_inject_fault;
/* Counters for tests and benchmarks, over every Vulkan lane of the process: dispatches recorded, and ops
 * that ran inside a fused kernel (a matmul with two epilogue ops counts 3). Relaxed atomic increments. */
extern uint64_t weft_vk_stat_dispatches;
extern uint64_t weft_vk_stat_fused_ops;

#endif /* WEFT_VK_INTERNAL_H */
