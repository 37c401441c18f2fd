/* peer_lane.c - the lane glue the remote (TCP/TLS) and MPI lanes share on top of the protocol's client:
 * the vtable, the reply buffer, the handshake's hello, the probe of a peer's lanes and the check on revive
 * (src/net/peer_lane.h). Nothing here knows how a frame travels. */
#include "net/peer_lane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_net_peer_init(weft_net_peer_lane *l, const weft_net_transport *tp, const weft_lane_host *host,
                        const char *name, const char *peer) {
  l->client.tp = tp;
  l->client.tp_ctx = l;
  l->client.host = host;
  l->client.name = l->name;
  snprintf(l->name, sizeof l->name, "%s", name);
  snprintf(l->peer, sizeof l->peer, "%s", peer);
}

void weft_net_peer_release(weft_net_peer_lane *l) {
  free(l->scratch);
  l->scratch = NULL;
  l->scratch_cap = 0;
}

int weft_net_peer_grow(uint8_t **buf, size_t *cap, size_t n) {
  if (n <= *cap) return 1;
  uint8_t *p = realloc(*buf, n);
  if (!p) return 0;
  *buf = p;
  *cap = n;
  return 1;
}

uint8_t *weft_net_peer_reply_room(weft_net_peer_lane *l, size_t n, char *why, size_t whylen) {
  /* The length is the peer's claim: no more than the request can get back is ever allocated for it. */
  if (n > l->max_reply) {
    snprintf(why, whylen, "a reply of %zu bytes, more than the request can get", n);
    return NULL;
  }
  if (!weft_net_peer_grow(&l->scratch, &l->scratch_cap, n)) {
    snprintf(why, whylen, "out of host memory for a reply of %zu bytes", n);
    return NULL;
  }
  return l->scratch;
}

weft_status weft_net_peer_handshake(weft_net_peer_lane *l, const uint8_t *secret, size_t secret_len,
                                    const char *expect_identity, char *identity, size_t identity_cap, char *why,
                                    size_t whylen) {
  weft_net_client *c = &l->client;
  weft_net_client_begin(c);
  weft_net_hello hello;
  weft_status st = weft_net_client_hello(c, &hello);
  if (st) {
    snprintf(why, whylen, "%s refused hello: %.400s", l->peer, c->why);
    return st;
  }
  st = weft_net_client_authenticate(c, &hello, secret, secret_len, expect_identity, identity, identity_cap);
  if (st) snprintf(why, whylen, "%s", c->why);
  return st;
}

/* ------------------------------------------------------------------------------------------ the vtable */

static void peer_describe(void *self, weft_lane_desc *out) {
  weft_net_peer_lane *l = self;
  memset(out, 0, sizeof *out);
  out->name = l->name;
  out->kind = l->kind->kind;
  out->device = l->device;
  out->driver = l->kind->driver;
  out->details = l->details;
  out->contracts = l->contracts;
  out->ops = l->ops;
}

static void peer_destroy(void *self) {
  weft_net_peer_lane *l = self;
  l->kind->destroy(l);
}

static weft_status peer_revive(void *self) {
  weft_net_peer_lane *l = self;
  return l->kind->revive(l);
}

static const weft_lane_vtable PEER_VTABLE = {
    .abi_version = WEFT_LANE_ABI_VERSION,
    .size = sizeof(weft_lane_vtable),
    .describe = peer_describe,
    .destroy = peer_destroy,
    .buffer_alloc = weft_net_client_buffer_alloc,
    .buffer_free = weft_net_client_buffer_free,
    .upload = weft_net_client_upload,
    .download = weft_net_client_download,
    .run = weft_net_client_run,
    .revive = peer_revive,
};

/* ------------------------------------------------------------------------------ the peer's lanes list */

typedef struct lane_match {
  const weft_net_peer_lane *l;
  int found;
} lane_match;

/* The same lane, at the same index, honouring at least what it did and offering at least the ops it did. */
static void match_lane(void *ctx, uint32_t index, weft_contract_mask contracts, uint64_t ops, const char *name,
                       const char *kind, const char *device) {
  lane_match *m = ctx;
  (void)kind, (void)device;
  if (index == (uint32_t)m->l->client.peer_lane && strcmp(name, m->l->peer_lane_name) == 0 &&
      (contracts & m->l->contracts) == m->l->contracts && (ops & m->l->ops) == m->l->ops)
    m->found = 1;
}

weft_status weft_net_peer_relist(weft_net_peer_lane *l) {
  lane_match m = {l, 0};
  weft_net_client *c = &l->client;
  c->why[0] = 0;
  weft_status st = weft_net_client_lanes(c, match_lane, &m);
  if (st == WEFT_OK && m.found) return WEFT_OK;
  if (c->up && c->tp->drop) c->tp->drop(c->tp_ctx, NULL);
  c->up = 0;
  if (st != WEFT_OK)
    return weft_lane_report(c->host, WEFT_ERR_LANE_FAILED, "%s: %s did not list its lanes (%.300s)", l->name, l->peer,
                            c->why[0] ? c->why : "out of host memory");
  return weft_lane_report(c->host, WEFT_ERR_LANE_FAILED, "%s: %s no longer offers lane %s", l->name, l->peer,
                          l->peer_lane_name);
}

typedef struct peer_probe {
  const weft_net_peer_kind *kind;
  void *ctx;
  const weft_lane_sink *sink;
  const char *prefix;
  char peer[160];            /* the lister's peer in words (the lister may be handed out) */
  weft_net_peer_lane *first; /* the connection that listed the lanes serves the first of them */
  int listed;                /* entries in the list */
} peer_probe;

/* One lane of the peer's list: a connection of its own, or absent with the reason. */
static void add_peer_lane(void *ctx, uint32_t index, weft_contract_mask contracts, uint64_t ops, const char *name,
                          const char *kind, const char *device) {
  peer_probe *w = ctx;
  char nm[256], why[512] = "";
  snprintf(nm, sizeof nm, "%.150s/%.100s", w->prefix, name);
  w->listed++;
  if (!contracts || !ops) {
    /* A lane that failed on the peer (listed without contracts from then on), or offers no op: named, so
     * that `weft devices` says where it went. */
    snprintf(why, sizeof why, "%s lists it %s", w->peer,
             !contracts ? "without contracts (it failed there)" : "with no op it offers");
    w->sink->add_absent(w->sink->ctx, nm, why);
    return;
  }
  weft_net_peer_lane *l = w->first ? w->first : w->kind->open(w->ctx, why, sizeof why);
  w->first = NULL;
  if (!l) {
    w->sink->add_absent(w->sink->ctx, nm, why[0] ? why : "out of memory");
    return;
  }
  l->kind = w->kind;
  l->client.peer_lane = (int32_t)index;
  l->contracts = contracts;
  l->ops = ops;
  snprintf(l->peer_lane_name, sizeof l->peer_lane_name, "%.127s", name);
  snprintf(l->name, sizeof l->name, "%s", nm);
  snprintf(l->device, sizeof l->device, "%.159s", device);
  w->kind->details(l, w->ctx, name, kind);
  w->sink->add_lane(w->sink->ctx, &PEER_VTABLE, l);
}

void weft_net_peer_probe(const weft_net_peer_kind *kind, void *ctx, const weft_lane_sink *sink, const char *prefix) {
  char why[512] = "";
  peer_probe w = {kind, ctx, sink, prefix, "", kind->open(ctx, why, sizeof why), 0};
  if (!w.first) {
    sink->add_absent(sink->ctx, prefix, why[0] ? why : "out of memory");
    return;
  }
  weft_net_peer_lane *lister = w.first;
  snprintf(w.peer, sizeof w.peer, "%s", lister->peer);
  lister->client.why[0] = 0;
  /* The list is copied before the callbacks run, so the first lane's connection may be handed out; a list
   * that fails runs none of them, so the lister is still here to say why. */
  if (weft_net_client_lanes(&lister->client, add_peer_lane, &w) != WEFT_OK) {
    snprintf(why, sizeof why, "%s did not list its lanes (%.300s)", w.peer,
             lister->client.why[0] ? lister->client.why : "out of host memory");
    sink->add_absent(sink->ctx, prefix, why);
  } else if (!w.listed) {
    snprintf(why, sizeof why, "%s offers no lane (its lanes filter matched none, or none opened there)", w.peer);
    sink->add_absent(sink->ctx, prefix, why);
  }
  if (w.first) kind->destroy(w.first);
}
