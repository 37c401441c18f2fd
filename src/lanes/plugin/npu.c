/* npu.c - weft_npu_probe: the NPUs the kernel's compute-accelerator subsystem lists (/sys/class/accel) and
 * the vendor runtime each could be reached through. It finds; it runs nothing: an NPU serves work only
 * through a plugin lane that passed admission (plugin.c). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

/* How a plugin could reach a device of this driver: the vendor's own execution stack. */
static const char *reach_of(const char *driver) {
  static const struct {
    const char *driver, *reach;
  } known[] = {
      {"ivpu", "Intel NPU: OpenVINO NPU plugin over Level Zero (intel-npu-driver)"},
      {"amdxdna", "AMD XDNA: XRT with the amdxdna shim (e.g. ONNX Runtime's Vitis AI provider)"},
      {"habanalabs", "Intel Gaudi: the Habana SynapseAI runtime"},
      {"qaic", "Qualcomm Cloud AI: the Qualcomm AIC runtime (QAic)"},
      {"rocket", "Rockchip NPU: the Mesa Teflon delegate"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(known[i].driver, driver) == 0) return known[i].reach;
  return *driver ? "no runtime known to weft for this driver" : "no driver bound to the device";
}

/* Copies src into dst (len bytes), cut short if it must be. */
static void copy_str(char *dst, size_t len, const char *src) {
  size_t n = strlen(src);
  if (n >= len) n = len - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  /* accel2 before accel10: shorter names first, then by name */
  size_t la = strlen((*a)->d_name), lb = strlen((*b)->d_name);
  return la != lb ? (la < lb ? -1 : 1) : strcmp((*a)->d_name, (*b)->d_name);
}

static int is_accel(const struct dirent *d) { return strncmp(d->d_name, "accel", 5) == 0; }

weft_status weft_npu_probe(weft_npu_info *out, size_t cap, size_t *out_count) {
  if (out_count) *out_count = 0;
  if (!out_count || (cap && !out)) return WEFT_ERR_INVALID_ARGUMENT;
  if (cap) memset(out, 0, cap * sizeof *out);
  const char *root = getenv("WEFT_SYSFS_ROOT");
  if (!root || !*root) root = "/sys";
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/class/accel", root);
  struct dirent **names = NULL;
  int n = scandir(dir, &names, is_accel, by_name);
  if (n < 0) return WEFT_OK; /* no accel class: no NPU the kernel knows of */
  for (int i = 0; i < n; i++) {
    if ((size_t)i < cap) {
      weft_npu_info *e = &out[i];
      copy_str(e->device, sizeof e->device, names[i]->d_name);
      char link[1400], target[1024];
      snprintf(link, sizeof link, "%s/%s/device/driver", dir, names[i]->d_name);
      ssize_t len = readlink(link, target, sizeof target - 1);
      if (len > 0) {
        target[len] = '\0';
        const char *base = strrchr(target, '/');
        copy_str(e->driver, sizeof e->driver, base ? base + 1 : target);
      }
      copy_str(e->reach, sizeof e->reach, reach_of(e->driver));
    }
    free(names[i]);
  }
  free(names);
  *out_count = (size_t)n;
  return WEFT_OK;
}
