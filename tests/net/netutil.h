/* netutil.h - test-side client of the wire protocol: start a real `weft worker` process on loopback with
 * an ephemeral port, connect, send frames (well-formed or deliberately not), read replies. */
#ifndef WEFT_TEST_NETUTIL_H
#define WEFT_TEST_NETUTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "net/protocol.h"

typedef struct nt_worker {
  pid_t pid;
  int port;
} nt_worker;

/* Starts `weft worker --listen 127.0.0.1:0 --lanes cpu` plus `extra` arguments (NULL-terminated, may be
 * NULL) and waits for the port it bound. Returns 0 on failure. */
int nt_start(const char *weft, const char *const *extra, nt_worker *out);
void nt_stop(nt_worker *w);
/* 1 while the worker process is alive. */
int nt_alive(nt_worker *w);
int nt_connect(int port);
int nt_send(int fd, uint16_t type, uint32_t id, const void *payload, uint32_t len);
/* Sends raw bytes. */
int nt_send_raw(int fd, const void *p, size_t n);
/* Reads one reply; *out_payload is malloc'ed (free it). Returns 0 on a closed or timed-out connection. */
int nt_recv(int fd, weft_net_header *h, uint8_t **out_payload);
/* Sends hello, reads the reply; fills nonce (may be NULL). Returns the reply's status or -1. */
int nt_hello(int fd, uint8_t *nonce);
/* One request, one reply: returns the reply's status (-1 when the connection closed); payload optional. */
int nt_call(int fd, uint16_t type, const void *payload, uint32_t len, uint8_t **out_payload, uint32_t *out_len);
/* 1 when the connection was closed by the peer (a read returns 0 within a second). */
int nt_closed(int fd);
/* Create a tensor (f32, or of a dtype); returns the handle or 0. */
uint64_t nt_create(int fd, int ndim, const int64_t *dims);
uint64_t nt_create_typed(int fd, weft_dtype dtype, int ndim, const int64_t *dims);
int nt_write(int fd, uint64_t h, const float *x, uint64_t n);
int nt_read(int fd, uint64_t h, float *x, uint64_t n);
/* A version-1 op as an OP payload (into WEFT_NET_OP_MAX_BYTES at pl; returns its size): hs = in0, in1,
 * out0, out1 (the table's counts of the op: slots past them are dropped), nd/dims their views (NULL: none),
 * flags 1/2 = trans_a/trans_b (params i[0], i[1]), alpha (params f[0]). */
size_t nt_op_v1(uint8_t *pl, uint32_t kind, uint32_t contract, int32_t lane, uint32_t flags, float alpha,
                const uint64_t hs[4], const int nd[4], const int64_t dims[4][4]);
int nt_op(int fd, uint32_t kind, uint32_t contract, int32_t lane, uint32_t flags, float alpha, const uint64_t hs[4]);
/* Proves the secret on a connection whose hello gave `nonce`; returns the AUTH reply's status or -1. */
int nt_auth(int fd, const uint8_t *nonce, const char *secret);
/* A fresh connection (hello, and auth when secret is not NULL) runs an m x k . k x n matmul routed by the
 * worker (lane -1) and compares the result bit for bit with nt_ref_matmul: 1 when right. */
int nt_matmul_right(int port, const char *secret, int m, int k, int n, uint64_t seed);
/* The process's resident memory (VmRSS) in KiB, or -1. */
long nt_rss_kib(pid_t pid);
/* Waits up to `seconds` for the peer to close (EOF or reset), reading and dropping whatever comes: 1 when
 * it closed. */
int nt_wait_closed(int fd, double seconds);
/* Raises the soft limit on open files to the hard one. */
void nt_raise_nofile(void);

/* c = a.b (m x k times k x n) in the exact contract's canonical order: the bits a worker must return. */
void nt_ref_matmul(const float *a, const float *b, float *c, int m, int k, int n);

/* A fake peer in this process, to test what the client lanes make of a worker that misbehaves: a loopback
 * listener whose connections one thread serves in turn, request by request. `answer` writes the reply's
 * payload (at most NT_FAKE_MAX_REPLY bytes) into out and its length into *len, and may set *status and
 * *claim (a length for the header other than *len: a lie); it returns 0 to close the connection instead of
 * answering. */
#define NT_FAKE_MAX_REPLY 256
typedef int (*nt_fake_answer)(void *ctx, const weft_net_header *h, uint8_t *out, size_t *len, uint16_t *status,
                              uint32_t *claim);
typedef struct nt_fake {
  int lfd, port;
  nt_fake_answer answer;
  void *ctx;
  pthread_t th;
} nt_fake;
/* Writes a hello reply's payload (version, caps, auth required, a fixed nonce, a 1 MiB frame cap, 1 GiB
 * resident) into q; returns its length. */
size_t nt_fake_hello(uint8_t *q, uint32_t version, uint32_t caps, int auth_required);
/* Starts serving on 127.0.0.1 (an ephemeral port, f->port). 0 on failure. */
int nt_fake_start(nt_fake *f, nt_fake_answer answer, void *ctx);
/* Shuts the listener and waits for the thread. */
void nt_fake_stop(nt_fake *f);

#endif
