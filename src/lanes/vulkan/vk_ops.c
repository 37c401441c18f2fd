/* vk_ops.c - the Vulkan lane's kernels: the embedded SPIR-V, pipelines (created on first use), and how each
 * op becomes dispatches. A tensor larger than the device's largest storage-buffer binding is bound as
 * windows, and the op is split into chunks that each fit: rows of elementwise ops, row/column/k blocks of a
 * matmul (k chunks in ascending order, each continuing the sums the previous left in c, which is the same
 * sequence of roundings), row blocks of sum_rows and softmax_xent; the transformer ops as their section says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

#define SPV(name)                                                                                              \
  extern const unsigned char weft_vk_spv_##name[];                                                             \
  extern const size_t weft_vk_spv_##name##_size;
SPV(ew)
SPV(sum_rows)
SPV(softmax_rows)
SPV(softmax_loss)
SPV(matmul_simple)
SPV(matmul_t88)
SPV(matmul_t44)
SPV(matmul_t88k16)
SPV(matmul_t88_fp32)
SPV(matmul_t44_fp32)
SPV(tx_embed_fwd)
SPV(tx_embed_links)
SPV(tx_embed_bwd)
SPV(tx_ln_fwd)
SPV(tx_ln_add_fwd)
SPV(tx_ln_bwd_dx)
SPV(tx_ln_bwd_dgb)
SPV(tx_gelu_fwd)
SPV(tx_gelu_bwd)
SPV(tx_softmax_fwd)
SPV(tx_softmax_bwd)
SPV(tx_att_fwd)
SPV(tx_att_ds)
SPV(tx_att_dqkv)
SPV(tx_xent_rows)
SPV(tx_xent_grad)
SPV(tx_adamw)
SPV(tx_permute)
SPV(tx_copy_slice)
#undef SPV

static const struct {
  const char *name;
  const unsigned char *code;
  const size_t *size;
} SHADERS[VK_SH_COUNT] = {
    {"elementwise", weft_vk_spv_ew, &weft_vk_spv_ew_size},
    {"sum_rows", weft_vk_spv_sum_rows, &weft_vk_spv_sum_rows_size},
    {"softmax_xent rows", weft_vk_spv_softmax_rows, &weft_vk_spv_softmax_rows_size},
    {"softmax_xent loss", weft_vk_spv_softmax_loss, &weft_vk_spv_softmax_loss_size},
    {"matmul (simple)", weft_vk_spv_matmul_simple, &weft_vk_spv_matmul_simple_size},
    {"matmul (tiled 128x128)", weft_vk_spv_matmul_t88, &weft_vk_spv_matmul_t88_size},
    {"matmul (tiled 64x64)", weft_vk_spv_matmul_t44, &weft_vk_spv_matmul_t44_size},
    {"matmul (tiled 128x128, k by 16)", weft_vk_spv_matmul_t88k16, &weft_vk_spv_matmul_t88k16_size},
    {"matmul fp32 (tiled 128x128)", weft_vk_spv_matmul_t88_fp32, &weft_vk_spv_matmul_t88_fp32_size},
    {"matmul fp32 (tiled 64x64)", weft_vk_spv_matmul_t44_fp32, &weft_vk_spv_matmul_t44_fp32_size},
    {"embed fwd", weft_vk_spv_tx_embed_fwd, &weft_vk_spv_tx_embed_fwd_size},
    {"embed links", weft_vk_spv_tx_embed_links, &weft_vk_spv_tx_embed_links_size},
    {"embed bwd", weft_vk_spv_tx_embed_bwd, &weft_vk_spv_tx_embed_bwd_size},
    {"ln fwd", weft_vk_spv_tx_ln_fwd, &weft_vk_spv_tx_ln_fwd_size},
    {"add + ln fwd", weft_vk_spv_tx_ln_add_fwd, &weft_vk_spv_tx_ln_add_fwd_size},
    {"ln bwd dx", weft_vk_spv_tx_ln_bwd_dx, &weft_vk_spv_tx_ln_bwd_dx_size},
    {"ln bwd dgb", weft_vk_spv_tx_ln_bwd_dgb, &weft_vk_spv_tx_ln_bwd_dgb_size},
    {"gelu fwd", weft_vk_spv_tx_gelu_fwd, &weft_vk_spv_tx_gelu_fwd_size},
    {"gelu bwd", weft_vk_spv_tx_gelu_bwd, &weft_vk_spv_tx_gelu_bwd_size},
    {"softmax fwd", weft_vk_spv_tx_softmax_fwd, &weft_vk_spv_tx_softmax_fwd_size},
    {"softmax bwd", weft_vk_spv_tx_softmax_bwd, &weft_vk_spv_tx_softmax_bwd_size},
    {"att fwd", weft_vk_spv_tx_att_fwd, &weft_vk_spv_tx_att_fwd_size},
    {"att ds", weft_vk_spv_tx_att_ds, &weft_vk_spv_tx_att_ds_size},
    {"att dqkv", weft_vk_spv_tx_att_dqkv, &weft_vk_spv_tx_att_dqkv_size},
    {"xent rows", weft_vk_spv_tx_xent_rows, &weft_vk_spv_tx_xent_rows_size},
    {"xent grad", weft_vk_spv_tx_xent_grad, &weft_vk_spv_tx_xent_grad_size},
    {"adamw", weft_vk_spv_tx_adamw, &weft_vk_spv_tx_adamw_size},
    {"permute", weft_vk_spv_tx_permute, &weft_vk_spv_tx_permute_size},
    {"copy slice", weft_vk_spv_tx_copy_slice, &weft_vk_spv_tx_copy_slice_size},
};

/* Descriptor sets per pool on the pool path. */
#define VK_SETS_PER_POOL 256
/* Workgroups along one dimension of a dispatch: Vulkan guarantees 65535. */
#define VK_MAX_GROUPS 65535u

/* -------------------------------------------------------------------------------------------- setup */

/* SPIR-V opcodes and operands the float-control patch looks at. */
enum {
  SPV_OP_EXTENSION = 10,
  SPV_OP_EXECUTION_MODE = 16,
  SPV_OP_CAPABILITY = 17,
  SPV_CAP_DENORM_PRESERVE = 4464,
  SPV_CAP_NAN_PRESERVE = 4466,
  SPV_MODE_DENORM_PRESERVE = 4459,
  SPV_MODE_NAN_PRESERVE = 4461,
};

/* Copies a module, dropping the float-control modes (and their capability and extension) the device does
 * not honour: a module asking for them would be invalid there. Returns the new word count. */
static size_t spirv_strip(const uint32_t *in, size_t nwords, uint32_t *out, int keep_denorm, int keep_nan) {
  size_t o = 0, i = 0;
  for (; i < 5 && i < nwords; i++) out[o++] = in[i];
  while (i < nwords) {
    uint32_t op = in[i] & 0xffffu, len = in[i] >> 16;
    if (len == 0 || i + len > nwords) break; /* malformed: copy nothing more, creation will say so */
    int drop = 0;
    if (op == SPV_OP_CAPABILITY && len >= 2)
      drop = (in[i + 1] == SPV_CAP_DENORM_PRESERVE && !keep_denorm) || (in[i + 1] == SPV_CAP_NAN_PRESERVE && !keep_nan);
    else if (op == SPV_OP_EXECUTION_MODE && len >= 3)
      drop = (in[i + 2] == SPV_MODE_DENORM_PRESERVE && !keep_denorm) || (in[i + 2] == SPV_MODE_NAN_PRESERVE && !keep_nan);
    else if (op == SPV_OP_EXTENSION && len >= 2 && !keep_denorm && !keep_nan)
      drop = strncmp((const char *)&in[i + 1], "SPV_KHR_float_controls", (len - 1) * 4) == 0;
    if (!drop)
      for (uint32_t w = 0; w < len; w++) out[o++] = in[i + w];
    i += len;
  }
  return o;
}

weft_status weft_vk_ops_init(weft_vk_lane *l) {
  VkDescriptorSetLayoutBinding binds[VK_NBIND];
  for (uint32_t i = 0; i < VK_NBIND; i++)
    binds[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
  VkDescriptorSetLayoutCreateInfo dci = {
      VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL,
      l->vkCmdPushDescriptorSetKHR ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0, VK_NBIND, binds};
  VkResult r = l->vkCreateDescriptorSetLayout(l->dev, &dci, NULL, &l->dsl);
  if (r != VK_SUCCESS) return weft_vk_check(l, r, "vkCreateDescriptorSetLayout");
  VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 64};
  VkPipelineLayoutCreateInfo pci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &l->dsl, 1, &pcr};
  r = l->vkCreatePipelineLayout(l->dev, &pci, NULL, &l->layout);
  if (r != VK_SUCCESS) return weft_vk_check(l, r, "vkCreatePipelineLayout");
  for (int s = 0; s < VK_SH_COUNT; s++) {
    size_t nwords = *SHADERS[s].size / 4;
    uint32_t *words = malloc(nwords * 4);
    if (!words) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
    memcpy(words, SHADERS[s].code, nwords * 4);
    uint32_t *patched = malloc(nwords * 4);
    if (!patched) {
      free(words);
      return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
    }
    size_t n = spirv_strip(words, nwords, patched, l->denorm_preserve, l->nan_preserve);
    VkShaderModuleCreateInfo mci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, n * 4, patched};
    r = l->vkCreateShaderModule(l->dev, &mci, NULL, &l->modules[s]);
    free(words), free(patched);
    if (r != VK_SUCCESS) {
      l->modules[s] = VK_NULL_HANDLE;
      return weft_lane_report(l->host, WEFT_ERR_LANE_FAILED, "%s: the driver refused the %s kernel: %s", l->name,
                              SHADERS[s].name, weft_vk_result_str(r));
    }
  }
  return weft_vk_buf_create(l, 16, &l->dummy);
}

void weft_vk_ops_destroy(weft_vk_lane *l) {
  for (int i = 0; i < l->npipes; i++) l->vkDestroyPipeline(l->dev, l->pipes[i].pipe, NULL);
  l->npipes = 0;
  for (int s = 0; s < VK_SH_COUNT; s++)
    if (l->modules[s]) l->vkDestroyShaderModule(l->dev, l->modules[s], NULL);
  if (l->layout) l->vkDestroyPipelineLayout(l->dev, l->layout, NULL);
  if (l->dsl) l->vkDestroyDescriptorSetLayout(l->dev, l->dsl, NULL);
  weft_vk_buf_destroy(l, l->dummy);
  weft_vk_buf_destroy(l, l->scratch);
  weft_vk_buf_destroy(l, l->s_links);
  weft_vk_buf_destroy(l, l->s_ds);
  weft_vk_buf_destroy(l, l->s_stats);
  l->dummy = l->scratch = l->s_links = l->s_ds = l->s_stats = NULL;
}

/* The pipeline of shader `s` specialised with spec[0..2], created the first time it is asked for. */
static weft_status get_pipe(weft_vk_lane *l, int s, uint32_t s0, uint32_t s1, uint32_t s2, VkPipeline *out) {
  for (int i = 0; i < l->npipes; i++) {
    vk_pipe *p = &l->pipes[i];
    if (p->shader == s && p->spec[0] == s0 && p->spec[1] == s1 && p->spec[2] == s2) {
      *out = p->pipe;
      return WEFT_OK;
    }
  }
  if (l->npipes == VK_MAX_PIPES)
    return weft_lane_report(l->host, WEFT_ERR_INTERNAL, "%s: more kernel variants than the lane keeps (please report)", l->name);
  uint32_t spec[3] = {s0, s1, s2};
  VkSpecializationMapEntry map[3] = {{0, 0, 4}, {1, 4, 4}, {2, 8, 4}};
  VkSpecializationInfo si = {3, map, sizeof spec, spec};
  VkComputePipelineCreateInfo ci = {
      VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      NULL,
      0,
      {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0, VK_SHADER_STAGE_COMPUTE_BIT, l->modules[s], "main", &si},
      l->layout,
      VK_NULL_HANDLE,
      -1};
  VkPipeline pipe;
  VkResult r;
  if (weft_vk_inject_fault == WEFT_VK_FAULT_PIPELINE) {
    weft_vk_inject_fault = WEFT_VK_FAULT_NONE;
    r = VK_ERROR_INITIALIZATION_FAILED;
  } else {
    r = l->vkCreateComputePipelines(l->dev, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
  }
  if (r != VK_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "compiling the %s kernel", SHADERS[s].name);
    weft_status st = weft_vk_check(l, r, what);
    /* A kernel the driver cannot build is a broken lane, not a full memory. */
    return st == WEFT_ERR_OUT_OF_MEMORY ? st : WEFT_ERR_LANE_FAILED;
  }
  vk_pipe *p = &l->pipes[l->npipes++];
  p->shader = s, p->spec[0] = s0, p->spec[1] = s1, p->spec[2] = s2, p->pipe = pipe;
  *out = pipe;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ binding */

/* A window of a buffer: elements [e0, e0+count) bound at an aligned offset, `base` the element index of e0
 * inside the window. The caller keeps count <= cap_elems(l), so the window fits the binding limit. */
typedef struct vk_win {
  VkDescriptorBufferInfo info;
  uint64_t base;
  vk_buf *buf;
} vk_win;

/* Elements a window may cover whatever its start: aligning the start down costs up to bind_align bytes. */
static uint64_t cap_elems(const weft_vk_lane *l) { return (l->max_binding - l->bind_align - 16) / 4; }

static vk_win window(const weft_vk_lane *l, vk_buf *b, uint64_t e0, uint64_t count) {
  vk_win w;
  uint64_t lo = (e0 * 4) & ~(l->bind_align - 1);
  uint64_t hi = ((e0 + count) * 4 + 15) & ~(uint64_t)15;
  if (hi > b->size) hi = b->size;
  if (hi <= lo) hi = lo + 16 <= b->size ? lo + 16 : b->size, lo = hi - 16;
  w.info.buffer = b->buf;
  w.info.offset = lo;
  w.info.range = hi - lo;
  w.base = e0 - lo / 4;
  w.buf = b;
  return w;
}

static vk_win dummy_win(const weft_vk_lane *l) { return window(l, l->dummy, 0, 1); }

/* Every binding the dummy: a kernel's unused bindings stay that way. */
static void wins_dummy(const weft_vk_lane *l, vk_win *w) {
  for (int i = 0; i < VK_NBIND; i++) w[i] = dummy_win(l);
}

static weft_status alloc_set(weft_vk_lane *l, vk_batch *b, VkDescriptorSet *out) {
  if (b->dpool_cur == 0 || b->dsets_left == 0) {
    if (b->dpool_cur == b->ndpools) {
      VkDescriptorPool *grown = realloc(b->dpools, (b->ndpools + 1) * sizeof *grown);
      if (!grown) return weft_lane_report(l->host, WEFT_ERR_OUT_OF_MEMORY, "%s: out of host memory", l->name);
      b->dpools = grown;
      VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_SETS_PER_POOL * VK_NBIND};
      VkDescriptorPoolCreateInfo ci = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, VK_SETS_PER_POOL, 1, &size};
      VkResult r = l->vkCreateDescriptorPool(l->dev, &ci, NULL, &b->dpools[b->ndpools]);
      if (r != VK_SUCCESS) return weft_vk_check(l, r, "vkCreateDescriptorPool");
      b->ndpools++;
    }
    b->dpool_cur++;
    b->dsets_left = VK_SETS_PER_POOL;
  }
  VkDescriptorSetAllocateInfo ai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, b->dpools[b->dpool_cur - 1], 1,
                                    &l->dsl};
  VkResult r = l->vkAllocateDescriptorSets(l->dev, &ai, out);
  if (r != VK_SUCCESS) return weft_vk_check(l, r, "vkAllocateDescriptorSets");
  b->dsets_left--;
  return WEFT_OK;
}

/* Records one dispatch: the barrier its buffers need, the pipeline, the VK_NBIND bindings (w[], those at
 * reads[0..nread) are read, those at writes[0..nwrite) written), the push constants and the grid. */
static weft_status dispatch(weft_vk_lane *l, vk_batch *b, VkPipeline pipe, const vk_win *w, const int *reads, int nread,
                            const int *writes, int nwrite, const void *pc, uint32_t pc_size, uint32_t gx, uint32_t gy,
                            uint32_t gz) {
  vk_buf *in[VK_NBIND], *out[VK_NBIND];
  for (int i = 0; i < nread; i++) in[i] = w[reads[i]].buf;
  for (int i = 0; i < nwrite; i++) out[i] = w[writes[i]].buf;
  VkWriteDescriptorSet wr[VK_NBIND];
  for (uint32_t i = 0; i < VK_NBIND; i++)
    wr[i] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, VK_NULL_HANDLE, i, 0, 1,
                                   VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, &w[i].info, NULL};
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (!l->vkCmdPushDescriptorSetKHR) {
    weft_status st = alloc_set(l, b, &set);
    if (st != WEFT_OK) return st;
    for (uint32_t i = 0; i < VK_NBIND; i++) wr[i].dstSet = set;
    l->vkUpdateDescriptorSets(l->dev, VK_NBIND, wr, 0, NULL);
  }
  weft_vk_hazard(l, b, in, nread, out, nwrite, 0);
  if (b->bound != pipe) l->vkCmdBindPipeline(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  b->bound = pipe;
  if (l->vkCmdPushDescriptorSetKHR)
    l->vkCmdPushDescriptorSetKHR(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, l->layout, 0, VK_NBIND, wr);
  else
    l->vkCmdBindDescriptorSets(b->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, l->layout, 0, 1, &set, 0, NULL);
  l->vkCmdPushConstants(b->cmd, l->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_size, pc);
  l->vkCmdDispatch(b->cmd, gx, gy, gz);
  b->ncmds++;
  __atomic_fetch_add(&weft_vk_stat_dispatches, 1, __ATOMIC_RELAXED);
  return WEFT_OK;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* ---------------------------------------------------------------------------------- the loop limit */

/* llvmpipe ends an invocation's loops silently once they have run 65535 iterations together (l->loop_limit,
 * vk_internal.h): no error, the results are just wrong. A loop of n iterations counts n + 1 there (measured:
 * attention rows of 64-element dots broke at 993 dots of 66). Where it is set, every kernel whose trip count grows
 * with the op's sizes is split over dispatches so that no invocation of one dispatch gets there: k chunks of
 * a matmul and row chunks of sum_rows and the mean loss (each continuing the sums the previous left, the
 * canonical sequence), column ranges of a cross-entropy row, score and output ranges of attention; and the
 * grid-stride kernels get at most one item per invocation. What no split covers is refused by supports()
 * with the count it would need, and the router takes the op elsewhere. LOOP_MARGIN covers the bookkeeping
 * loops a kernel runs around its counted ones. */
#define LOOP_MARGIN 256u
/* Invocations of one dispatch of `wg`-wide workgroups along x. */
#define INVOCATIONS(wg) ((uint64_t)VK_MAX_GROUPS * (uint64_t)(wg))
/* k of one matmul dispatch under a limit: the tiled kernels' exact path runs TM*TN (64) sequences of k. */
#define MM_LOOP_K 960u

/* Iterations one invocation may run in one dispatch; 0: no limit. */
static uint64_t loop_budget(const weft_vk_lane *l) {
  return l->loop_limit && !weft_vk_ignore_loop_limit ? l->loop_limit - LOOP_MARGIN : 0;
}

static weft_status loop_refuse(weft_vk_lane *l, const char *op, const char *what, uint64_t need) {
  return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED,
                          "%s: %s %s; lavapipe (llvmpipe) stops a kernel's loops after %u iterations in all, "
                          "and this op needs %llu in one invocation",
                          l->name, op, what, l->loop_limit, (unsigned long long)need);
}

/* Shrinks (outer, inner) until a block of `outer` rows of stride `ld` and `inner` contiguous elements spans
 * at most cap elements: span = (outer-1)*ld + inner. Returns 1 if it changed anything. */
static int fit_span(uint64_t *outer, uint64_t ld, uint64_t *inner, uint64_t cap) {
  if (*inner > cap) {
    *inner = cap;
    *outer = 1;
    return 1;
  }
  if (*outer <= 1 || ld == 0) return 0;
  uint64_t most = (cap - *inner) / ld + 1; /* no product: outer*ld may not fit 64 bits */
  if (*outer > most) {
    *outer = most;
    return 1;
  }
  return 0;
}

/* --------------------------------------------------------------------------------------- elementwise */

typedef struct ew_pc {
  uint32_t count, base_x, base_y, base_o, ymod0, ycols;
  float alpha;
} ew_pc;

static weft_status run_ew(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  uint32_t kind;
  switch (op->kind) {
  case WEFT_OP_ADD: kind = 0; break;
  case WEFT_OP_RELU: kind = 1; break;
  case WEFT_OP_RELU_BACKWARD: kind = 2; break;
  case WEFT_OP_SCALE: kind = 3; break;
  default: kind = 4; break;
  }
  VkPipeline pipe;
  weft_status st = get_pipe(l, VK_SH_EW, kind, 0, 0, &pipe);
  if (st != WEFT_OK) return st;
  const uint64_t count = (uint64_t)op->rows * (uint64_t)op->cols, cols = (uint64_t)op->cols, cap = cap_elems(l);
  const int binary = op->kind == WEFT_OP_ADD || op->kind == WEFT_OP_RELU_BACKWARD;
  const int bcast = op->kind == WEFT_OP_ADD && op->y_broadcast;
  for (uint64_t e0 = 0; e0 < count;) {
    uint64_t len = min_u64(count - e0, cap);
    ew_pc pc = {0, 0, 0, 0, 0, 0, op->alpha};
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], e0, len);
    w[1] = dummy_win(l);
    w[3] = dummy_win(l);
    if (bcast && cols <= cap) { /* the whole row of y is bound; the shader wraps around it */
      w[1] = window(l, op->in[1], 0, cols);
      pc.ymod0 = (uint32_t)(e0 % cols), pc.ycols = (uint32_t)cols;
    } else if (bcast) { /* a row longer than a binding: chunks stay inside one row, y binds that stretch */
      uint64_t c0 = e0 % cols;
      len = min_u64(len, cols - c0);
      w[0] = window(l, op->in[0], e0, len);
      w[1] = window(l, op->in[1], c0, len);
    } else if (binary) {
      w[1] = window(l, op->in[1], e0, len);
    }
    w[2] = window(l, op->out[0], e0, len);
    pc.count = (uint32_t)len;
    pc.base_x = (uint32_t)w[0].base, pc.base_y = (uint32_t)w[1].base, pc.base_o = (uint32_t)w[2].base;
    int reads[3] = {0, 1, 2}, writes[1] = {2};
    /* axpy reads its output too; the write covers that hazard. */
    uint32_t groups = (uint32_t)min_u64(ceil_div(len, 256), VK_MAX_GROUPS);
    st = dispatch(l, b, pipe, w, reads, binary ? 2 : 1, writes, 1, &pc, sizeof pc, groups, 1, 1);
    if (st != WEFT_OK) return st;
    e0 += len;
  }
  return WEFT_OK;
}

/* ----------------------------------------------------------------------------------------- sum_rows */

typedef struct sum_pc {
  uint32_t rows, cols, ldx, base_x, base_o, accum;
} sum_pc;

static weft_status run_sum_rows(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  VkPipeline pipe;
  weft_status st = get_pipe(l, VK_SH_SUM_ROWS, 0, 0, 0, &pipe);
  if (st != WEFT_OK) return st;
  const uint64_t rows = (uint64_t)op->rows, cols = (uint64_t)op->cols, cap = cap_elems(l);
  uint64_t ri = rows ? rows : 1, cc = min_u64(cols, (uint64_t)VK_MAX_GROUPS * 256);
  if (loop_budget(l)) ri = min_u64(ri, loop_budget(l)); /* row chunks continue the sums */
  fit_span(&ri, cols, &cc, cap);
  for (uint64_t c0 = 0; c0 < cols; c0 += cc) {
    uint64_t nc = min_u64(cc, cols - c0);
    uint64_t r0 = 0;
    do { /* rows == 0 still writes the zero sums */
      uint64_t nr = min_u64(ri, rows - r0);
      vk_win w[VK_NBIND];
      wins_dummy(l, w);
      w[0] = nr ? window(l, op->in[0], r0 * cols + c0, (nr - 1) * cols + nc) : dummy_win(l);
      w[1] = dummy_win(l);
      w[2] = window(l, op->out[0], c0, nc);
      w[3] = dummy_win(l);
      sum_pc pc = {(uint32_t)nr, (uint32_t)nc, nr > 1 ? (uint32_t)cols : 0, (uint32_t)w[0].base, (uint32_t)w[2].base,
                   r0 > 0};
      int reads[1] = {0}, writes[1] = {2};
      st = dispatch(l, b, pipe, w, reads, 1, writes, 1, &pc, sizeof pc, (uint32_t)ceil_div(nc, 256), 1, 1);
      if (st != WEFT_OK) return st;
      r0 += nr;
    } while (r0 < rows);
  }
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------- softmax_xent */

typedef struct smx_pc {
  uint32_t rows, cols, base_z, base_t, base_g, base_l, flags;
  float inv_rows;
} smx_pc;

typedef struct loss_pc {
  uint32_t rows, base_l, base_o, flags;
  float inv_rows;
} loss_pc;

static weft_status run_softmax(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  VkPipeline prow, ploss = VK_NULL_HANDLE;
  weft_status st = get_pipe(l, VK_SH_SOFTMAX_ROWS, 0, 0, 0, &prow);
  if (st == WEFT_OK && op->out[0]) st = get_pipe(l, VK_SH_SOFTMAX_LOSS, 0, 0, 0, &ploss);
  if (st != WEFT_OK) return st;
  const uint64_t rows = (uint64_t)op->rows, cols = (uint64_t)op->cols, cap = cap_elems(l);
  uint64_t ri = min_u64(min_u64(rows, cap / cols), (uint64_t)VK_MAX_GROUPS * 64);
  if (loop_budget(l)) ri = min_u64(ri, loop_budget(l)); /* the mean loss sums ri rows in one loop */
  if (op->out[0] && (!l->scratch || l->scratch->size < ri * 4)) {
    weft_vk_buf_release(l, l->scratch); /* after the work that still uses it */
    l->scratch = NULL;
    if ((st = weft_vk_buf_create(l, ri * 4, &l->scratch)) != WEFT_OK) return st;
  }
  for (uint64_t r0 = 0; r0 < rows; r0 += ri) {
    uint64_t nr = min_u64(ri, rows - r0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], r0 * cols, nr * cols);
    w[1] = window(l, op->in[1], r0 * cols, nr * cols);
    w[2] = op->out[1] ? window(l, op->out[1], r0 * cols, nr * cols) : dummy_win(l);
    w[3] = op->out[0] ? window(l, l->scratch, 0, nr) : dummy_win(l);
    smx_pc pc = {(uint32_t)nr, (uint32_t)cols, (uint32_t)w[0].base, (uint32_t)w[1].base, (uint32_t)w[2].base,
                 (uint32_t)w[3].base, (op->out[1] ? 1u : 0u) | (op->out[0] ? 2u : 0u), op->inv_rows};
    int reads[2] = {0, 1}, writes[2] = {2, 3};
    st = dispatch(l, b, prow, w, reads, 2, writes, 2, &pc, sizeof pc, (uint32_t)ceil_div(nr, 64), 1, 1);
    if (st != WEFT_OK || !op->out[0]) {
      if (st != WEFT_OK) return st;
      continue;
    }
    vk_win lw[VK_NBIND];
    wins_dummy(l, lw);
    lw[0] = window(l, l->scratch, 0, nr);
    lw[1] = dummy_win(l);
    lw[2] = window(l, op->out[0], 0, 1);
    lw[3] = dummy_win(l);
    loss_pc lpc = {(uint32_t)nr, (uint32_t)lw[0].base, (uint32_t)lw[2].base,
                   (r0 > 0 ? 1u : 0u) | (r0 + nr == rows ? 2u : 0u), op->inv_rows};
    int lreads[1] = {0}, lwrites[1] = {2};
    st = dispatch(l, b, ploss, lw, lreads, 1, lwrites, 1, &lpc, sizeof lpc, 1, 1, 1);
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------- matmul */

typedef struct mm_pc {
  uint32_t M, N, K, lda, ldb, ldc, base_a, base_b, base_c, stride_a, stride_b, stride_c, flags;
  uint32_t base_bias, base_r, base_g; /* the epilogue's (epilogue.glsl) */
} mm_pc;

/* pc.flags bits of the epilogue steps (epilogue.glsl) */
enum { MM_EPI_BIAS = 8u, MM_EPI_RES = 16u, MM_EPI_GELU = 32u };

enum { MM_SIMPLE = 1, MM_T88 = 2, MM_T44 = 3, MM_T88K16 = 4 };

/* Which kernel a block of mc x nc (x cnt batch entries) gets. Tiles need enough of them to fill a GPU;
 * below 16 rows or columns most of a tile would idle, and the one-thread-per-element kernel wins. */
static int pick_matmul(uint64_t mc, uint64_t nc, uint64_t cnt) {
  if (weft_vk_force_matmul_kernel >= MM_SIMPLE && weft_vk_force_matmul_kernel <= MM_T88K16)
    return weft_vk_force_matmul_kernel;
  if (mc < 16 || nc < 16) return MM_SIMPLE;
  if (ceil_div(mc, 128) * ceil_div(nc, 128) * cnt >= 128) return MM_T88;
  if (mc * nc * cnt >= 32 * 32) return MM_T44;
  return MM_SIMPLE;
}

/* `epi`: a fused matmul (src/lanes/fuse.h) whose bias, residual and GELU run in the kernels' epilogue on the
 * last k chunk of each block, or NULL. Its buffers are windowed like c (the bias row like c's columns). */
static weft_status run_matmul(weft_vk_lane *l, vk_batch *b, const weft_op *op, const weft_fused *epi) {
  const uint64_t m = (uint64_t)op->m, n = (uint64_t)op->n, k = (uint64_t)op->k, batch = (uint64_t)op->batch;
  const uint64_t cap = cap_elems(l);
  const int ta = op->trans_a, tb = op->trans_b;
  const uint64_t sa = m * k, sb = op->b_batched ? k * n : 0, sc = m * n;
  if (batch == 0) return WEFT_OK;

  /* 1. Block sizes: every operand's window must fit a binding, and the grid the device's group limit. */
  uint64_t mi = min_u64(m, (uint64_t)VK_MAX_GROUPS * 16), nj = min_u64(n, (uint64_t)VK_MAX_GROUPS * 16), kc = k;
  if (loop_budget(l)) kc = min_u64(kc, MM_LOOP_K); /* k chunks continue the sums in c: the same sequence */
  for (int changed = 1, guard = 0; changed && guard < 64; guard++) {
    changed = 0;
    changed |= ta ? fit_span(&kc, m, &mi, cap) : fit_span(&mi, k, &kc, cap);
    changed |= tb ? fit_span(&nj, k, &kc, cap) : fit_span(&kc, n, &nj, cap);
    changed |= fit_span(&mi, n, &nj, cap);
  }
  /* 2. Whole matrices fit: as many batch entries per dispatch as the windows allow. */
  uint64_t nb = 1;
  if (mi == m && nj == n && kc == k) {
    nb = min_u64(batch, VK_MAX_GROUPS);
    nb = min_u64(nb, (cap - m * k) / sa + 1);
    nb = min_u64(nb, (cap - m * n) / sc + 1);
    if (sb) nb = min_u64(nb, (cap - k * n) / sb + 1);
  }
  /* 3. Blocks in order; for one block of c the k chunks run in ascending order. */
  for (uint64_t p0 = 0; p0 < batch; p0 += nb) {
    uint64_t cnt = min_u64(nb, batch - p0);
    for (uint64_t i0 = 0; i0 < m; i0 += mi) {
      uint64_t mc = min_u64(mi, m - i0);
      for (uint64_t j0 = 0; j0 < n; j0 += nj) {
        uint64_t nc = min_u64(nj, n - j0);
        int kern = pick_matmul(mc, nc, cnt);
        /* k = 0: one dispatch with no k steps (c = 0, or c's own value canonical for matmul_acc) */
        const uint64_t nk = k ? ceil_div(k, kc) : 1;
        for (uint64_t q = 0; q < nk; q++) {
          const uint64_t k0 = q * kc, kcc = k ? min_u64(kc, k - k0) : 0;
          vk_win w[VK_NBIND];
          wins_dummy(l, w);
          if (kcc) {
            w[0] = ta ? window(l, op->in[0], p0 * sa + k0 * m + i0, (cnt - 1) * sa + (kcc - 1) * m + mc)
                      : window(l, op->in[0], p0 * sa + i0 * k + k0, (cnt - 1) * sa + (mc - 1) * k + kcc);
            w[1] = tb ? window(l, op->in[1], p0 * sb + j0 * k + k0, (cnt - 1) * sb + (nc - 1) * k + kcc)
                      : window(l, op->in[1], p0 * sb + k0 * n + j0, (cnt - 1) * sb + (kcc - 1) * n + nc);
          }
          w[2] = window(l, op->out[0], p0 * sc + i0 * n + j0, (cnt - 1) * sc + (mc - 1) * n + nc);
          w[3] = dummy_win(l);
          const uint64_t c0 = p0 * sc + i0 * n + j0, cspan = (cnt - 1) * sc + (mc - 1) * n + nc;
          uint32_t epi_flags = 0;
          if (epi && k0 + kcc == k) {
            if (epi->bias) w[3] = window(l, epi->bias, j0, nc), epi_flags |= MM_EPI_BIAS;
            if (epi->residual) w[4] = window(l, epi->residual, c0, cspan), epi_flags |= MM_EPI_RES;
            if (epi->gelu_out) w[5] = window(l, epi->gelu_out, c0, cspan), epi_flags |= MM_EPI_GELU;
          }
          /* A stride is only ever multiplied by an index below the block's extent: pass 0 when that is 1,
           * so that no value beyond a window (which may exceed 32 bits) reaches the shader. */
          mm_pc pc;
          pc.M = (uint32_t)mc, pc.N = (uint32_t)nc, pc.K = (uint32_t)kcc;
          pc.lda = (uint32_t)(ta ? (kcc > 1 ? m : 0) : (mc > 1 ? k : 0));
          pc.ldb = (uint32_t)(tb ? (nc > 1 ? k : 0) : (kcc > 1 ? n : 0));
          pc.ldc = (uint32_t)(mc > 1 ? n : 0);
          pc.base_a = (uint32_t)w[0].base, pc.base_b = (uint32_t)w[1].base, pc.base_c = (uint32_t)w[2].base;
          pc.stride_a = (uint32_t)(cnt > 1 ? sa : 0), pc.stride_b = (uint32_t)(cnt > 1 ? sb : 0);
          pc.stride_c = (uint32_t)(cnt > 1 ? sc : 0);
          /* 4: each sum continues from c (the k chunks after the first; every chunk of matmul_acc) */
          const int accum = k0 > 0 || op->kind == WEFT_OP_MATMUL_ACC;
          pc.flags = (ta ? 1u : 0u) | (tb ? 2u : 0u) | (accum ? 4u : 0u) | epi_flags;
          pc.base_bias = (uint32_t)w[3].base, pc.base_r = (uint32_t)w[4].base, pc.base_g = (uint32_t)w[5].base;
          VkPipeline pipe;
          weft_status st;
          uint32_t gx, gy;
          if (kern == MM_SIMPLE) {
            st = get_pipe(l, VK_SH_MATMUL_SIMPLE, 0, 0, 0, &pipe);
            gx = (uint32_t)ceil_div(nc, 16), gy = (uint32_t)ceil_div(mc, 16);
          } else {
            /* Vector loads need 4-float alignment of every row start and vector dimensions in multiples of
             * 4, so that no vector straddles an edge of the block. */
            int vec = pc.lda % 4 == 0 && pc.ldb % 4 == 0 && pc.ldc % 4 == 0 && pc.base_a % 4 == 0 &&
                      pc.base_b % 4 == 0 && pc.base_c % 4 == 0 && pc.stride_a % 4 == 0 && pc.stride_b % 4 == 0 &&
                      pc.stride_c % 4 == 0 && (ta ? mc : kcc) % 4 == 0 && (tb ? kcc : nc) % 4 == 0 && nc % 4 == 0;
            int fp32 = op->contract != WEFT_CONTRACT_EXACT;
            int s = kern == MM_T44 ? (fp32 ? VK_SH_MATMUL_T44_FP32 : VK_SH_MATMUL_T44)
                    : kern == MM_T88K16 && !fp32 ? VK_SH_MATMUL_T88K16
                                                 : (fp32 ? VK_SH_MATMUL_T88_FP32 : VK_SH_MATMUL_T88);
            uint32_t bm = kern == MM_T44 ? 64 : 128;
            st = get_pipe(l, s, (uint32_t)ta, (uint32_t)tb, (uint32_t)vec, &pipe);
            gx = (uint32_t)ceil_div(nc, bm), gy = (uint32_t)ceil_div(mc, bm);
          }
          if (st != WEFT_OK) return st;
          int reads[4] = {0, 1}, writes[2] = {2}, nread = 2, nwrite = 1;
          if (epi_flags & MM_EPI_BIAS) reads[nread++] = 3;
          if (epi_flags & MM_EPI_RES) reads[nread++] = 4;
          if (epi_flags & MM_EPI_GELU) writes[nwrite++] = 5;
          st = dispatch(l, b, pipe, w, reads, nread, writes, nwrite, &pc, sizeof pc, gx, gy, (uint32_t)cnt);
          if (st != WEFT_OK) return st;
        }
      }
    }
  }
  return WEFT_OK;
}

/* ---------------------------------------------------------------------------- the transformer ops */

/* Each runs the tx_*.comp kernels (their header comments give bindings, push constants and grids) under
 * the exact contract, in the loop orders of src/core/reference_tx.c. Ranges larger than a binding are
 * chunked: element ranges (gelu, adamw), row blocks (layernorm, causal softmax, cross-entropy, positions of
 * the embedding), (b, h) blocks of attention's [B, NH, T, T] tensors, row windows of embedding tables.
 * Where chunks accumulate into one output (dgamma, dbeta) they run in ascending order, continuing the
 * previous chunk's sums: the same sequence of roundings. Cross-entropy rows are also reduced in column
 * ranges (XENT_COLS). supports() refuses what would not fit even so. */

/* Grows scratch *s to hold `elems` 4-byte elements; the old one is freed after the work that uses it. */
static weft_status scratch_get(weft_vk_lane *l, vk_buf **s, uint64_t elems) {
  if (*s && (*s)->size >= elems * 4) return WEFT_OK;
  weft_vk_buf_release(l, *s);
  *s = NULL;
  return weft_vk_buf_create(l, elems ? elems * 4 : 4, s);
}

static uint32_t grid(uint64_t items, uint32_t wg) {
  uint64_t g = ceil_div(items, wg);
  return (uint32_t)(g == 0 ? 1 : min_u64(g, VK_MAX_GROUPS));
}

/* One dispatch of kernel `sh`: bindings in `rmask` are read, those in `wmask` written. */
static weft_status tx_dispatch(weft_vk_lane *l, vk_batch *b, int sh, const vk_win *w, unsigned rmask, unsigned wmask,
                               const void *pc, uint32_t pc_size, uint32_t gx) {
  VkPipeline pipe;
  weft_status st = get_pipe(l, sh, 0, 0, 0, &pipe);
  if (st != WEFT_OK) return st;
  int reads[VK_NBIND], writes[VK_NBIND], nr = 0, nw = 0;
  for (int i = 0; i < VK_NBIND; i++) {
    if (rmask & (1u << i)) reads[nr++] = i;
    if (wmask & (1u << i)) writes[nw++] = i;
  }
  return dispatch(l, b, pipe, w, reads, nr, writes, nw, pc, pc_size, gx, 1, 1);
}

#define U32(x) ((uint32_t)(x))

static weft_status run_gelu(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t n = (uint64_t)op->iparam[0], cap = cap_elems(l);
  const int bwd = op->kind == WEFT_OP_GELU_BACKWARD;
  for (uint64_t e0 = 0; e0 < n; e0 += cap) {
    uint64_t len = min_u64(cap, n - e0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], e0, len);
    if (bwd) w[1] = window(l, op->in[1], e0, len);
    w[2] = window(l, op->out[0], e0, len);
    struct { uint32_t count, base_x, base_dy, base_o; } pc = {U32(len), U32(w[0].base), U32(w[1].base), U32(w[2].base)};
    weft_status st = tx_dispatch(l, b, bwd ? VK_SH_TX_GELU_BWD : VK_SH_TX_GELU_FWD, w, bwd ? 3u : 1u, 4u, &pc,
                                 sizeof pc, grid(len, 256));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

static weft_status run_adamw(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t n = (uint64_t)op->iparam[0], cap = cap_elems(l);
  for (uint64_t e0 = 0; e0 < n; e0 += cap) {
    uint64_t len = min_u64(cap, n - e0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->out[0], e0, len); /* param */
    w[1] = window(l, op->in[0], e0, len);  /* grad */
    w[2] = window(l, op->out[1], e0, len); /* m */
    w[3] = window(l, op->out[2], e0, len); /* v */
    struct {
      uint32_t count;
      float f[7];
      uint32_t base_p, base_g, base_m, base_v;
    } pc;
    pc.count = U32(len);
    for (int i = 0; i < 7; i++) pc.f[i] = op->fparam[i];
    pc.base_p = U32(w[0].base), pc.base_g = U32(w[1].base), pc.base_m = U32(w[2].base), pc.base_v = U32(w[3].base);
    weft_status st = tx_dispatch(l, b, VK_SH_TX_ADAMW, w, 2u, 1u | 4u | 8u, &pc, sizeof pc, grid(len, 256));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* `add`: the add x2 = in[0] + in[1] fused before it (src/lanes/fuse.h; op->in[0] is x2), or NULL. */
static weft_status run_layernorm(weft_vk_lane *l, vk_batch *b, const weft_op *op, const weft_op *add) {
  const uint64_t N = (uint64_t)op->iparam[0], C = (uint64_t)op->iparam[1], cap = cap_elems(l);
  const uint64_t per = C ? cap / C : N;
  for (uint64_t r0 = 0; r0 < N; r0 += per) {
    uint64_t nr = min_u64(per, N - r0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, add ? add->in[0] : op->in[0], r0 * C, nr * C);
    if (add) w[6] = window(l, add->in[1], r0 * C, nr * C), w[7] = window(l, op->in[0], r0 * C, nr * C);
    w[1] = window(l, op->in[1], 0, C); /* gamma, beta: indexed from 0 by the kernel */
    w[2] = window(l, op->in[2], 0, C);
    w[3] = window(l, op->out[0], r0 * C, nr * C);
    uint32_t flags = 0, base_stats = 0;
    if (op->out[1]) w[4] = window(l, op->out[1], r0, nr), flags |= 1u, base_stats = U32(w[4].base);
    if (op->out[2]) w[5] = window(l, op->out[2], r0, nr), flags |= 2u, base_stats = U32(w[5].base);
    struct {
      uint32_t N, C, flags;
      float eps;
      uint32_t base_x, base_y, base_stats, base_b, base_x2;
    } pc = {U32(nr), U32(C), flags, op->fparam[0], U32(w[0].base), U32(w[3].base), base_stats, U32(w[6].base),
            U32(w[7].base)};
    weft_status st = add ? tx_dispatch(l, b, VK_SH_TX_LN_ADD_FWD, w, 1u | 2u | 4u | 64u, 8u | 16u | 32u | 128u, &pc,
                                       sizeof pc, grid(nr, 1))
                         : tx_dispatch(l, b, VK_SH_TX_LN_FWD, w, 7u, 8u | 16u | 32u, &pc, sizeof pc, grid(nr, 1));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

static weft_status run_layernorm_backward(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t N = (uint64_t)op->iparam[0], C = (uint64_t)op->iparam[1], cap = cap_elems(l);
  const uint64_t per = C ? cap / C : N;
  weft_status st;
  /* dgamma and dbeta first: dx may be dy. Row blocks ascending, each continuing the sums. */
  if (op->out[1] || op->out[2]) {
    /* one invocation per column sums the chunk's rows: under a loop limit, chunks of at most that many */
    const uint64_t pg = loop_budget(l) ? min_u64(per, loop_budget(l)) : per;
    for (uint64_t r0 = 0; r0 < N; r0 += pg) {
      uint64_t nr = min_u64(pg, N - r0);
      vk_win w[VK_NBIND];
      wins_dummy(l, w);
      w[0] = window(l, op->in[0], r0 * C, nr * C);
      w[1] = window(l, op->in[1], r0 * C, nr * C);
      w[2] = window(l, op->in[2], r0, nr);
      w[3] = window(l, op->in[3], r0, nr);
      uint32_t flags = 0;
      unsigned wm = 0;
      if (op->out[1]) w[4] = window(l, op->out[1], 0, C), flags |= 1u, wm |= 16u;
      if (op->out[2]) w[5] = window(l, op->out[2], 0, C), flags |= 2u, wm |= 32u;
      struct { uint32_t N, C, flags, base_x, base_dy, base_stats, base_dg, base_db; } pc = {
          U32(nr), U32(C), flags, U32(w[1].base), U32(w[0].base), U32(w[2].base), U32(w[4].base), U32(w[5].base)};
      st = tx_dispatch(l, b, VK_SH_TX_LN_BWD_DGB, w, 15u, wm, &pc, sizeof pc, grid(C, 64));
      if (st != WEFT_OK) return st;
    }
  }
  for (uint64_t r0 = 0; r0 < N; r0 += per) {
    uint64_t nr = min_u64(per, N - r0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], r0 * C, nr * C);
    w[1] = window(l, op->in[1], r0 * C, nr * C);
    w[2] = window(l, op->in[2], r0, nr);
    w[3] = window(l, op->in[3], r0, nr);
    w[4] = window(l, op->in[4], 0, C);
    w[5] = window(l, op->out[0], r0 * C, nr * C);
    struct { uint32_t N, C, base_x, base_dy, base_dx, base_stats; } pc = {
        U32(nr), U32(C), U32(w[1].base), U32(w[0].base), U32(w[5].base), U32(w[2].base)};
    st = tx_dispatch(l, b, VK_SH_TX_LN_BWD_DX, w, 31u, 32u, &pc, sizeof pc, grid(nr, 1));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

static weft_status run_causal_softmax(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t R = (uint64_t)op->iparam[0], T = (uint64_t)op->iparam[1], cap = cap_elems(l);
  const uint64_t rows = R * T, per = T ? cap / T : rows;
  const int bwd = op->kind == WEFT_OP_CAUSAL_SOFTMAX_BACKWARD;
  for (uint64_t r0 = 0; r0 < rows; r0 += per) {
    uint64_t nr = min_u64(per, rows - r0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], r0 * T, nr * T);
    if (bwd) w[1] = window(l, op->in[1], r0 * T, nr * T);
    w[2] = window(l, op->out[0], r0 * T, nr * T);
    struct {
      uint32_t nrows, T, row0;
      float scale;
      uint32_t base_a, base_b, base_o;
    } pc = {U32(nr), U32(T), U32(r0 % T), op->fparam[0], U32(w[0].base), U32(w[1].base), U32(w[2].base)};
    weft_status st = tx_dispatch(l, b, bwd ? VK_SH_TX_SOFTMAX_BWD : VK_SH_TX_SOFTMAX_FWD, w, bwd ? 3u : 1u, 4u, &pc,
                                 sizeof pc, grid(nr, 64));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

typedef struct att_pc {
  uint32_t T, C, NH, bh0, nbh, flags, base_att, base_pre, base_ds, j0, j1, i0, i1;
  uint32_t t0, Tq; /* ATT_FWD's rows: 0 and T for the fused op, the query positions for attention_cached */
} att_pc;

/* Under a loop limit one (b, h, t) row's work is split: scores (and the backward's dots) in ranges of `jc`
 * columns, outputs in ranges of `ic` elements, the softmax in a dispatch of its own; and no dispatch covers
 * more (b, h, t) rows than it has invocations. Without one, every phase runs in one dispatch. The checks that
 * this suffices are in tx_supports(). */
static weft_status run_attention(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t B = (uint64_t)op->iparam[0], T = (uint64_t)op->iparam[1], C = (uint64_t)op->iparam[2],
                 NH = (uint64_t)op->iparam[3], cap = cap_elems(l), budget = loop_budget(l);
  const uint64_t nbh = B * NH, TT = T * T, hs = NH ? C / NH : 0;
  uint64_t per = TT ? cap / TT : nbh, jc = T, ic = hs;
  int one = 1; /* every phase of a row in one dispatch */
  const int bwd = op->kind == WEFT_OP_ATTENTION_BACKWARD;
  if (budget && T) {
    per = min_u64(per, INVOCATIONS(64) / (T * (bwd && hs ? hs : 1)));
    /* a loop of n iterations counts n + 1 (its last test too): a score is hs + 2, an output element T + 2 */
    jc = budget / (hs + 2), ic = budget / (T + 2);
    if (per == 0 || jc == 0 || ic == 0) return loop_refuse(l, weft_op_kind_str(op->kind), "rows too long", T * hs);
    /* scores, softmax (about 4T) and outputs of the longest row together */
    one = T * (hs + 2) + 4 * T + 8 + hs * (T + 2) <= budget;
    if (bwd) one = T * (hs + 2) + 2 * T + 4 <= budget;
  }
  weft_status st;
  if (bwd && (st = scratch_get(l, &l->s_ds, min_u64(per, nbh) * TT)) != WEFT_OK) return st;
  for (uint64_t bh0 = 0; bh0 < nbh; bh0 += per) {
    uint64_t cnt = min_u64(per, nbh - bh0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, bwd ? op->in[1] : op->in[0], 0, B * T * 3 * C); /* qkv, whole */
    att_pc pc = {U32(T), U32(C), U32(NH), U32(bh0), U32(cnt), 0, 0, 0, 0, 0, U32(T), 0, U32(hs), 0, U32(T)};
    if (!bwd) {
      w[1] = window(l, op->out[0], 0, B * T * C);
      const uint32_t pre = op->out[2] ? 1u : 0u;
      if (pre) w[2] = window(l, op->out[2], bh0 * TT, cnt * TT);
      w[3] = window(l, op->out[1], bh0 * TT, cnt * TT);
      pc.base_att = U32(w[3].base), pc.base_pre = U32(w[2].base);
      if (one) {
        pc.flags = pre | 2u | 4u | 8u;
        st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u, 2u | 4u | 8u, &pc, sizeof pc, grid(cnt * T, 64));
        if (st != WEFT_OK) return st;
        continue;
      }
      for (uint64_t j0 = 0; j0 < T; j0 += jc) {
        pc.flags = 2u, pc.j0 = U32(j0), pc.j1 = U32(min_u64(T, j0 + jc));
        if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u | 8u, 8u, &pc, sizeof pc, grid(cnt * T, 64))) != WEFT_OK)
          return st;
      }
      pc.flags = pre | 4u;
      if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 8u, 4u | 8u, &pc, sizeof pc, grid(cnt * T, 64))) != WEFT_OK)
        return st;
      for (uint64_t i0 = 0; i0 < hs; i0 += ic) {
        pc.flags = 8u, pc.i0 = U32(i0), pc.i1 = U32(min_u64(hs, i0 + ic));
        if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u | 8u, 2u, &pc, sizeof pc, grid(cnt * T, 64))) != WEFT_OK)
          return st;
      }
      continue;
    }
    w[1] = window(l, op->in[0], 0, B * T * C); /* dout */
    w[2] = window(l, op->in[2], bh0 * TT, cnt * TT);
    w[3] = window(l, l->s_ds, 0, cnt * TT);
    pc.base_att = U32(w[2].base), pc.base_ds = U32(w[3].base);
    for (uint64_t j0 = 0; j0 < T; j0 += jc) {
      const int last = j0 + jc >= T;
      pc.flags = 2u | (last ? 4u : 0u), pc.j0 = U32(j0), pc.j1 = U32(min_u64(T, j0 + jc));
      if (last && !one) { /* the softmax backward in a dispatch of its own */
        pc.flags = 2u;
        if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_DS, w, 7u | 8u, 8u, &pc, sizeof pc, grid(cnt * T, 64))) != WEFT_OK)
          return st;
        pc.flags = 4u;
      }
      if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_DS, w, 7u | 8u, 8u, &pc, sizeof pc, grid(cnt * T, 64))) != WEFT_OK)
        return st;
    }
    w[4] = window(l, op->out[0], 0, B * T * 3 * C);
    st = tx_dispatch(l, b, VK_SH_TX_ATT_DQKV, w, 15u, 16u, &pc, sizeof pc, grid(cnt * T * hs, 64));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* Decode attention: ATT_FWD over the rows t0 .. t0+Tq-1 of each (b, h), qkv the cache of Tmax positions, att
 * the caller's [B,NH,Tq,Tmax] or scratch (s_ds: the forward has no other use for it). Chunked by (b, h)
 * blocks and split under a loop limit as the fused forward is, rows being at most n = t0+Tq long. */
static weft_status run_attention_cached(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t B = (uint64_t)op->iparam[0], T = (uint64_t)op->iparam[1], C = (uint64_t)op->iparam[2],
                 NH = (uint64_t)op->iparam[3], t0 = (uint64_t)op->iparam[4], Tq = (uint64_t)op->iparam[5];
  const uint64_t cap = cap_elems(l), budget = loop_budget(l), nbh = B * NH, row = Tq * T, hs = NH ? C / NH : 0,
                 n = t0 + Tq;
  if (nbh == 0 || Tq == 0) return WEFT_OK;
  uint64_t per = row ? cap / row : nbh, jc = n, ic = hs;
  int one = 1;
  if (budget) {
    per = min_u64(per, INVOCATIONS(64) / Tq);
    jc = budget / (hs + 2), ic = budget / (n + 2);
    if (per == 0 || jc == 0 || ic == 0) return loop_refuse(l, weft_op_kind_str(op->kind), "rows too long", n * hs);
    one = n * (hs + 2) + 4 * T + 8 + hs * (n + 2) <= budget;
  }
  weft_status st;
  if (!op->out[1] && (st = scratch_get(l, &l->s_ds, min_u64(per, nbh) * row)) != WEFT_OK) return st;
  for (uint64_t bh0 = 0; bh0 < nbh; bh0 += per) {
    const uint64_t cnt = min_u64(per, nbh - bh0);
    const uint32_t gx = grid(cnt * Tq, 64);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], 0, B * T * 3 * C); /* the cache, whole */
    w[1] = window(l, op->out[0], 0, B * Tq * C);
    w[3] = op->out[1] ? window(l, op->out[1], bh0 * row, cnt * row) : window(l, l->s_ds, 0, cnt * row);
    att_pc pc = {U32(T), U32(C), U32(NH), U32(bh0), U32(cnt), 0, U32(w[3].base), 0, 0, 0, U32(n), 0, U32(hs),
                 U32(t0), U32(Tq)};
    if (one) {
      pc.flags = 2u | 4u | 8u;
      if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u, 2u | 8u, &pc, sizeof pc, gx)) != WEFT_OK) return st;
      continue;
    }
    for (uint64_t j0 = 0; j0 < n; j0 += jc) {
      pc.flags = 2u, pc.j0 = U32(j0), pc.j1 = U32(min_u64(n, j0 + jc));
      if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u | 8u, 8u, &pc, sizeof pc, gx)) != WEFT_OK) return st;
    }
    pc.flags = 4u;
    if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 8u, 8u, &pc, sizeof pc, gx)) != WEFT_OK) return st;
    for (uint64_t i0 = 0; i0 < hs; i0 += ic) {
      pc.flags = 8u, pc.i0 = U32(i0), pc.i1 = U32(min_u64(hs, i0 + ic));
      if ((st = tx_dispatch(l, b, VK_SH_TX_ATT_FWD, w, 1u | 8u, 2u, &pc, sizeof pc, gx)) != WEFT_OK) return st;
    }
  }
  return WEFT_OK;
}

/* Columns of a row that one XENT_ROWS dispatch reduces. llvmpipe (lavapipe) ends an invocation's loops,
 * silently, once it has run 65535 iterations of them in all; a row of GPT-2's 50,257 logits in one max loop
 * and one sum loop got its sum cut short there. A max pass and a sum pass over XENT_COLS columns, one row
 * per invocation, stay well below that on every driver; wider rows are reduced in ascending column ranges,
 * each dispatch continuing the running max and sum the previous one left in the stats: the same sequence of
 * compares and roundings as one loop. */
#define XENT_COLS 16384u

static weft_status run_crossentropy(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t N = (uint64_t)op->iparam[0], V = (uint64_t)op->iparam[1], cap = cap_elems(l);
  /* one row per invocation: at most 64 * VK_MAX_GROUPS rows per dispatch */
  const uint64_t per = min_u64(V ? min_u64(cap / V, cap / 2) : N, (uint64_t)VK_MAX_GROUPS * 64);
  const int bwd = op->kind == WEFT_OP_CROSSENTROPY_BACKWARD;
  weft_status st = scratch_get(l, &l->s_stats, 2 * min_u64(per, N));
  if (st != WEFT_OK) return st;
  for (uint64_t r0 = 0; r0 < N; r0 += per) {
    uint64_t nr = min_u64(per, N - r0);
    vk_win w[VK_NBIND];
    wins_dummy(l, w);
    w[0] = window(l, op->in[0], r0 * V, nr * V);
    w[1] = window(l, op->in[1], r0, nr);
    w[2] = window(l, l->s_stats, 0, 2 * nr);
    if (!bwd) w[3] = window(l, op->out[0], r0, nr);
    /* Row statistics: max then sum over column ranges (one dispatch doing both when the row is short). */
    const int split = V > XENT_COLS;
    for (int pass = split ? 0 : 2; pass < (split ? 2 : 3); pass++) {
      const uint32_t what = pass == 0 ? 4u : pass == 1 ? 8u : 4u | 8u;
      for (uint64_t j0 = 0; j0 < V; j0 += XENT_COLS) {
        const uint64_t j1 = split ? min_u64(V, j0 + XENT_COLS) : V;
        uint32_t flags = what | ((what & 8u) && j1 == V ? 16u : 0u);
        if (!bwd && (flags & 16u)) flags |= 2u;
        struct { uint32_t nrows, V, flags, base_z, base_t, base_s, base_l, j0, j1; } pc = {
            U32(nr), U32(V), flags, U32(w[0].base), U32(w[1].base), U32(w[2].base), U32(w[3].base), U32(j0), U32(j1)};
        st = tx_dispatch(l, b, VK_SH_TX_XENT_ROWS, w, 7u, 4u | (!bwd && (flags & 2u) ? 8u : 0u), &pc, sizeof pc,
                         grid(nr, 64));
        if (st != WEFT_OK) return st;
        if (!split) break;
      }
    }
    if (!bwd) continue;
    w[3] = window(l, op->in[2], r0, nr);
    w[4] = window(l, op->out[0], r0 * V, nr * V);
    struct { uint32_t nrows, V, base_z, base_t, base_s, base_dl, base_g; } gpc = {
        U32(nr), U32(V), U32(w[0].base), U32(w[1].base), U32(w[2].base), U32(w[3].base), U32(w[4].base)};
    st = tx_dispatch(l, b, VK_SH_TX_XENT_GRAD, w, 15u, 16u, &gpc, sizeof gpc, grid(nr * V, 64));
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

static weft_status run_embedding(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t B = (uint64_t)op->iparam[0], T = (uint64_t)op->iparam[1], C = (uint64_t)op->iparam[2],
                 V = (uint64_t)op->iparam[3], P = (uint64_t)op->iparam[4], cap = cap_elems(l);
  const uint64_t n = B * T, per_i = C ? cap / C : n, per_v = C ? cap / C : V;
  const int has_pos = op->in[1] != NULL;
  for (uint64_t i0 = 0; i0 < n; i0 += per_i) {
    uint64_t ni = min_u64(per_i, n - i0);
    for (uint64_t v0 = 0; v0 < V; v0 += per_v) { /* one dispatch per window of table rows */
      uint64_t nv = min_u64(per_v, V - v0);
      vk_win w[VK_NBIND];
      wins_dummy(l, w);
      w[0] = window(l, op->in[0], i0, ni);
      if (has_pos) w[1] = window(l, op->in[1], i0, ni);
      w[2] = window(l, op->in[2], v0 * C, nv * C);
      w[3] = window(l, op->in[3], 0, P * C);
      w[4] = window(l, op->out[0], i0 * C, ni * C);
      struct { uint32_t n, T, C, flags, bt0, v0, nv, base_tok, base_pos, base_wte, base_wpe, base_out; } pc = {
          U32(ni), U32(T), U32(C), has_pos ? 1u : 0u, U32(i0 % T), U32(v0), U32(nv), U32(w[0].base),
          U32(w[1].base), U32(w[2].base), U32(w[3].base), U32(w[4].base)};
      weft_status st = tx_dispatch(l, b, VK_SH_TX_EMBED_FWD, w, 15u, 16u, &pc, sizeof pc, grid(ni * C, 256));
      if (st != WEFT_OK) return st;
    }
  }
  return WEFT_OK;
}

static weft_status run_embedding_backward(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t B = (uint64_t)op->iparam[0], T = (uint64_t)op->iparam[1], C = (uint64_t)op->iparam[2],
                 cap = cap_elems(l);
  const uint64_t n = B * T, per_v = C ? cap / C : 1;
  weft_status st = scratch_get(l, &l->s_links, 2 * n);
  if (st != WEFT_OK) return st;
  for (int table = 0; table < 2; table++) {
    vk_buf *tab = op->out[table];
    if (!tab) continue;
    vk_buf *idx = table == 0 ? op->in[1] : op->in[2]; /* pos NULL: the implicit t */
    const uint64_t rows = (uint64_t)op->iparam[table == 0 ? 3 : 4];
    const uint32_t has_idx = idx ? 1u : 0u;
    vk_win lw[VK_NBIND];
    wins_dummy(l, lw);
    if (idx) lw[0] = window(l, idx, 0, n);
    lw[1] = window(l, l->s_links, 0, 2 * n);
    struct { uint32_t n, T, flags, base_idx, base_links; } lpc = {U32(n), U32(T), has_idx, U32(lw[0].base),
                                                                   U32(lw[1].base)};
    st = tx_dispatch(l, b, VK_SH_TX_EMBED_LINKS, lw, 1u, 2u, &lpc, sizeof lpc, grid(n, 256));
    if (st != WEFT_OK) return st;
    for (uint64_t v0 = 0; v0 < rows; v0 += per_v) {
      uint64_t nv = min_u64(per_v, rows - v0);
      vk_win w[VK_NBIND];
      wins_dummy(l, w);
      w[0] = lw[0], w[1] = lw[1];
      w[2] = window(l, op->in[0], 0, n * C);
      w[3] = window(l, tab, v0 * C, nv * C);
      struct { uint32_t n, T, C, flags, v0, nv, base_idx, base_links, base_dout, base_tab; } pc = {
          U32(n), U32(T), U32(C), has_idx, U32(v0), U32(nv), U32(w[0].base), U32(w[1].base), U32(w[2].base),
          U32(w[3].base)};
      st = tx_dispatch(l, b, VK_SH_TX_EMBED_BWD, w, 7u, 8u, &pc, sizeof pc, grid(n * C, 256));
      if (st != WEFT_OK) return st;
    }
  }
  return WEFT_OK;
}

/* permute and copy_slice move 4-byte elements unchanged, whatever the dtype (docs/DESIGN.md): flags 0, the
 * kernels' bit copy, so a float NaN keeps its payload as on every other lane. */
static weft_status run_permute(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const int64_t *xd = op->iparam + 1;
  uint64_t xs[4], yd[4], s[4], n = 1;
  xs[3] = 1;
  for (int a = 2; a >= 0; a--) xs[a] = xs[a + 1] * (uint64_t)xd[a + 1];
  for (int a = 0; a < 4; a++) {
    int p = (int)((op->iparam[5] >> (2 * a)) & 3);
    yd[a] = (uint64_t)xd[p], s[a] = xs[p], n *= (uint64_t)xd[a];
  }
  if (n == 0) return WEFT_OK;
  vk_win w[VK_NBIND];
  wins_dummy(l, w);
  w[0] = window(l, op->in[0], 0, n);
  w[1] = window(l, op->out[0], 0, n);
  struct { uint32_t count, d1, d2, d3, s0, s1, s2, s3, base_src, base_dst, flags; } pc = {
      U32(n), U32(yd[1]), U32(yd[2]), U32(yd[3]), U32(s[0]), U32(s[1]), U32(s[2]), U32(s[3]),
      U32(w[0].base), U32(w[1].base), 0u};
  return tx_dispatch(l, b, VK_SH_TX_PERMUTE, w, 1u, 2u, &pc, sizeof pc, grid(n, 256));
}

static weft_status run_copy_slice(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t outer = (uint64_t)op->iparam[0], sl = (uint64_t)op->iparam[1], dl = (uint64_t)op->iparam[2],
                 inner = (uint64_t)op->iparam[3], off = (uint64_t)op->iparam[4], cap = cap_elems(l);
  const uint64_t cols = sl * inner, sld = sl * inner, dld = dl * inner;
  if (outer == 0 || cols == 0) return WEFT_OK;
  uint64_t ro = outer, cc = cols;
  fit_span(&ro, sld > dld ? sld : dld, &cc, cap);
  for (uint64_t o0 = 0; o0 < outer; o0 += ro) {
    uint64_t nr = min_u64(ro, outer - o0);
    for (uint64_t c0 = 0; c0 < cols; c0 += cc) {
      uint64_t nc = min_u64(cc, cols - c0);
      vk_win w[VK_NBIND];
      wins_dummy(l, w);
      w[0] = window(l, op->in[0], o0 * sld + c0, (nr - 1) * sld + nc);
      w[1] = window(l, op->out[0], o0 * dld + off * inner + c0, (nr - 1) * dld + nc);
      struct { uint32_t rows, cols, src_ld, dst_ld, base_src, base_dst, flags; } pc = {
          U32(nr), U32(nc), nr > 1 ? U32(sld) : 0u, nr > 1 ? U32(dld) : 0u, U32(w[0].base), U32(w[1].base), 0u};
      weft_status st = tx_dispatch(l, b, VK_SH_TX_COPY_SLICE, w, 1u, 2u, &pc, sizeof pc, grid(nr * nc, 256));
      if (st != WEFT_OK) return st;
    }
  }
  return WEFT_OK;
}

uint64_t weft_vk_ops_offered(void) {
  /* sumsq (one ascending sum into one element) is left to the lanes that offer it */
  return WEFT_OPS_ALL & ~WEFT_OP_BIT(WEFT_OP_SUMSQ);
}

/* What a transformer op needs bound whole (or per row / per block) that no chunking splits further. */
static weft_status tx_supports(weft_vk_lane *l, const weft_op *op) {
  const uint64_t cap = cap_elems(l);
  const int64_t *ip = op->iparam;
  const char *what = NULL;
  uint64_t need = 0;
  switch (op->kind) {
  case WEFT_OP_EMBEDDING:
    need = (uint64_t)ip[4] * (uint64_t)ip[2], what = "the position table wpe (P*C floats)";
    break;
  case WEFT_OP_EMBEDDING_BACKWARD:
    need = (uint64_t)ip[0] * (uint64_t)ip[1] * (uint64_t)ip[2], what = "dout (B*T*C floats)";
    if (need < 2 * (uint64_t)ip[0] * (uint64_t)ip[1]) need = 2 * (uint64_t)ip[0] * (uint64_t)ip[1];
    break;
  case WEFT_OP_LAYERNORM:
  case WEFT_OP_LAYERNORM_BACKWARD: need = (uint64_t)ip[1], what = "one row (C floats)"; break;
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: need = (uint64_t)ip[1], what = "one row (T floats)"; break;
  case WEFT_OP_ATTENTION:
  case WEFT_OP_ATTENTION_BACKWARD:
    need = (uint64_t)ip[0] * (uint64_t)ip[1] * 3 * (uint64_t)ip[2], what = "qkv (B*T*3C floats)";
    if (need < (uint64_t)ip[1] * (uint64_t)ip[1]) need = (uint64_t)ip[1] * (uint64_t)ip[1];
    break;
  case WEFT_OP_ATTENTION_CACHED: /* the cache whole, and one (b, h)'s [Tq, Tmax] block of att */
    need = (uint64_t)ip[0] * (uint64_t)ip[1] * 3 * (uint64_t)ip[2], what = "the cache qkv (B*Tmax*3C floats)";
    if (need < (uint64_t)ip[5] * (uint64_t)ip[1]) need = (uint64_t)ip[5] * (uint64_t)ip[1];
    break;
  case WEFT_OP_CROSSENTROPY:
  case WEFT_OP_CROSSENTROPY_BACKWARD: need = (uint64_t)ip[1], what = "one row of logits (V floats)"; break;
  case WEFT_OP_PERMUTE:
    need = (uint64_t)ip[1] * (uint64_t)ip[2] * (uint64_t)ip[3] * (uint64_t)ip[4], what = "the tensor";
    break;
  case WEFT_OP_SUMSQ:
    return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED,
                            "%s does not offer sumsq (one sequential sum into one element): the CPU lane does",
                            l->name);
  default: return WEFT_OK;
  }
  if (need > cap)
    return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED,
                            "%s: %s %s must fit one storage binding (%llu elements here, %llu needed)", l->name,
                            weft_op_kind_str(op->kind), what, (unsigned long long)cap, (unsigned long long)need);
  return WEFT_OK;
}

/* What the loop limit leaves out (see "the loop limit"): the per-invocation trip counts of the kernels no
 * split covers, the longest row's, at one item per invocation or as many as the grid-stride loops hand one. */
static weft_status loop_supports(weft_vk_lane *l, const weft_op *op) {
  const uint64_t budget = loop_budget(l);
  if (!budget) return WEFT_OK;
  const int64_t *ip = op->iparam;
  const char *name = weft_op_kind_str(op->kind), *what = NULL;
  uint64_t need = 0;
  switch (op->kind) {
  case WEFT_OP_SOFTMAX_XENT: /* max, sum and the loss loop over one row */
    need = 3 * (uint64_t)op->cols, what = "over rows this wide (3 loops of the row's classes)";
    break;
  case WEFT_OP_LAYERNORM: /* mean, variance, then the row again; at most 65535 rows per dispatch */
  case WEFT_OP_LAYERNORM_BACKWARD:
    need = ceil_div((uint64_t)ip[0], VK_MAX_GROUPS) * 3 * (uint64_t)ip[1], what = "over rows this wide";
    break;
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD:
    need = ceil_div((uint64_t)ip[0] * (uint64_t)ip[1], INVOCATIONS(64)) * 4 * (uint64_t)ip[1],
    what = "over rows this long";
    break;
  case WEFT_OP_ATTENTION:
  case WEFT_OP_ATTENTION_BACKWARD: { /* the softmax of a row, the output element's (or dqkv's) sums */
    const uint64_t T = (uint64_t)ip[1], hs = ip[3] ? (uint64_t)ip[2] / (uint64_t)ip[3] : 0;
    need = 4 * T + 8;
    if (hs + 1 > need) need = hs + 1;
    if (T * (hs ? hs : 1) > INVOCATIONS(64)) need = T * hs; /* one row per invocation is not possible */
    what = "over sequences this long";
    break;
  }
  case WEFT_OP_ATTENTION_CACHED: { /* the softmax of a row (zeros up to Tmax), an output element's sum */
    const uint64_t T = (uint64_t)ip[1], hs = ip[3] ? (uint64_t)ip[2] / (uint64_t)ip[3] : 0;
    need = 4 * T + 8;
    if (hs + 1 > need) need = hs + 1;
    if ((uint64_t)ip[5] > INVOCATIONS(64)) need = (uint64_t)ip[5] * (hs + 2); /* rows share invocations */
    what = "over caches this long";
    break;
  }
  case WEFT_OP_EMBEDDING_BACKWARD: { /* the chain of one table row, up to every position */
    const uint64_t n = (uint64_t)ip[0] * (uint64_t)ip[1];
    need = ceil_div(n * (uint64_t)ip[2], INVOCATIONS(256)) * (n + 1), what = "with this many positions";
    break;
  }
  default: return WEFT_OK;
  }
  return need > budget ? loop_refuse(l, name, what, need) : WEFT_OK;
}

/* --------------------------------------------------------------------------------------------- entry */

weft_status weft_vk_ops_supports(weft_vk_lane *l, const weft_op *op) {
  if (op->contract != WEFT_CONTRACT_EXACT && op->contract != WEFT_CONTRACT_FP32)
    return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED, "%s honours the exact and fp32 contracts only", l->name);
  if (op->kind == WEFT_OP_SOFTMAX_XENT && (uint64_t)op->cols > cap_elems(l))
    return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED,
                            "%s: softmax_xent over rows of %lld classes: one row must fit a storage binding (%llu "
                            "floats here)",
                            l->name, (long long)op->cols, (unsigned long long)cap_elems(l));
  if ((unsigned)op->kind >= WEFT_OP_COUNT)
    return weft_lane_report(l->host, WEFT_ERR_UNSUPPORTED, "%s: op %d is unknown to this lane", l->name, (int)op->kind);
  weft_status st = loop_supports(l, op);
  return st != WEFT_OK ? st : tx_supports(l, op);
}

weft_status weft_vk_ops_run(weft_vk_lane *l, const weft_op *op) {
  weft_status st = weft_vk_ops_supports(l, op);
  if (st != WEFT_OK) return st;
  vk_batch *b;
  if ((st = weft_vk_batch_get(l, &b)) != WEFT_OK) return st;
  switch (op->kind) {
  case WEFT_OP_MATMUL:
  case WEFT_OP_MATMUL_ACC: return run_matmul(l, b, op, NULL);
  case WEFT_OP_SUM_ROWS: return run_sum_rows(l, b, op);
  case WEFT_OP_SOFTMAX_XENT: return run_softmax(l, b, op);
  case WEFT_OP_EMBEDDING: return run_embedding(l, b, op);
  case WEFT_OP_EMBEDDING_BACKWARD: return run_embedding_backward(l, b, op);
  case WEFT_OP_LAYERNORM: return run_layernorm(l, b, op, NULL);
  case WEFT_OP_LAYERNORM_BACKWARD: return run_layernorm_backward(l, b, op);
  case WEFT_OP_GELU:
  case WEFT_OP_GELU_BACKWARD: return run_gelu(l, b, op);
  case WEFT_OP_ATTENTION:
  case WEFT_OP_ATTENTION_BACKWARD: return run_attention(l, b, op);
  case WEFT_OP_ATTENTION_CACHED: return run_attention_cached(l, b, op);
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: return run_causal_softmax(l, b, op);
  case WEFT_OP_CROSSENTROPY:
  case WEFT_OP_CROSSENTROPY_BACKWARD: return run_crossentropy(l, b, op);
  case WEFT_OP_ADAMW: return run_adamw(l, b, op);
  case WEFT_OP_PERMUTE: return run_permute(l, b, op);
  case WEFT_OP_COPY_SLICE: return run_copy_slice(l, b, op);
  default: return run_ew(l, b, op);
  }
}

weft_status weft_vk_ops_run_fused(void *ctx, const weft_fused *f) {
  weft_vk_lane *l = ctx;
  if (f->kind == WEFT_FUSED_SINGLE) return weft_vk_ops_run(l, &f->ops[0]);
  /* Each op was checked by supports() when it came; the fused kernel has the limits of the matmul or the
   * layernorm it extends (the same loops, chunked the same way). */
  vk_batch *b;
  weft_status st = weft_vk_batch_get(l, &b);
  if (st != WEFT_OK) return st;
  st = f->kind == WEFT_FUSED_MATMUL_EPILOGUE ? run_matmul(l, b, &f->ops[0], f)
                                             : run_layernorm(l, b, &f->ops[1], &f->ops[0]);
  if (st == WEFT_OK) __atomic_fetch_add(&weft_vk_stat_fused_ops, (uint64_t)f->nops, __ATOMIC_RELAXED);
  return st;
}
