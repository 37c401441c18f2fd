/* mpi.c - the MPI job as weft sees it (mpi.h): initialization with errors returned, not fatal; the
 * communicators (one for the lanes' frames, one for data-parallel traffic, so the two never match each
 * other's messages); waits bounded by a timeout, spinning briefly then sleeping; and the public weft_mpi_*
 * calls of include/weft.h. */
#define _GNU_SOURCE
#include "net/mpi.h"

#include "core/envnum.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static weft_mpi_job job = {0, WEFT_MPI_LANES, 0, 1, MPI_COMM_NULL, MPI_COMM_NULL, 32767, 0, 0};
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];
static atomic_int next_session;

weft_mpi_job *weft_mpi_job_get(void) { return &job; }

void weft_mpi_lock(void) {
  if (job.serialized) pthread_mutex_lock(&job_lock);
}

void weft_mpi_unlock(void) {
  if (job.serialized) pthread_mutex_unlock(&job_lock);
}

weft_status weft_mpi_fail(weft_status status, const char *fmt, ...) {
  char msg[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&err_lock);
  memcpy(last_error, msg, sizeof msg);
  pthread_mutex_unlock(&err_lock);
  return status;
}

const char *weft_mpi_last_error(void) { return last_error; }

const char *weft_mpi_strerror(int code, char *buf, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
  snprintf(buf, len, "%s", s);
  return buf;
}

double weft_mpi_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* WEFT_MPI_TIMEOUT_MS's largest value; weft_mpi_init refuses one outside 1 .. this. */
#define MPI_TIMEOUT_MS_MAX 86399999L

int weft_mpi_timeout_ms(void) {
  long v;
  return weft_env_long("WEFT_MPI_TIMEOUT_MS", 1, MPI_TIMEOUT_MS_MAX, &v) == 1 ? (int)v : 60000;
}

/* The waiting policy: poll without sleeping for the first SPIN_S (replies to small requests come within
 * microseconds: measured on 2 loaded cores, a tiny op's round trip was 1.7 us polling and 3.2-4.1 us with a
 * sched_yield between polls); then sleep between polls, from SLEEP0_NS doubling, so a rank waiting long (an
 * op of its peer's, or nothing to serve) does not burn a core. For the first NEAR_S of a wait the sleeps stay
 * under SLEEP_NEAR_NS, shorter than the spin (with the kernel's timer slack): a rank that slept through the
 * other's message then answers within the other's spin, and a ping-pong that slipped out of step gets back
 * in at the next exchange. With sleeps up to 1 ms at once, two ranks that had both waited past the spin
 * (after a long op) stayed out of step: each saw the other's message up to a sleep late, so the other was
 * asleep again, and 300 tiny ops on mpi:1/cpu took 1.88 ms each instead of microseconds. After NEAR_S the
 * sleeps grow to SLEEP_MAX_NS. */
#define SPIN_S 200e-6
#define SLEEP0_NS 20000L
#define SLEEP_NEAR_NS 80000L
#define NEAR_S 10e-3
#define SLEEP_MAX_NS 1000000L

void weft_mpi_waiter_init(weft_mpi_waiter *w, int timeout_ms) {
  w->t0 = weft_mpi_now();
  w->deadline = timeout_ms < 0 ? -1 : w->t0 + timeout_ms * 1e-3;
  w->sleep_ns = SLEEP0_NS;
}

int weft_mpi_waiter_step(weft_mpi_waiter *w) {
  double now = weft_mpi_now();
  if (w->deadline >= 0 && now >= w->deadline) return 1;
  if (now - w->t0 < SPIN_S) return 0; /* poll again at once (yielding the core here doubled a tiny op's time) */
  const long cap = now - w->t0 < NEAR_S ? SLEEP_NEAR_NS : SLEEP_MAX_NS;
  if (w->sleep_ns > cap) w->sleep_ns = cap;
  struct timespec ts = {0, w->sleep_ns};
  nanosleep(&ts, NULL);
  w->sleep_ns *= 2;
  return 0;
}

int weft_mpi_wait(MPI_Request *reqs, int n, MPI_Status *st, int timeout_ms, int *err) {
  weft_mpi_waiter w;
  weft_mpi_waiter_init(&w, timeout_ms);
  for (;;) {
    int flag = 0;
    weft_mpi_lock();
    int rc = MPI_Testall(n, reqs, &flag, st ? st : MPI_STATUSES_IGNORE);
    weft_mpi_unlock();
    if (rc != MPI_SUCCESS) {
      if (err) *err = rc;
      return -1;
    }
    if (flag) return 0;
    if (weft_mpi_waiter_step(&w)) return 1;
  }
}

int weft_mpi_probe(int source, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *status, int timeout_ms,
                   int *err) {
  weft_mpi_waiter w;
  weft_mpi_waiter_init(&w, timeout_ms);
  for (;;) {
    int flag = 0;
    weft_mpi_lock();
    int rc = MPI_Improbe(source, tag, comm, &flag, msg, status);
    weft_mpi_unlock();
    if (rc != MPI_SUCCESS) {
      if (err) *err = rc;
      return -1;
    }
    if (flag) return 0;
    if (weft_mpi_waiter_step(&w)) return 1;
  }
}

int weft_mpi_session_new(void) {
  int span = job.tag_ub - WEFT_MPI_TAG_SESSION0;
  if (span < 1) span = 1;
  return atomic_fetch_add(&next_session, 1) % span;
}

/* ------------------------------------------------------------------------------------------ the API */

int weft_mpi_built(void) { return 1; }

int weft_mpi_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

weft_status weft_mpi_init(weft_mpi_mode mode, int *argc, char ***argv) {
  char why[256];
  if (job.inited) return weft_mpi_fail(WEFT_ERR_STATE, "weft_mpi_init: MPI is initialized already");
  if (mode != WEFT_MPI_LANES && mode != WEFT_MPI_DATA_PARALLEL)
    return weft_mpi_fail(WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_init: mode %d is neither WEFT_MPI_LANES nor "
                                                    "WEFT_MPI_DATA_PARALLEL", (int)mode);
  long tmo;
  if (weft_env_long("WEFT_MPI_TIMEOUT_MS", 1, MPI_TIMEOUT_MS_MAX, &tmo) < 0) /* told, not replaced in silence */
    return weft_mpi_fail(WEFT_ERR_INVALID_ARGUMENT, "WEFT_MPI_TIMEOUT_MS is '%.40s'; it takes a whole number of "
                                                    "milliseconds from 1 to %ld", getenv("WEFT_MPI_TIMEOUT_MS"),
                         MPI_TIMEOUT_MS_MAX);
  int already = 0, provided = MPI_THREAD_SINGLE, rc;
  MPI_Initialized(&already);
  if (!already) {
    rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return weft_mpi_fail(WEFT_ERR_IO, "MPI_Init_thread failed: %s", weft_mpi_strerror(rc, why, sizeof why));
  } else {
    MPI_Query_thread(&provided);
  }
  /* A failed call returns its error, which weft reports; the default handler would abort the job with a
   * message that does not say what weft was doing. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &job.lanes)) != MPI_SUCCESS ||
      (rc = MPI_Comm_dup(MPI_COMM_WORLD, &job.dp)) != MPI_SUCCESS)
    return weft_mpi_fail(WEFT_ERR_IO, "MPI_Comm_dup failed: %s", weft_mpi_strerror(rc, why, sizeof why));
  MPI_Comm_set_errhandler(job.lanes, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(job.dp, MPI_ERRORS_RETURN);
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  job.tag_ub = flag && ub && *ub > WEFT_MPI_TAG_SESSION0 ? *ub : 32767;
  job.serialized = provided < MPI_THREAD_MULTIPLE;
  job.mode = mode;
  job.inited = 1;
  return WEFT_OK;
}

int weft_mpi_rank(void) { return job.inited ? job.rank : 0; }
int weft_mpi_size(void) { return job.inited ? job.size : 1; }

weft_status weft_mpi_finalize(void) {
  if (!job.inited) return WEFT_OK;
  if (job.mode == WEFT_MPI_LANES && job.rank == 0 && job.dead_rank) {
    /* MPI_Finalize waits for every rank, and one of them stopped answering: the caller ends the job
     * (weft_mpi_abort) rather than hang in it. */
    job.inited = 0;
    return weft_mpi_fail(WEFT_ERR_LANE_FAILED, "rank %d stopped answering, so the job cannot end cleanly", job.dead_rank);
  }
  if (job.mode == WEFT_MPI_LANES && job.rank == 0 && job.size > 1) {
    /* The serving ranks stop at this; a rank that no longer answers is not waited on for long. */
    MPI_Request *req = calloc((size_t)job.size, sizeof *req);
    uint32_t stop[2] = {WEFT_MPI_CTL_STOP, 0};
    int n = 0;
    for (int r = 1; req && r < job.size; r++) {
      weft_mpi_lock();
      if (MPI_Isend(stop, 2, MPI_UINT32_T, r, WEFT_MPI_TAG_CTL, job.lanes, &req[n]) == MPI_SUCCESS) n++;
      weft_mpi_unlock();
    }
    if (req && weft_mpi_wait(req, n, NULL, 5000, NULL) != 0) {
      free(req);
      job.inited = 0;
      return weft_mpi_fail(WEFT_ERR_LANE_FAILED, "a serving rank did not take the message to stop within 5 s");
    }
    free(req);
  }
  MPI_Comm_free(&job.lanes);
  MPI_Comm_free(&job.dp);
  job.inited = 0;
  int rc = MPI_Finalize();
  char why[256];
  return rc == MPI_SUCCESS ? WEFT_OK
                           : weft_mpi_fail(WEFT_ERR_IO, "MPI_Finalize failed: %s", weft_mpi_strerror(rc, why, sizeof why));
}

void weft_mpi_abort(int code) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Abort(MPI_COMM_WORLD, code);
}

weft_status weft_mpi_sum_ordered(double *values, int n) {
  if (!job.inited) return weft_mpi_fail(WEFT_ERR_STATE, "weft_mpi_sum_ordered: weft_mpi_init was not called");
  if (n < 0 || !values) return weft_mpi_fail(WEFT_ERR_INVALID_ARGUMENT, "weft_mpi_sum_ordered: no values");
  if (job.size == 1 || n == 0) return WEFT_OK;
  double *all = malloc(sizeof(double) * (size_t)n * (size_t)job.size);
  if (!all) return weft_mpi_fail(WEFT_ERR_OUT_OF_MEMORY, "weft_mpi_sum_ordered: out of host memory");
  MPI_Request req;
  int err = 0;
  weft_mpi_lock();
  int rc = MPI_Iallgather(values, n, MPI_DOUBLE, all, n, MPI_DOUBLE, job.dp, &req);
  weft_mpi_unlock();
  int w = rc == MPI_SUCCESS ? weft_mpi_wait(&req, 1, NULL, weft_mpi_timeout_ms(), &err) : -1;
  if (w != 0) {
    free(all);
    char why[256];
    if (w == 1)
      return weft_mpi_fail(WEFT_ERR_LANE_FAILED,
                           "rank %d: the ranks' reports did not all arrive within %d ms: a rank died or hangs",
                           job.rank, weft_mpi_timeout_ms());
    return weft_mpi_fail(WEFT_ERR_IO, "rank %d: MPI_Iallgather: %s", job.rank,
                         weft_mpi_strerror(rc != MPI_SUCCESS ? rc : err, why, sizeof why));
  }
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int r = 0; r < job.size; r++) s += all[(size_t)r * (size_t)n + (size_t)i];
    values[i] = s;
  }
  free(all);
  return WEFT_OK;
}
