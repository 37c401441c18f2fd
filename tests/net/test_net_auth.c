/* test_net_auth.c - the worker's authentication: a worker with a secret serves only clients that prove
 * it (HMAC-SHA256 of its nonce); a wrong proof or none is refused; binding off loopback without a secret
 * refuses to start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netutil.h"
#include "tutil.h"

static const char secret[] = "correct horse battery staple 42";

static int auth(int fd, const uint8_t *nonce, const char *key) {
  uint8_t mac[WEFT_NET_MAC_BYTES];
  if (weft_net_auth_mac((const uint8_t *)key, strlen(key), nonce, mac)) return -9;
  return nt_call(fd, WEFT_NET_AUTH, mac, sizeof mac, NULL, NULL);
}

int main(int argc, char **argv) {
  double start = tu_now();
  if (argc < 2) return 2;
  char path[] = "weft-secret-XXXXXX";
  int sfd = mkstemp(path);
  TU_CHECK(sfd >= 0, "mkstemp");
  if (sfd < 0) return tu_finish("net_auth", start);
  TU_CHECK(write(sfd, secret, strlen(secret)) == (ssize_t)strlen(secret), "write secret");
  close(sfd);

  nt_worker w;
  const char *extra[] = {"--secret-file", path, NULL};
  TU_CHECK(nt_start(argv[1], extra, &w), "worker with a secret starts");
  uint8_t nonce[WEFT_NET_NONCE_BYTES], nonce2[WEFT_NET_NONCE_BYTES];

  int fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, nonce) == 0, "hello");
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == WEFT_ERR_STATE, "no proof: refused");
  TU_CHECK(nt_closed(fd), "no proof: connection closed");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, nonce) == 0, "hello");
  TU_CHECK(auth(fd, nonce, "the wrong secret, long enough") == WEFT_ERR_INVALID_ARGUMENT, "wrong secret refused");
  TU_CHECK(nt_closed(fd), "wrong secret: connection closed");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, nonce2) == 0, "hello");
  TU_CHECK(memcmp(nonce, nonce2, sizeof nonce) != 0, "each connection gets a fresh nonce");
  TU_CHECK(auth(fd, nonce, secret) == WEFT_ERR_INVALID_ARGUMENT, "a proof replayed from another nonce is refused");
  close(fd);

  fd = nt_connect(w.port);
  TU_CHECK(nt_hello(fd, nonce) == 0, "hello");
  TU_CHECK(auth(fd, nonce, secret) == 0, "right secret accepted");
  TU_CHECK(nt_call(fd, WEFT_NET_LANES, NULL, 0, NULL, NULL) == 0, "served after auth");
  close(fd);
  TU_CHECK(nt_alive(&w), "worker alive");
  nt_stop(&w);

  /* Off loopback without a secret: the worker refuses to start (exit 1, says why). */
  pid_t pid = fork();
  if (pid == 0) {
    execl(argv[1], argv[1], "worker", "--listen", "0.0.0.0:0", "--lanes", "cpu", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "non-loopback without a secret refused (status %d)",
           status);
  unlink(path);
  return tu_finish("net_auth", start);
}
