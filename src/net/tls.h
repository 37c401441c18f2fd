/* tls.h - the byte stream under the wire protocol's frames: a plain socket, or TLS 1.3 over it with an
 * external pre-shared key derived from the shared secret (HKDF-SHA256 with its own label, see the domains
 * in protocol.h), TLS_AES_128_GCM_SHA256 only, no certificates. The worker's connections and the remote
 * lane's transport read and write through a weft_net_conn whichever it is. Blocking I/O under the socket's
 * own timeouts (SO_RCVTIMEO, SO_SNDTIMEO): a timed-out call fails with errno EAGAIN. */
#ifndef WEFT_NET_TLS_H
#define WEFT_NET_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* One side's TLS configuration (an SSL_CTX and the derived key). Shared by every connection of that side. */
typedef struct weft_net_tls weft_net_tls;

typedef struct weft_net_conn {
  int fd;    /* -1 when closed */
  void *ssl; /* SSL *, or NULL for plain TCP */
} weft_net_conn;

/* Server (is_server = 1) or client configuration from the shared secret (at least 16 bytes). */
weft_status weft_net_tls_create(int is_server, const uint8_t *secret, size_t secret_len, weft_net_tls **out,
                                char *err, size_t errlen);
void weft_net_tls_destroy(weft_net_tls *t);

/* A plain connection over fd (takes ownership of fd). */
void weft_net_conn_init(weft_net_conn *c, int fd);
/* Runs TLS's handshake on the connection as the server. A peer that speaks plaintext frames instead is sent a
 * plaintext error reply that says this worker wants TLS, then refused. On failure err says why; the caller
 * closes. */
weft_status weft_net_conn_accept(weft_net_conn *c, weft_net_tls *t, char *err, size_t errlen);
/* The same on a non-blocking fd, one step at a time (the worker's handshake stage polls many connections on
 * one thread): 1 done (c->ssl set), 0 call again when the fd is readable (*want_write 0) or writable
 * (*want_write 1), -1 refused (err says why; a plaintext weft client was sent a plaintext error reply). While
 * it runs c->ssl may be set already: the caller tells the two apart by this function's verdict. */
int weft_net_conn_accept_step(weft_net_conn *c, weft_net_tls *t, int *want_write, char *err, size_t errlen);
/* Once, without waiting where the fd is non-blocking: the count moved, 0 the peer closed (read), -1 an error,
 * -2 nothing can move now (a blocking fd's timeout reads as -2 too). A TLS write flushes its records. */
long weft_net_conn_read_some(weft_net_conn *c, uint8_t *p, size_t n);
long weft_net_conn_write_some(weft_net_conn *c, const uint8_t *p, size_t n);
/* Runs TLS's handshake as the client; on failure err says why in words a person can act on (the peer speaks
 * plaintext, the secrets differ). */
weft_status weft_net_conn_connect(weft_net_conn *c, weft_net_tls *t, char *err, size_t errlen);
/* Exactly n bytes, retrying on EINTR (never SIGPIPE). 1 on success, 0 when the peer closed, timed out or the
 * stream failed (a TLS record that does not authenticate is a failure). */
int weft_net_conn_send_all(weft_net_conn *c, const uint8_t *p, size_t n);
int weft_net_conn_recv_all(weft_net_conn *c, uint8_t *p, size_t n);
/* One frame given as three pieces (a piece may be NULL or empty): one sendmsg in plain TCP, one TLS record
 * for small frames. 1 on success. */
int weft_net_conn_send3(weft_net_conn *c, const uint8_t *const piece[3], const size_t len[3]);
/* 1 when bytes already received and decrypted wait in the TLS layer: poll() on the fd would not see them. */
int weft_net_conn_pending(const weft_net_conn *c);
/* "TLS 1.3 (TLS_AES_128_GCM_SHA256, PSK)" or "plain TCP", with ", kTLS" when the kernel does the records. */
const char *weft_net_conn_describe(const weft_net_conn *c, char *buf, size_t n);
/* Closes (a TLS close_notify first, best effort) and frees; the fd becomes -1. */
void weft_net_conn_close(weft_net_conn *c);

#endif
