/* fuzz_protocol.c - libFuzzer target for the wire protocol: the input is a byte stream as a client would
 * send it; every frame goes through the header decoder, the request decoder and a real session (a worker
 * fabric on the CPU lane, no socket), exactly as the worker handles a connection. Run by fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/protocol.h"
#include "net/worker.h"

static weft_net_server *servers[2]; /* [1] requires authentication */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!servers[0]) {
    static const uint8_t secret[] = "fuzzing-secret-0123456789";
    for (int i = 0; i < 2; i++) {
      weft_net_worker_desc d = {0};
      d.lanes = "cpu";
      /* Small caps so the fuzzer reaches them. */
      d.limits.max_frame = 1u << 16;
      d.limits.max_resident = 1u << 20;
      if (i) {
        d.secret = secret;
        d.secret_len = sizeof secret - 1;
      }
      char err[256];
      if (weft_net_server_create(&d, &servers[i], err, sizeof err)) abort();
    }
  }
  /* Odd-sized inputs meet a worker that wants a proof first. */
  weft_net_server *server = servers[size & 1];
  /* The decoder alone, on the raw input. */
  weft_net_limits lim = {1u << 16, 1u << 20};
  weft_net_request r;
  char err[WEFT_NET_MAX_MESSAGE];
  if (size >= 2) weft_net_request_decode(weft_net_get16(data), data + 2, size - 2, &lim, &r, err, sizeof err);

  weft_net_session *s = weft_net_session_create(server);
  if (!s) return 0;
  weft_net_buf out = {0};
  size_t p = 0;
  while (size - p >= WEFT_NET_HEADER_BYTES) {
    weft_net_header h;
    if (weft_net_header_decode(data + p, &lim, &h, err, sizeof err)) break;
    p += WEFT_NET_HEADER_BYTES;
    if (h.length > size - p) break; /* truncated: the worker would wait, then drop the connection */
    /* A copy of exactly `length` bytes, so ASan sees any read past the payload. */
    uint8_t *payload = malloc(h.length ? h.length : 1);
    if (!payload) break;
    memcpy(payload, data + p, h.length);
    p += h.length;
    out.len = 0;
    int keep = weft_net_session_handle(s, &h, payload, &out);
    free(payload);
    if (!keep) break;
  }
  weft_net_buf_free(&out);
  weft_net_session_destroy(s);
  return 0;
}
