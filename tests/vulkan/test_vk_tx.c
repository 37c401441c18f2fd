/* test_vk_tx.c - the transformer kernels of the Vulkan lane (src/lanes/vulkan/shaders/tx_*.comp), run
 * directly on the device (no op layer; test_vk_ops_tx.c runs them through the API) and compared bit for
 * bit with the reference kernels of src/core/reference_tx.c, on GPT-2-like small shapes with NaN, +-inf, -0, subnormal
 * and large values in the data; the scalar functions of wmath.glsl against src/core/wmath.c on edge bit
 * patterns; the embedding table split into row windows the way the lane must chunk a table larger than a
 * binding. Each kernel runs with the lane's binding model: one set of storage buffers (8 here), at most 64
 * bytes of push constants. Skips (exit 77) where there is no Vulkan device. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "core/reference_tx.h"
#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

#define SPV(name)                                                                                              \
  extern const unsigned char weft_vk_spv_##name[];                                                             \
  extern const size_t weft_vk_spv_##name##_size;
SPV(tx_embed_fwd)
SPV(tx_embed_links)
SPV(tx_embed_bwd)
SPV(tx_ln_fwd)
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
SPV(tx_wmath_probe)
#undef SPV
#define K(name) weft_vk_spv_##name, &weft_vk_spv_##name##_size

enum { NB = 8, PC_BYTES = 64 };

/* ------------------------------------------------------------------ a bare runner: one dispatch at a time */

static struct {
  weft_vk_instance *vi;
  VkPhysicalDevice phys;
  VkDevice dev;
  VkQueue queue;
  uint32_t qfam, mem_type;
  uint64_t max_range; /* maxStorageBufferRange: the most one binding may span */
  int keep_denorm, keep_nan;
  WEFT_VK_DEVICE_FNS(WEFT_VK_DECLARE)
  PFN_vkQueueWaitIdle vkQueueWaitIdle;
  VkDescriptorSetLayout dsl;
  VkPipelineLayout layout;
} G;

static int runner_open(void) {
  char why[512];
  G.vi = weft_vk_instance_create(why, sizeof why);
  if (!G.vi) {
    tu_skip("no Vulkan: %s", why);
    return 0;
  }
  uint32_t n = 0;
  G.vi->vkEnumeratePhysicalDevices(G.vi->instance, &n, NULL);
  if (n == 0) {
    tu_skip("no Vulkan device");
    return 0;
  }
  VkPhysicalDevice devs[16];
  if (n > 16) n = 16;
  G.vi->vkEnumeratePhysicalDevices(G.vi->instance, &n, devs);
  G.phys = devs[0];
  VkPhysicalDeviceProperties props;
  G.vi->vkGetPhysicalDeviceProperties(G.phys, &props);
  G.max_range = props.limits.maxStorageBufferRange;
  if (G.vi->vkGetPhysicalDeviceProperties2 && props.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceFloatControlsProperties fc;
    memset(&fc, 0, sizeof fc);
    fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
    VkPhysicalDeviceProperties2 p2;
    memset(&p2, 0, sizeof p2);
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &fc;
    G.vi->vkGetPhysicalDeviceProperties2(G.phys, &p2);
    G.keep_denorm = fc.shaderDenormPreserveFloat32 == VK_TRUE;
    G.keep_nan = fc.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
  }
  printf("device: %s (subnormals %s, NaN/inf/-0 %s by the driver)\n", props.deviceName,
         G.keep_denorm ? "kept" : "not guaranteed", G.keep_nan ? "kept" : "not guaranteed");
  uint32_t nq = 0;
  VkQueueFamilyProperties qf[16];
  G.vi->vkGetPhysicalDeviceQueueFamilyProperties(G.phys, &nq, NULL);
  if (nq > 16) nq = 16;
  G.vi->vkGetPhysicalDeviceQueueFamilyProperties(G.phys, &nq, qf);
  G.qfam = UINT32_MAX;
  for (uint32_t i = 0; i < nq && G.qfam == UINT32_MAX; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) G.qfam = i;
  if (G.qfam == UINT32_MAX) {
    tu_skip("%s has no compute queue", props.deviceName);
    return 0;
  }
  VkPhysicalDeviceMemoryProperties mp;
  G.vi->vkGetPhysicalDeviceMemoryProperties(G.phys, &mp);
  G.mem_type = UINT32_MAX;
  const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mp.memoryTypeCount && G.mem_type == UINT32_MAX; i++)
    if ((mp.memoryTypes[i].propertyFlags & want) == want) G.mem_type = i;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, G.qfam, 1, &prio};
  VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &qci, 0, NULL, 0, NULL, NULL};
  VkResult r = G.vi->vkCreateDevice(G.phys, &dci, NULL, &G.dev);
  TU_CHECK(r == VK_SUCCESS, "vkCreateDevice: %s", weft_vk_result_str(r));
  if (r != VK_SUCCESS) return 0;
#define LOAD(name) G.name = (PFN_##name)G.vi->vkGetDeviceProcAddr(G.dev, #name);
  WEFT_VK_DEVICE_FNS(LOAD)
  LOAD(vkQueueWaitIdle)
#undef LOAD
  G.vkGetDeviceQueue(G.dev, G.qfam, 0, &G.queue);
  VkDescriptorSetLayoutBinding binds[NB];
  for (uint32_t i = 0; i < NB; i++)
    binds[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
  VkDescriptorSetLayoutCreateInfo lci = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL, 0, NB, binds};
  G.vkCreateDescriptorSetLayout(G.dev, &lci, NULL, &G.dsl);
  VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, PC_BYTES};
  VkPipelineLayoutCreateInfo pci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &G.dsl, 1, &pcr};
  G.vkCreatePipelineLayout(G.dev, &pci, NULL, &G.layout);
  return 1;
}

static void runner_close(void) {
  if (G.dev) {
    G.vkDestroyPipelineLayout(G.dev, G.layout, NULL);
    G.vkDestroyDescriptorSetLayout(G.dev, G.dsl, NULL);
    G.vkDestroyDevice(G.dev, NULL);
  }
  if (G.vi) weft_vk_instance_release(G.vi);
}

/* Drops the float-control modes the device does not honour (as vk_ops.c does when it loads a kernel). */
static size_t spirv_strip(const uint32_t *in, size_t nwords, uint32_t *out) {
  size_t o = 0, i = 0;
  for (; i < 5 && i < nwords; i++) out[o++] = in[i];
  while (i < nwords) {
    uint32_t op = in[i] & 0xffffu, len = in[i] >> 16;
    if (len == 0 || i + len > nwords) break;
    int drop = 0;
    if (op == 17 && len >= 2) drop = (in[i + 1] == 4464 && !G.keep_denorm) || (in[i + 1] == 4466 && !G.keep_nan);
    else if (op == 16 && len >= 3) drop = (in[i + 2] == 4459 && !G.keep_denorm) || (in[i + 2] == 4461 && !G.keep_nan);
    else if (op == 10 && len >= 2 && !G.keep_denorm && !G.keep_nan)
      drop = strncmp((const char *)&in[i + 1], "SPV_KHR_float_controls", (len - 1) * 4) == 0;
    if (!drop)
      for (uint32_t w = 0; w < len; w++) out[o++] = in[i + w];
    i += len;
  }
  return o;
}

/* One storage buffer: host data copied in before and back out after the dispatch (NULL data: a dummy). */
typedef struct {
  void *data;
  size_t bytes;
} vb;

/* Runs kernel `code` once: bindings b[0..nb), push constants, gx x gy groups, spec constant 0 = spec0. */
static int vrun(const char *name, const unsigned char *code, const size_t *code_size, const vb *b, int nb,
                const void *pc, uint32_t pc_size, uint32_t gx, uint32_t spec0) {
  TU_CHECK(pc_size <= PC_BYTES, "%s: %u bytes of push constants, more than the lane's %d", name, pc_size, PC_BYTES);
  VkBuffer buf[NB];
  VkDeviceMemory mem[NB];
  void *map[NB];
  VkDescriptorBufferInfo info[NB];
  int ok = 1;
  for (int i = 0; i < NB; i++) {
    size_t bytes = i < nb && b[i].data ? (b[i].bytes + 15) / 16 * 16 : 16;
    if (bytes == 0) bytes = 16;
    VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                              VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    G.vkCreateBuffer(G.dev, &bci, NULL, &buf[i]);
    VkMemoryRequirements req;
    G.vkGetBufferMemoryRequirements(G.dev, buf[i], &req);
    VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, G.mem_type};
    VkResult r = G.vkAllocateMemory(G.dev, &mai, NULL, &mem[i]);
    TU_CHECK(r == VK_SUCCESS, "%s: vkAllocateMemory(%zu): %s", name, bytes, weft_vk_result_str(r));
    G.vkBindBufferMemory(G.dev, buf[i], mem[i], 0);
    G.vkMapMemory(G.dev, mem[i], 0, VK_WHOLE_SIZE, 0, &map[i]);
    memset(map[i], 0, bytes);
    if (i < nb && b[i].data) memcpy(map[i], b[i].data, b[i].bytes);
    info[i] = (VkDescriptorBufferInfo){buf[i], 0, VK_WHOLE_SIZE};
  }
  size_t nwords = *code_size / 4;
  uint32_t *words = malloc(nwords * 4), *patched = malloc(nwords * 4);
  memcpy(words, code, nwords * 4);
  size_t n = spirv_strip(words, nwords, patched);
  VkShaderModuleCreateInfo mci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, n * 4, patched};
  VkShaderModule mod;
  VkResult r = G.vkCreateShaderModule(G.dev, &mci, NULL, &mod);
  free(words), free(patched);
  TU_CHECK(r == VK_SUCCESS, "%s: vkCreateShaderModule: %s", name, weft_vk_result_str(r));
  VkSpecializationMapEntry me = {0, 0, 4};
  VkSpecializationInfo si = {1, &me, 4, &spec0};
  VkComputePipelineCreateInfo cci = {
      VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
      {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0, VK_SHADER_STAGE_COMPUTE_BIT, mod, "main", &si},
      G.layout, VK_NULL_HANDLE, -1};
  VkPipeline pipe;
  r = G.vkCreateComputePipelines(G.dev, VK_NULL_HANDLE, 1, &cci, NULL, &pipe);
  TU_CHECK(r == VK_SUCCESS, "%s: vkCreateComputePipelines: %s", name, weft_vk_result_str(r));
  if (r != VK_SUCCESS) ok = 0;
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NB};
  VkDescriptorPoolCreateInfo dpci = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, 1, 1, &ps};
  VkDescriptorPool pool;
  G.vkCreateDescriptorPool(G.dev, &dpci, NULL, &pool);
  VkDescriptorSetAllocateInfo dsai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, pool, 1, &G.dsl};
  VkDescriptorSet set;
  G.vkAllocateDescriptorSets(G.dev, &dsai, &set);
  VkWriteDescriptorSet wr[NB];
  for (uint32_t i = 0; i < NB; i++)
    wr[i] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, set, i, 0, 1,
                                   VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, &info[i], NULL};
  G.vkUpdateDescriptorSets(G.dev, NB, wr, 0, NULL);
  VkCommandPoolCreateInfo cpci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL, 0, G.qfam};
  VkCommandPool cpool;
  G.vkCreateCommandPool(G.dev, &cpci, NULL, &cpool);
  VkCommandBufferAllocateInfo cbai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, cpool,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  VkCommandBuffer cmd;
  G.vkAllocateCommandBuffers(G.dev, &cbai, &cmd);
  if (ok) {
    VkCommandBufferBeginInfo cbi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                    VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    G.vkBeginCommandBuffer(cmd, &cbi);
    G.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    G.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, G.layout, 0, 1, &set, 0, NULL);
    G.vkCmdPushConstants(cmd, G.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pc_size, pc);
    G.vkCmdDispatch(cmd, gx, 1, 1);
    G.vkEndCommandBuffer(cmd);
    VkSubmitInfo sub = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cmd, 0, NULL};
    r = G.vkQueueSubmit(G.queue, 1, &sub, VK_NULL_HANDLE);
    TU_CHECK(r == VK_SUCCESS, "%s: vkQueueSubmit: %s", name, weft_vk_result_str(r));
    r = G.vkQueueWaitIdle(G.queue);
    TU_CHECK(r == VK_SUCCESS, "%s: vkQueueWaitIdle: %s", name, weft_vk_result_str(r));
    if (r != VK_SUCCESS) ok = 0;
  }
  for (int i = 0; i < nb; i++)
    if (ok && b[i].data) memcpy(b[i].data, map[i], b[i].bytes);
  G.vkDestroyCommandPool(G.dev, cpool, NULL);
  G.vkDestroyDescriptorPool(G.dev, pool, NULL);
  if (pipe) G.vkDestroyPipeline(G.dev, pipe, NULL);
  G.vkDestroyShaderModule(G.dev, mod, NULL);
  for (int i = 0; i < NB; i++) G.vkDestroyBuffer(G.dev, buf[i], NULL), G.vkFreeMemory(G.dev, mem[i], NULL);
  return ok;
}

static uint32_t groups(uint64_t items, uint32_t wg) {
  uint64_t g = (items + wg - 1) / wg;
  if (g == 0) g = 1;
  return g > 65535 ? 65535 : (uint32_t)g;
}

/* ------------------------------------------------------------------------------------ test helpers */

static float *fl(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static int32_t *in32(size_t n) { return calloc(n ? n : 1, sizeof(int32_t)); }
static float *dup(const float *x, size_t n) {
  float *y = fl(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}
#define FB(p, n) ((vb){(p), (size_t)(n) * 4})

/* Random data: sp 0 plain uniform [-lo, lo); sp 1 with special values; sp 2 edge bit patterns. */
static void fill(tu_rng *r, float *x, size_t n, int sp, float scale) {
  if (sp == 2) {
    vkt_fill_bits(r, x, n);
    return;
  }
  vkt_fill(r, x, n, sp);
  for (size_t i = 0; i < n; i++)
    if (x[i] == x[i] && x[i] > -1.0f && x[i] < 1.0f) x[i] = x[i] * scale;
}

/* ------------------------------------------------------------------------------------------ the tests */

static void wmath(tu_rng *r) {
  enum { N = 1 << 18 };
  float *x = fl(N), *got = fl(N), *want = fl(N);
  /* A quarter edge bit patterns, a quarter every float around 1, the rest random bits anywhere. */
  vkt_fill_bits(r, x, N / 4);
  for (size_t i = N / 4; i < N / 2; i++) x[i] = tu_float(0x3f000000u + (uint32_t)(i - N / 4) * 97u);
  for (size_t i = N / 2; i < N; i++) x[i] = tu_float((uint32_t)tu_rng_next(r));
  x[0] = tu_float(0x80000000u), x[1] = 0.0f, x[2] = tu_float(0x7f800000u), x[3] = tu_float(0xff800000u);
  x[4] = tu_float(0x00000001u), x[5] = tu_float(0x7f7fffffu), x[6] = tu_float(0x80000001u), x[7] = 10.0f;
  x[8] = 0.75f, x[9] = tu_float(0x39800000u), x[10] = tu_float(0x397fffffu), x[11] = tu_float(0x7fa00001u);
  static const char *NAMES[] = {"recip", "rsqrt", "sqrt", "tanh", "exp", "log"};
  float (*const FNS[])(float) = {weft_recipf, weft_rsqrtf, weft_sqrtf, weft_tanhf, weft_expf, weft_logf};
  for (uint32_t f = 0; f < 6; f++) {
    vb b[2] = {FB(x, N), FB(got, N)};
    uint32_t pc = N;
    if (!vrun("wmath probe", weft_vk_spv_tx_wmath_probe, &weft_vk_spv_tx_wmath_probe_size, b, 2, &pc, 4, groups(N, 256), f))
      continue;
    for (size_t i = 0; i < N; i++) want[i] = FNS[f](x[i]);
    char what[64];
    snprintf(what, sizeof what, "weft_%sf (wmath.glsl)", NAMES[f]);
    vkt_same(what, got, want, N);
  }
  free(x), free(got), free(want);
}

/* The embedding forward and backward; `windows` > 1 splits the token table into that many row windows, each
 * its own buffer, as the lane must for a table larger than a binding. */
static void embedding(tu_rng *r, int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int with_pos, int windows,
                      int sp) {
  const int64_t n = B * T;
  int32_t *tok = in32((size_t)n), *pos = in32((size_t)n), *links = in32((size_t)(2 * n));
  for (int64_t i = 0; i < n; i++) {
    /* a few hot tokens repeat often (their rows get many contributions), the rest anywhere */
    tok[i] = (int32_t)(tu_rng_int(r, 0, 3) == 0 ? tu_rng_int(r, 0, 3) : tu_rng_int(r, 0, V - 1));
    pos[i] = (int32_t)tu_rng_int(r, 0, P - 1);
  }
  float *wte = fl((size_t)(V * C)), *wpe = fl((size_t)(P * C)), *out = fl((size_t)(n * C)), *want = fl((size_t)(n * C));
  fill(r, wte, (size_t)(V * C), sp, 1.0f);
  fill(r, wpe, (size_t)(P * C), sp, 1.0f);
  char what[160];
  snprintf(what, sizeof what, "embedding B %lld T %lld C %lld V %lld P %lld%s, %d window(s), data %d", (long long)B,
           (long long)T, (long long)C, (long long)V, (long long)P, with_pos ? " with positions" : "", windows, sp);
  TU_STATUS(weft_ref_embedding_forward(want, tok, with_pos ? pos : NULL, wte, wpe, B, T, C, V, P), WEFT_OK, what);
  int64_t per = (V + windows - 1) / windows;
  for (int w = 0; w < windows; w++) {
    int64_t v0 = w * per, nv = v0 + per > V ? V - v0 : per;
    if (nv <= 0) continue;
    uint32_t pc[12] = {(uint32_t)n, (uint32_t)T, (uint32_t)C, (uint32_t)with_pos, 0, (uint32_t)v0, (uint32_t)nv, 0, 0, 0, 0, 0};
    vb b[5] = {{tok, (size_t)n * 4}, {pos, (size_t)n * 4}, FB(wte + v0 * C, nv * C), FB(wpe, P * C), FB(out, n * C)};
    vrun("embedding forward", K(tx_embed_fwd), b, 5, pc, sizeof pc, groups((uint64_t)(n * C), 256), 0);
  }
  char w2[200];
  snprintf(w2, sizeof w2, "%s: forward", what);
  vkt_same(w2, out, want, (size_t)(n * C));

  /* backward into tables that already hold values (gradients accumulate) */
  float *dout = fl((size_t)(n * C)), *dwte = fl((size_t)(V * C)), *dwpe = fl((size_t)(P * C));
  fill(r, dout, (size_t)(n * C), sp, 1.0f);
  fill(r, dwte, (size_t)(V * C), sp, 1.0f);
  fill(r, dwpe, (size_t)(P * C), sp, 1.0f);
  float *gte = dup(dwte, (size_t)(V * C)), *gpe = dup(dwpe, (size_t)(P * C));
  TU_STATUS(weft_ref_embedding_backward(dwte, dwpe, dout, tok, with_pos ? pos : NULL, B, T, C, V, P), WEFT_OK, what);
  for (int table = 0; table < 2; table++) {
    int32_t *idx = table == 0 ? tok : pos;
    uint32_t has_idx = table == 0 ? 1u : (uint32_t)with_pos;
    uint32_t lpc[5] = {(uint32_t)n, (uint32_t)T, has_idx, 0, 0};
    vb lb[2] = {{idx, (size_t)n * 4}, {links, (size_t)(2 * n) * 4}};
    vrun("embedding links", K(tx_embed_links), lb, 2, lpc, sizeof lpc, groups((uint64_t)n, 256), 0);
    int64_t rows = table == 0 ? V : P, nwin = table == 0 ? windows : 1, per2 = (rows + nwin - 1) / nwin;
    float *tab = table == 0 ? gte : gpe;
    for (int64_t w = 0; w < nwin; w++) {
      int64_t v0 = w * per2, nv = v0 + per2 > rows ? rows - v0 : per2;
      if (nv <= 0) continue;
      uint32_t pc[10] = {(uint32_t)n, (uint32_t)T, (uint32_t)C, has_idx, (uint32_t)v0, (uint32_t)nv, 0, 0, 0, 0};
      vb b[4] = {{idx, (size_t)n * 4}, {links, (size_t)(2 * n) * 4}, FB(dout, n * C), FB(tab + v0 * C, nv * C)};
      vrun("embedding backward", K(tx_embed_bwd), b, 4, pc, sizeof pc, groups((uint64_t)(n * C), 256), 0);
    }
  }
  snprintf(w2, sizeof w2, "%s: backward dwte", what);
  vkt_same(w2, gte, dwte, (size_t)(V * C));
  snprintf(w2, sizeof w2, "%s: backward dwpe", what);
  vkt_same(w2, gpe, dwpe, (size_t)(P * C));
  free(tok), free(pos), free(links), free(wte), free(wpe), free(out), free(want), free(dout), free(dwte), free(dwpe);
  free(gte), free(gpe);
}

static void layernorm(tu_rng *r, int64_t N, int64_t C, int sp) {
  size_t nc = (size_t)(N * C);
  float *x = fl(nc), *gamma = fl((size_t)C), *beta = fl((size_t)C), *y = fl(nc), *mean = fl((size_t)N),
        *rstd = fl((size_t)N), *wy = fl(nc), *wm = fl((size_t)N), *wr = fl((size_t)N);
  fill(r, x, nc, sp, 3.0f);
  fill(r, gamma, (size_t)C, sp, 1.0f);
  fill(r, beta, (size_t)C, sp, 1.0f);
  /* one row nearly constant (variance near zero: rstd large), one row tiny (subnormal deviations) */
  if (N > 2) {
    for (int64_t c = 0; c < C; c++) x[C + c] = 0.5f + (float)(c % 3) * 0x1p-20f;
    for (int64_t c = 0; c < C; c++) x[2 * C + c] = tu_float((uint32_t)tu_rng_int(r, 0, 0x00ffffff));
  }
  const float eps = 1e-5f;
  weft_ref_layernorm_forward(wy, wm, wr, x, gamma, beta, N, C, eps);
  uint32_t pc[7] = {(uint32_t)N, (uint32_t)C, 3u, 0, 0, 0, 0};
  memcpy(&pc[3], &eps, 4);
  vb b[6] = {FB(x, nc), FB(gamma, C), FB(beta, C), FB(y, nc), FB(mean, N), FB(rstd, N)};
  vrun("layernorm forward", K(tx_ln_fwd), b, 6, pc, sizeof pc, groups((uint64_t)N, 1), 0);
  char what[96], w2[140];
  snprintf(what, sizeof what, "layernorm N %lld C %lld data %d", (long long)N, (long long)C, sp);
  snprintf(w2, sizeof w2, "%s: y", what), vkt_same(w2, y, wy, nc);
  snprintf(w2, sizeof w2, "%s: mean", what), vkt_same(w2, mean, wm, (size_t)N);
  snprintf(w2, sizeof w2, "%s: rstd", what), vkt_same(w2, rstd, wr, (size_t)N);

  float *dy = fl(nc), *dx = fl(nc), *wdx = fl(nc), *dg = fl((size_t)C), *db = fl((size_t)C);
  fill(r, dy, nc, sp, 1.0f);
  fill(r, dg, (size_t)C, sp, 1.0f);
  fill(r, db, (size_t)C, sp, 1.0f);
  float *wdg = dup(dg, (size_t)C), *wdb = dup(db, (size_t)C);
  weft_ref_layernorm_backward(wdx, wdg, wdb, dy, x, wm, wr, gamma, N, C);
  uint32_t pdx[6] = {(uint32_t)N, (uint32_t)C, 0, 0, 0, 0};
  vb bdx[6] = {FB(dy, nc), FB(x, nc), FB(wm, N), FB(wr, N), FB(gamma, C), FB(dx, nc)};
  vrun("layernorm backward dx", K(tx_ln_bwd_dx), bdx, 6, pdx, sizeof pdx, groups((uint64_t)N, 1), 0);
  uint32_t pgb[8] = {(uint32_t)N, (uint32_t)C, 3u, 0, 0, 0, 0, 0};
  vb bgb[6] = {FB(dy, nc), FB(x, nc), FB(wm, N), FB(wr, N), FB(dg, C), FB(db, C)};
  vrun("layernorm backward dgamma dbeta", K(tx_ln_bwd_dgb), bgb, 6, pgb, sizeof pgb, groups((uint64_t)C, 64), 0);
  snprintf(w2, sizeof w2, "%s: dx", what), vkt_same(w2, dx, wdx, nc);
  snprintf(w2, sizeof w2, "%s: dgamma", what), vkt_same(w2, dg, wdg, (size_t)C);
  snprintf(w2, sizeof w2, "%s: dbeta", what), vkt_same(w2, db, wdb, (size_t)C);
  free(x), free(gamma), free(beta), free(y), free(mean), free(rstd), free(wy), free(wm), free(wr);
  free(dy), free(dx), free(wdx), free(dg), free(db), free(wdg), free(wdb);
}

static void gelu(tu_rng *r, int64_t n, int sp) {
  float *x = fl((size_t)n), *dy = fl((size_t)n), *y = fl((size_t)n), *w = fl((size_t)n);
  fill(r, x, (size_t)n, sp, 6.0f);
  fill(r, dy, (size_t)n, sp, 1.0f);
  uint32_t pc[4] = {(uint32_t)n, 0, 0, 0};
  char what[64];
  vb b[3] = {FB(x, n), FB(dy, n), FB(y, n)};
  vrun("gelu forward", K(tx_gelu_fwd), b, 3, pc, sizeof pc, groups((uint64_t)n, 256), 0);
  weft_ref_gelu_forward(w, x, n);
  snprintf(what, sizeof what, "gelu forward n %lld data %d", (long long)n, sp);
  vkt_same(what, y, w, (size_t)n);
  vrun("gelu backward", K(tx_gelu_bwd), b, 3, pc, sizeof pc, groups((uint64_t)n, 256), 0);
  weft_ref_gelu_backward(w, x, dy, n);
  snprintf(what, sizeof what, "gelu backward n %lld data %d", (long long)n, sp);
  vkt_same(what, y, w, (size_t)n);
  free(x), free(dy), free(y), free(w);
}

/* Causal softmax over R blocks of [T, T]; `chunks` dispatches of consecutive rows (row0 set each time). */
static void softmax(tu_rng *r, int64_t R, int64_t T, float scale, int chunks, int sp) {
  size_t n = (size_t)(R * T * T);
  int64_t rows = R * T;
  float *s = fl(n), *p = fl(n), *wp = fl(n), *dp = fl(n), *ds = fl(n), *wds = fl(n);
  fill(r, s, n, sp, 8.0f);
  fill(r, dp, n, sp, 1.0f);
  weft_ref_causal_softmax_forward(wp, s, R, T, scale);
  weft_ref_causal_softmax_backward(wds, wp, dp, R, T, scale);
  int64_t per = (rows + chunks - 1) / chunks;
  for (int64_t r0 = 0; r0 < rows; r0 += per) {
    int64_t nr = r0 + per > rows ? rows - r0 : per;
    uint32_t pc[7] = {(uint32_t)nr, (uint32_t)T, (uint32_t)r0, 0, 0, 0, 0};
    memcpy(&pc[3], &scale, 4);
    vb bf[3] = {FB(s + r0 * T, nr * T), {NULL, 0}, FB(p + r0 * T, nr * T)};
    vrun("causal softmax forward", K(tx_softmax_fwd), bf, 3, pc, sizeof pc, groups((uint64_t)nr, 64), 0);
    vb bb[3] = {FB(wp + r0 * T, nr * T), FB(dp + r0 * T, nr * T), FB(ds + r0 * T, nr * T)};
    vrun("causal softmax backward", K(tx_softmax_bwd), bb, 3, pc, sizeof pc, groups((uint64_t)nr, 64), 0);
  }
  char what[128];
  snprintf(what, sizeof what, "causal softmax R %lld T %lld scale %g, %d chunk(s), data %d: forward", (long long)R,
           (long long)T, (double)scale, chunks, sp);
  vkt_same(what, p, wp, n);
  snprintf(what, sizeof what, "causal softmax R %lld T %lld scale %g, %d chunk(s), data %d: backward", (long long)R,
           (long long)T, (double)scale, chunks, sp);
  vkt_same(what, ds, wds, n);
  free(s), free(p), free(wp), free(dp), free(ds), free(wds);
}

/* Fused attention forward and backward; `chunks` dispatches over blocks of (b, h) pairs. */
static void attention(tu_rng *r, int64_t B, int64_t T, int64_t C, int64_t NH, int chunks, int sp) {
  size_t nq = (size_t)(B * T * 3 * C), no = (size_t)(B * T * C), na = (size_t)(B * NH * T * T);
  float *qkv = fl(nq), *out = fl(no), *pre = fl(na), *att = fl(na), *wout = fl(no), *wpre = fl(na), *watt = fl(na);
  float *dout = fl(no), *dqkv = fl(nq), *wdqkv = fl(nq), *ds = fl(na);
  fill(r, qkv, nq, sp, 2.0f);
  fill(r, dout, no, sp, 1.0f);
  char what[128], w2[160];
  snprintf(what, sizeof what, "attention B %lld T %lld C %lld NH %lld, %d chunk(s), data %d", (long long)B,
           (long long)T, (long long)C, (long long)NH, chunks, sp);
  TU_STATUS(weft_ref_attention_forward(wout, wpre, watt, qkv, B, T, C, NH), WEFT_OK, what);
  TU_STATUS(weft_ref_attention_backward(wdqkv, dout, qkv, watt, B, T, C, NH), WEFT_OK, what);
  int64_t nbh = B * NH, per = (nbh + chunks - 1) / chunks;
  for (int64_t bh0 = 0; bh0 < nbh; bh0 += per) {
    int64_t cnt = bh0 + per > nbh ? nbh - bh0 : per;
    size_t off = (size_t)(bh0 * T * T), len = (size_t)(cnt * T * T);
    /* every phase in one dispatch (flags 2|4|8, preatt 1), scores and outputs over their whole ranges; the
     * rows t0 = 0 .. Tq = T (all of them: attention_cached is the same kernel over fewer rows) */
    uint32_t pc[15] = {(uint32_t)T, (uint32_t)C, (uint32_t)NH, (uint32_t)bh0, (uint32_t)cnt, 1u | 2u | 4u | 8u,
                       0, 0, 0, 0, (uint32_t)T, 0, (uint32_t)(C / NH), 0, (uint32_t)T};
    vb bf[4] = {FB(qkv, nq), FB(out, no), FB(pre + off, len), FB(att + off, len)};
    vrun("attention forward", K(tx_att_fwd), bf, 4, pc, sizeof pc, groups((uint64_t)(cnt * T), 64), 0);
    vb b1[4] = {FB(qkv, nq), FB(dout, no), FB(watt + off, len), FB(ds + off, len)};
    vrun("attention backward ds", K(tx_att_ds), b1, 4, pc, sizeof pc, groups((uint64_t)(cnt * T), 64), 0);
    vb b2[5] = {FB(qkv, nq), FB(dout, no), FB(watt + off, len), FB(ds + off, len), FB(dqkv, nq)};
    vrun("attention backward dqkv", K(tx_att_dqkv), b2, 5, pc, sizeof pc, groups((uint64_t)(cnt * T * (C / NH)), 64), 0);
  }
  snprintf(w2, sizeof w2, "%s: out", what), vkt_same(w2, out, wout, no);
  snprintf(w2, sizeof w2, "%s: preatt", what), vkt_same(w2, pre, wpre, na);
  snprintf(w2, sizeof w2, "%s: att", what), vkt_same(w2, att, watt, na);
  snprintf(w2, sizeof w2, "%s: dqkv", what), vkt_same(w2, dqkv, wdqkv, nq);
  free(qkv), free(out), free(pre), free(att), free(wout), free(wpre), free(watt), free(dout), free(dqkv), free(wdqkv);
  free(ds);
}

/* Cross-entropy forward and backward; `chunks` dispatches of consecutive rows, each row reduced in column
 * ranges of `cols` logits (a max pass, then a sum pass, each dispatch continuing the stats the previous one
 * left), as the lane does for rows wider than its XENT_COLS; cols 0: the whole row in one dispatch. */
static void xent(tu_rng *r, int64_t N, int64_t V, float spread, int chunks, int64_t cols, int sp) {
  size_t nz = (size_t)(N * V);
  float *z = fl(nz), *loss = fl((size_t)N), *wloss = fl((size_t)N), *stats = fl((size_t)(2 * N)), *dl = fl((size_t)N);
  float *g = fl(nz), *wg = fl(nz);
  int32_t *tgt = in32((size_t)N);
  fill(r, z, nz, sp, spread);
  fill(r, dl, (size_t)N, sp, 1.0f);
  for (int64_t i = 0; i < N; i++) tgt[i] = (int32_t)tu_rng_int(r, 0, V - 1);
  if (N > 1) tgt[1] = (int32_t)(V - 1);
  char what[128], w2[160];
  snprintf(what, sizeof what, "crossentropy N %lld V %lld spread %g, %d chunk(s), column ranges %lld, data %d",
           (long long)N, (long long)V, (double)spread, chunks, (long long)cols, sp);
  TU_STATUS(weft_ref_crossentropy_forward(wloss, z, tgt, N, V), WEFT_OK, what);
  TU_STATUS(weft_ref_crossentropy_backward(wg, z, tgt, dl, N, V), WEFT_OK, what);
  int64_t per = (N + chunks - 1) / chunks;
  for (int64_t r0 = 0; r0 < N; r0 += per) {
    int64_t nr = r0 + per > N ? N - r0 : per;
    vb br[4] = {FB(z + r0 * V, nr * V), {tgt + r0, (size_t)nr * 4}, FB(stats + 2 * r0, 2 * nr), FB(loss + r0, nr)};
    for (int pass = cols ? 0 : 2; pass < (cols ? 2 : 3); pass++)
      for (int64_t j0 = 0; j0 < V; j0 += cols ? cols : V) {
        const int64_t j1 = cols && j0 + cols < V ? j0 + cols : V;
        const uint32_t part = pass == 0 ? 4u : pass == 1 ? 8u : 4u | 8u;
        const uint32_t flags = part | ((part & 8u) && j1 == V ? 16u | 2u : 0u);
        uint32_t pr[9] = {(uint32_t)nr, (uint32_t)V, flags, 0, 0, 0, 0, (uint32_t)j0, (uint32_t)j1};
        vrun("crossentropy rows", K(tx_xent_rows), br, 4, pr, sizeof pr, groups((uint64_t)nr, 64), 0);
      }
    uint32_t pg[7] = {(uint32_t)nr, (uint32_t)V, 0, 0, 0, 0, 0};
    vb bg[5] = {FB(z + r0 * V, nr * V), {tgt + r0, (size_t)nr * 4}, FB(stats + 2 * r0, 2 * nr), FB(dl + r0, nr),
                FB(g + r0 * V, nr * V)};
    vrun("crossentropy grad", K(tx_xent_grad), bg, 5, pg, sizeof pg, groups((uint64_t)(nr * V), 64), 0);
  }
  snprintf(w2, sizeof w2, "%s: losses", what), vkt_same(w2, loss, wloss, (size_t)N);
  snprintf(w2, sizeof w2, "%s: dlogits", what), vkt_same(w2, g, wg, nz);
  free(z), free(loss), free(wloss), free(stats), free(dl), free(g), free(wg), free(tgt);
}

static void adamw(tu_rng *r, int64_t n, int64_t t, int sp) {
  float *p = fl((size_t)n), *g = fl((size_t)n), *m = fl((size_t)n), *v = fl((size_t)n);
  fill(r, p, (size_t)n, sp, 1.0f);
  fill(r, g, (size_t)n, sp, 1e-2f);
  fill(r, m, (size_t)n, sp, 1e-2f);
  vkt_fill(r, v, (size_t)n, 0);
  for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i] * 1e-4f; /* second moments are >= 0 */
  if (sp) v[0] = tu_float(0x00000003u), v[1] = 0.0f, v[2] = tu_float(0x7f800000u);
  float *wp = dup(p, (size_t)n), *wm = dup(m, (size_t)n), *wv = dup(v, (size_t)n);
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  float bc1 = weft_ref_adamw_bias_correction(b1, t), bc2 = weft_ref_adamw_bias_correction(b2, t);
  weft_ref_adamw(wp, g, wm, wv, n, lr, b1, b2, eps, wd, bc1, bc2);
  uint32_t pc[12] = {(uint32_t)n};
  const float fp[7] = {lr, b1, b2, eps, wd, bc1, bc2};
  memcpy(&pc[1], fp, sizeof fp);
  vb b[4] = {FB(p, n), FB(g, n), FB(m, n), FB(v, n)};
  vrun("adamw", K(tx_adamw), b, 4, pc, sizeof pc, groups((uint64_t)n, 256), 0);
  char what[96], w2[128];
  snprintf(what, sizeof what, "adamw n %lld step %lld data %d", (long long)n, (long long)t, sp);
  snprintf(w2, sizeof w2, "%s: param", what), vkt_same(w2, p, wp, (size_t)n);
  snprintf(w2, sizeof w2, "%s: m", what), vkt_same(w2, m, wm, (size_t)n);
  snprintf(w2, sizeof w2, "%s: v", what), vkt_same(w2, v, wv, (size_t)n);
  free(p), free(g), free(m), free(v), free(wp), free(wm), free(wv);
}

/* [B,T,H,D] -> [B,H,T,D] and back, int32 data bit for bit (and fp32 with NaN canonicalised); a slice of rows
 * written into a bigger tensor at a row and column offset. */
static void copies(tu_rng *r) {
  const uint32_t B = 3, T = 17, H = 4, D = 12, n = B * T * H * D;
  uint32_t *src = calloc(n, 4), *mid = calloc(n, 4), *back = calloc(n, 4), *want = calloc(n, 4);
  for (uint32_t i = 0; i < n; i++) src[i] = (uint32_t)tu_rng_next(r);
  src[0] = 0x7fa00001u, src[1] = 0xffc00001u; /* NaN bit patterns: int32 data must keep them */
  for (int isfloat = 0; isfloat <= 1; isfloat++) {
    /* out [B,H,T,D] from in [B,T,H,D]: strides of the out axes in the input */
    uint32_t p1[11] = {n, H, T, D, T * H * D, D, H * D, 1, 0, 0, (uint32_t)isfloat};
    vb b1[2] = {{src, n * 4}, {mid, n * 4}};
    vrun("permute", K(tx_permute), b1, 2, p1, sizeof p1, groups(n, 256), 0);
    for (uint32_t b = 0; b < B; b++)
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < H; h++)
          for (uint32_t d = 0; d < D; d++) {
            uint32_t u = src[((b * T + t) * H + h) * D + d];
            if (isfloat && (u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
            want[((b * H + h) * T + t) * D + d] = u;
          }
    TU_CHECK(memcmp(mid, want, n * 4) == 0, "permute [B,T,H,D] -> [B,H,T,D] (%s data): bits differ",
             isfloat ? "float" : "int32");
    uint32_t p2[11] = {n, T, H, D, H * T * D, D, T * D, 1, 0, 0, (uint32_t)isfloat};
    vb b2[2] = {{mid, n * 4}, {back, n * 4}};
    vrun("permute back", K(tx_permute), b2, 2, p2, sizeof p2, groups(n, 256), 0);
    int same = 1;
    for (uint32_t i = 0; i < n && same; i++) {
      uint32_t u = src[i];
      if (isfloat && (u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
      same = back[i] == u;
    }
    TU_CHECK(same, "permute [B,H,T,D] -> [B,T,H,D] (%s data) does not give the input back", isfloat ? "float" : "int32");
  }
  /* slice: rows x cols of src (leading dimension 40) into dst (64 x 50) at row 7, column 3 */
  const uint32_t rows = 9, cols = 31, sld = 40, dld = 50, drows = 64, r0 = 7, c0 = 3;
  uint32_t *dst = calloc(drows * dld, 4), *wdst = calloc(drows * dld, 4);
  for (uint32_t i = 0; i < drows * dld; i++) dst[i] = wdst[i] = (uint32_t)tu_rng_next(r);
  for (uint32_t i = 0; i < rows; i++)
    for (uint32_t j = 0; j < cols; j++) wdst[(r0 + i) * dld + c0 + j] = src[i * sld + j];
  uint32_t ps[7] = {rows, cols, sld, dld, 0, r0 * dld + c0, 0};
  vb bs[2] = {{src, rows * sld * 4}, {dst, drows * dld * 4}};
  vrun("copy slice", K(tx_copy_slice), bs, 2, ps, sizeof ps, groups(rows * cols, 256), 0);
  TU_CHECK(memcmp(dst, wdst, drows * dld * 4) == 0, "copy_slice of int32 rows at an offset: bits differ");
  free(src), free(mid), free(back), free(want), free(dst), free(wdst);
}

int main(void) {
  double start = tu_now();
  tu_rng r = {tu_seed()};
  if (!runner_open()) {
    runner_close();
    return tu_finish("vulkan transformer kernels", start);
  }
  wmath(&r);
  for (int sp = 0; sp <= 2; sp++) {
    embedding(&r, 2, 16, 48, 300, 32, 0, 1, sp);
    layernorm(&r, 37, 96, sp);
    gelu(&r, 70000, sp);
    softmax(&r, 6, 33, 0.125f, 1, sp);
    attention(&r, 2, 19, 48, 4, 1, sp);
    xent(&r, 9, 1000, sp == 2 ? 1.0f : 20.0f, 1, 0, sp);
    xent(&r, 9, 1000, sp == 2 ? 1.0f : 20.0f, 2, 300, sp);
    adamw(&r, 70000, 1 + 9 * sp, sp);
  }
  /* what the lane will chunk: table windows, row blocks, (b, h) blocks */
  embedding(&r, 4, 33, 64, 1000, 64, 1, 3, 1);
  embedding(&r, 2, 8, 16, 50, 8, 0, 7, 0);
  softmax(&r, 5, 20, 0.25f, 3, 1);
  attention(&r, 3, 21, 64, 4, 5, 1);
  layernorm(&r, 4, 768, 1);
  /* GPT-2's vocabulary in the lane's column ranges of 16,384 (one loop over a whole row would outrun
   * llvmpipe's bound on an invocation's loop iterations); finite rows too (data 1 puts a NaN in each) */
  xent(&r, 5, 50257, 10.0f, 2, 16384, 1);
  xent(&r, 5, 50257, 10.0f, 2, 16384, 0);
  /* GPT-2's token table, 50,257 x 768 fp32 = 154 MB: more than lavapipe's 128 MiB binding, so bound as row
   * windows that each fit the device's limit, for the lookup and its backward. */
  {
    const int64_t V = 50257, C = 768;
    int windows = (int)(((uint64_t)(V * C) * 4 + G.max_range - 1) / G.max_range);
    if (windows < 2) windows = 2;
    printf("token table at GPT-2's size: %d windows under a %llu-byte binding limit\n", windows,
           (unsigned long long)G.max_range);
    embedding(&r, 2, 64, C, V, 1024, 1, windows, 0);
  }
  copies(&r);
  runner_close();
  return tu_finish("vulkan transformer kernels", start);
}
