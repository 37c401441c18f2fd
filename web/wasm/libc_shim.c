/* libc_shim.c - the few C library functions weft's kernels and router need in the browser: a heap over
 * WebAssembly's linear memory, and the memory/string moves. The wasm build is freestanding (-nostdlib):
 * weft needs a dozen functions, not a C library, and this keeps weft.wasm small and the build free of any
 * sysroot.
 *
 * The heap: blocks laid end to end from __heap_base, each a 64-byte header then its payload, so every
 * payload is 64-byte aligned (what the kernels' packed panels want) and aligned_alloc is malloc. First fit
 * with splitting; freeing merges a block with the free blocks after it. The page allocates a few buffers
 * per matmul size, so a linear walk is plenty. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64u
#define HEADER 64u
#define PAGE 65536u

typedef struct block {
  size_t size; /* payload bytes, a multiple of ALIGN */
  int free;
} block;

extern unsigned char __heap_base; /* provided by wasm-ld: the first byte after the data and the stack */

static uintptr_t heap_start, heap_end; /* the blocks lie in [heap_start, heap_end) */

static uintptr_t align_up(uintptr_t x, uintptr_t to) { return (x + to - 1) / to * to; }

static block *next_of(block *b) { return (block *)((uintptr_t)b + HEADER + b->size); }

/* Grows linear memory so that [0, top) is addressable; 0 when the browser refuses. */
static int reach(uintptr_t top) {
  uintptr_t have = (uintptr_t)__builtin_wasm_memory_size(0) * PAGE;
  if (top <= have) return 1;
  size_t pages = (top - have + PAGE - 1) / PAGE;
  return __builtin_wasm_memory_grow(0, pages) != (size_t)-1;
}

void *malloc(size_t size) {
  if (!heap_start) heap_start = heap_end = align_up((uintptr_t)&__heap_base, ALIGN);
  if (size == 0) size = 1;
  if (size > (size_t)0x7fffffff) return NULL;
  size = align_up(size, ALIGN);
  for (block *b = (block *)heap_start; (uintptr_t)b < heap_end; b = next_of(b)) {
    if (!b->free) continue;
    /* merge the free blocks that follow, so freed neighbours can serve a larger request */
    while ((uintptr_t)next_of(b) < heap_end && next_of(b)->free) b->size += HEADER + next_of(b)->size;
    if (b->size < size) continue;
    if (b->size >= size + HEADER + ALIGN) { /* split: the rest stays free */
      block *rest = (block *)((uintptr_t)b + HEADER + size);
      rest->size = b->size - size - HEADER;
      rest->free = 1;
      b->size = size;
    }
    b->free = 0;
    return (void *)((uintptr_t)b + HEADER);
  }
  if (heap_end + HEADER + size < heap_end || !reach(heap_end + HEADER + size)) return NULL;
  block *b = (block *)heap_end;
  b->size = size;
  b->free = 0;
  heap_end += HEADER + size;
  return (void *)((uintptr_t)b + HEADER);
}

void free(void *ptr) {
  if (!ptr) return;
  block *b = (block *)((uintptr_t)ptr - HEADER);
  b->free = 1;
  if ((uintptr_t)next_of(b) == heap_end) heap_end = (uintptr_t)b; /* the last block: give it back to the top */
}

void *aligned_alloc(size_t alignment, size_t size) { return alignment <= ALIGN ? malloc(size) : NULL; }

void *calloc(size_t count, size_t size) {
  if (size && count > (size_t)-1 / size) return NULL;
  void *p = malloc(count * size);
  if (p) memset(p, 0, count * size);
  return p;
}

void *realloc(void *ptr, size_t size) {
  if (!ptr) return malloc(size);
  block *b = (block *)((uintptr_t)ptr - HEADER);
  if (b->size >= size) return ptr;
  void *q = malloc(size);
  if (!q) return NULL;
  memcpy(q, ptr, b->size);
  free(ptr);
  return q;
}

/* The compiler turns struct copies and the kernels' edge-tile copies into calls to these. Written as plain
 * loops: LLVM does not turn a loop inside memcpy or memset back into a call to itself. */
void *memcpy(void *restrict dst, const void *restrict src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  for (size_t i = 0; i < n; i++) d[i] = s[i];
  return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
  unsigned char *d = dst;
  const unsigned char *s = src;
  if (d < s)
    for (size_t i = 0; i < n; i++) d[i] = s[i];
  else
    for (size_t i = n; i > 0; i--) d[i - 1] = s[i - 1];
  return dst;
}

void *memset(void *dst, int c, size_t n) {
  unsigned char *d = dst;
  for (size_t i = 0; i < n; i++) d[i] = (unsigned char)c;
  return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

size_t strlen(const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return n;
}

int strcmp(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return (unsigned char)*a - (unsigned char)*b;
}
