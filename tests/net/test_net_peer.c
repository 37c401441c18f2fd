/* test_net_peer.c - what a remote lane's probe makes of a worker that lists its lanes badly or not at all
 * (src/net/peer_lane.c, which MPI lanes share): fake workers in this process answer hello, then LANES with
 * a malformed list, an empty list, a list whose one lane failed there, a reply whose header claims more than
 * the request can get, or a closed connection. Each is an absent entry whose reason says which, never a
 * lane that silently is not there, and the fabric opens with its CPU lane. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netutil.h"
#include "tutil.h"
#include "weft.h"

typedef enum fake_mode { FAKE_BAD_LIST, FAKE_NO_LANES, FAKE_FAILED_LANE, FAKE_HUGE_REPLY, FAKE_CLOSES } fake_mode;

/* One LANES entry: contracts, ops, then name, kind and device as u16-prefixed strings. */
static size_t put_entry(uint8_t *q, uint32_t contracts, uint64_t ops, const char *name) {
  const char *s[3] = {name, "cpu", "fake device"};
  size_t at = 12;
  weft_net_put32(q, contracts);
  weft_net_put64(q + 4, ops);
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(s[k]);
    weft_net_put16(q + at, (uint16_t)n);
    memcpy(q + at + 2, s[k], n);
    at += 2 + n;
  }
  return at;
}

/* Hello without authentication, then LANES as the mode says; any other request gets an error reply. */
static int fake_answer(void *ctx, const weft_net_header *h, uint8_t *q, size_t *len, uint16_t *status,
                       uint32_t *claim) {
  const fake_mode mode = *(const fake_mode *)ctx;
  if (h->type == WEFT_NET_HELLO) {
    *len = nt_fake_hello(q, WEFT_NET_VERSION, WEFT_NET_CAP_AUTH_HMAC_SHA256 | WEFT_NET_CAP_AUTH_MUTUAL, 0);
  } else if (h->type == WEFT_NET_LANES && mode == FAKE_CLOSES) {
    return 0;
  } else if (h->type == WEFT_NET_LANES && mode == FAKE_BAD_LIST) {
    weft_net_put32(q, 1); /* one entry, cut off after its contracts */
    weft_net_put32(q + 4, 1);
    *len = 8;
  } else if (h->type == WEFT_NET_LANES && mode == FAKE_NO_LANES) {
    weft_net_put32(q, 0);
    *len = 4;
  } else if (h->type == WEFT_NET_LANES && mode == FAKE_FAILED_LANE) {
    weft_net_put32(q, 1);
    *len = 4 + put_entry(q + 4, 0, 1, "broken");
  } else if (h->type == WEFT_NET_LANES && mode == FAKE_HUGE_REPLY) {
    *claim = 0x7fffff00u; /* and nothing after the header */
  } else {
    static const char m[] = "a fake worker serves hello and lanes only";
    *len = sizeof m - 1;
    memcpy(q, m, *len);
    *status = WEFT_ERR_UNSUPPORTED;
  }
  return 1;
}

/* Opens a fabric of the CPU lane and the fake worker; checks that no remote lane joined and that the absent
 * entry `name` (remote:ADDR, or remote:ADDR/LANE with lane) gives a reason that holds each of want[]. */
static void check_absent(fake_mode mode, const char *what, const char *lane, const char *const *want) {
  nt_fake fk;
  if (!nt_fake_start(&fk, fake_answer, &mode)) {
    TU_CHECK(0, "%s: the fake worker did not start", what);
    return;
  }
  char addr[64], name[128];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", fk.port);
  snprintf(name, sizeof name, "remote:%s%s%s", addr, lane ? "/" : "", lane ? lane : "");
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu,remote";
  d.remote = addr;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(&d, &f);
  TU_CHECK(st == WEFT_OK, "%s: the fabric opens with its CPU lane: %s", what, weft_open_error());
  if (st == WEFT_OK) {
    size_t remote = 0;
    for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
      weft_lane_info li;
      if (!weft_fabric_lane_info(f, i, &li) && strcmp(li.kind, "remote") == 0) remote++;
    }
    TU_CHECK(remote == 0, "%s: no remote lane joined (%zu did)", what, remote);
    const char *reason = NULL;
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
      const char *n, *r;
      if (!weft_fabric_absent_info(f, i, &n, &r) && strcmp(n, name) == 0) reason = r;
    }
    TU_CHECK(reason != NULL, "%s: %s is absent with a reason", what, name);
    for (int k = 0; reason && want[k]; k++)
      TU_CHECK(tu_contains(reason, want[k]), "%s: the reason says '%s': %s", what, want[k], reason);
    if (reason) printf("ok: %s: %s: %s\n", what, name, reason);
    weft_fabric_close(f);
  }
  nt_fake_stop(&fk);
}

int main(int argc, char **argv) {
  double start = tu_now();
  (void)argc, (void)argv;
  setenv("WEFT_REMOTE_TIMEOUT_MS", "3000", 1);
  unsetenv("WEFT_REMOTE_SECRET_FILE");
  unsetenv("WEFT_REMOTE_TLS");
  check_absent(FAKE_BAD_LIST, "a malformed list", NULL,
               (const char *const[]){"did not list its lanes", "malformed lanes list", NULL});
  check_absent(FAKE_NO_LANES, "an empty list", NULL, (const char *const[]){"offers no lane", NULL});
  check_absent(FAKE_FAILED_LANE, "a lane that failed there", "broken",
               (const char *const[]){"without contracts", NULL});
  check_absent(FAKE_HUGE_REPLY, "a reply claiming 2 GiB", NULL,
               (const char *const[]){"did not list its lanes", "more than the request can get", NULL});
  check_absent(FAKE_CLOSES, "a connection closed instead of the list", NULL,
               (const char *const[]){"did not list its lanes", "connection lost", NULL});
  return tu_finish("net_peer", start);
}
