/* fuzz_protocol.c - libFuzzer target for the wire protocol: the input is a byte stream as a client would
 * send it; every frame goes through the header decoder, the request decoder and a real session (a worker
 * fabric on the CPU lane, no socket), exactly as the worker handles a connection: a WRITE whose 24-byte
 * prefix names a valid target is received straight into the tensor (the zero-copy path of serve_conn),
 * any other frame is handled whole. Run by fuzz.sh.
 *
 * Built with -DFUZZ_REPLAY_MAIN it is a plain program (no libFuzzer): `fuzz_replay [--expect-direct-write]
 * DIR...` runs every file of the folders through the target once and says how many writes took the
 * zero-copy path, failing when --expect-direct-write is given and none did (test net_fuzz_replay). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/protocol.h"
#include "net/worker.h"

static weft_net_server *servers[2]; /* [1] requires authentication */
static long fuzz_direct_writes;      /* WRITE frames received by the zero-copy path */

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
    if (h.type == WEFT_NET_WRITE && h.length >= 24) {
      /* serve_conn: a valid prefix sends the floats straight into the tensor, no staging copy. ASan sees a
       * target that leaves the tensor. */
      float *dst = weft_net_session_write_target(s, &h, payload);
      if (dst) {
        memcpy(dst, payload + 24, h.length - 24u);
        fuzz_direct_writes++;
        free(payload);
        continue;
      }
    }
    int keep = weft_net_session_handle(s, &h, payload, &out);
    free(payload);
    if (!keep) break;
  }
  weft_net_buf_free(&out);
  weft_net_session_destroy(s);
  return 0;
}

#ifdef FUZZ_REPLAY_MAIN
#include <dirent.h>
#include <stdio.h>

int main(int argc, char **argv) {
  int expect = 0, files = 0;
  for (int a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--expect-direct-write") == 0) {
      expect = 1;
      continue;
    }
    DIR *d = opendir(argv[a]);
    if (!d) {
      fprintf(stderr, "fuzz_replay: cannot open %s\n", argv[a]);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
      FILE *fp = fopen(path, "rb");
      if (!fp) continue;
      uint8_t *buf = malloc(1 << 20);
      size_t n = buf ? fread(buf, 1, 1 << 20, fp) : 0;
      fclose(fp);
      long before = fuzz_direct_writes;
      if (buf) LLVMFuzzerTestOneInput(buf, n);
      free(buf);
      printf("%s: %zu bytes, %ld zero-copy writes\n", e->d_name, n, fuzz_direct_writes - before);
      files++;
    }
    closedir(d);
  }
  for (int i = 0; i < 2; i++) weft_net_server_destroy(servers[i]);
  printf("fuzz_replay: %d inputs, %ld writes took the zero-copy path\n", files, fuzz_direct_writes);
  if (files == 0 || (expect && fuzz_direct_writes == 0)) {
    fprintf(stderr, "FAIL fuzz_replay: %s\n", files ? "no input reached the zero-copy WRITE path" : "no inputs");
    return 1;
  }
  return 0;
}
#endif
