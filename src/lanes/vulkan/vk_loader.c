/* vk_loader.c - finding Vulkan at run time: opens the loader (libvulkan.so.1) with dlopen, creates the
 * instance the lanes share, and loads the instance-level entry points. No loader or no driver is not an
 * error: the probe records the lane as absent with the reason from here. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

/* The loader stays open for the life of the process: drivers register thread-locals and exit handlers
 * that must not outlive their code, so unloading it is the riskier choice. */
static pthread_once_t loader_once = PTHREAD_ONCE_INIT;
static PFN_vkGetInstanceProcAddr loader_gipa;
static char loader_error[512];

static void loader_open(void) {
  const char *names[] = {"libvulkan.so.1", "libvulkan.so"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(loader_error, sizeof loader_error,
             "no Vulkan loader: libvulkan.so.1 could not be opened (%s); install it (Debian: libvulkan1) and a "
             "driver (mesa-vulkan-drivers, or the GPU vendor's)",
             e ? e : "not found");
    return;
  }
  loader_gipa = (PFN_vkGetInstanceProcAddr)(uintptr_t)dlsym(h, "vkGetInstanceProcAddr");
  if (!loader_gipa)
    snprintf(loader_error, sizeof loader_error, "the Vulkan loader has no vkGetInstanceProcAddr: it is broken or too old");
}

const char *weft_vk_result_str(VkResult r) {
  switch (r) {
#define R(x)                                                                                                   \
  case x: return #x;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE) R(VK_ERROR_OUT_OF_HOST_MEMORY)
    R(VK_ERROR_OUT_OF_DEVICE_MEMORY) R(VK_ERROR_INITIALIZATION_FAILED) R(VK_ERROR_DEVICE_LOST)
    R(VK_ERROR_MEMORY_MAP_FAILED) R(VK_ERROR_LAYER_NOT_PRESENT) R(VK_ERROR_EXTENSION_NOT_PRESENT)
    R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER) R(VK_ERROR_TOO_MANY_OBJECTS)
    R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_FRAGMENTED_POOL) R(VK_ERROR_UNKNOWN) R(VK_ERROR_OUT_OF_POOL_MEMORY)
    R(VK_ERROR_INVALID_EXTERNAL_HANDLE) R(VK_ERROR_FRAGMENTATION) R(VK_ERROR_INVALID_SHADER_NV)
    R(VK_PIPELINE_COMPILE_REQUIRED)
#undef R
  default: return "VkResult (unlisted)";
  }
}

weft_vk_instance *weft_vk_instance_create(char *why, size_t why_len) {
  pthread_once(&loader_once, loader_open);
  if (!loader_gipa) {
    snprintf(why, why_len, "%s", loader_error);
    return NULL;
  }
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)loader_gipa(NULL, "vkCreateInstance");
  PFN_vkEnumerateInstanceVersion version = (PFN_vkEnumerateInstanceVersion)loader_gipa(NULL, "vkEnumerateInstanceVersion");
  if (!create) {
    snprintf(why, why_len, "the Vulkan loader has no vkCreateInstance: it is broken");
    return NULL;
  }
  uint32_t loader_version = VK_API_VERSION_1_0;
  if (version && version(&loader_version) != VK_SUCCESS) loader_version = VK_API_VERSION_1_0;
  /* 1.2 brings the float-controls and driver properties; the lane works on 1.0 without them. */
  uint32_t api = loader_version >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2 : loader_version;

  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "weft", 1, "weft", 1, api};
  VkInstanceCreateInfo ci = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = create(&ci, NULL, &inst);
  if (r != VK_SUCCESS) {
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
      snprintf(why, why_len,
               "no Vulkan driver: the loader found none (VK_ERROR_INCOMPATIBLE_DRIVER); install one "
               "(mesa-vulkan-drivers, or the GPU vendor's), or check VK_DRIVER_FILES / VK_ICD_FILENAMES");
    else snprintf(why, why_len, "vkCreateInstance failed: %s", weft_vk_result_str(r));
    return NULL;
  }
  weft_vk_instance *vi = calloc(1, sizeof *vi);
  if (!vi) {
    PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)loader_gipa(inst, "vkDestroyInstance");
    if (destroy) destroy(inst, NULL);
    snprintf(why, why_len, "out of host memory");
    return NULL;
  }
  vi->refs = 1;
  vi->instance = inst;
  vi->api_version = api;
  vi->get_proc = loader_gipa;
  int missing = 0;
#define LOAD(name)                                                                                             \
  vi->name = (PFN_##name)loader_gipa(inst, #name);                                                             \
  if (!vi->name && !missing) {                                                                                 \
    snprintf(why, why_len, "the Vulkan loader lacks %s", #name);                                               \
    missing = 1;                                                                                               \
  }
  WEFT_VK_INSTANCE_FNS(LOAD)
#undef LOAD
  if (api >= VK_API_VERSION_1_1)
    vi->vkGetPhysicalDeviceProperties2 =
        (PFN_vkGetPhysicalDeviceProperties2)loader_gipa(inst, "vkGetPhysicalDeviceProperties2");
  if (missing) {
    if (vi->vkDestroyInstance) vi->vkDestroyInstance(inst, NULL);
    free(vi);
    return NULL;
  }
  return vi;
}

void weft_vk_instance_release(weft_vk_instance *vi) {
  if (!vi || --vi->refs > 0) return;
  vi->vkDestroyInstance(vi->instance, NULL);
  free(vi);
}
