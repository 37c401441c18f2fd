/* pool.h - the CPU lane's persistent worker threads. The caller's thread always works on its own job, so
 * a pool of `threads` holds threads - 1 pthreads; tiny ops never touch the pool at all.
 *
 * A job never waits for a worker to arrive: workers join a job while it is open, and the job's function
 * must be written so that any subset of its threads finishes it (work taken from shared counters). So a
 * worker that the OS wakes late, or places on the caller's busy core, only means the others do more. */
#ifndef WEFT_CPU_POOL_H
#define WEFT_CPU_POOL_H

#include <stdatomic.h>

typedef struct weft_cpu_pool weft_cpu_pool;

/* The work of one job on one thread; tid is 0 for the caller and distinct for each worker (an index below
 * the pool's thread count, for per-thread scratch). It returns when no work is left to take; the caller's
 * call must also wait until the work other threads took is done. */
typedef void (*weft_cpu_task_fn)(void *ctx, int tid);

/* Starts up to threads - 1 workers. *out_pool is NULL on failure to allocate; a pool that could start fewer
 * workers than asked still works, and weft_cpu_pool_threads says how many threads it really has. */
void weft_cpu_pool_create(int threads, weft_cpu_pool **out_pool);
/* Threads a job can use: the caller plus the workers that started (1 for a NULL pool). */
int weft_cpu_pool_threads(const weft_cpu_pool *pool);
/* Runs fn on the caller (tid 0) and on up to nthreads - 1 workers that join while it runs; returns once the
 * caller's fn has returned and every worker that joined has left. Not reentrant: one job at a time. */
void weft_cpu_pool_run(weft_cpu_pool *pool, int nthreads, weft_cpu_task_fn fn, void *ctx);
/* Waits until *counter >= target (acquire): spins briefly, then yields the core, since the thread being
 * waited for may share it. For waits inside a job on work another thread has taken. */
void weft_cpu_wait_until(const atomic_llong *counter, long long target);
/* Stops and joins the workers and frees the pool. NULL is ignored. */
void weft_cpu_pool_destroy(weft_cpu_pool *pool);

#endif
