/* math.h - what the cost model uses, for the freestanding wasm32 build: WebAssembly has these as
 * instructions, so the compiler's builtins are the whole implementation. */
#ifndef WEFT_WASM_MATH_H
#define WEFT_WASM_MATH_H

static inline double fabs(double x) { return __builtin_fabs(x); }
static inline double sqrt(double x) { return __builtin_sqrt(x); }
static inline double floor(double x) { return __builtin_floor(x); }
static inline float floorf(float x) { return __builtin_floorf(x); }

#endif
