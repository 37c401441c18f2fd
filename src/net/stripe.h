/* stripe.h - striped bulk transfers, the client's half (docs/PROTOCOL.md, "Streams"): a large WRITE or READ
 * is cut into chunks that several connections of one session carry at once: the session's own connection,
 * driven by the calling thread, and streams joined to it with JOIN, each driven by a thread of its own (as
 * the worker serves each on a thread of its own). Every chunk is a WRITE or READ of its own range, written
 * straight where it belongs (the worker's tensor, or the caller's buffer on a read), so the chunks need no
 * order. One connection's throughput is bounded by one core's (TLS's AEAD and copies: about 3x plain TCP's
 * CPU per byte); several take several cores. */
#ifndef WEFT_NET_STRIPE_H
#define WEFT_NET_STRIPE_H

#include <stddef.h>
#include <stdint.h>

#include "net/protocol.h"
#include "net/tls.h"

/* Transfers of at least this many bytes go through weft_net_bulk_run (striped when the session has streams);
 * smaller ones are one frame or a few on the session's own connection. */
#define WEFT_NET_BULK_MIN_BYTES ((size_t)4 << 20)
/* Chunks are at least this large (fewer, larger frames cost fewer round trips) and at most the peer's frame
 * cap; a transfer is cut into about four per connection so that faster connections take more. */
#define WEFT_NET_CHUNK_MIN_BYTES ((size_t)1 << 20)

/* One bulk transfer. */
typedef struct weft_net_bulk {
  int write;          /* 1: WRITE (an upload), 0: READ (a download) */
  uint64_t handle;    /* the worker's handle of this session */
  uint64_t first;     /* the first element of the range */
  uint64_t count;     /* elements (4 bytes each) */
  uint8_t *data;      /* count * 4 bytes: the source of a write, the destination of a read */
  uint64_t max_chunk; /* the most elements one frame may carry (from the peer's frame cap) */
} weft_net_bulk;

/* Runs `job` over conns[0 .. n-1] (n >= 1). conns[0] is the session's own connection, driven by the calling
 * thread with request ids from *next_id (so the session's sequence goes on); conns[1 ..] are streams joined
 * to the session, each driven by a thread of its own with ids of its own. Each connection keeps two chunks
 * in flight. A stream the worker closed (end of stream, reset) is closed here too (its fd becomes -1: the
 * caller drops it) and its chunks are done again on conns[0]. Returns WEFT_OK; WEFT_ERR_LANE_FAILED when
 * conns[0] broke, a connection timed out or a reply was malformed (why says which: the caller fails the
 * lane); or the worker's status for a chunk it refused on conns[0] (why holds its message, printable). */
weft_status weft_net_bulk_run(weft_net_conn *conns, size_t n, uint32_t *next_id, const weft_net_bulk *job, char *why,
                              size_t whylen);

/* Joins connection c (TLS up where the session's connection has it) to `session` as stream `index`: JOIN with
 * the proof (weft_net_join_proof with the session's stream key and the worker's identity), then its reply.
 * WEFT_OK, or the worker's status (or WEFT_ERR_IO) with why saying what it said or what broke. */
weft_status weft_net_stream_join(weft_net_conn *c, uint64_t session, uint32_t index,
                                 const uint8_t key[WEFT_NET_KEY_BYTES], const char *identity, char *why,
                                 size_t whylen);

#endif
