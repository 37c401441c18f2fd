/* stripe.c - see stripe.h. The chunks of a transfer are numbered; every connection takes the next number from
 * one counter, so a faster connection simply takes more. A stream that the worker closed gives its chunks
 * back, and the session's own connection does them after the streams are done. */
#include "net/stripe.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

typedef struct bulk_state {
  const weft_net_bulk *job;
  uint64_t per, nchunks; /* elements per chunk (the last may be shorter), and how many */
  atomic_uint_fast64_t next;
  atomic_int stop;       /* take no more chunks: the session's own connection failed, or a stream fatally */
  pthread_mutex_t lock;  /* guards the rest */
  uint64_t *redo;        /* chunks given back by streams the worker closed: done again on conns[0] */
  size_t nredo;
  int redo_phase;        /* the streams are joined: only conns[0] takes chunks, from redo */
  int fatal;             /* a stream timed out or got a malformed reply: the lane fails */
  char fatal_why[256];
} bulk_state;

/* How a connection's turn ended. */
enum { GOT, BROKE, FATAL, REFUSED };

static int take(bulk_state *b, uint64_t *k) {
  if (b->redo_phase) {
    if (!b->nredo) return 0;
    *k = b->redo[--b->nredo];
    return 1;
  }
  if (atomic_load(&b->stop)) return 0;
  uint64_t i = atomic_fetch_add(&b->next, 1);
  if (i >= b->nchunks) return 0;
  *k = i;
  return 1;
}

static void give_back(bulk_state *b, const uint64_t *k, int n) {
  pthread_mutex_lock(&b->lock);
  for (int i = 0; i < n; i++) b->redo[b->nredo++] = k[i];
  pthread_mutex_unlock(&b->lock);
}

static void chunk_range(const bulk_state *b, uint64_t k, uint64_t *e0, uint64_t *n) {
  *e0 = k * b->per;
  *n = b->job->count - *e0 < b->per ? b->job->count - *e0 : b->per;
}

/* A broken connection: a timeout is fatal (the worker may still be busy with the chunk, so nothing may be
 * redone under it), an end of stream or a reset is the worker's close. */
static int lost(char *why, size_t whylen) {
  int timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
  snprintf(why, whylen, "%s", timed_out ? "timed out" : "connection lost");
  return timed_out ? FATAL : BROKE;
}

/* Chunk k's request: a WRITE with its elements (sent from where they lie), or a READ. */
static int send_chunk(weft_net_conn *c, const bulk_state *b, uint64_t k, uint32_t id) {
  const weft_net_bulk *j = b->job;
  uint64_t e0, n;
  chunk_range(b, k, &e0, &n);
  uint8_t head[WEFT_NET_HEADER_BYTES + 24];
  weft_net_header h = {WEFT_NET_MAGIC, (uint16_t)(j->write ? WEFT_NET_WRITE : WEFT_NET_READ), 0, id,
                       (uint32_t)(24 + (j->write ? n * 4 : 0))};
  weft_net_header_encode(&h, head);
  weft_net_put64(head + WEFT_NET_HEADER_BYTES, j->handle);
  weft_net_put64(head + WEFT_NET_HEADER_BYTES + 8, j->first + e0);
  weft_net_put64(head + WEFT_NET_HEADER_BYTES + 16, n);
  const uint8_t *piece[3] = {head, j->write ? j->data + e0 * 4 : NULL, NULL};
  const size_t len[3] = {sizeof head, j->write ? (size_t)n * 4 : 0, 0};
  errno = 0;
  return weft_net_conn_send3(c, piece, len);
}

/* Chunk k's reply; a READ's elements are received straight into the caller's buffer. */
static int recv_chunk(weft_net_conn *c, const bulk_state *b, uint64_t k, uint32_t id, weft_status *st, char *why,
                      size_t whylen) {
  const weft_net_bulk *j = b->job;
  uint64_t e0, n;
  chunk_range(b, k, &e0, &n);
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  errno = 0;
  if (!weft_net_conn_recv_all(c, hb, sizeof hb)) return lost(why, whylen);
  uint16_t type = weft_net_get16(hb + 4), status = weft_net_get16(hb + 6);
  uint16_t want = (uint16_t)((j->write ? WEFT_NET_WRITE : WEFT_NET_READ) | WEFT_NET_REPLY);
  uint32_t rid = weft_net_get32(hb + 8), len = weft_net_get32(hb + 12);
  if (weft_net_get32(hb) != WEFT_NET_MAGIC || type != want || rid != id) {
    snprintf(why, whylen, "a malformed reply (type 0x%x, id %u; wanted type 0x%x, id %u)", (unsigned)type,
             (unsigned)rid, (unsigned)want, (unsigned)id);
    return FATAL;
  }
  if (status) {
    char msg[WEFT_NET_MAX_MESSAGE + 1];
    if (len > WEFT_NET_MAX_MESSAGE) {
      snprintf(why, whylen, "an error reply of %u bytes (at most %u)", (unsigned)len, WEFT_NET_MAX_MESSAGE);
      return FATAL;
    }
    if (!weft_net_conn_recv_all(c, (uint8_t *)msg, len)) return lost(why, whylen);
    for (uint32_t i = 0; i < len; i++)
      if ((uint8_t)msg[i] < 0x20 || msg[i] == 0x7f) msg[i] = '?';
    msg[len] = 0;
    *st = status < 64 ? (weft_status)status : WEFT_ERR_INTERNAL;
    snprintf(why, whylen, "%s", msg);
    return REFUSED;
  }
  if (j->write) {
    if (len == 0) return GOT;
    snprintf(why, whylen, "a write reply of %u bytes (want none)", (unsigned)len);
    return FATAL;
  }
  uint8_t cnt[8];
  if (len != 8 + n * 4) {
    snprintf(why, whylen, "a read reply of %u bytes for %llu elements", (unsigned)len, (unsigned long long)n);
    return FATAL;
  }
  if (!weft_net_conn_recv_all(c, cnt, sizeof cnt)) return lost(why, whylen);
  if (weft_net_get64(cnt) != n) {
    snprintf(why, whylen, "a read reply that counts %llu elements for %llu", (unsigned long long)weft_net_get64(cnt),
             (unsigned long long)n);
    return FATAL;
  }
  if (!weft_net_conn_recv_all(c, j->data + e0 * 4, (size_t)n * 4)) return lost(why, whylen);
  return GOT;
}

/* Drives one connection until the chunks run out, two in flight (the next request leaves before the reply
 * to the one before is read, so the link does not wait a round trip between chunks). On a failure the
 * chunks in flight are in k[0 .. *nin-1]; after REFUSED the reply to the second is still unread. */
static int drive(weft_net_conn *c, bulk_state *b, uint32_t *next_id, uint64_t k[2], int *nin, weft_status *st,
                 char *why, size_t whylen) {
  uint32_t id[2];
  *nin = 0;
  for (;;) {
    uint64_t nk;
    while (*nin < 2 && take(b, &nk)) {
      k[*nin] = nk;
      id[*nin] = (*next_id)++;
      ++*nin;
      if (!send_chunk(c, b, nk, id[*nin - 1])) return lost(why, whylen);
    }
    if (!*nin) return GOT;
    int r = recv_chunk(c, b, k[0], id[0], st, why, whylen);
    if (r != GOT) {
      if (r == REFUSED && *nin == 2) {
        /* Keep the stream in step: the second chunk's reply comes all the same. */
        char w2[256];
        weft_status s2;
        int r2 = recv_chunk(c, b, k[1], id[1], &s2, w2, sizeof w2);
        if (r2 == BROKE || r2 == FATAL) {
          snprintf(why, whylen, "%s", w2);
          return r2;
        }
      }
      return r;
    }
    k[0] = k[1];
    id[0] = id[1];
    --*nin;
  }
}

typedef struct helper {
  bulk_state *b;
  weft_net_conn *c;
  pthread_t th;
  int started;
} helper;

/* A stream's thread: its chunks, then what to do with the stream. A stream the worker closed, or one whose
 * chunk was refused (the session's own connection redoes it and reports the refusal), gives its chunks back
 * and is closed; a timeout or a malformed reply makes the whole transfer fail. */
static void *helper_main(void *arg) {
  helper *hp = arg;
  bulk_state *b = hp->b;
  uint32_t id = 1;
  uint64_t k[2];
  int nin = 0;
  weft_status st = WEFT_OK;
  char why[256];
  int r = drive(hp->c, b, &id, k, &nin, &st, why, sizeof why);
  if (r == GOT) return NULL;
  if (r == FATAL) {
    pthread_mutex_lock(&b->lock);
    if (!b->fatal) snprintf(b->fatal_why, sizeof b->fatal_why, "a stream of the session: %.200s", why);
    b->fatal = 1;
    pthread_mutex_unlock(&b->lock);
    atomic_store(&b->stop, 1);
  } else {
    give_back(b, k, nin);
  }
  weft_net_conn_close(hp->c);
  return NULL;
}

weft_status weft_net_bulk_run(weft_net_conn *conns, size_t n, uint32_t *next_id, const weft_net_bulk *job, char *why,
                              size_t whylen) {
  why[0] = 0;
  if (!job->count) return WEFT_OK;
  bulk_state b;
  memset(&b, 0, sizeof b);
  b.job = job;
  /* About four chunks per connection, each at least CHUNK_MIN and at most a frame, in whole pages. */
  uint64_t per = (job->count + 4 * n - 1) / (4 * n), lo = WEFT_NET_CHUNK_MIN_BYTES / 4;
  per = per < lo ? lo : per;
  per = (per + 1023) / 1024 * 1024;
  if (per > job->max_chunk) per = job->max_chunk;
  if (per < 1) per = 1;
  b.per = per;
  b.nchunks = (job->count + per - 1) / per;
  atomic_init(&b.next, 0);
  atomic_init(&b.stop, 0);
  b.redo = malloc(sizeof *b.redo * b.nchunks);
  if (!b.redo) {
    snprintf(why, whylen, "out of host memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  pthread_mutex_init(&b.lock, NULL);
  helper *hs = n > 1 ? calloc(n - 1, sizeof *hs) : NULL;
  size_t nh = 0;
  /* A stream per thread, while there are chunks for it (a thread that cannot start leaves its chunks to the
   * others). */
  for (size_t i = 1; hs && i < n && i < b.nchunks; i++) {
    if (conns[i].fd < 0) continue;
    helper *hp = &hs[nh];
    hp->b = &b;
    hp->c = &conns[i];
    if (pthread_create(&hp->th, NULL, helper_main, hp) == 0) hp->started = 1, nh++;
  }
  uint64_t k[2];
  int nin = 0;
  weft_status st = WEFT_OK;
  int r = drive(&conns[0], &b, next_id, k, &nin, &st, why, whylen);
  if (r != GOT) atomic_store(&b.stop, 1);
  for (size_t i = 0; i < nh; i++) pthread_join(hs[i].th, NULL);
  free(hs);
  weft_status out = WEFT_OK;
  if (r == BROKE || r == FATAL) {
    out = WEFT_ERR_LANE_FAILED;
  } else if (r == REFUSED) {
    out = st;
  } else if (b.fatal) {
    snprintf(why, whylen, "%s", b.fatal_why);
    out = WEFT_ERR_LANE_FAILED;
  } else if (b.nredo) {
    /* Chunks of streams the worker closed: on the session's own connection now. */
    b.redo_phase = 1;
    r = drive(&conns[0], &b, next_id, k, &nin, &st, why, whylen);
    out = r == GOT ? WEFT_OK : r == REFUSED ? st : WEFT_ERR_LANE_FAILED;
  }
  pthread_mutex_destroy(&b.lock);
  free(b.redo);
  return out;
}

weft_status weft_net_stream_join(weft_net_conn *c, uint64_t session, uint32_t index,
                                 const uint8_t key[WEFT_NET_KEY_BYTES], const char *identity, char *why,
                                 size_t whylen) {
  uint8_t f[WEFT_NET_HEADER_BYTES + WEFT_NET_JOIN_BYTES];
  weft_net_header h = {WEFT_NET_MAGIC, WEFT_NET_JOIN, 0, 1, WEFT_NET_JOIN_BYTES};
  weft_net_header_encode(&h, f);
  weft_net_put64(f + WEFT_NET_HEADER_BYTES, session);
  weft_net_put32(f + WEFT_NET_HEADER_BYTES + 8, index);
  if (weft_net_join_proof(key, session, index, identity, f + WEFT_NET_HEADER_BYTES + 12) != WEFT_OK) {
    snprintf(why, whylen, "HMAC failed");
    return WEFT_ERR_INTERNAL;
  }
  int sent = weft_net_conn_send_all(c, f, sizeof f);
  OPENSSL_cleanse(f, sizeof f);
  uint8_t hb[WEFT_NET_HEADER_BYTES];
  if (!sent || !weft_net_conn_recv_all(c, hb, sizeof hb)) {
    snprintf(why, whylen, "the worker closed the stream before answering its join");
    return WEFT_ERR_IO;
  }
  uint32_t len = weft_net_get32(hb + 12);
  uint16_t status = weft_net_get16(hb + 6);
  if (weft_net_get32(hb) != WEFT_NET_MAGIC || weft_net_get16(hb + 4) != (WEFT_NET_JOIN | WEFT_NET_REPLY) ||
      weft_net_get32(hb + 8) != 1 || len > WEFT_NET_MAX_MESSAGE || (!status && len)) {
    snprintf(why, whylen, "a malformed join reply");
    return WEFT_ERR_IO;
  }
  if (!status) return WEFT_OK;
  char msg[WEFT_NET_MAX_MESSAGE + 1];
  if (!weft_net_conn_recv_all(c, (uint8_t *)msg, len)) len = 0;
  for (uint32_t i = 0; i < len; i++)
    if ((uint8_t)msg[i] < 0x20 || msg[i] == 0x7f) msg[i] = '?';
  msg[len] = 0;
  snprintf(why, whylen, "the worker refused the join: %s", len ? msg : "(no reason given)");
  return status < 64 ? (weft_status)status : WEFT_ERR_INTERNAL;
}
