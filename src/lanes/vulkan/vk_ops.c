/* vk_ops.c - the Vulkan lane's kernels: the embedded SPIR-V, pipelines (created on first use), and how each
 * op becomes dispatches. A tensor larger than the device's largest storage-buffer binding is bound as
 * windows, and the op is split into chunks that each fit: rows of elementwise ops, row/column/k blocks of a
 * matmul (k chunks in ascending order, each continuing the sums the previous left in c, which is the same
 * sequence of roundings), row blocks of sum_rows and softmax_xent. */
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
  l->dummy = l->scratch = NULL;
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

/* Records one dispatch: the barrier its buffers need, the pipeline, the four bindings (w[0..3], reads
 * nread of them first, then writes from index 2), the push constants and the grid. */
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
  return WEFT_OK;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

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
  fit_span(&ri, cols, &cc, cap);
  for (uint64_t c0 = 0; c0 < cols; c0 += cc) {
    uint64_t nc = min_u64(cc, cols - c0);
    uint64_t r0 = 0;
    do { /* rows == 0 still writes the zero sums */
      uint64_t nr = min_u64(ri, rows - r0);
      vk_win w[VK_NBIND];
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
  if (op->out[0] && (!l->scratch || l->scratch->size < ri * 4)) {
    weft_vk_buf_release(l, l->scratch); /* after the work that still uses it */
    l->scratch = NULL;
    if ((st = weft_vk_buf_create(l, ri * 4, &l->scratch)) != WEFT_OK) return st;
  }
  for (uint64_t r0 = 0; r0 < rows; r0 += ri) {
    uint64_t nr = min_u64(ri, rows - r0);
    vk_win w[VK_NBIND];
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
} mm_pc;

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

static weft_status run_matmul(weft_vk_lane *l, vk_batch *b, const weft_op *op) {
  const uint64_t m = (uint64_t)op->m, n = (uint64_t)op->n, k = (uint64_t)op->k, batch = (uint64_t)op->batch;
  const uint64_t cap = cap_elems(l);
  const int ta = op->trans_a, tb = op->trans_b;
  const uint64_t sa = m * k, sb = op->b_batched ? k * n : 0, sc = m * n;
  if (batch == 0) return WEFT_OK;

  /* 1. Block sizes: every operand's window must fit a binding, and the grid the device's group limit. */
  uint64_t mi = min_u64(m, (uint64_t)VK_MAX_GROUPS * 16), nj = min_u64(n, (uint64_t)VK_MAX_GROUPS * 16), kc = k;
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
        for (uint64_t k0 = 0; k0 < k; k0 += kc) {
          uint64_t kcc = min_u64(kc, k - k0);
          vk_win w[VK_NBIND];
          w[0] = ta ? window(l, op->in[0], p0 * sa + k0 * m + i0, (cnt - 1) * sa + (kcc - 1) * m + mc)
                    : window(l, op->in[0], p0 * sa + i0 * k + k0, (cnt - 1) * sa + (mc - 1) * k + kcc);
          w[1] = tb ? window(l, op->in[1], p0 * sb + j0 * k + k0, (cnt - 1) * sb + (nc - 1) * k + kcc)
                    : window(l, op->in[1], p0 * sb + k0 * n + j0, (cnt - 1) * sb + (kcc - 1) * n + nc);
          w[2] = window(l, op->out[0], p0 * sc + i0 * n + j0, (cnt - 1) * sc + (mc - 1) * n + nc);
          w[3] = dummy_win(l);
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
          pc.flags = (ta ? 1u : 0u) | (tb ? 2u : 0u) | (k0 > 0 ? 4u : 0u);
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
          int reads[2] = {0, 1}, writes[1] = {2};
          st = dispatch(l, b, pipe, w, reads, 2, writes, 1, &pc, sizeof pc, gx, gy, (uint32_t)cnt);
          if (st != WEFT_OK) return st;
        }
      }
    }
  }
  return WEFT_OK;
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
  return WEFT_OK;
}

weft_status weft_vk_ops_run(weft_vk_lane *l, const weft_op *op) {
  weft_status st = weft_vk_ops_supports(l, op);
  if (st != WEFT_OK) return st;
  vk_batch *b;
  if ((st = weft_vk_batch_get(l, &b)) != WEFT_OK) return st;
  switch (op->kind) {
  case WEFT_OP_MATMUL: return run_matmul(l, b, op);
  case WEFT_OP_SUM_ROWS: return run_sum_rows(l, b, op);
  case WEFT_OP_SOFTMAX_XENT: return run_softmax(l, b, op);
  default: return run_ew(l, b, op);
  }
}
