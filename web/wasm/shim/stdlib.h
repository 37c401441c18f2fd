/* stdlib.h - the part of the C library weft's CPU kernels and router use, for the freestanding wasm32 build
 * (web/wasm/libc_shim.c implements it). Not a general C library. */
#ifndef WEFT_WASM_STDLIB_H
#define WEFT_WASM_STDLIB_H

#include <stddef.h>

void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void *aligned_alloc(size_t alignment, size_t size);
void free(void *ptr);
/* The page has no environment: every variable is unset. */
static inline char *getenv(const char *name) {
  (void)name;
  return NULL;
}

#endif
