/* test_net_worker.c - a real `weft worker` process on loopback: ops through resident handles give the
 * reference's bits, and one regression per class of bug the ggml RPC server shipped gets an error reply
 * (or a clean close of that connection) while the worker keeps serving another client. */
#define _GNU_SOURCE /* memmem */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netutil.h"
#include "tutil.h"

static nt_worker w;

/* A fresh client can still say hello and list lanes: the worker survived whatever came before. */
static void check_serving(const char *after) {
  TU_CHECK(nt_alive(&w), "worker process died after %s", after);
  int fd = nt_connect(w.port);
  TU_CHECK(fd >= 0, "cannot connect after %s", after);
  if (fd < 0) return;
  TU_CHECK(nt_hello(fd, NULL) == 0, "hello failed after %s", after);
  uint8_t *r;
  uint32_t n = 0;
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, &r, &n) == 0 && n >= 4 && weft_net_get32(r) >= 1,
           "lanes failed after %s", after);
  free(r);
  close(fd);
}

static int session(void) {
  int fd = nt_connect(w.port);
  if (fd >= 0 && nt_hello(fd, NULL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void test_matmul_bits(void) {
  int fd = session();
  TU_CHECK(fd >= 0, "session");
  if (fd < 0) return;
  int64_t m = 5, k = 7, n = 3;
  int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
  float a[35], b[21], c[15], want[15];
  tu_rng rng = {tu_seed()};
  for (int i = 0; i < 35; i++) a[i] = tu_rng_float(&rng, -1, 1);
  for (int i = 0; i < 21; i++) b[i] = tu_rng_float(&rng, -1, 1);
  nt_ref_matmul(a, b, want, m, k, n);
  uint64_t ha = nt_create(fd, 2, da), hb = nt_create(fd, 2, db), hc = nt_create(fd, 2, dc);
  TU_CHECK(ha && hb && hc && ha != hb && hb != hc, "create gives distinct handles");
  TU_CHECK(nt_write(fd, ha, a, 35) == 0 && nt_write(fd, hb, b, 21) == 0, "write");
  uint64_t hs[4] = {ha, hb, hc, 0};
  TU_CHECK(nt_op(fd, WEFT_OP_MATMUL, WEFT_CONTRACT_EXACT, -1, 0, 0, hs) == 0, "matmul");
  TU_CHECK(nt_read(fd, hc, c, 15) == 0, "read");
  int same = 1;
  for (int i = 0; i < 15; i++) same &= tu_same_bits(c[i], want[i]);
  TU_CHECK(same, "remote matmul differs from the canonical order");
  /* Weights travel once: a second op on the resident a and b, no re-upload. */
  uint64_t hs2[4] = {hc, 0, hc, 0};
  TU_CHECK(nt_op(fd, WEFT_OP_SCALE, 0, -1, 0, 2.0f, hs2) == 0, "scale in place");
  TU_CHECK(nt_read(fd, hc, c, 15) == 0 && tu_same_bits(c[4], want[4] * 2.0f), "scale result");
  uint8_t pl[8];
  weft_net_put64(pl, hc);
  TU_CHECK(nt_call(fd, WEFT_NET_FREE, pl, 8, NULL, NULL) == 0, "free");
  TU_CHECK(nt_read(fd, hc, c, 15) == WEFT_ERR_NOT_FOUND, "read after free: not found");
  close(fd);
}

/* ggml RPC: tensors named by raw pointers and offsets let a client read or write outside a buffer.
 * Here names are handles the worker issued; a made-up one, another connection's, or a freed one is
 * refused. */
static void test_handles_refer_to_nothing(void) {
  int a = session(), b = session();
  TU_CHECK(a >= 0 && b >= 0, "sessions");
  if (a < 0 || b < 0) return;
  int64_t d[1] = {4};
  uint64_t h = nt_create(a, 1, d);
  TU_CHECK(h != 0, "create");
  float x[4] = {1, 2, 3, 4};
  TU_CHECK(nt_read(b, h, x, 4) == WEFT_ERR_NOT_FOUND, "another connection's handle");
  TU_CHECK(nt_read(a, 0xdeadbeef00001000ull, x, 4) == WEFT_ERR_NOT_FOUND, "a pointer-like handle");
  /* Offsets outside the tensor: past its end, and far beyond any tensor. */
  uint8_t rd[24];
  weft_net_put64(rd, h);
  weft_net_put64(rd + 8, 2);
  weft_net_put64(rd + 16, 4);
  TU_CHECK(nt_call(a, WEFT_NET_READ, rd, 24, NULL, NULL) == WEFT_ERR_SHAPE, "read past the end");
  weft_net_put64(rd + 8, (uint64_t)1 << 62);
  weft_net_put64(rd + 16, 1);
  TU_CHECK(nt_call(a, WEFT_NET_READ, rd, 24, NULL, NULL) == WEFT_ERR_SHAPE, "read at a huge offset");
  weft_net_put64(rd + 8, 0);
  weft_net_put64(rd + 16, UINT64_MAX);
  TU_CHECK(nt_call(a, WEFT_NET_READ, rd, 24, NULL, NULL) == WEFT_ERR_SHAPE, "read of a wrapping count");
  TU_CHECK(nt_write(a, 999, x, 4) == WEFT_ERR_NOT_FOUND, "write to an unknown handle");
  /* Graph node that refers to nothing: an op naming a handle never issued, or leaving out a required one. */
  uint64_t hs[4] = {h, 777, h, 0};
  TU_CHECK(nt_op(a, WEFT_OP_ADD, 0, -1, 0, 0, hs) == WEFT_ERR_NOT_FOUND, "op input refers to nothing");
  uint64_t hs2[4] = {h, 0, h, 0};
  TU_CHECK(nt_op(a, WEFT_OP_ADD, 0, -1, 0, 0, hs2) == WEFT_ERR_INVALID_ARGUMENT, "op missing an input");
  /* More operands than the op table gives the op: relu with two outputs. */
  uint64_t hs3[4] = {h, 0, h, 0};
  uint8_t opl[WEFT_NET_OP_MAX_BYTES];
  size_t ol = nt_op_v1(opl, WEFT_OP_RELU, 0, -1, 0, 0, hs3, NULL, NULL);
  opl[17] = 2;
  memset(opl + ol, 0, WEFT_NET_OP_ENTRY_BYTES);
  TU_CHECK(nt_call(a, WEFT_NET_OP, opl, (uint32_t)(ol + WEFT_NET_OP_ENTRY_BYTES), NULL, NULL) ==
               WEFT_ERR_INVALID_ARGUMENT,
           "op with an extra slot");
  /* Lying write: the count says 4 floats, the bytes are 3 floats' worth. */
  uint8_t lie[24 + 12];
  weft_net_put64(lie, h);
  weft_net_put64(lie + 8, 0);
  weft_net_put64(lie + 16, 4);
  memset(lie + 24, 0, 12);
  TU_CHECK(nt_call(a, WEFT_NET_WRITE, lie, sizeof lie, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT, "lying write");
  /* A write whose size does not match the tensor: the pointer-plus-size overrun. */
  float big[8] = {0};
  TU_CHECK(nt_write(a, h, big, 8) == WEFT_ERR_SHAPE, "write past the tensor");
  /* The connection is still usable after every one of these. */
  TU_CHECK(nt_write(a, h, x, 4) == 0, "connection still usable after errors");
  close(a);
  close(b);
  check_serving("handle errors");
}

/* Unchecked dtype / contract / rank, zero-size dimensions, size products that overflow. */
static void test_shapes(void) {
  int fd = session();
  if (fd < 0) return;
  int64_t zero[2] = {0, 3};
  TU_CHECK(nt_create(fd, 2, zero) == 0, "zero-size matrix dimension refused");
  int64_t neg[2] = {-1, 3};
  TU_CHECK(nt_create(fd, 2, neg) == 0, "negative dimension refused");
  int64_t ovf[4] = {1 << 24, 1 << 24, 1 << 24, 1 << 24};
  uint8_t pl[8 + 32];
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 4);
  for (int i = 0; i < 4; i++) weft_net_put64(pl + 8 + 8 * i, (uint64_t)ovf[i]);
  TU_CHECK(nt_call(fd, WEFT_NET_CREATE, pl, sizeof pl, NULL, NULL) == WEFT_ERR_OVERFLOW, "overflowing product");
  int64_t wrap[2] = {(int64_t)1 << 33, (int64_t)1 << 33};
  TU_CHECK(nt_create(fd, 2, wrap) == 0, "dims whose product wraps 64 bits refused");
  weft_net_put32(pl + 4, 9);
  TU_CHECK(nt_call(fd, WEFT_NET_CREATE, pl, sizeof pl, NULL, NULL) == WEFT_ERR_SHAPE, "rank 9");
  weft_net_put32(pl, 2);
  weft_net_put32(pl + 4, 4);
  TU_CHECK(nt_call(fd, WEFT_NET_CREATE, pl, sizeof pl, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT, "dtype 2 refused");
  int64_t d[1] = {4};
  uint64_t h = nt_create(fd, 1, d);
  uint64_t hs[4] = {h, 0, h, 0};
  TU_CHECK(nt_op(fd, WEFT_OP_RELU, 77, -1, 0, 0, hs) == WEFT_ERR_INVALID_ARGUMENT, "unknown contract (dtype)");
  uint8_t opl[WEFT_NET_OP_MAX_BYTES];
  size_t ol = nt_op_v1(opl, WEFT_OP_RELU, 0, -1, 0, 0, hs, NULL, NULL);
  weft_net_put32(opl + 12, 0x100);
  TU_CHECK(nt_call(fd, WEFT_NET_OP, opl, (uint32_t)ol, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT, "unknown flags");
  TU_CHECK(nt_op(fd, WEFT_OP_RELU, 0, 1000, 0, 0, hs) != 0, "lane out of range");
  /* An op not on the allow-list. */
  TU_CHECK(nt_op(fd, 200, 0, -1, 0, 0, hs) == WEFT_ERR_UNSUPPORTED, "op kind 200");
  TU_CHECK(nt_op(fd, WEFT_OP_COUNT, 0, -1, 0, 0, hs) == WEFT_ERR_UNSUPPORTED, "op kind WEFT_OP_COUNT");
  /* Shapes that disagree: the public API's validation answers. */
  int64_t d2[2] = {3, 5};
  uint64_t h2 = nt_create(fd, 2, d2);
  uint64_t hs4[4] = {h, h2, h, 0};
  TU_CHECK(nt_op(fd, WEFT_OP_ADD, 0, -1, 0, 0, hs4) == WEFT_ERR_SHAPE, "add of mismatched shapes");
  close(fd);
  check_serving("shape errors");
}

/* One handle in several slots of an op. In the same shape it is one tensor: an in-place op, whose result
 * must reach the handle. In different shapes (views) as an input and the output, it is two tensors over
 * one buffer: refused with WEFT_ERR_INVALID_ARGUMENT, and the handle keeps its value. */
static uint32_t view_op(uint8_t *pl, uint32_t kind, float alpha, const uint64_t hs[4], const int nd[4],
                        const int64_t dims[4][2]) {
  int64_t d4[4][4] = {{0}};
  for (int i = 0; i < 4; i++)
    for (int d = 0; d < nd[i] && d < 2; d++) d4[i][d] = dims[i][d];
  return (uint32_t)nt_op_v1(pl, kind, 0, -1, 0, alpha, hs, nd, (const int64_t(*)[4])d4);
}

static void test_views(void) {
  int fd = session();
  if (fd < 0) return;
  int64_t d[1] = {16};
  uint64_t h = nt_create(fd, 1, d);
  float x[16], got[16];
  for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) * 0.5f;
  TU_CHECK(nt_write(fd, h, x, 16) == 0, "write");
  uint8_t pl[WEFT_NET_OP_MAX_BYTES];
  uint64_t hs[4] = {h, 0, h, 0}, hs3[4] = {h, h, h, 0};
  /* add: x and out the handle as [4,4] (one tensor, in place), y its first row as a bias [4]: y is a
   * different tensor over memory the op overwrites */
  const int64_t views[4][2] = {{4, 4}, {4, 0}, {4, 4}, {0, 0}};
  const int nd_diff[4] = {2, 1, 2, 0}, nd_same[4] = {1, 0, 1, 0};
  const int64_t same_views[4][2] = {{16, 0}, {0, 0}, {16, 0}, {0, 0}};
  uint32_t plen = view_op(pl, WEFT_OP_ADD, 0, hs3, nd_diff, views);
  uint8_t *reply = NULL;
  uint32_t rlen = 0;
  int rs = nt_call(fd, WEFT_NET_OP, pl, plen, &reply, &rlen);
  TU_CHECK(rs == WEFT_ERR_INVALID_ARGUMENT, "add of a handle and a view of its first row into the handle: status %d",
           rs);
  TU_CHECK(reply && rlen > 0 && memmem(reply, rlen, "overlapping memory", 18), "the refusal says why: %.*s",
           (int)rlen, reply ? (const char *)reply : "");
  free(reply);
  TU_CHECK(nt_read(fd, h, got, 16) == 0 && memcmp(got, x, sizeof x) == 0, "a refused op left the handle as it was");
  plen = view_op(pl, WEFT_OP_SCALE, 3.0f, hs, nd_same, same_views);
  TU_CHECK(nt_call(fd, WEFT_NET_OP, pl, plen, NULL, NULL) == 0, "scale in place, one view");
  TU_CHECK(nt_read(fd, h, got, 16) == 0, "read");
  int ok = 1;
  for (int i = 0; i < 16; i++) ok &= got[i] == 3.0f * x[i];
  TU_CHECK(ok, "scale in place through the worker: the handle holds 3x");
  TU_CHECK(nt_op(fd, WEFT_OP_RELU, 0, -1, 0, 0, hs) == 0, "relu in place (no views)");
  TU_CHECK(nt_read(fd, h, got, 16) == 0, "read");
  ok = 1;
  for (int i = 0; i < 16; i++) ok &= got[i] == (x[i] > 0 ? 3.0f * x[i] : 0.0f);
  TU_CHECK(ok, "relu in place through the worker: the handle holds the relu");
  close(fd);
  check_serving("views of one handle");
}

/* A receive buffer sized by the client: a huge length prefix is refused before anything is read or
 * allocated; a bad magic or a truncated frame closes that connection only. */
static void test_frames(void) {
  int fd = session();
  if (fd < 0) return;
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_WRITE, 0, 99, 0xffffffffu};
  weft_net_header_encode(&h, hb);
  TU_CHECK(nt_send_raw(fd, hb, sizeof hb), "send");
  weft_net_header rh;
  uint8_t *p;
  TU_CHECK(nt_recv(fd, &rh, &p) && rh.status == WEFT_ERR_OVERFLOW, "huge length prefix: overflow reply");
  free(p);
  TU_CHECK(nt_closed(fd), "connection closed after a huge length prefix");
  close(fd);
  check_serving("huge length prefix");

  fd = nt_connect(w.port);
  h.magic = 0x12345678;
  h.length = 0;
  weft_net_header_encode(&h, hb);
  nt_send_raw(fd, hb, sizeof hb);
  TU_CHECK(nt_recv(fd, &rh, &p) && rh.status != 0, "bad magic: error reply");
  free(p);
  TU_CHECK(nt_closed(fd), "bad magic closes the connection");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == WEFT_ERR_STATE, "request before hello refused");
  close(fd);

  fd = session();
  h.magic = WEFT_NET_MAGIC;
  h.length = 100;
  weft_net_header_encode(&h, hb);
  nt_send_raw(fd, hb, sizeof hb);
  nt_send_raw(fd, "short", 5);
  close(fd); /* truncated mid-frame */
  fd = session();
  uint8_t junk[7] = {1, 2, 3};
  TU_CHECK(nt_call(fd, WEFT_NET_READ, junk, sizeof junk, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
           "malformed read payload: error reply");
  TU_CHECK(nt_call(fd, 0x7fff, NULL, 0, NULL, NULL) != 0, "unknown type refused");
  close(fd);
  check_serving("malformed frames");
}

/* Per-connection resident cap (the worker runs with --max-resident-mib 1). */
static void test_resident_cap(void) {
  int fd = session();
  if (fd < 0) return;
  int64_t d[2] = {256, 512}; /* 512 KiB */
  TU_CHECK(nt_create(fd, 2, d) != 0, "first half MiB fits");
  TU_CHECK(nt_create(fd, 2, d) != 0, "second half MiB fits");
  uint8_t pl[8 + 16];
  weft_net_put32(pl, WEFT_DTYPE_F32);
  weft_net_put32(pl + 4, 2);
  weft_net_put64(pl + 8, 256);
  weft_net_put64(pl + 16, 512);
  TU_CHECK(nt_call(fd, WEFT_NET_CREATE, pl, sizeof pl, NULL, NULL) == WEFT_ERR_OUT_OF_MEMORY,
           "third passes the resident cap");
  close(fd);
  check_serving("resident cap");
}

/* Clients at once, each mixing malformed requests (and, for one, a frame that closes its connection) with
 * real ops: every good op's result is right, whatever the others send. */
typedef struct conc {
  int id;
  long good, wrong, failed;
} conc;

static void *conc_client(void *arg) {
  conc *c = arg;
  int fd = session();
  if (fd < 0) {
    c->failed++;
    return NULL;
  }
  enum { N = 32 };
  int64_t d[1] = {N};
  uint64_t x = nt_create(fd, 1, d), y = nt_create(fd, 1, d);
  float in[N], out[N];
  tu_rng rng = {tu_seed() + (uint64_t)c->id};
  for (int i = 0; i < 200; i++) {
    if (i % 10 == 3) {
      uint64_t hs[4] = {x, 0, 0xbadull, 0};
      if (nt_op(fd, WEFT_OP_RELU, 0, -1, 0, 0, hs) != WEFT_ERR_NOT_FOUND) c->failed++;
      continue;
    }
    if (i == 150 && c->id == 0) {
      /* A bad magic closes this connection only; reconnect and go on. */
      nt_send_raw(fd, "garbage-garbage!", 16);
      close(fd);
      fd = session();
      if (fd < 0) {
        c->failed++;
        return NULL;
      }
      x = nt_create(fd, 1, d);
      y = nt_create(fd, 1, d);
    }
    for (int j = 0; j < N; j++) in[j] = tu_rng_float(&rng, -1, 1);
    uint64_t hs[4] = {x, 0, y, 0};
    if (nt_write(fd, x, in, N) || nt_op(fd, WEFT_OP_RELU, 0, -1, 0, 0, hs) || nt_read(fd, y, out, N)) {
      c->failed++;
      continue;
    }
    int ok = 1;
    for (int j = 0; j < N; j++) ok &= tu_same_bits(out[j], in[j] > 0 ? in[j] : 0.0f);
    if (ok) c->good++;
    else c->wrong++;
  }
  close(fd);
  return NULL;
}

static void test_concurrent(void) {
  enum { T = 6 };
  pthread_t th[T];
  conc c[T];
  memset(c, 0, sizeof c);
  for (int i = 0; i < T; i++) {
    c[i].id = i;
    pthread_create(&th[i], NULL, conc_client, &c[i]);
  }
  long good = 0, wrong = 0, failed = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    good += c[i].good, wrong += c[i].wrong, failed += c[i].failed;
  }
  TU_CHECK(wrong == 0 && failed == 0 && good == T * 180, "concurrent clients: %ld good, %ld wrong, %ld failed", good,
           wrong, failed);
  check_serving("concurrent clients");
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) {
    fprintf(stderr, "usage: test_net_worker /path/to/weft\n");
    return 2;
  }
  const char *extra[] = {"--max-resident-mib", "1", NULL};
  if (!nt_start(argv[1], extra, &w)) {
    TU_CHECK(0, "worker did not start");
    return tu_finish("net_worker", start);
  }
  test_matmul_bits();
  test_handles_refer_to_nothing();
  test_shapes();
  test_views();
  test_frames();
  test_resident_cap();
  test_concurrent();
  TU_CHECK(nt_alive(&w), "worker alive at the end");
  nt_stop(&w);
  return tu_finish("net_worker", start);
}
