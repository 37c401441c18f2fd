/* protocol.h - the weft wire protocol (docs/PROTOCOL.md): frame header, message types, hard caps, and a
 * pure decoder (bytes in, a parsed request or a status and message out) that allocates nothing, so the
 * worker, the tests and the fuzzer share one definition of what a valid frame is. */
#ifndef WEFT_NET_PROTOCOL_H
#define WEFT_NET_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WEFT_NET_MAGIC 0x54464557u /* "WEFT" as little-endian bytes */
/* Version 2: CREATE carries a dtype, OP carries any op of the table (its operands, views and parameters),
 * LANES says which ops each lane offers, RETYPE relabels a handle's dtype. A peer of version 1 is refused
 * with a message in both directions (docs/PROTOCOL.md, "Versioning"). */
#define WEFT_NET_VERSION 2u
#define WEFT_NET_HEADER_BYTES 16u
#define WEFT_NET_NONCE_BYTES 32u
#define WEFT_NET_MAC_BYTES 32u
#define WEFT_NET_REPLY 0x8000u /* a reply's type is the request's type | WEFT_NET_REPLY */

/* Hard caps: a request beyond them is refused before anything is allocated. */
#define WEFT_NET_MAX_RANK 4
#define WEFT_NET_MAX_DIM ((int64_t)1 << 28)
#define WEFT_NET_MAX_ELEMENTS ((uint64_t)1 << 28)      /* 1 GiB of floats */
#define WEFT_NET_DEFAULT_MAX_FRAME ((uint32_t)64 << 20) /* payload bytes */
#define WEFT_NET_DEFAULT_MAX_RESIDENT ((uint64_t)1 << 30)
#define WEFT_NET_MAX_HANDLES 4096u
#define WEFT_NET_MAX_MESSAGE 512u

/* Capability bits exchanged in the handshake. */
#define WEFT_NET_CAP_AUTH_HMAC_SHA256 1u
/* Mutual authentication (AUTH_START, AUTH_FINISH below): a worker that requires a secret sets it in its
 * hello reply; a client that holds a secret refuses a worker without it (or one that asks for no auth). */
#define WEFT_NET_CAP_AUTH_MUTUAL 2u
/* Striped bulk transfers (STREAMS, JOIN below): a client sets it in its hello when it may ask for streams; a
 * worker sets it in its reply when it grants them. A client sends STREAMS only to a worker that set it (a
 * worker without it would refuse the type), and a worker grants streams only to a client that set it. */
#define WEFT_NET_CAP_STREAMS 4u

/* Authentication domains. Every MAC made with the shared secret carries a label naming its role and
 * direction (NUL-terminated, so no label is a prefix of another), and what it binds, so a MAC made for one
 * purpose is never accepted for another:
 *
 *   client -> worker  HMAC-SHA256(secret, "weft-v1 client->worker" 0x00 || worker_nonce[32] ||
 *                                 client_nonce[32] || u16 len || worker identity)       AUTH_FINISH
 *   worker -> client  HMAC-SHA256(secret, "weft-v1 worker->client" 0x00 || client_nonce[32] ||
 *                                 worker_nonce[32] || u16 len || worker identity)       AUTH_START's reply
 *   TLS 1.3 PSK       HKDF-SHA256(secret, salt "weft-v1 tls13 psk", info "weft-v1 tls13 external psk")
 *                     (src/net/tls.c)
 *   stream key        HMAC-SHA256(secret, "weft-v1 stream key" 0x00 || worker_nonce[32] || client_nonce[32] ||
 *                                 u16 len || worker identity): a session's key for joining streams, known to
 *                     both ends after the mutual proof and never sent (without a secret: 32 random bytes the
 *                     worker sends in the STREAMS reply)
 *   stream join       HMAC-SHA256(stream key, "weft-v1 stream join" 0x00 || u64 session || u32 index ||
 *                                 u16 len || worker identity)                           JOIN
 *   tab -> fabric     a browser tab's PROVE answer: the browser lane's own label (src/lanes/browser,
 *                     web/worker/worker.js); never any of the above
 *
 * The single-sided proof of the first release ("weft-auth-v1" || nonce, AUTH) shared its label with the
 * tab's PROVE, so a tab holding the secret could sign a worker login: `weft worker` no longer accepts it. */
#define WEFT_NET_LABEL_CLIENT_PROOF "weft-v1 client->worker"
#define WEFT_NET_LABEL_WORKER_PROOF "weft-v1 worker->client"
#define WEFT_NET_LABEL_STREAM_KEY "weft-v1 stream key"
#define WEFT_NET_LABEL_STREAM_JOIN "weft-v1 stream join"
#define WEFT_NET_MAX_IDENTITY 255u
#define WEFT_NET_KEY_BYTES 32u
#define WEFT_NET_JOIN_BYTES (8u + 4u + WEFT_NET_MAC_BYTES)
#define WEFT_NET_STREAMS_REPLY_BYTES (4u + 8u + WEFT_NET_KEY_BYTES) /* then u16 len, identity */
#define WEFT_NET_MAX_STREAMS 64u /* connections of one session, its first included */

typedef enum weft_net_type {
  WEFT_NET_HELLO = 1,  /* u32 version, u32 caps -> u32 version, u32 caps, u32 auth_required, nonce[32],
                        *                          u32 max_frame, u64 max_resident */
  WEFT_NET_AUTH = 2,   /* retired: mac[32] = HMAC-SHA256(secret, "weft-auth-v1" || nonce); `weft worker` refuses
                        * it with a message (use AUTH_START, AUTH_FINISH) */
  WEFT_NET_LANES = 3,  /* empty -> u32 n, n x { u32 contracts, u64 ops, u16 len, name, u16 len, kind, u16 len,
                        * device } */
  WEFT_NET_CREATE = 4, /* u32 dtype, u32 ndim, ndim x i64 dims -> u64 handle */
  WEFT_NET_WRITE = 5,  /* u64 handle, u64 offset, u64 count, count x 4-byte elements -> empty (offset, count in
                        * elements; the bits are copied, never interpreted) */
  WEFT_NET_READ = 6,   /* u64 handle, u64 offset, u64 count -> u64 count, count x 4-byte elements */
  WEFT_NET_FREE = 7,   /* u64 handle -> empty */
  WEFT_NET_OP = 8,     /* u32 kind, u32 contract, i32 lane, u32 flags (0), u8 nin, u8 nout, u16 0,
                        * (nin + nout) x {u64 handle (0 = an absent optional operand), u32 ndim (0 = the
                        * tensor's own shape), 4 x i64 dims}, 8 x i64 iparams, 8 x f32 fparams -> i32 lane */
  WEFT_NET_PROVE = 9,  /* nonce[32] -> mac[32] = weft_net_tab_mac: the client asks the worker to prove the
                        * secret (a browser tab joining a fabric); `weft worker` refuses it */
  WEFT_NET_AUTH_START = 10,  /* client_nonce[32] -> mac[32] (the worker's proof), u16 len, identity */
  WEFT_NET_AUTH_FINISH = 11, /* mac[32] (the client's proof) -> empty */
  WEFT_NET_RETYPE = 12,      /* u64 handle, u32 dtype -> empty: the handle's elements are now of that dtype
                              * (bits unchanged; a client lane's buffers are untyped until an op says) */
  WEFT_NET_STREAMS = 13,     /* u32 wanted (2..255 connections, this one included) -> u32 granted (1..wanted),
                              * u64 session, key[32] (zeros when the key comes from the secret), u16 len,
                              * identity (the worker's, which JOIN proofs name): other connections may now
                              * JOIN this session as streams 1 .. granted-1 */
  WEFT_NET_JOIN = 14,        /* u64 session, u32 index, proof[32]: the first frame of a stream connection (in
                              * place of HELLO) -> empty; the connection then carries WRITE and READ of the
                              * session's handles, on a thread of its own */
  WEFT_NET_TYPE_END
} weft_net_type;

/* OP: a 20-byte head, nin + nout operand entries of 44 bytes, 96 bytes of parameters (weft_op_params). The
 * operands are the op table's (src/core/optable.c), in its order: in[0 .. nin-1], then out[0 .. nout-1]. */
#define WEFT_NET_OP_HEAD_BYTES 20u
#define WEFT_NET_OP_ENTRY_BYTES 44u
#define WEFT_NET_OP_PARAM_BYTES 96u
#define WEFT_NET_OP_SLOTS (WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT)
#define WEFT_NET_OP_MAX_BYTES (WEFT_NET_OP_HEAD_BYTES + WEFT_NET_OP_SLOTS * WEFT_NET_OP_ENTRY_BYTES + WEFT_NET_OP_PARAM_BYTES)
/* The payload size of an OP with nin inputs and nout outputs. */
#define WEFT_NET_OP_BYTES(nin, nout) \
  (WEFT_NET_OP_HEAD_BYTES + (size_t)((nin) + (nout)) * WEFT_NET_OP_ENTRY_BYTES + WEFT_NET_OP_PARAM_BYTES)
/* Operand slot s of a decoded or encoded OP: inputs at 0 .. WEFT_OP_MAX_IN-1, outputs after them. */
#define WEFT_NET_IN(i) (i)
#define WEFT_NET_OUT(o) (WEFT_OP_MAX_IN + (o))

typedef struct weft_net_header {
  uint32_t magic;
  uint16_t type;
  uint16_t status; /* 0 in requests; a weft_status in replies */
  uint32_t request_id;
  uint32_t length; /* payload bytes that follow */
} weft_net_header;

typedef struct weft_net_limits {
  uint32_t max_frame;    /* largest payload accepted */
  uint64_t max_resident; /* bytes of tensors one connection may hold */
} weft_net_limits;

/* A decoded request. Pointers point into the payload that was decoded (nothing is copied). */
typedef struct weft_net_request {
  weft_net_type type;
  uint32_t version, caps;         /* HELLO */
  const uint8_t *mac;             /* AUTH, AUTH_FINISH */
  const uint8_t *nonce;           /* AUTH_START: the client's nonce */
  uint32_t streams;               /* STREAMS: connections wanted; JOIN: the stream's index */
  uint64_t session;               /* JOIN */
  weft_dtype dtype;               /* CREATE, RETYPE */
  int ndim;                       /* CREATE */
  int64_t dims[WEFT_NET_MAX_RANK];
  uint64_t numel;                 /* CREATE: overflow-checked product; WRITE, READ: count */
  uint64_t offset;                /* WRITE, READ: first element */
  uint64_t handle;                /* WRITE, READ, FREE */
  const uint8_t *data;            /* WRITE: count little-endian floats (maybe unaligned) */
  weft_op_kind op;                /* OP */
  weft_contract contract;
  int32_t lane;
  uint32_t flags;                 /* 0 (reserved) */
  int nin, nout;                  /* operands given: at most the table's counts for the op */
  /* Per operand slot (WEFT_NET_IN(i), WEFT_NET_OUT(o)): the handle (0 = none), and a view of its elements
   * with this shape (ndim 0: the tensor's own). */
  uint64_t handles[WEFT_NET_OP_SLOTS];
  int shape_ndim[WEFT_NET_OP_SLOTS];
  int64_t shape_dims[WEFT_NET_OP_SLOTS][WEFT_NET_MAX_RANK];
  uint64_t shape_numel[WEFT_NET_OP_SLOTS];
  weft_op_params params;          /* OP: the op's scalar parameters, as weft_op_run takes them */
} weft_net_request;

/* Little-endian helpers (the wire is little-endian whatever the host). */
static inline uint16_t weft_net_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t weft_net_get32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t weft_net_get64(const uint8_t *p) {
  return (uint64_t)weft_net_get32(p) | ((uint64_t)weft_net_get32(p + 4) << 32);
}
static inline void weft_net_put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void weft_net_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void weft_net_put64(uint8_t *p, uint64_t v) {
  weft_net_put32(p, (uint32_t)v);
  weft_net_put32(p + 4, (uint32_t)(v >> 32));
}

void weft_net_header_encode(const weft_net_header *h, uint8_t out[WEFT_NET_HEADER_BYTES]);
/* Parses a header; refuses a wrong magic, an unknown type and a length above limits->max_frame, so the
 * caller never allocates what the peer asked for beyond the cap. */
weft_status weft_net_header_decode(const uint8_t in[WEFT_NET_HEADER_BYTES], const weft_net_limits *limits,
                                   weft_net_header *out, char *err, size_t errlen);
/* Parses a request's payload (`len` bytes at `payload`) against the caps. Pure: no allocation, no state. */
weft_status weft_net_request_decode(uint16_t type, const uint8_t *payload, size_t len,
                                    const weft_net_limits *limits, weft_net_request *out, char *err,
                                    size_t errlen);
/* Validates a shape against the caps: rank 1..4, the first (batch) dimension >= 0 when rank >= 3 and the
 * others >= 1, each <= WEFT_NET_MAX_DIM, the product (overflow-checked) <= WEFT_NET_MAX_ELEMENTS. */
weft_status weft_net_shape_check(int ndim, const int64_t *dims, uint64_t *out_numel, char *err, size_t errlen);

/* Encodes r's OP fields (op, contract, lane, flags, nin, nout, handles, views, params) as an OP payload into
 * out (WEFT_NET_OP_MAX_BYTES at least); returns its size. */
size_t weft_net_op_encode(const weft_net_request *r, uint8_t *out);

/* The fixed payload size of a handshake frame (HELLO 8, AUTH_START 32, AUTH_FINISH 32, JOIN 44): before the handshake
 * completes a worker reads only those types, and only at exactly these sizes; -1 for every other type (the
 * old single-sided AUTH included: the stage refuses it with UNSUPPORTED without reading its payload). */
long weft_net_handshake_len(uint16_t type);

/* HMAC-SHA256(secret, "weft-auth-v1" || nonce): the first release's single-sided proof; `weft worker` accepts
 * it no more (kept so tests can show that it is no valid proof of any other domain). */
weft_status weft_net_auth_mac(const uint8_t *secret, size_t secret_len, const uint8_t nonce[WEFT_NET_NONCE_BYTES],
                              uint8_t out[WEFT_NET_MAC_BYTES]);
/* The proofs of mutual authentication (the domains above): WEFT_NET_PROOF_CLIENT is what the client sends
 * in AUTH_FINISH, WEFT_NET_PROOF_WORKER what the worker answers AUTH_START with. The secret never travels. */
typedef enum weft_net_proof { WEFT_NET_PROOF_CLIENT, WEFT_NET_PROOF_WORKER } weft_net_proof;
weft_status weft_net_auth_proof(weft_net_proof which, const uint8_t *secret, size_t secret_len,
                                const uint8_t worker_nonce[WEFT_NET_NONCE_BYTES],
                                const uint8_t client_nonce[WEFT_NET_NONCE_BYTES], const char *identity,
                                uint8_t out[WEFT_NET_MAC_BYTES]);
/* The stream key of a session (the domains above) from the handshake's nonces: both ends compute it after the
 * mutual proof; it never crosses the wire. */
weft_status weft_net_stream_key(const uint8_t *secret, size_t secret_len,
                                const uint8_t worker_nonce[WEFT_NET_NONCE_BYTES],
                                const uint8_t client_nonce[WEFT_NET_NONCE_BYTES], const char *identity,
                                uint8_t out[WEFT_NET_KEY_BYTES]);
/* The proof a JOIN carries for stream `index` of `session`, keyed by the session's stream key: it names the
 * session, the index and the worker, so it joins nothing else and a copy of it joins nothing at all once its
 * index has joined (each index joins once). */
weft_status weft_net_join_proof(const uint8_t key[WEFT_NET_KEY_BYTES], uint64_t session, uint32_t index,
                                const char *identity, uint8_t out[WEFT_NET_MAC_BYTES]);
/* HMAC-SHA256(secret, "weft-v1 tab->fabric" || nonce || server): a browser tab's answer to PROVE, where
 * `server` is the host:port the tab dialled (the page's view, as in its Host header). Its own label keeps it
 * from ever being a valid AUTH proof (or the reverse), and the server's name in it makes a proof given to
 * one server worthless to any other. */
weft_status weft_net_tab_mac(const uint8_t *secret, size_t secret_len, const uint8_t nonce[WEFT_NET_NONCE_BYTES],
                             const char *server, uint8_t out[WEFT_NET_MAC_BYTES]);
/* Reads a secret file (at most 4096 bytes, trailing newline dropped, at least 16 bytes left). */
weft_status weft_net_read_secret(const char *path, uint8_t *out, size_t cap, size_t *out_len, char *err,
                                 size_t errlen);

/* Connections a bulk transfer stripes over by default, on either end: this machine's online cores, 1 to 8. */
uint32_t weft_net_default_streams(void);

/* Splits "host:port" ("[v6]:port" too) into its parts; 0 when it is not of that form or does not fit. */
int weft_net_split_addr(const char *addr, char *host, size_t hl, char *port, size_t pl);
/* 1 when the socket address is on loopback (127/8, ::1): the only addresses served without a secret. */
struct sockaddr;
int weft_net_is_loopback(const struct sockaddr *sa);

/* Sends or receives exactly n bytes on a socket, retrying on EINTR (send never raises SIGPIPE). 1 on
 * success, 0 when the peer closed or the socket failed. Shared by the client lane and the worker. */
int weft_net_send_all(int fd, const uint8_t *p, size_t n);
int weft_net_recv_all(int fd, uint8_t *p, size_t n);

#endif
