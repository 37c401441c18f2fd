/* cpu_isa.c - picks the microkernels for the CPU at run time (CPUID through the compiler's cpu model,
 * which also checks that the OS saves the wide registers), honouring WEFT_CPU_ISA as a ceiling. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Instruction sets in rising order; a request names a ceiling, so a CPU that lacks the requested set
 * quietly gets the best it has below it (the lane's details string shows the real choice). */
enum { ISA_PORTABLE, ISA_AVX2, ISA_AVX512 };

static int isa_supported(void) {
#ifdef WEFT_CPU_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ISA_AVX2;
#endif
  return ISA_PORTABLE;
}

/* The ceiling WEFT_CPU_ISA asks for; -1 for a word it does not know (then no ceiling). */
static int isa_asked(void) {
  const char *env = getenv("WEFT_CPU_ISA");
  if (!env || !*env || strcmp(env, "avx512") == 0) return ISA_AVX512;
  if (strcmp(env, "portable") == 0) return ISA_PORTABLE;
  if (strcmp(env, "avx2") == 0) return ISA_AVX2;
  return -1;
}

static int isa_requested(void) {
  const int isa = isa_asked();
  return isa < 0 ? ISA_AVX512 : isa;
}

int weft_cpu_isa_request_unknown(void) { return isa_asked() < 0; }

const weft_cpu_kernels *weft_cpu_kernels_select(void) {
  int have = isa_supported(), want = isa_requested();
  int isa = want < have ? want : have;
#ifdef WEFT_CPU_X86
  if (isa == ISA_AVX512) return &weft_cpu_kernels_avx512;
  if (isa == ISA_AVX2) return &weft_cpu_kernels_avx2;
#endif
  (void)isa;
  return &weft_cpu_kernels_portable;
}

const char *weft_cpu_isa_name(void) { return weft_cpu_kernels_select()->isa; }
