/* mpi.h - weft over MPI (built with WEFT_HAVE_MPI): the job's state, bounded waits, and the second transport
 * of the wire protocol. The frames, handles, caps and validation are the TCP protocol's (docs/PROTOCOL.md):
 * src/net/client.c is the client half (the MPI lanes, src/lanes/mpi/), src/net/worker.c's sessions the
 * server half (the serving ranks, src/net/mpi_serve.c). Only how a frame travels differs:
 *
 *   - one connection is a session: a tag of the job's lanes communicator (WEFT_MPI_TAG_SESSION0 + id), on
 *     which rank 0 sends requests and the serving rank its replies, in order;
 *   - a frame is one message, except one whose payload is large (over WEFT_MPI_SPLIT_BYTES): then the
 *     header with the first WEFT_MPI_HEAD_PAYLOAD bytes of payload, and the rest as a second message on
 *     the same tag (so a WRITE's floats land straight in the tensor, as over TCP);
 *   - control messages on WEFT_MPI_TAG_CTL from rank 0: close a session, or stop serving.
 *
 * MPI has no authentication: every process of the job is trusted. `weft worker` is the way to reach
 * machines that are not. */
#ifndef WEFT_NET_MPI_H
#define WEFT_NET_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WEFT_MPI_TAG_CTL 1
/* Data-parallel traffic (on its own communicator, src/sched/chain.c): running sums up the chain, final
 * values back down it, and the checks of a rank that waits too long (is a rank alive; what went wrong). */
#define WEFT_MPI_TAG_CHAIN 2
#define WEFT_MPI_TAG_FINAL 3
#define WEFT_MPI_TAG_PING 4
#define WEFT_MPI_TAG_PONG 5
#define WEFT_MPI_TAG_NOTICE 6
#define WEFT_MPI_TAG_SESSION0 16
#define WEFT_MPI_SPLIT_BYTES (64u << 10)
#define WEFT_MPI_HEAD_PAYLOAD 24u /* a WRITE's handle, offset and count */

/* Control messages: u32 what, u32 session. */
enum { WEFT_MPI_CTL_CLOSE = 1, WEFT_MPI_CTL_STOP = 2 };

typedef struct weft_mpi_job {
  int inited;           /* weft_mpi_init succeeded (and MPI_Finalize not called yet) */
  weft_mpi_mode mode;
  int rank, size;
  MPI_Comm lanes;       /* frames between rank 0 and the serving ranks */
  MPI_Comm dp;          /* data-parallel traffic: running sums, final values, checks, reports */
  int tag_ub;
  int serialized;       /* the MPI library gave less than MPI_THREAD_MULTIPLE: every call under `lock` */
  int dead_rank;        /* a serving rank that stopped answering (0: none): the job cannot end cleanly */
} weft_mpi_job;

/* The job (never NULL; inited 0 before weft_mpi_init). */
weft_mpi_job *weft_mpi_job_get(void);
/* Every MPI call of weft goes between these (a no-op when the library is thread-safe). */
void weft_mpi_lock(void);
void weft_mpi_unlock(void);
/* Records the last failure (weft_mpi_last_error) and returns status. */
weft_status weft_mpi_fail(weft_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An MPI error code in words. */
const char *weft_mpi_strerror(int code, char *buf, size_t len);

/* The waiting policy of every wait below, for loops that poll something else (src/sched/chain.c): step
 * returns 1 once timeout_ms (< 0: none) has passed since init, else polls at once for the first 200 us and
 * then sleeps between polls, from 20 us doubling, up to 80 us for the first 10 ms and 1 ms after. */
typedef struct weft_mpi_waiter {
  double t0, deadline;
  long sleep_ns;
} weft_mpi_waiter;
void weft_mpi_waiter_init(weft_mpi_waiter *w, int timeout_ms);
int weft_mpi_waiter_step(weft_mpi_waiter *w);

/* Waits for n requests. Spins briefly (a reply is usually due soon), then sleeps with backoff so an idle
 * wait does not burn a core. 0 all done (statuses in st, may be NULL), 1 timed out (the requests are left
 * pending: the caller cancels or abandons them), -1 an MPI error (its code in *err). timeout_ms < 0: none. */
int weft_mpi_wait(MPI_Request *reqs, int n, MPI_Status *st, int timeout_ms, int *err);
/* Waits for a message from `source` on `tag` of `comm` and takes it off the queue (MPI_Improbe): 0 found
 * (*msg, *count in bytes), 1 timed out, -1 an MPI error. */
int weft_mpi_probe(int source, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *status, int timeout_ms,
                   int *err);
/* Monotonic seconds. */
double weft_mpi_now(void);

/* A new session id for a lane connection to a serving rank (tags wrap within the MPI library's tag bound). */
int weft_mpi_session_new(void);

/* The serving side (src/net/mpi_serve.c, in the worker's library with src/net/worker.c): a rank other than 0
 * of a WEFT_MPI_LANES job serves its lanes (the fabric filter `lanes`, NULL = all) to rank 0, one
 * weft_net_session per session tag, until rank 0 says stop (weft_mpi_finalize). err says why on failure. */
weft_status weft_net_mpi_serve(const char *lanes, char *err, size_t errlen);

#endif
