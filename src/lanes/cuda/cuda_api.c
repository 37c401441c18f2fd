/* cuda_api.c - finding and opening libcuda.so.1 and libcublas at run time, once per process. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEFT_STR2(x) #x
#define WEFT_STR(x) WEFT_STR2(x) /* the name after macro expansion: cuMemAlloc -> "cuMemAlloc_v2" */

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static weft_cuda_api driver;
static int driver_ok;
static char driver_why[512];

static void driver_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(driver_why, sizeof driver_why, "no NVIDIA driver: libcuda.so.1 could not be opened (%s)", e ? e : "?");
    return;
  }
  driver.lib = lib;
#define WEFT_CU_RESOLVE(fn)                                                                                        \
  *(void **)&driver.fn = dlsym(lib, WEFT_STR(fn));                                                                 \
  if (!driver.fn) {                                                                                                \
    snprintf(driver_why, sizeof driver_why,                                                                        \
             "the NVIDIA driver is too old for this weft: libcuda.so.1 lacks %s (install a driver for CUDA %d.%d "  \
             "or newer)",                                                                                          \
             WEFT_STR(fn), CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                                         \
    return;                                                                                                        \
  }
  WEFT_CU_DRIVER_FUNCS(WEFT_CU_RESOLVE)
  driver_ok = 1;
}

const weft_cuda_api *weft_cuda_api_load(const char **why) {
  pthread_once(&driver_once, driver_load);
  if (why) *why = driver_ok ? "" : driver_why;
  return driver_ok ? &driver : NULL;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static weft_cublas_api blas;
static int blas_ok;
static char blas_why[768];

/* Opens libcublasLt then libcublas from one folder ("" = the loader's search path). cuBLAS names cuBLASLt
 * as a dependency by soname; once cuBLASLt is loaded from a folder outside the search path, that soname is
 * satisfied by it. */
static void *open_pair(const char *dir, const char *ver) {
  char lt[320], b[320];
  snprintf(lt, sizeof lt, "%s%slibcublasLt.so%s", dir, *dir ? "/" : "", ver);
  snprintf(b, sizeof b, "%s%slibcublas.so%s", dir, *dir ? "/" : "", ver);
  void *hl = dlopen(lt, RTLD_NOW | RTLD_LOCAL);
  void *hb = dlopen(b, RTLD_NOW | RTLD_LOCAL);
  if (!hb) {
    if (hl) dlclose(hl);
    return NULL;
  }
  snprintf(blas.path, sizeof blas.path, "%s", b);
  return hb; /* cuBLASLt stays loaded for the process, as cuBLAS needs it */
}

static void blas_load(void) {
  static const char *const versions[] = {".13", ".12", ""};
  const char *dirs[4] = {"", getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  void *lib = NULL;
  for (size_t d = 0; d < 4 && !lib; d++) {
    if (!dirs[d]) continue;
    char dir[256];
    if (*dirs[d]) snprintf(dir, sizeof dir, "%s/lib64", dirs[d]);
    else dir[0] = '\0';
    for (size_t v = 0; v < 3 && !lib; v++) lib = open_pair(dir, versions[v]);
  }
  if (!lib) {
    snprintf(blas_why, sizeof blas_why,
             "cuBLAS not found: libcublas.so.13 / .12 are neither on the library path nor under $CUDA_HOME/lib64 or "
             "/usr/local/cuda/lib64 (install CUDA's cuBLAS or add its folder to LD_LIBRARY_PATH)");
    return;
  }
  blas.lib = lib;
#define WEFT_CUBLAS_RESOLVE(fn)                                                                                    \
  *(void **)&blas.fn = dlsym(lib, WEFT_STR(fn));                                                                   \
  if (!blas.fn) {                                                                                                  \
    snprintf(blas_why, sizeof blas_why, "%s lacks %s (cuBLAS 12 or newer is needed)", blas.path, WEFT_STR(fn));    \
    return;                                                                                                        \
  }
  WEFT_CUBLAS_FUNCS(WEFT_CUBLAS_RESOLVE)
  blas_ok = 1;
}

const weft_cublas_api *weft_cublas_api_load(const char **why) {
  pthread_once(&blas_once, blas_load);
  if (why) *why = blas_ok ? "" : blas_why;
  return blas_ok ? &blas : NULL;
}
