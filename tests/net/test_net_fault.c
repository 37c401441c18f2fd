/* test_net_fault.c - a remote lane whose worker is killed (SIGKILL) between ops: the next op routed to it
 * fails over to the CPU with the right bits, and the lane is marked failed. Also: remote lanes appear in
 * the fabric under their names, and an op pinned to one gives the reference's bits. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netutil.h"
#include "tutil.h"

static int same(const float *x, const float *y, int n) {
  for (int i = 0; i < n; i++)
    if (!tu_same_bits(x[i], y[i])) return 0;
  return 1;
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  nt_worker w;
  if (!nt_start(argv[1], NULL, &w)) {
    TU_CHECK(0, "worker did not start");
    return tu_finish("net_fault", start);
  }
  setenv("WEFT_REMOTE_TIMEOUT_MS", "3000", 1);
  char addr[64], name[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  snprintf(name, sizeof name, "remote:%s/cpu", addr);
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu,remote";
  d.remote = addr;
  weft_fabric *f = NULL;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open with a remote worker");
  if (!f) return tu_finish("net_fault", start);
  size_t remote = 0, cpu = 0;
  TU_STATUS(weft_fabric_lane_find(f, name, &remote), WEFT_OK, "the remote lane is in the fabric");
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &cpu), WEFT_OK, "cpu lane");
  weft_lane_info li;
  TU_CHECK(weft_fabric_lane_info(f, remote, &li) == WEFT_OK && strcmp(li.kind, "remote") == 0 &&
               (li.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT)),
           "remote lane kind and contracts come from the worker");

  enum { M = 24, K = 40, N = 16 };
  float a[M * K], b[K * N], c[M * N], want[M * N];
  tu_rng rng = {tu_seed()};
  for (int i = 0; i < M * K; i++) a[i] = tu_rng_float(&rng, -1, 1);
  for (int i = 0; i < K * N; i++) b[i] = tu_rng_float(&rng, -1, 1);
  nt_ref_matmul(a, b, want, M, K, N);
  int64_t da[2] = {M, K}, db[2] = {K, N}, dc[2] = {M, N};
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_tensor_create(f, 2, da, a, &ta);
  weft_tensor_create(f, 2, db, b, &tb);
  weft_tensor_create(f, 2, dc, NULL, &tc);

  weft_op_desc od = WEFT_OP_DESC_INIT;
  od.lane = (int)remote;
  TU_STATUS(weft_op_matmul(f, &od, ta, 0, tb, 0, tc), WEFT_OK, "matmul pinned to the remote lane");
  TU_STATUS(weft_tensor_read(tc, c, M * N), WEFT_OK, "read");
  TU_CHECK(same(c, want, M * N), "remote matmul gives the canonical bits");

  /* Make the router prefer the remote lane, then kill its worker. */
  for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++) {
    weft_fabric_set_cost_model(f, remote, (weft_cost_class)cls, WEFT_CONTRACT_EXACT, 1e-9, 1e15);
    weft_fabric_set_cost_model(f, cpu, (weft_cost_class)cls, WEFT_CONTRACT_EXACT, 1.0, 1e3);
  }
  TU_STATUS(weft_op_matmul(f, NULL, ta, 0, tb, 0, tc), WEFT_OK, "routed matmul");
  TU_CHECK(weft_fabric_last_lane(f) == (int)remote, "the router picked the remote lane (got %d)",
           weft_fabric_last_lane(f));
  nt_stop(&w);
  memset(c, 0, sizeof c);
  weft_tensor_write(tc, c, M * N);
  TU_STATUS(weft_op_matmul(f, NULL, ta, 0, tb, 0, tc), WEFT_OK, "routed matmul after the worker died");
  TU_CHECK(weft_fabric_last_lane(f) == (int)cpu, "re-routed to the cpu (got %d)", weft_fabric_last_lane(f));
  TU_STATUS(weft_tensor_read(tc, c, M * N), WEFT_OK, "read");
  TU_CHECK(same(c, want, M * N), "the re-routed result has the canonical bits");
  TU_CHECK(weft_fabric_lane_info(f, remote, &li) == WEFT_OK && li.failed == 1, "the remote lane is marked failed");
  TU_CHECK(li.revivable == 1, "and may come back");

  /* The worker is restarted on the same address: the lane is retried and comes back. */
  size_t up = 0;
  weft_fabric_revive(f, &up);
  TU_CHECK(up == 1, "no worker yet: only the cpu is up (%zu)", up);
  const char *same_port[] = {"--listen", addr, NULL};
  if (!nt_start(argv[1], same_port, &w)) {
    TU_CHECK(0, "the worker did not restart on %s", addr);
    return tu_finish("net_fault", start);
  }
  int back = 0;
  for (double t_end = tu_now() + 10; !back && tu_now() < t_end;) {
    /* routed ops ask the down lane again once its backoff has passed */
    TU_STATUS(weft_op_matmul(f, NULL, ta, 0, tb, 0, tc), WEFT_OK, "routed matmul while the worker restarts");
    weft_fabric_lane_info(f, remote, &li);
    back = !li.failed;
    if (!back) usleep(20000);
  }
  TU_CHECK(back, "the lane came back after the worker restarted");
  memset(c, 0, sizeof c);
  weft_tensor_write(tc, c, M * N);
  TU_STATUS(weft_op_matmul(f, &od, ta, 0, tb, 0, tc), WEFT_OK, "matmul pinned to the revived lane");
  TU_STATUS(weft_tensor_read(tc, c, M * N), WEFT_OK, "read");
  TU_CHECK(same(c, want, M * N), "the revived lane gives the canonical bits (its tensors were uploaded again)");
  nt_stop(&w);
  weft_tensor_destroy(ta);
  weft_tensor_destroy(tb);
  weft_tensor_destroy(tc);
  weft_fabric_close(f);

  /* A worker that stalls (SIGSTOP: the socket stays open, nothing answers): the lane's timeout turns it
   * into a failed lane and the op is re-routed. */
  if (!nt_start(argv[1], NULL, &w)) {
    TU_CHECK(0, "second worker did not start");
    return tu_finish("net_fault", start);
  }
  snprintf(addr, sizeof addr, "127.0.0.1:%d", w.port);
  snprintf(name, sizeof name, "remote:%s/cpu", addr);
  d.remote = addr;
  TU_STATUS(weft_fabric_open(&d, &f), WEFT_OK, "open with the second worker");
  if (!f) return tu_finish("net_fault", start);
  TU_STATUS(weft_fabric_lane_find(f, name, &remote), WEFT_OK, "remote lane");
  TU_STATUS(weft_fabric_lane_find(f, "cpu", &cpu), WEFT_OK, "cpu lane");
  for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++) {
    weft_fabric_set_cost_model(f, remote, (weft_cost_class)cls, WEFT_CONTRACT_EXACT, 1e-9, 1e15);
    weft_fabric_set_cost_model(f, cpu, (weft_cost_class)cls, WEFT_CONTRACT_EXACT, 1.0, 1e3);
  }
  weft_tensor_create(f, 2, da, a, &ta);
  weft_tensor_create(f, 2, db, b, &tb);
  weft_tensor_create(f, 2, dc, NULL, &tc);
  kill(w.pid, SIGSTOP);
  /* kill returns before the worker's threads have stopped: one still running could answer the op (seen
   * about once in 20 runs on 2 cores). The stop is waited for, as a parent can. */
  int wst = 0;
  TU_CHECK(waitpid(w.pid, &wst, WUNTRACED) == w.pid && WIFSTOPPED(wst), "the worker stopped");
  double t0 = tu_now();
  TU_STATUS(weft_op_matmul(f, NULL, ta, 0, tb, 0, tc), WEFT_OK, "routed matmul while the worker is stalled");
  double waited = tu_now() - t0;
  TU_CHECK(waited < 20, "the stall was cut short by the timeout (%.1f s)", waited);
  TU_CHECK(weft_fabric_last_lane(f) == (int)cpu, "re-routed to the cpu (got %d)", weft_fabric_last_lane(f));
  memset(c, 0, sizeof c);
  TU_STATUS(weft_tensor_read(tc, c, M * N), WEFT_OK, "read");
  TU_CHECK(same(c, want, M * N), "the re-routed result has the canonical bits");
  TU_CHECK(weft_fabric_lane_info(f, remote, &li) == WEFT_OK && li.failed == 1, "the stalled lane is marked failed");
  weft_tensor_destroy(ta);
  weft_tensor_destroy(tb);
  weft_tensor_destroy(tc);
  weft_fabric_close(f);
  kill(w.pid, SIGCONT);
  nt_stop(&w);
  return tu_finish("net_fault", start);
}
