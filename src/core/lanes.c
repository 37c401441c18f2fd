/* lanes.c - the lane providers weft was built with, in the order the fabric probes them. A provider left
 * out of the build is still listed, with the reason, so `weft devices` can say why its lanes are absent. */
#include "internal.h"

weft_status weft_cpu_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#ifdef WEFT_HAVE_VULKAN
weft_status weft_vulkan_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#endif
#ifdef WEFT_HAVE_CUDA
weft_status weft_cuda_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#endif
#ifdef WEFT_HAVE_REMOTE
weft_status weft_remote_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#endif
#ifdef WEFT_HAVE_BROWSER
weft_status weft_browser_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#endif
#ifdef WEFT_HAVE_MPI
weft_status weft_mpi_lanes_probe(const weft_probe_args *args, const weft_lane_sink *sink);
#endif
weft_status weft_plugin_probe(const weft_probe_args *args, const weft_lane_sink *sink);

const weft_lane_provider weft_lane_providers[] = {
    {"cpu", weft_cpu_probe, NULL},
#ifdef WEFT_HAVE_VULKAN
    {"vulkan", weft_vulkan_probe, NULL},
#else
    {"vulkan", NULL, "weft was built without the Vulkan lane (no Vulkan headers or glslc at build time)"},
#endif
#ifdef WEFT_HAVE_CUDA
    {"cuda", weft_cuda_probe, NULL},
#else
    {"cuda", NULL, "weft was built without the CUDA lanes (no nvcc or CUDA headers at build time)"},
#endif
#ifdef WEFT_HAVE_REMOTE
    {"remote", weft_remote_probe, NULL},
#else
    {"remote", NULL, "weft was built without remote lanes (no libcrypto, Debian libssl-dev, at build time)"},
#endif
#ifdef WEFT_HAVE_BROWSER
    {"browser", weft_browser_probe, NULL},
#else
    {"browser", NULL,
     "weft was built without browser lanes (no libwebsockets, Debian libwebsockets-dev, at build time, or "
     "WEFT_BROWSER_LANES=OFF)"},
#endif
#ifdef WEFT_HAVE_MPI
    {"mpi", weft_mpi_lanes_probe, NULL},
#else
    {"mpi", NULL, "weft was built without MPI (Debian: openmpi-bin libopenmpi-dev at build time, or WEFT_MPI=OFF)"},
#endif
    /* Last: plugin lanes are admitted after a self-test, and a built-in lane keeps its name. */
    {"plugin", weft_plugin_probe, NULL},
};
const size_t weft_lane_provider_count = sizeof weft_lane_providers / sizeof weft_lane_providers[0];
