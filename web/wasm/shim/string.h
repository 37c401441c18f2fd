/* string.h - the part of the C library weft's CPU kernels and router use, for the freestanding wasm32 build
 * (web/wasm/libc_shim.c implements it). */
#ifndef WEFT_WASM_STRING_H
#define WEFT_WASM_STRING_H

#include <stddef.h>

void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);

#endif
