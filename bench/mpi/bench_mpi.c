/* bench_mpi.c - figures for weft over MPI (not a test), each against its peer measured side by side in the
 * same run, in alternating blocks:
 *
 *   mpirun -np 2 bench_mpi lanes [MiB]   a tiny op's round trip (relu of 4 floats, resident) to rank 1's CPU
 *                                       lane (mpi:1/cpu) against the same op to a `weft worker` on loopback
 *                                       TCP (WEFT_REMOTE names it; run_mpi.sh starts one) and against
 *                                       OpenMPI's own ping-pong of the same message sizes (blocking
 *                                       MPI_Send/MPI_Recv: the floor); then an upload of MiB (default 256)
 *                                       to mpi:1/cpu against one MPI_Send of that size with an ack.
 *   mpirun -np N bench_mpi reduce [M]   the chained exact reduction (weft_mpi_grad_*: each rank continues
 *                                       the running sum, and each final chunk comes back down the chain) of
 *                                       M floats (default 124439808, GPT-2 124M's gradient) against
 *                                       MPI_Allreduce (SUM, in place) of the same floats; the slowest rank's
 *                                       time. The peer at its best: MPI_Allreduce mallocs a scratch buffer
 *                                       of half the message on every call and frees it, and glibc hands
 *                                       one that large back to the system, so each call pays for fresh
 *                                       pages; malloc is told to keep freed memory instead (BENCH_MPI_MALLOC=
 *                                       default leaves it as it is). The chain allocates nothing per step.
 *
 * Rank 1 of `lanes` switches between echoing raw messages and serving its lanes as rank 0 asks (one
 * command message per block), so both run in one job. */
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "net/mpi.h"
#include "../bench_util.h"

#define TAG_CMD 7
#define TAG_RAW 8
enum { CMD_PING = 1, CMD_BW = 2, CMD_SERVE = 3, CMD_DONE = 4 };
#define BW_PIECE ((size_t)64 << 20)

/* The upper median (the middle element, sorted; 0 for none): this program's figures have always used it. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n ? v[n / 2] : 0;
}

/* ----------------------------------------------------------------------------------------------- lanes */

/* The OP request (16 + 116 + 2 x 44 bytes) and its reply (16 + 4) of a tiny op, as raw messages. */
#define PING_OUT 220
#define PING_BACK 20

static void cmd(int what, long long arg) {
  long long m[2] = {what, arg};
  MPI_Send(m, 2, MPI_LONG_LONG, 1, TAG_CMD, MPI_COMM_WORLD);
}

/* Rank 1: echoes, receives, or serves, as rank 0 says. */
static int follower(void) {
  static char buf[PING_OUT];
  for (;;) {
    long long m[2];
    MPI_Recv(m, 2, MPI_LONG_LONG, 0, TAG_CMD, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (m[0] == CMD_DONE) return 0;
    if (m[0] == CMD_PING) {
      for (long long i = 0; i < m[1]; i++) {
        MPI_Recv(buf, PING_OUT, MPI_BYTE, 0, TAG_RAW, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, PING_BACK, MPI_BYTE, 0, TAG_RAW, MPI_COMM_WORLD);
      }
    } else if (m[0] == CMD_BW) {
      /* m[1] bytes in messages of at most BW_PIECE, three times: as one message, then in pieces */
      char *big = malloc((size_t)m[1]);
      memset(big, 0, (size_t)m[1]);
      for (int r = 0; r < 6; r++) {
        const size_t piece = r < 3 ? (size_t)m[1] : BW_PIECE;
        for (size_t at = 0; at < (size_t)m[1]; at += piece)
          MPI_Recv(big + at, (int)((size_t)m[1] - at < piece ? (size_t)m[1] - at : piece), MPI_BYTE, 0, TAG_RAW,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, 4, MPI_BYTE, 0, TAG_RAW, MPI_COMM_WORLD);
      }
      free(big);
    } else if (m[0] == CMD_SERVE) {
      char err[512] = "";
      if (weft_net_mpi_serve("cpu", err, sizeof err) != WEFT_OK) {
        fprintf(stderr, "bench_mpi: rank 1 cannot serve: %s\n", err);
        return 1;
      }
    }
  }
}

/* Rank 0: ends a serving block (the message weft_mpi_finalize sends at the end of a job). */
static void stop_serving(void) {
  uint32_t stop[2] = {WEFT_MPI_CTL_STOP, 0};
  MPI_Send(stop, 2, MPI_UINT32_T, 1, WEFT_MPI_TAG_CTL, weft_mpi_job_get()->lanes);
}

static void raw_ping(int reps, double *t) {
  static char buf[PING_OUT];
  cmd(CMD_PING, reps);
  for (int i = 0; i < reps; i++) {
    double t0 = bench_now();
    MPI_Send(buf, PING_OUT, MPI_BYTE, 1, TAG_RAW, MPI_COMM_WORLD);
    MPI_Recv(buf, PING_BACK, MPI_BYTE, 1, TAG_RAW, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t[i] = bench_now() - t0;
  }
}

/* OpenMPI at its best for `bytes`: one message, or messages of 64 MiB (the size weft's frames come in), each
 * three times; the faster of the two medians. */
static double raw_bw(const char *data, size_t bytes) {
  char ack[4];
  double t[2][3];
  cmd(CMD_BW, (long long)bytes);
  for (int r = 0; r < 6; r++) {
    const size_t piece = r < 3 ? bytes : BW_PIECE;
    double t0 = bench_now();
    for (size_t at = 0; at < bytes; at += piece)
      MPI_Send(data + at, (int)(bytes - at < piece ? bytes - at : piece), MPI_BYTE, 1, TAG_RAW, MPI_COMM_WORLD);
    MPI_Recv(ack, 4, MPI_BYTE, 1, TAG_RAW, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t[r / 3][r % 3] = bench_now() - t0;
  }
  const double one = median(t[0], 3), pieces = median(t[1], 3);
  if (getenv("BENCH_MPI_VERBOSE")) printf("MPI_Send: one message %.4f s, 64 MiB messages %.4f s\n", one, pieces);
  return one < pieces ? one : pieces;
}

/* The tiny op on lane `lane` of f, reps times, each timed. */
static int tiny_ops(weft_fabric *f, int lane, int reps, double *t) {
  const int64_t d[1] = {4};
  float h[4] = {1, -2, 3, -4};
  weft_tensor *x = NULL, *y = NULL;
  weft_op_desc od = {WEFT_CONTRACT_EXACT, lane};
  int ok = weft_tensor_create(f, 1, d, h, &x) == WEFT_OK && weft_tensor_create(f, 1, d, NULL, &y) == WEFT_OK;
  for (int i = 0; ok && i < 50; i++) ok = weft_op_relu(f, &od, x, y) == WEFT_OK; /* resident from here */
  for (int i = 0; ok && i < reps; i++) {
    double t0 = bench_now();
    ok = weft_op_relu(f, &od, x, y) == WEFT_OK;
    t[i] = bench_now() - t0;
  }
  if (!ok) fprintf(stderr, "bench_mpi: tiny op: %s\n", weft_fabric_last_error(f));
  weft_tensor_destroy(x), weft_tensor_destroy(y);
  return ok;
}

/* An upload of `bytes` to the lane: copy_slice of one element into a large dst written anew on the host, so
 * the op first uploads dst whole (its work is one element); less the same op with dst resident. */
static int upload(weft_fabric *f, int lane, float *data, size_t bytes, double *out) {
  const int64_t n = (int64_t)(bytes / 4), one = 1;
  weft_tensor *dst = NULL, *src = NULL;
  float s = 1;
  int ok = weft_tensor_wrap(f, 1, &n, data, &dst) == WEFT_OK && weft_tensor_create(f, 1, &one, &s, &src) == WEFT_OK;
  weft_op_desc od = {WEFT_CONTRACT_EXACT, lane};
  double fresh[3], resident[3];
  for (int r = 0; ok && r < 3; r++) {
    ok = weft_tensor_write(dst, data, (size_t)n) == WEFT_OK; /* the lane's copy dropped */
    double t0 = bench_now();
    ok = ok && weft_op_copy_slice(f, &od, src, dst, 0, 0) == WEFT_OK;
    double t1 = bench_now();
    ok = ok && weft_op_copy_slice(f, &od, src, dst, 0, 0) == WEFT_OK;
    fresh[r] = t1 - t0, resident[r] = bench_now() - t1;
  }
  if (!ok) fprintf(stderr, "bench_mpi: upload: %s\n", weft_fabric_last_error(f));
  weft_tensor_destroy(dst), weft_tensor_destroy(src);
  *out = median(fresh, 3) - median(resident, 3);
  if (getenv("BENCH_MPI_VERBOSE")) printf("upload: fresh %.4f s, resident %.4f s\n", median(fresh, 3), median(resident, 3));
  return ok;
}

static int bench_lanes(size_t mib) {
  enum { R = 2000, BLOCKS = 6 };
  static double raw[BLOCKS * R], mpi[BLOCKS * R], tcp[BLOCKS * R];
  int nraw = 0, nmpi = 0, ntcp = 0, have_tcp = getenv("WEFT_REMOTE") != NULL;
  const size_t bytes = mib << 20;
  float *data = malloc(bytes);
  for (size_t i = 0; i < bytes / 4; i++) data[i] = (float)(i % 1000);
  double bw_raw[BLOCKS] = {0}, bw_mpi[BLOCKS] = {0};
  int ok = 1;
  for (int blk = 0; blk < BLOCKS && ok; blk++) {
    raw_ping(R, raw + nraw);
    nraw += R;
    bw_raw[blk] = (double)bytes / raw_bw((const char *)data, bytes);
    cmd(CMD_SERVE, 0);
    weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
    d.lanes = have_tcp ? "mpi,remote" : "mpi";
    d.calibration = WEFT_CALIBRATION_OFF;
    weft_fabric *f = NULL;
    if (weft_fabric_open(&d, &f) != WEFT_OK) {
      fprintf(stderr, "bench_mpi: %s\n", weft_open_error());
      ok = 0;
    }
    size_t lm = 0, lt = 0;
    if (ok && weft_fabric_lane_find(f, "mpi:1/cpu", &lm) != WEFT_OK) ok = 0, fprintf(stderr, "bench_mpi: no mpi:1/cpu\n");
    int tcp_lane = -1;
    if (ok && have_tcp) {
      char name[160];
      snprintf(name, sizeof name, "remote:%s/cpu", getenv("WEFT_REMOTE"));
      if (weft_fabric_lane_find(f, name, &lt) == WEFT_OK) tcp_lane = (int)lt;
    }
    /* alternate: MPI then TCP, then the other way round in the next block */
    for (int k = 0; k < 2 && ok; k++) {
      int mpi_first = (blk + k) % 2 == 0;
      if (mpi_first) ok = tiny_ops(f, (int)lm, R / 2, mpi + nmpi), nmpi += R / 2;
      else if (tcp_lane >= 0) ok = tiny_ops(f, tcp_lane, R / 2, tcp + ntcp), ntcp += R / 2;
      if (ok && !mpi_first) ok = tiny_ops(f, (int)lm, R / 2, mpi + nmpi), nmpi += R / 2;
      else if (ok && tcp_lane >= 0) ok = tiny_ops(f, tcp_lane, R / 2, tcp + ntcp), ntcp += R / 2;
    }
    if (ok) {
      double s = 0;
      ok = upload(f, (int)lm, data, bytes, &s);
      bw_mpi[blk] = s > 0 ? (double)bytes / s : 0;
    }
    weft_fabric_close(f);
    stop_serving();
  }
  cmd(CMD_DONE, 0);
  if (!ok) return 1;
  const double mr = median(raw, nraw), mm = median(mpi, nmpi), mt = ntcp ? median(tcp, ntcp) : 0;
  printf("tiny op round trip (relu of 4 floats, resident), %d each, alternating blocks:\n", nmpi);
  printf("  mpi:1/cpu (MPI, shared memory)       median %7.1f us\n", mm * 1e6);
  if (ntcp) printf("  remote:.../cpu (weft worker, TCP)    median %7.1f us   TCP / MPI %.2fx\n", mt * 1e6, mt / mm);
  printf("  OpenMPI ping-pong, same sizes (floor) median %7.1f us   mpi lane / floor %.2fx\n", mr * 1e6, mm / mr);
  const double br = median(bw_raw, BLOCKS), bm = median(bw_mpi, BLOCKS);
  printf("upload of %zu MiB to mpi:1/cpu: %.2f GB/s; OpenMPI MPI_Send of %zu MiB (one message or 64 MiB ones, "
         "the faster): %.2f GB/s; upload / MPI %.2f (medians of %d alternating blocks)\n",
         mib, bm / 1e9, mib, br / 1e9, bm / br, BLOCKS);
  free(data);
  return 0;
}

/* ---------------------------------------------------------------------------------------------- reduce */

static int bench_reduce(long long floats) {
  const int rank = weft_mpi_rank(), size = weft_mpi_size();
  const char *mode = getenv("BENCH_MPI_MALLOC");
  const int warm = !(mode && strcmp(mode, "default") == 0);
  if (warm) {
    mallopt(M_MMAP_MAX, 0);             /* large blocks from the heap, */
    mallopt(M_TRIM_THRESHOLD, INT_MAX); /* which keeps what is freed */
  }
  const int64_t n = 4096, m = (int64_t)((floats + n - 1) / n);
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu";
  d.cpu_threads = 1;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&d, &f) != WEFT_OK) {
    fprintf(stderr, "bench_mpi: %s\n", weft_open_error());
    return 1;
  }
  /* c [m,n] += ones[1,m]^T . x[1,n]: each rank adds one sample (x) to every row of the running sum - the
   * traffic of a gradient of m x n floats, with one multiply-add per element per rank like the adds of an
   * all-reduce */
  float *ones = malloc(sizeof(float) * (size_t)m), *x = malloc(sizeof(float) * (size_t)n);
  float *buf = malloc(sizeof(float) * (size_t)(m * n));
  for (int64_t i = 0; i < m; i++) ones[i] = 1;
  for (int64_t j = 0; j < n; j++) x[j] = (float)(rank + 1) * 0.001f * (float)(j % 97);
  for (int64_t e = 0; e < m * n; e++) buf[e] = x[e % n];
  const int64_t da[2] = {1, m}, db[2] = {1, n}, dc[2] = {m, n};
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_tensor_create(f, 2, da, ones, &ta);
  weft_tensor_create(f, 2, db, x, &tb);
  weft_tensor_create(f, 2, dc, NULL, &tc);
  enum { REPS = 5 }; /* alternating, each the slowest rank's time; the medians */
  double tch[REPS], tar[REPS], fch[REPS], far[REPS]; /* times; this rank's minor page faults */
  int ok = 1;
  for (int r = 0; r < REPS && ok; r++) {
    for (int which = 0; which < 2 && ok; which++) {
      const int chain = (which + r) % 2 == 0;
      MPI_Barrier(MPI_COMM_WORLD);
      struct rusage u0, u1;
      getrusage(RUSAGE_SELF, &u0);
      double t0 = bench_now();
      if (chain) {
        weft_mpi_grad *g = NULL;
        ok = weft_mpi_grad_begin(f, WEFT_CONTRACT_EXACT, &g) == WEFT_OK &&
             weft_mpi_grad_matmul(g, NULL, ta, 1, tb, 0, tc) == WEFT_OK;
        ok = weft_mpi_grad_end(g) == WEFT_OK && ok;
      } else {
        ok = MPI_Allreduce(MPI_IN_PLACE, buf, (int)(m * n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
      }
      double t = bench_now() - t0, worst = 0;
      getrusage(RUSAGE_SELF, &u1);
      MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      (chain ? tch : tar)[r] = worst;
      (chain ? fch : far)[r] = (double)(u1.ru_minflt - u0.ru_minflt);
    }
  }
  if (!ok) fprintf(stderr, "bench_mpi: rank %d: %s %s\n", rank, weft_fabric_last_error(f), weft_mpi_last_error());
  /* the chain's result, on every rank: each row is 0 + x_0 + x_1 + ... in rank order, each add rounded */
  if (ok && weft_tensor_read(tc, buf, (size_t)(m * n)) == WEFT_OK) {
    int64_t bad = -1;
    for (int64_t j = 0; j < n; j++) {
      float acc = 0;
      for (int r = 0; r < size; r++) acc = acc + (float)(r + 1) * 0.001f * (float)(j % 97);
      x[j] = acc;
    }
    for (int64_t e = 0; e < m * n && bad < 0; e++)
      if (memcmp(&buf[e], &x[e % n], sizeof(float)) != 0) bad = e;
    if (bad >= 0) {
      fprintf(stderr, "bench_mpi: rank %d: the chained sum is wrong at element %lld\n", rank, (long long)bad);
      ok = 0;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const double c = median(tch, REPS), a = median(tar, REPS);
  if (rank == 0 && ok && getenv("BENCH_MPI_VERBOSE"))
    printf("rank 0's minor page faults in a call (median): chained %.0f, MPI_Allreduce %.0f (4 KiB pages)\n",
           median(fch, REPS), median(far, REPS));
  if (rank == 0 && ok)
    printf("reduction of %lld floats (%.0f MB) over %d ranks: chained exact %.3f s, MPI_Allreduce %.3f s (%s): "
           "chained / allreduce %.2fx\n",
           (long long)(m * n), 4e-6 * (double)(m * n), size, c, a,
           warm ? "its scratch memory kept by malloc" : "malloc as it comes", c / a);
  weft_fabric_close(f);
  free(ones), free(x), free(buf);
  return !ok;
}

int main(int argc, char **argv) {
  const int reduce = argc > 1 && strcmp(argv[1], "reduce") == 0;
  if (argc < 2 || (!reduce && strcmp(argv[1], "lanes") != 0)) {
    fprintf(stderr, "usage: mpirun -np 2 bench_mpi lanes [MiB] | mpirun -np N bench_mpi reduce [floats]\n");
    return 2;
  }
  if (weft_mpi_init(reduce ? WEFT_MPI_DATA_PARALLEL : WEFT_MPI_LANES, &argc, &argv) != WEFT_OK) {
    fprintf(stderr, "bench_mpi: %s\n", weft_mpi_last_error());
    return 1;
  }
  int rc;
  if (reduce) {
    rc = bench_reduce(argc > 2 ? atoll(argv[2]) : 124439808LL);
  } else if (weft_mpi_size() != 2) {
    if (weft_mpi_rank() == 0) fprintf(stderr, "bench_mpi lanes: run it on 2 ranks (mpirun -np 2)\n");
    rc = 2;
  } else {
    rc = weft_mpi_rank() == 0 ? bench_lanes(argc > 2 ? (size_t)atoll(argv[2]) : 256) : follower();
  }
  /* the serving rank stopped already: nothing to stop at finalize */
  weft_mpi_job_get()->mode = WEFT_MPI_DATA_PARALLEL;
  weft_mpi_finalize();
  return rc;
}
