/* hostcopy.h - large host memory copies on several threads, shared by the whole process: a tensor's data
 * into and out of its host copy (tensor.c) and a GPU lane's pinned staging (the CUDA lane). Not installed. */
#ifndef WEFT_HOSTCOPY_H
#define WEFT_HOSTCOPY_H

#include <stddef.h>

typedef struct weft_hostcopy weft_hostcopy;

/* Copies smaller than this run on the caller's thread alone: waking workers costs more than it saves. */
#define WEFT_HOSTCOPY_MIN ((size_t)2 << 20)

/* A reference to the process's copier, made by the first caller; NULL when one thread is all there is to
 * use (then weft_hostcopy_run copies on the caller's thread). Its threads: WEFT_COPY_THREADS from the
 * environment when set (1 to 64, the caller counts as one), else the online CPUs less one, at most 16. */
weft_hostcopy *weft_hostcopy_acquire(void);
/* Drops a reference; the last one stops the threads. NULL is ignored. */
void weft_hostcopy_release(weft_hostcopy *c);
/* Copies `bytes` from `src` to `dst` (which must not overlap), or zeroes `bytes` at `dst` when `src` is
 * NULL, on the caller's thread and the copier's. Returns when every byte is in place. Safe from any thread:
 * a caller that finds the copier busy with another thread's copy does its own alone. */
void weft_hostcopy_run(weft_hostcopy *c, void *dst, const void *src, size_t bytes);
/* 1, with why (whylen bytes) saying so, when WEFT_COPY_THREADS is set to anything but a whole number from 1 to
 * 64 (the default is used then); 0 when it is unset or valid. */
int weft_hostcopy_env_problem(char *why, size_t whylen);
/* Threads a copy uses (1 for NULL). */
int weft_hostcopy_threads(const weft_hostcopy *c);

#endif
