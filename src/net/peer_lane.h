/* peer_lane.h - a lane of a peer that serves several lanes by index (a `weft worker` over TCP/TLS,
 * src/lanes/remote; a rank of an MPI job, src/lanes/mpi): what both share on top of the client
 * (src/net/client.h). The lane vtable (describe from the peer's LANES entry, the client's buffer, transfer
 * and op functions, destroy and revive handed to the transport's kind), the receive buffer a transport
 * reads replies into, capped by what the request can get back, the handshake's hello, the probe that turns
 * the peer's list into lanes (one connection each; the one that listed serves the first), and the check on
 * revive that the peer still offers the same lane. Each transport keeps how frames travel, how a
 * connection is made and ended, and its lane's details. */
#ifndef WEFT_NET_PEER_LANE_H
#define WEFT_NET_PEER_LANE_H

#include <stddef.h>
#include <stdint.h>

#include "net/client.h"
#include "weft_lane.h"

typedef struct weft_net_peer_lane weft_net_peer_lane;

/* What a transport supplies: its lanes' kind and how to open, end and revive one. */
typedef struct weft_net_peer_kind {
  const char *kind;   /* weft_lane_desc.kind: "remote", "mpi" */
  const char *driver; /* weft_lane_desc.driver */
  /* Opens a lane with a connection of its own to the probe's peer (ctx is the probe's), handshaken, its name
   * the probe's prefix. NULL with why on failure (why left empty: out of memory). */
  weft_net_peer_lane *(*open)(void *ctx, char *why, size_t whylen);
  /* Writes the lane's details (weft_lane_desc.details; the cost cache keys on them) once the LANES entry it
   * serves (lane, kind) is known. */
  void (*details)(weft_net_peer_lane *l, void *ctx, const char *lane, const char *kind);
  /* The vtable's destroy and revive slots. */
  void (*destroy)(weft_net_peer_lane *l);
  weft_status (*revive)(weft_net_peer_lane *l);
} weft_net_peer_kind;

/* A transport's lane struct starts with it. */
struct weft_net_peer_lane {
  weft_net_client client; /* first: the client's vtable functions take the lane as its client */
  const weft_net_peer_kind *kind; /* set by weft_net_peer_probe */
  char peer[160]; /* the peer in words, for messages: "the worker at 127.0.0.1:7070", "rank 2" */
  weft_contract_mask contracts;
  uint64_t ops;             /* the ops the peer's lane offers (its LANES entry): what the router may send here */
  char peer_lane_name[128]; /* the lane's name on the peer: a peer that comes back must still offer it */
  char name[256];           /* prefix/<lane> (prefix alone until the list is read) */
  char device[160];
  char details[600];
  uint8_t *scratch; /* the last reply received (the transport's) */
  size_t scratch_cap;
  size_t max_reply; /* the largest reply the last request may get */
};

/* Sets up a zeroed lane: its transport (whose ctx is the lane), the host its client reports to, and its name
 * and peer in words. Its kind is the probe's, set when the probe takes it. */
void weft_net_peer_init(weft_net_peer_lane *l, const weft_net_transport *tp, const weft_lane_host *host,
                        const char *name, const char *peer);
/* Frees what weft_net_peer_init and the lane's use gathered (not the lane itself). */
void weft_net_peer_release(weft_net_peer_lane *l);

/* Grows *buf (capacity *cap) to hold n bytes: 0 when host memory ran out (*buf is kept). */
int weft_net_peer_grow(uint8_t **buf, size_t *cap, size_t n);
/* Room for a reply of n bytes in the lane's scratch: NULL, with why, when n is more than the last request
 * may get back or host memory ran out. */
uint8_t *weft_net_peer_reply_room(weft_net_peer_lane *l, size_t n, char *why, size_t whylen);

/* A new session on a fresh connection: hello, then the mutual proof (weft_net_client_authenticate: secret,
 * pin and identity as there; none for a peer that needs no proof). On failure why says so. */
weft_status weft_net_peer_handshake(weft_net_peer_lane *l, const uint8_t *secret, size_t secret_len,
                                    const char *expect_identity, char *identity, size_t identity_cap, char *why,
                                    size_t whylen);

/* On revive, after a new handshake: the peer must still offer the same lane at the same index, honouring at
 * least the contracts and ops it did. Otherwise the connection is dropped and the lane stays down, with the
 * reason reported to the client's host. */
weft_status weft_net_peer_relist(weft_net_peer_lane *l);

/* Probes one peer: opens a lane (kind->open(ctx)), reads the peer's lanes and adds each that offers
 * something to the sink as prefix/<lane> (the opening connection serves the first; each other opens its
 * own). A peer that cannot be reached, does not list its lanes or offers none is one absent entry,
 * `prefix`, with the reason. */
void weft_net_peer_probe(const weft_net_peer_kind *kind, void *ctx, const weft_lane_sink *sink, const char *prefix);

#endif
