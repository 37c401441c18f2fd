/* client.h - the client half of the wire protocol (docs/PROTOCOL.md) over any transport that carries whole
 * frames: the request/reply exchange with its checks, the handshake's hello, the lanes list, and the lane
 * vtable functions (buffers as worker handles, chunked transfers, ops with views). Remote lanes carry it
 * over TCP (src/lanes/remote), MPI lanes over MPI messages (src/lanes/mpi), browser lanes over WebSocket
 * (src/lanes/browser); each supplies a transport and its own describe, destroy and revive (remote and MPI
 * lanes through src/net/peer_lane.h). A peer that misbehaves (a wrong id, a short or oversized reply,
 * a count that does not match) drops the connection and fails the lane; it never aborts the process. */
#ifndef WEFT_NET_CLIENT_H
#define WEFT_NET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "net/protocol.h"
#include "net/stripe.h"
#include "weft_lane.h"

/* How frames travel. Called from the fabric's thread only. Replies come back in the order of the requests,
 * so a client may send several (ops) before it reads their replies. */
typedef struct weft_net_transport {
  /* Sends (or queues) one request frame, given as three pieces in order (the 16-byte header first; a
   * piece may be empty); the pieces may be reused once this returns. The reply may be at most max_reply
   * bytes. WEFT_OK, or WEFT_ERR_LANE_FAILED with the reason ("connection lost", "the tab closed") in why. */
  weft_status (*send)(void *ctx, const uint8_t *const piece[3], const size_t len[3], size_t max_reply, char *why,
                      size_t whylen);
  /* Receives the next whole frame into *out_frame (header and payload, owned by the transport and valid
   * until the next call), waiting at most the lane's timeout. WEFT_OK, or WEFT_ERR_LANE_FAILED with why. */
  weft_status (*recv)(void *ctx, const uint8_t **out_frame, size_t *out_len, char *why, size_t whylen);
  /* Drops the connection (after a failure or a protocol violation), telling the peer `why` where the
   * transport can; later calls fail at once. */
  void (*drop)(void *ctx, const char *why);
  /* Optional (NULL: none). A bulk transfer of at least WEFT_NET_BULK_MIN_BYTES (net/stripe.h) done by the
   * transport itself over the session's connection and any streams it joined to the session, no reply
   * pending; request ids on the session's connection come from *next_id. WEFT_OK; WEFT_ERR_LANE_FAILED
   * with why when the connection broke (the client fails the lane); or the peer's status, its message in
   * why. A client whose transport has it announces WEFT_NET_CAP_STREAMS in its hello. */
  weft_status (*bulk)(void *ctx, const weft_net_bulk *job, uint32_t *next_id, char *why, size_t whylen);
} weft_net_transport;

/* Ops a pipelined client may have on the wire before it waits for the first of their replies. */
#define WEFT_NET_CLIENT_MAX_PENDING 64

/* One lane's client state. A lane's own struct starts with it, so the vtable functions below take the
 * lane's `self` directly. */
typedef struct weft_net_client weft_net_client;
struct weft_net_client {
  const weft_net_transport *tp;
  void *tp_ctx;
  const weft_lane_host *host;
  const char *name;     /* the lane's name, for messages */
  uint32_t next_id;
  uint32_t max_frame;   /* the peer's frame cap, clamped to a sane range */
  int32_t peer_lane;    /* the lane index on the peer that ops are pinned to */
  uint64_t peer_routes; /* ops sent with lane -1 instead: the peer picks among its lanes (a tab: its GPU
                         * for a large op); 0 for every other op, and for lanes that never let it */
  /* Optional: told, from each op's reply, which of the peer's lanes computed it (on the fabric's thread). */
  void (*op_ran)(weft_net_client *c, weft_op_kind kind, int32_t peer_lane);
  /* Bumped on every new connection: a buffer remembers the session it was created in, so a handle of a
   * closed connection is never sent to the next peer (where it would name nothing, or something else). */
  uint32_t session;
  int up;               /* 0 once the transport failed, until the lane connects again */
  /* Pipelined ops: run() sends the op and returns, like a GPU stream; its reply is read before the next
   * request that needs one (or at sync), in order. An op that then turns out to have failed fails the lane,
   * and the core computes what it wrote again elsewhere. */
  int pipeline;
  uint32_t pending;     /* ops sent whose replies are unread */
  uint32_t first_pending_id;
  uint8_t pending_kind[WEFT_NET_CLIENT_MAX_PENDING]; /* each pending op's kind, by request id */
  uint32_t peer_caps;   /* the capability bits of the peer's hello */
  /* After the mutual proof: the session's stream key (weft_net_stream_key) and the identity proven. */
  int have_stream_key;
  uint8_t stream_key[WEFT_NET_KEY_BYTES];
  char proven_identity[WEFT_NET_MAX_IDENTITY + 1];
  const uint8_t *reply; /* the last reply's payload (the transport's memory) */
  size_t reply_len;
  char why[512];        /* the last failure in words (a dropped connection's reason, or the peer's message) */
};

/* What the peer said in its hello reply. */
typedef struct weft_net_hello {
  uint32_t version, caps;
  int auth_required;
  uint8_t nonce[WEFT_NET_NONCE_BYTES];
  uint32_t max_frame;
  uint64_t max_resident;
} weft_net_hello;

/* The core's: safe from any thread. A lane that came up in the background (a tab admitted, a worker
 * reconnected) calls it so the fabric's next op asks the lane's revive, which then only says yes. */
void weft_lane_revive_soon(const weft_lane_host *host);

/* The largest WEFT_REMOTE_TIMEOUT_MS (ms); a value outside 1 .. this keeps the remote lanes out, saying so. */
#define WEFT_NET_TIMEOUT_MS_MAX 3599999L

/* How long a lane waits for a reply: WEFT_REMOTE_TIMEOUT_MS, default 30000 (remote and browser lanes). */
int weft_net_client_timeout_ms(void);
/* Starts a new session on a fresh connection: next request id 1, a new session number, up. */
void weft_net_client_begin(weft_net_client *c);
/* One request and its reply. A reply with a non-zero status is that status, with the peer's message
 * reported (control characters replaced); a transport failure or a malformed reply drops the connection
 * and is WEFT_ERR_LANE_FAILED. On WEFT_OK the payload is at c->reply (c->reply_len bytes). */
weft_status weft_net_client_call(weft_net_client *c, uint16_t type, const uint8_t *payload, size_t len,
                                 const uint8_t *tail, size_t tail_len);
/* Sends hello and reads the reply; sets c->max_frame from it. */
weft_status weft_net_client_hello(weft_net_client *c, weft_net_hello *out);
/* Mutual authentication after hello (docs/PROTOCOL.md): with a secret, the worker must require auth and
 * offer WEFT_NET_CAP_AUTH_MUTUAL (no downgrade); the client sends a fresh nonce (AUTH_START), checks the
 * worker's proof in constant time, and only then sends its own (AUTH_FINISH). Without a secret, a worker
 * that requires one is refused. expect_identity (NULL or "": any) pins the worker: a worker whose proven
 * identity is not exactly that string is refused before the client's proof is sent, and a pin without a
 * secret is refused (nothing could prove it). On WEFT_OK, identity (may be NULL) holds the worker's proven
 * identity ("" when no auth ran). Any failure drops the connection with the reason reported. */
weft_status weft_net_client_authenticate(weft_net_client *c, const weft_net_hello *hello, const uint8_t *secret,
                                         size_t secret_len, const char *expect_identity, char *identity,
                                         size_t identity_cap);
/* Asks for the peer's lanes and, once the whole list is found well-formed, calls `each` per entry (index,
 * contracts, the ops it offers (bits beyond this library's table dropped), name, kind, device; strings bounded, control characters replaced); a malformed list is
 * WEFT_ERR_LANE_FAILED and calls nothing. `each` may hand the lane to the fabric: the client is not used
 * after it returns. */
weft_status weft_net_client_lanes(weft_net_client *c,
                                  void (*each)(void *ctx, uint32_t index, weft_contract_mask contracts,
                                               uint64_t ops, const char *name, const char *kind,
                                               const char *device),
                                  void *ctx);
/* STREAMS (only to a peer whose hello offered WEFT_NET_CAP_STREAMS): asks for `wanted` connections (2..255,
 * this one included). On WEFT_OK *granted (1 .. wanted: 1 is none) and, when more than 1, the session id
 * streams join by, the key their proofs take (the stream key from the mutual proof, or the key the peer
 * sent when there was no secret) and the identity they name. A peer that refuses is an error of the call
 * (the connection stays); a malformed reply fails the lane. */
weft_status weft_net_client_streams(weft_net_client *c, uint32_t wanted, uint32_t *granted, uint64_t *session,
                                    uint8_t key[WEFT_NET_KEY_BYTES], char *identity, size_t identity_cap);
/* Fails the lane now: drops the connection and reports `why`. */
weft_status weft_net_client_fail(weft_net_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads the replies of every pipelined op still on the wire; the first that failed fails the lane. */
weft_status weft_net_client_drain(weft_net_client *c);

/* Lane vtable functions; `self` is a struct that starts with a weft_net_client. */
weft_status weft_net_client_buffer_alloc(void *self, size_t bytes, weft_buffer **out);
void weft_net_client_buffer_free(void *self, weft_buffer *buffer);
weft_status weft_net_client_upload(void *self, weft_buffer *buffer, size_t offset, const void *src, size_t bytes);
weft_status weft_net_client_download(void *self, weft_buffer *buffer, size_t offset, void *dst, size_t bytes);
weft_status weft_net_client_run(void *self, const weft_op *op);
/* The sync slot: waits for every pipelined op. */
weft_status weft_net_client_sync(void *self);

#endif
