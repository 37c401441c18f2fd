/* test_net_auth.c - authentication between `weft worker` and its clients: it is mutual (the worker proves
 * the secret before the client does), each proof has its own domain (a browser tab's answer or the first
 * release's single-sided proof is no login), it binds the worker's identity and both nonces (a proof for
 * another worker or another connection is refused), and a client with a secret refuses a worker that asks for
 * none, or proves nothing, or proves wrong (fake workers in this process). Off loopback without a secret the
 * worker refuses to start. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "netutil.h"
#include "tutil.h"
#include "weft.h"

static const char secret[] = "correct horse battery staple 42";
static const char identity[] = "test-worker-A";

/* AUTH_START with a fresh client nonce: returns the status; the worker's proof and identity in *mac, id. */
static int auth_start(int fd, uint8_t cn[WEFT_NET_NONCE_BYTES], uint8_t mac[WEFT_NET_MAC_BYTES], char *id,
                      size_t idcap) {
  for (unsigned i = 0; i < WEFT_NET_NONCE_BYTES; i++) cn[i] = (uint8_t)(rand() & 0xff);
  uint8_t *r = NULL;
  uint32_t n = 0;
  int st = nt_call(fd, WEFT_NET_AUTH_START, cn, WEFT_NET_NONCE_BYTES, &r, &n);
  id[0] = 0;
  if (st == 0 && n >= WEFT_NET_MAC_BYTES + 2) {
    size_t il = weft_net_get16(r + WEFT_NET_MAC_BYTES);
    if (n == WEFT_NET_MAC_BYTES + 2 + il && il < idcap) {
      memcpy(mac, r, WEFT_NET_MAC_BYTES);
      memcpy(id, r + WEFT_NET_MAC_BYTES + 2, il);
      id[il] = 0;
    } else {
      st = -5;
    }
  }
  free(r);
  return st;
}

static int finish(int fd, const uint8_t *wn, const uint8_t *cn, const char *key, const char *id) {
  uint8_t mac[WEFT_NET_MAC_BYTES];
  if (weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)key, strlen(key), wn, cn, id, mac)) return -9;
  return nt_call(fd, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL);
}

/* HMAC-SHA256(secret, label || nonce): the first release's proof, and the shape of a tab's PROVE answer. */
static void label_mac(const char *label, const uint8_t *nonce, uint8_t out[WEFT_NET_MAC_BYTES]) {
  uint8_t msg[64 + WEFT_NET_NONCE_BYTES];
  size_t ll = strlen(label);
  memcpy(msg, label, ll);
  memcpy(msg + ll, nonce, WEFT_NET_NONCE_BYTES);
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, ll + WEFT_NET_NONCE_BYTES, out, &n);
}

/* ------------------------------------------------------------------------------ fake workers (client side) */

/* FAKE_V1_REFUSES: a worker of protocol 1, which refuses a hello of version 2 as that release did;
 * FAKE_V1_ANSWERS: a peer that answers hello with version 1. */
typedef enum fake_mode { FAKE_WRONG_PROOF, FAKE_NO_MUTUAL, FAKE_V1_REFUSES, FAKE_V1_ANSWERS } fake_mode;

typedef struct fake_worker {
  nt_fake peer;
  int port;
  fake_mode mode;
  int got_client_proof; /* the client sent AUTH_FINISH or AUTH: it proved the secret to an unproven peer */
  int got_other;        /* anything after the handshake (LANES, ...) */
} fake_worker;

/* Hello with auth required, then a wrong proof (or no mutual capability), and records whatever the client
 * sends next. */
static int fake_answer(void *ctx, const weft_net_header *h, uint8_t *q, size_t *len, uint16_t *status,
                       uint32_t *claim) {
  fake_worker *f = ctx;
  (void)claim;
  if (h->type == WEFT_NET_HELLO && f->mode == FAKE_V1_REFUSES) {
    static const char m[] = "protocol version 2 is not spoken here (this worker speaks 1)";
    *len = sizeof m - 1;
    memcpy(q, m, *len);
    *status = WEFT_ERR_UNSUPPORTED;
  } else if (h->type == WEFT_NET_HELLO) {
    *len = nt_fake_hello(q, f->mode == FAKE_V1_ANSWERS ? 1 : WEFT_NET_VERSION,
                         WEFT_NET_CAP_AUTH_HMAC_SHA256 | (f->mode == FAKE_NO_MUTUAL ? 0 : WEFT_NET_CAP_AUTH_MUTUAL), 1);
  } else if (h->type == WEFT_NET_AUTH_START) {
    /* A proof made without the secret. */
    *len = WEFT_NET_MAC_BYTES + 2 + 4;
    memset(q, 0x33, WEFT_NET_MAC_BYTES);
    weft_net_put16(q + WEFT_NET_MAC_BYTES, 4);
    memcpy(q + WEFT_NET_MAC_BYTES + 2, "fake", 4);
  } else if (h->type == WEFT_NET_AUTH_FINISH || h->type == WEFT_NET_AUTH) {
    f->got_client_proof = 1;
  } else {
    f->got_other = 1;
  }
  return 1;
}

static int fake_start(fake_worker *f, fake_mode mode) {
  memset(f, 0, sizeof *f);
  f->mode = mode;
  if (!nt_fake_start(&f->peer, fake_answer, f)) return 0;
  f->port = f->peer.port;
  return 1;
}

static void fake_stop(fake_worker *f) { nt_fake_stop(&f->peer); }

/* Opens a fabric with the cpu lane and the worker at port; "" when a remote lane joined, else the reason the
 * remote lane is absent (copied into why). */
static const char *remote_outcome_pinned(int port, const char *pin, char *why, size_t n) {
  char addr[400];
  snprintf(addr, sizeof addr, "127.0.0.1:%d%s%s", port, pin ? "=" : "", pin ? pin : "");
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = "cpu,remote";
  d.remote = addr;
  d.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = NULL;
  snprintf(why, n, "the fabric did not open");
  if (weft_fabric_open(&d, &f)) return why;
  snprintf(why, n, "no remote lane and no reason");
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    if (!weft_fabric_lane_info(f, i, &li) && strcmp(li.kind, "remote") == 0) why[0] = 0;
  }
  for (size_t i = 0; why[0] && i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (!weft_fabric_absent_info(f, i, &name, &reason) && strncmp(name, "remote:", 7) == 0)
      snprintf(why, n, "%s", reason);
  }
  weft_fabric_close(f);
  return why;
}

static const char *remote_outcome(int port, char *why, size_t n) { return remote_outcome_pinned(port, NULL, why, n); }

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  srand((unsigned)getpid());
  char path[] = "weft-secret-XXXXXX";
  int sfd = mkstemp(path);
  TU_CHECK(sfd >= 0, "mkstemp");
  if (sfd < 0) return tu_finish("net_auth", start);
  TU_CHECK(write(sfd, secret, strlen(secret)) == (ssize_t)strlen(secret), "write secret");
  close(sfd);

  /* ---------------------------------------------------------------------------- the worker's side */
  nt_worker w;
  const char *extra[] = {"--secret-file", path, "--identity", identity, NULL};
  TU_CHECK(nt_start(argv[1], extra, &w), "worker with a secret starts");
  uint8_t wn[WEFT_NET_NONCE_BYTES], wn2[WEFT_NET_NONCE_BYTES], cn[WEFT_NET_NONCE_BYTES], cn2[WEFT_NET_NONCE_BYTES];
  uint8_t mac[WEFT_NET_MAC_BYTES], want[WEFT_NET_MAC_BYTES];
  char id[300];

  int fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == WEFT_ERR_STATE, "no proof: refused");
  TU_CHECK(nt_closed(fd), "no proof: connection closed");
  close(fd);

  /* The first release's proof, HMAC(secret, "weft-auth-v1" || nonce), is exactly what a browser tab holding
   * the secret answers PROVE with: no login. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  label_mac("weft-auth-v1", wn, mac);
  TU_CHECK(nt_call(fd, WEFT_NET_AUTH, mac, sizeof mac, NULL, NULL) != 0, "the tab-domain proof is not a login");
  TU_CHECK(nt_closed(fd), "the tab-domain proof: connection closed");
  close(fd);

  /* Nor as the client's proof of the mutual exchange. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start");
  label_mac("weft-auth-v1", wn, mac);
  TU_CHECK(nt_call(fd, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
           "the tab-domain proof is not an auth_finish either");
  TU_CHECK(nt_closed(fd), "connection closed");
  close(fd);

  /* The worker proves itself first, for its identity, over both nonces. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start answered");
  TU_CHECK(strcmp(id, identity) == 0, "the worker names its identity (got '%s')", id);
  weft_net_auth_proof(WEFT_NET_PROOF_WORKER, (const uint8_t *)secret, strlen(secret), wn, cn, identity, want);
  TU_CHECK(memcmp(want, mac, sizeof mac) == 0, "the worker's proof verifies");
  weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)secret, strlen(secret), wn, cn, identity, want);
  TU_CHECK(memcmp(want, mac, sizeof mac) != 0, "the worker's proof is not the client's (directions differ)");
  TU_CHECK(nt_call(fd, WEFT_NET_AUTH_START, cn, sizeof cn, NULL, NULL) == WEFT_ERR_STATE, "one auth_start only");
  close(fd);

  /* A proof for another worker's identity is refused. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start");
  TU_CHECK(finish(fd, wn, cn, secret, "test-worker-B") == WEFT_ERR_INVALID_ARGUMENT,
           "a proof for another worker identity is refused");
  TU_CHECK(nt_closed(fd), "another identity: connection closed");
  close(fd);

  /* The worker's own proof reflected back as the client's is refused. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start");
  TU_CHECK(nt_call(fd, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
           "the worker's proof reflected is refused");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start");
  TU_CHECK(finish(fd, wn, cn, "the wrong secret, long enough", identity) == WEFT_ERR_INVALID_ARGUMENT,
           "wrong secret refused");
  TU_CHECK(nt_closed(fd), "wrong secret: connection closed");
  close(fd);

  /* A proof replayed from another connection's nonces is refused. */
  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn2) == 0, "hello");
  TU_CHECK(memcmp(wn, wn2, sizeof wn) != 0, "each connection gets a fresh nonce");
  TU_CHECK(auth_start(fd, cn2, mac, id, sizeof id) == 0, "auth_start");
  TU_CHECK(finish(fd, wn, cn, secret, identity) == WEFT_ERR_INVALID_ARGUMENT, "a replayed proof is refused");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  weft_net_auth_proof(WEFT_NET_PROOF_CLIENT, (const uint8_t *)secret, strlen(secret), wn, cn, identity, mac);
  TU_CHECK(nt_call(fd, WEFT_NET_AUTH_FINISH, mac, sizeof mac, NULL, NULL) == WEFT_ERR_STATE,
           "auth_finish without auth_start is refused");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, wn) == 0, "hello");
  TU_CHECK(auth_start(fd, cn, mac, id, sizeof id) == 0, "auth_start");
  TU_CHECK(finish(fd, wn, cn, secret, identity) == 0, "the right proof is accepted");
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0, "served after auth");
  close(fd);

  /* The library's client against the real worker: mutual, and the identity it proved is in the details. */
  setenv("WEFT_REMOTE_SECRET_FILE", path, 1);
  char why[600];
  TU_CHECK(remote_outcome(w.port, why, sizeof why)[0] == 0, "the client authenticates with the worker (%s)", why);
  /* A pinned identity: the worker must prove exactly that one (host:port=IDENTITY, or WEFT_REMOTE_IDENTITY for
   * entries without one); another that holds the secret is refused. */
  TU_CHECK(remote_outcome_pinned(w.port, identity, why, sizeof why)[0] == 0, "the pinned identity joins (%s)", why);
  remote_outcome_pinned(w.port, "test-worker-B", why, sizeof why);
  TU_CHECK(strstr(why, "proved it is 'test-worker-A', but this client expects 'test-worker-B'") != NULL,
           "a worker proving another identity than the pinned one is refused: '%s'", why);
  remote_outcome_pinned(w.port, "test-worker-", why, sizeof why);
  TU_CHECK(strstr(why, "expects 'test-worker-'") != NULL, "a prefix of the identity is not it: '%s'", why);
  setenv("WEFT_REMOTE_IDENTITY", "test-worker-B", 1);
  remote_outcome(w.port, why, sizeof why);
  TU_CHECK(strstr(why, "expects 'test-worker-B'") != NULL, "WEFT_REMOTE_IDENTITY pins it too: '%s'", why);
  TU_CHECK(remote_outcome_pinned(w.port, identity, why, sizeof why)[0] == 0,
           "the entry's own pin wins over WEFT_REMOTE_IDENTITY (%s)", why);
  setenv("WEFT_REMOTE_IDENTITY", identity, 1);
  TU_CHECK(remote_outcome(w.port, why, sizeof why)[0] == 0, "WEFT_REMOTE_IDENTITY, matched, joins (%s)", why);
  unsetenv("WEFT_REMOTE_IDENTITY");
  remote_outcome_pinned(w.port, "", why, sizeof why);
  TU_CHECK(strstr(why, "empty pinned identity") != NULL, "an empty pin is refused: '%s'", why);
  TU_CHECK(nt_alive(&w), "worker alive");
  nt_stop(&w);

  /* ---------------------------------------------------------------------------- the client's side */
  /* A worker that asks for no authentication, while the client has a secret: refused (no downgrade). */
  TU_CHECK(nt_start(argv[1], NULL, &w), "worker without a secret starts");
  remote_outcome(w.port, why, sizeof why);
  TU_CHECK(strstr(why, "asks for no authentication") != NULL, "a worker asking for no auth is refused: '%s'", why);
  /* A pin without a secret: nothing can prove it. */
  unsetenv("WEFT_REMOTE_SECRET_FILE");
  remote_outcome_pinned(w.port, identity, why, sizeof why);
  TU_CHECK(strstr(why, "pins the worker's identity to 'test-worker-A' but has no shared secret") != NULL,
           "a pinned identity without a secret is refused: '%s'", why);
  TU_CHECK(remote_outcome(w.port, why, sizeof why)[0] == 0, "without pin or secret a loopback worker joins (%s)", why);
  setenv("WEFT_REMOTE_SECRET_FILE", path, 1);
  nt_stop(&w);

  /* A worker whose proof is wrong: refused, and the client never proved the secret to it. */
  fake_worker fk;
  TU_CHECK(fake_start(&fk, FAKE_WRONG_PROOF), "fake worker");
  remote_outcome(fk.port, why, sizeof why);
  TU_CHECK(strstr(why, "proof of the shared secret is wrong") != NULL, "a wrong worker proof is refused: '%s'", why);
  fake_stop(&fk);
  TU_CHECK(!fk.got_client_proof, "the client sent no proof to a worker that failed its own");
  TU_CHECK(!fk.got_other, "the client sent nothing after a wrong worker proof");

  /* A worker that requires auth but will not prove itself (the first release's worker): refused too. */
  TU_CHECK(fake_start(&fk, FAKE_NO_MUTUAL), "fake worker");
  remote_outcome(fk.port, why, sizeof why);
  TU_CHECK(strstr(why, "mutual authentication") != NULL, "a worker without mutual auth is refused: '%s'", why);
  fake_stop(&fk);
  TU_CHECK(!fk.got_client_proof, "the client sent no proof to a worker that proves nothing");

  /* A worker of protocol 1, which refuses version 2 (as that release does), and a peer that answers with
   * version 1: each refused with what to do, and sent nothing else. */
  TU_CHECK(fake_start(&fk, FAKE_V1_REFUSES), "fake worker");
  remote_outcome(fk.port, why, sizeof why);
  TU_CHECK(strstr(why, "older protocol") && strstr(why, "update the peer"), "a protocol-1 worker is refused: '%s'",
           why);
  fake_stop(&fk);
  TU_CHECK(!fk.got_client_proof && !fk.got_other, "nothing sent to a protocol-1 worker after its refusal");
  TU_CHECK(fake_start(&fk, FAKE_V1_ANSWERS), "fake worker");
  remote_outcome(fk.port, why, sizeof why);
  TU_CHECK(strstr(why, "protocol version 1") && strstr(why, "update the peer"),
           "a peer answering hello with protocol 1 is refused: '%s'", why);
  fake_stop(&fk);
  TU_CHECK(!fk.got_client_proof && !fk.got_other, "nothing sent to a protocol-1 peer after its hello");
  unsetenv("WEFT_REMOTE_SECRET_FILE");

  /* Off loopback without a secret: the worker refuses to start (exit 2, says why). */
  pid_t pid = fork();
  if (pid == 0) {
    execl(argv[1], argv[1], "worker", "--listen", "0.0.0.0:0", "--lanes", "cpu", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  /* a combination of options it refuses to run with: a usage error, exit 2 */
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "non-loopback without a secret refused (status %d)",
           status);
  /* TLS needs the secret its key comes from. */
  pid = fork();
  if (pid == 0) {
    execl(argv[1], argv[1], "worker", "--listen", "127.0.0.1:0", "--lanes", "cpu", "--tls", (char *)NULL);
    _exit(127);
  }
  waitpid(pid, &status, 0);
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "--tls without a secret refused (status %d)", status);
  unlink(path);
  return tu_finish("net_auth", start);
}
