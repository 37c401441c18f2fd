/* worker.h - the server side of the protocol: a server (a directory fabric that lists and routes, one
 * fabric per lane behind a FIFO lock that runs the ops, the secret, the caps) and sessions (one per
 * connection: its handles, its resident bytes, its auth state). weft_net_session_handle turns one frame into
 * one reply with no socket involved, so the request handler can be fuzzed; weft_net_worker_run adds the
 * listening socket, a poll()-driven handshake stage for unauthenticated connections and a thread per
 * authenticated one. */
#ifndef WEFT_NET_WORKER_H
#define WEFT_NET_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "net/protocol.h"
#include "weft.h"

typedef struct weft_net_server weft_net_server;
typedef struct weft_net_session weft_net_session;

typedef struct weft_net_worker_desc {
  const char *listen;      /* "HOST:PORT"; NULL = "127.0.0.1:7070"; port 0 picks a free one */
  const char *lanes;       /* the worker fabric's lanes (weft_fabric_desc.lanes); NULL = all */
  const uint8_t *secret;   /* shared secret, or NULL; required off loopback */
  size_t secret_len;
  int tls;                 /* TLS 1.3 (a PSK derived from the secret) on loopback too; always on elsewhere */
  const char *identity;    /* the name the worker proves (bound into both proofs); NULL = "HOSTNAME:PORT" */
  weft_net_limits limits;  /* zeros = defaults */
  int max_clients;         /* concurrent connections past the handshake; 0 = 64 */
  int io_timeout_ms;       /* a peer silent this long mid-frame is dropped; 0 = 30000 */
  int max_pending;         /* connections still in the handshake (their own cap; the oldest is dropped for a
                            * newcomer when full); 0 = 64 */
  int handshake_timeout_ms; /* accept to a complete HELLO (and AUTH when a secret is set); 0 = 5000 */
  int idle_timeout_ms;     /* an authenticated peer silent this long between frames is dropped; 0 = one
                            * hour, < 0 = never */
  uint64_t max_total_resident; /* tensor and frame-buffer bytes across all connections; 0 = half the
                                * machine's physical memory */
  int max_streams;         /* connections one session may stripe its bulk transfers over (STREAMS, its first
                            * included); 0 = weft_net_default_streams(), 1 = no streams */
  /* Called once the socket is bound, with the address and the port actually bound. */
  void (*on_listen)(void *ctx, const char *host, int port);
  void *ctx;
  /* Called (from the worker's threads, with ctx) with one line per connection event: a peer connected,
   * completed its handshake (authenticated or not), was refused or dropped before that (and why), left.
   * NULL: silent. */
  void (*on_log)(void *ctx, const char *line);
} weft_net_worker_desc;

/* A growing reply buffer. */
typedef struct weft_net_buf {
  uint8_t *data;
  size_t len, cap;
} weft_net_buf;

weft_status weft_net_server_create(const weft_net_worker_desc *desc, weft_net_server **out, char *err,
                                   size_t errlen);
void weft_net_server_destroy(weft_net_server *srv);
weft_net_session *weft_net_session_create(weft_net_server *srv);
/* Frees every tensor the session still holds. */
void weft_net_session_destroy(weft_net_session *s);
/* Handles one frame whose header was decoded by weft_net_header_decode and whose payload is `payload`;
 * appends the reply frame to `reply`. Returns 1 to keep the connection, 0 to close it after the reply. */
int weft_net_session_handle(weft_net_session *s, const weft_net_header *h, const uint8_t *payload,
                            weft_net_buf *reply);

/* Where serve_conn would receive a WRITE frame's floats directly (no staging copy) given its first 24
 * payload bytes, or NULL when the frame is not a valid write for this session now (the frame is then read
 * whole and weft_net_session_handle answers it). For the fuzzer, which has no socket. */
float *weft_net_session_write_target(weft_net_session *s, const weft_net_header *h, const uint8_t *prefix);

void weft_net_buf_free(weft_net_buf *b);

/* Binds, then serves until the process ends. Returns only on a setup error (bind failed, a non-loopback
 * address without a secret, TLS without a secret), with the reason in err. Off loopback every connection
 * runs in TLS 1.3 whatever desc->tls says. */
weft_status weft_net_worker_run(const weft_net_worker_desc *desc, char *err, size_t errlen);

#endif
