/* weft_plugin.h - the ABI of lanes built outside weft and loaded at run time (dlopen).
 *
 * A plugin is a shared object that exports one function, weft_plugin_entry, returning a descriptor: which
 * ABI it was built against, what kind of lane it brings ("opencl", "npu", ...), which ops it claims and a
 * probe that adds its lanes through the same sink the built-in lanes use (weft_lane.h). weft loads the
 * plugins named in weft_fabric_desc.plugins or WEFT_PLUGIN_PATH (':'-separated files, or directories whose
 * *.so files are all loaded).
 *
 * Admission: a plugin lane serves no work until it has passed a self-test of every op it offers, run by
 * the helper executable weft-plugin-check in a process of its own (spawned, never forked from the caller;
 * a crash or a hang there cannot take the caller down): exact-contract cases compared bit for bit with
 * weft's reference (every NaN must be the canonical 0x7fc00000), small shapes in every form of each op and
 * matmuls with k up to 4099 and odd m, n, k; for the transformer ops, cases with NaNs of several payloads,
 * +-inf, -0 and subnormals among the inputs, int32 index operands (token ids, positions, targets) and int32
 * data (permute, copy_slice), odd widths, and sumsq over several chunks.
 *
 * Which ops: a lane offers its weft_lane_desc.ops (0: the version-1 set); every op it offers must be one
 * its plugin claims (desc.claims) or one its supports slot declines (then it is taken out of the set), or
 * the lane is refused. A lane that gets one of the version-1 ops wrong is refused as a whole; one that gets
 * a transformer op wrong is admitted without that op (the router never sends it there) and `weft devices`
 * names the op and why (its `admission` line); a lane left with no op is refused.
 * weft copies the plugin file once into a sealed private copy, hashes it (SHA-256), tests that copy and
 * loads that same copy: what runs is byte for byte what passed, and a verdict is kept per content hash.
 * (A plugin is therefore loaded from /proc/self/fd/N: an $ORIGIN in its run path does not find files
 * next to it; link its dependencies from the system's library path.) The helper is found through the
 * environment variable WEFT_PLUGIN_CHECK, next to the library or executable holding weft, in weft's
 * installed libexec folder, or in its build tree.
 *
 * A lane of kind "npu" must name, from its accel_device slot, the /sys/class/accel device it runs on
 * ("accel0"); it is admitted only when that device's own busy counter (npu_busy_time_us, which the Intel
 * NPU driver advances when and only when jobs are submitted to the firmware) advanced during its
 * self-test. Whatever its evidence slot writes is shown as claimed, never taken as proof: an NPU lane
 * whose counter did not move is refused ("npu claimed, not verified"), never silently served by something
 * else. Refused plugins and lanes are listed as absent with the reason; `weft devices` says for each
 * admitted plugin lane what was verified and what was only claimed. The sysfs root is /sys, or
 * WEFT_SYSFS_ROOT (tests point it at a fake tree).
 *
 * A plugin links nothing of weft: it reports errors through args->host->report (the executable that loads
 * it may hold weft statically and export none of its symbols).
 *
 * Versioning: the descriptor starts with its ABI version and its size and only grows at the end. A plugin
 * whose abi_version differs from WEFT_PLUGIN_ABI_VERSION is refused. */
#ifndef WEFT_PLUGIN_H
#define WEFT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "weft_lane.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 came with lane ABI version 2 (weft_lane.h): a plugin of version 1 is refused, naming both. */
#define WEFT_PLUGIN_ABI_VERSION 2

/* Bit for op kind k in weft_plugin_desc.claims (WEFT_OP_BIT(k)). */
#define WEFT_PLUGIN_CLAIM(k) WEFT_OP_BIT(k)
/* The version-1 ops (matmul .. softmax_xent). */
#define WEFT_PLUGIN_CLAIM_V1 WEFT_OPS_V1
/* Every op the self-test can check: all of them. */
#define WEFT_PLUGIN_CLAIM_ALL WEFT_OPS_ALL

typedef struct weft_plugin_desc {
  uint32_t abi_version;      /* WEFT_PLUGIN_ABI_VERSION the plugin was built against */
  uint32_t size;             /* sizeof(weft_plugin_desc) the plugin was built against */
  uint32_t lane_abi_version; /* WEFT_LANE_ABI_VERSION of the vtables its probe hands out */
  const char *name;          /* the plugin's name ("opencl"); absent entries are named "plugin:<name>" */
  const char *kind;          /* the lane kind it brings: "opencl", "npu", ...; what the lane filter matches */
  /* Ops its lanes may offer (WEFT_PLUGIN_CLAIM bits). A lane offering an op its plugin does not claim
   * (weft_lane_desc.ops; 0 there is the version-1 set) must have a supports slot that declines it;
   * admission checks both. (64 bits since the transformer ops; on 64-bit targets the field's offset and
   * the descriptor's size are those of the 32-bit field it replaced, which padding followed.) */
  uint64_t claims;
  /* Finds the plugin's devices and adds one lane per device to the sink (or an absent entry and WEFT_OK
   * when there is none). Called once in the self-test's child process and once in the caller. */
  weft_lane_probe_fn probe;
  /* Optional: after the self-test ran on the lane `self` (a lane this probe added), writes the platform's
   * own receipt that its device ran that work into buf (len bytes, NUL-terminated) and returns 1; returns
   * 0 when there is no such receipt. Shown as what the plugin claims; admission does not rely on it. */
  int (*evidence)(void *self, char *buf, size_t len);
  /* Required for kind "npu": writes the name of the /sys/class/accel device the lane `self` runs its work
   * on ("accel0") into buf (len bytes, NUL-terminated) and returns 1; 0 when it cannot say. Admission
   * reads that device's npu_busy_time_us before and after the self-test. */
  int (*accel_device)(void *self, char *buf, size_t len);
} weft_plugin_desc;

/* For a lane admitted from a plugin in this process: one line saying what admission verified (the
 * self-test's bits; for an NPU, the device counter that advanced) and what the plugin only claimed. NULL
 * for any other lane. The text lives as long as the process. (`weft devices` prints it.) */
WEFT_API const char *weft_plugin_admission(const char *lane_name);

/* What a plugin exports, under this name (WEFT_PLUGIN_ENTRY_SYMBOL). Returns a descriptor that lives as
 * long as the plugin is loaded. */
typedef const weft_plugin_desc *(*weft_plugin_entry_fn)(void);
#define WEFT_PLUGIN_ENTRY_SYMBOL "weft_plugin_entry"

#ifdef __cplusplus
}
#endif
#endif /* WEFT_PLUGIN_H */
