/* pool.h - the CPU lane's persistent worker threads. The caller's thread is always worker 0, so a pool of
 * `threads` holds threads - 1 pthreads; tiny ops never touch the pool at all. */
#ifndef WEFT_CPU_POOL_H
#define WEFT_CPU_POOL_H

typedef struct weft_cpu_pool weft_cpu_pool;

/* The work of one job: called once on each of `nthreads` threads with tid 0 .. nthreads-1. */
typedef void (*weft_cpu_task_fn)(void *ctx, int tid, int nthreads);

/* Starts up to threads - 1 workers. *out_pool is NULL on failure to allocate; a pool that could start fewer
 * workers than asked still works, and weft_cpu_pool_threads says how many threads it really has. */
void weft_cpu_pool_create(int threads, weft_cpu_pool **out_pool);
/* Threads a job can use: the caller plus the workers that started (1 for a NULL pool). */
int weft_cpu_pool_threads(const weft_cpu_pool *pool);
/* Runs fn on min(nthreads, pool threads) threads, the caller being tid 0, and returns when all are done.
 * Not reentrant: one job at a time, never from inside a job. */
void weft_cpu_pool_run(weft_cpu_pool *pool, int nthreads, weft_cpu_task_fn fn, void *ctx);
/* Waits inside a job until all `nthreads` threads of the job have arrived. */
void weft_cpu_pool_barrier(weft_cpu_pool *pool, int nthreads);
/* Stops and joins the workers and frees the pool. NULL is ignored. */
void weft_cpu_pool_destroy(weft_cpu_pool *pool);

#endif
