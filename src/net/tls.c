/* tls.c - see tls.h. TLS 1.3 with an external PSK (RFC 8446 section 4.2.11): both sides derive the same
 * 32-byte key from the shared secret, the client offers it under the identity "weft-v1", the server looks it
 * up; psk_dhe_ke gives forward secrecy (an ECDHE share under the PSK's authentication), and a peer without
 * the secret cannot finish the handshake (its binder does not verify). */
#include "net/tls.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include "net/protocol.h"

#define PSK_IDENTITY "weft-v1"
#define PSK_BYTES 32
#define HKDF_SALT "weft-v1 tls13 psk"
#define HKDF_INFO "weft-v1 tls13 external psk"

struct weft_net_tls {
  SSL_CTX *ctx;
  int is_server;
  uint8_t psk[PSK_BYTES];
};

static const unsigned char AES128GCM_SHA256[2] = {0x13, 0x01}; /* TLS_AES_128_GCM_SHA256 */

static int derive_psk(const uint8_t *secret, size_t secret_len, uint8_t out[PSK_BYTES]) {
  EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
  size_t n = PSK_BYTES;
  int ok = k && EVP_PKEY_derive_init(k) > 0 && EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) > 0 &&
           EVP_PKEY_CTX_set1_hkdf_salt(k, (const unsigned char *)HKDF_SALT, (int)strlen(HKDF_SALT)) > 0 &&
           EVP_PKEY_CTX_set1_hkdf_key(k, secret, (int)secret_len) > 0 &&
           EVP_PKEY_CTX_add1_hkdf_info(k, (const unsigned char *)HKDF_INFO, (int)strlen(HKDF_INFO)) > 0 &&
           EVP_PKEY_derive(k, out, &n) > 0 && n == PSK_BYTES;
  EVP_PKEY_CTX_free(k);
  return ok;
}

/* The PSK as a session OpenSSL can resume from; ownership passes to OpenSSL. */
static SSL_SESSION *psk_session(SSL *ssl, const weft_net_tls *t) {
  const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, AES128GCM_SHA256);
  SSL_SESSION *s = cipher ? SSL_SESSION_new() : NULL;
  if (s && SSL_SESSION_set1_master_key(s, t->psk, PSK_BYTES) && SSL_SESSION_set_cipher(s, cipher) &&
      SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))
    return s;
  SSL_SESSION_free(s);
  return NULL;
}

static int find_psk(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess) {
  const weft_net_tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
  *sess = NULL;
  /* An unknown identity: no PSK, so the handshake fails (there is no certificate to fall back to). */
  if (idlen != strlen(PSK_IDENTITY) || memcmp(id, PSK_IDENTITY, idlen) != 0) return 1;
  *sess = psk_session(ssl, t);
  return *sess != NULL;
}

static int use_psk(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen, SSL_SESSION **sess) {
  const weft_net_tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
  *sess = NULL;
  /* After a HelloRetryRequest, md is the suite's hash: the PSK is for SHA-256 only. */
  if (md && md != EVP_sha256()) return 1;
  *sess = psk_session(ssl, t);
  if (!*sess) return 0;
  *id = (const unsigned char *)PSK_IDENTITY;
  *idlen = strlen(PSK_IDENTITY);
  return 1;
}

weft_status weft_net_tls_create(int is_server, const uint8_t *secret, size_t secret_len, weft_net_tls **out,
                                char *err, size_t errlen) {
  *out = NULL;
  if (!secret || secret_len < 16) {
    snprintf(err, errlen, "TLS needs the shared secret (at least 16 bytes): its key is derived from it");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  weft_net_tls *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  t->is_server = is_server;
  t->ctx = SSL_CTX_new(is_server ? TLS_server_method() : TLS_client_method());
  int ok = t->ctx && derive_psk(secret, secret_len, t->psk) &&
           SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) &&
           SSL_CTX_set_max_proto_version(t->ctx, TLS1_3_VERSION) &&
           SSL_CTX_set_ciphersuites(t->ctx, "TLS_AES_128_GCM_SHA256");
  if (ok) {
    SSL_CTX_set_app_data(t->ctx, t);
    /* Nothing to resume: no tickets after the handshake. */
    SSL_CTX_set_num_tickets(t->ctx, 0);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION
#ifdef SSL_OP_ENABLE_KTLS
                                    | SSL_OP_ENABLE_KTLS
#endif
    );
    /* Large frames: read whole records (and what follows) in as few calls as the kernel allows. */
    SSL_CTX_set_read_ahead(t->ctx, 1);
    SSL_CTX_set_default_read_buffer_len(t->ctx, 256 * 1024);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_AUTO_RETRY);
    if (is_server) SSL_CTX_set_psk_find_session_callback(t->ctx, find_psk);
    else SSL_CTX_set_psk_use_session_callback(t->ctx, use_psk);
  }
  if (!ok) {
    snprintf(err, errlen, "cannot set up TLS 1.3: %s", ERR_reason_error_string(ERR_get_error()));
    ERR_clear_error();
    weft_net_tls_destroy(t);
    return WEFT_ERR_INTERNAL;
  }
  *out = t;
  return WEFT_OK;
}

void weft_net_tls_destroy(weft_net_tls *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx);
  OPENSSL_cleanse(t->psk, sizeof t->psk);
  free(t);
}

void weft_net_conn_init(weft_net_conn *c, int fd) {
  c->fd = fd;
  c->ssl = NULL;
}

/* OpenSSL writes to sockets with write(), which raises SIGPIPE on a peer that closed; a library must not
 * kill its host for that. SIGPIPE is blocked around the call and one it raised is taken back. */
typedef struct pipe_guard {
  sigset_t old;
  int was_pending;
} pipe_guard;

static void guard_on(pipe_guard *g) {
  sigset_t block, pend;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &g->old);
  g->was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
}

static void guard_off(pipe_guard *g) {
  sigset_t pend;
  if (!g->was_pending && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    struct timespec zero = {0, 0};
    int saved = errno;
    while (sigtimedwait(&block, NULL, &zero) < 0 && errno == EINTR) {
    }
    errno = saved;
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* The reason of OpenSSL's last error, for messages; clears the thread's error queue. */
static int last_reason(char *buf, size_t n) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  snprintf(buf, n, "%s", r ? r : "no reason given");
  ERR_clear_error();
  return e ? ERR_GET_REASON(e) : 0;
}

/* The SSL object over fd: reads straight from the socket (read-ahead fills a large buffer), writes through a
 * buffer that gathers many 16 KiB records into one send (flushed at the end of every write), so a large frame
 * costs a few system calls, not one per record. */
static SSL *new_ssl(weft_net_tls *t, int fd) {
  SSL *ssl = SSL_new(t->ctx);
  BIO *sock = BIO_new_socket(fd, BIO_NOCLOSE), *buf = BIO_new(BIO_f_buffer());
  if (!ssl || !sock || !buf || !BIO_set_write_buffer_size(buf, 256 * 1024) || !BIO_up_ref(sock)) {
    SSL_free(ssl);
    BIO_free(sock);
    BIO_free(buf);
    ERR_clear_error();
    return NULL;
  }
  BIO_push(buf, sock);
  SSL_set_bio(ssl, sock, buf); /* the SSL owns both: sock once as rbio, once inside the wbio chain */
  return ssl;
}

weft_status weft_net_conn_accept(weft_net_conn *c, weft_net_tls *t, char *err, size_t errlen) {
  /* A TLS client's first byte is 0x16 (a handshake record). A weft client speaking plaintext starts with the
   * frame magic: tell it, in a frame it can read, why it is refused. */
  uint8_t first = 0;
  ssize_t k;
  while ((k = recv(c->fd, &first, 1, MSG_PEEK)) < 0 && errno == EINTR) {
  }
  if (k <= 0) {
    snprintf(err, errlen, "the client %s before TLS's handshake", k == 0 ? "closed" : "was silent");
    return WEFT_ERR_IO;
  }
  if (first != 0x16) {
    uint8_t hb[WEFT_NET_HEADER_BYTES];
    if (weft_net_recv_all(c->fd, hb, sizeof hb) && weft_net_get32(hb) == WEFT_NET_MAGIC) {
      static const char msg[] = "this worker speaks TLS 1.3 only (a key derived from its shared secret): "
                                "the client must use TLS (WEFT_REMOTE_TLS=1 and WEFT_REMOTE_SECRET_FILE)";
      uint8_t out[WEFT_NET_HEADER_BYTES + sizeof msg - 1];
      weft_net_header h = {WEFT_NET_MAGIC, (uint16_t)(weft_net_get16(hb + 4) | WEFT_NET_REPLY),
                           (uint16_t)WEFT_ERR_UNSUPPORTED, weft_net_get32(hb + 8), (uint32_t)(sizeof msg - 1)};
      weft_net_header_encode(&h, out);
      memcpy(out + WEFT_NET_HEADER_BYTES, msg, sizeof msg - 1);
      weft_net_send_all(c->fd, out, sizeof out);
    }
    snprintf(err, errlen, "the client speaks plaintext; this worker requires TLS");
    return WEFT_ERR_UNSUPPORTED;
  }
  SSL *ssl = new_ssl(t, c->fd);
  if (!ssl) {
    snprintf(err, errlen, "out of memory for TLS");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  int r = SSL_accept(ssl);
  if (r != 1) {
    char why[160];
    last_reason(why, sizeof why);
    snprintf(err, errlen, "TLS handshake failed (%s): the client's secret differs, or it is not a weft client", why);
    SSL_free(ssl);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  c->ssl = ssl;
  return WEFT_OK;
}

int weft_net_conn_accept_step(weft_net_conn *c, weft_net_tls *t, int *want_write, char *err, size_t errlen) {
  *want_write = 0;
  if (!c->ssl) {
    /* As weft_net_conn_accept: a weft client speaking plaintext starts with the frame magic, a TLS client
     * with 0x16. Only peeked until a whole header is there; then it is taken and answered. */
    uint8_t hb[WEFT_NET_HEADER_BYTES];
    ssize_t k;
    while ((k = recv(c->fd, hb, sizeof hb, MSG_PEEK | MSG_DONTWAIT)) < 0 && errno == EINTR) {
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (k <= 0) {
      snprintf(err, errlen, "the client %s before TLS's handshake", k == 0 ? "closed" : "failed");
      return -1;
    }
    if (hb[0] != 0x16) {
      if ((size_t)k < sizeof hb) return 0; /* the rest of a plaintext header, within the deadline */
      while (recv(c->fd, hb, sizeof hb, MSG_DONTWAIT) < 0 && errno == EINTR) {
      }
      if (weft_net_get32(hb) == WEFT_NET_MAGIC) {
        static const char msg[] = "this worker speaks TLS 1.3 only (a key derived from its shared secret): "
                                  "the client must use TLS (WEFT_REMOTE_TLS=1 and WEFT_REMOTE_SECRET_FILE)";
        uint8_t out[WEFT_NET_HEADER_BYTES + sizeof msg - 1];
        weft_net_header h = {WEFT_NET_MAGIC, (uint16_t)(weft_net_get16(hb + 4) | WEFT_NET_REPLY),
                             (uint16_t)WEFT_ERR_UNSUPPORTED, weft_net_get32(hb + 8), (uint32_t)(sizeof msg - 1)};
        weft_net_header_encode(&h, out);
        memcpy(out + WEFT_NET_HEADER_BYTES, msg, sizeof msg - 1);
        while (send(c->fd, out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {
        }
      }
      snprintf(err, errlen, "the client speaks plaintext; this worker requires TLS");
      return -1;
    }
    c->ssl = new_ssl(t, c->fd);
    if (!c->ssl) {
      snprintf(err, errlen, "out of memory for TLS");
      return -1;
    }
  }
  pipe_guard g;
  guard_on(&g);
  int r = SSL_accept(c->ssl);
  int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
  guard_off(&g);
  if (r == 1) return 1;
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    *want_write = e == SSL_ERROR_WANT_WRITE;
    return 0;
  }
  char why[160];
  last_reason(why, sizeof why);
  snprintf(err, errlen, "TLS handshake failed (%s): the client's secret differs, or it is not a weft client", why);
  return -1;
}

long weft_net_conn_read_some(weft_net_conn *c, uint8_t *p, size_t n) {
  if (!c->ssl) {
    for (;;) {
      ssize_t k = recv(c->fd, p, n, 0);
      if (k >= 0) return (long)k;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? -2 : -1;
    }
  }
  size_t k = 0;
  if (SSL_read_ex(c->ssl, p, n, &k) == 1) return (long)k;
  int e = SSL_get_error(c->ssl, 0), saved = errno;
  ERR_clear_error();
  errno = saved;
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return -2;
  return e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

long weft_net_conn_write_some(weft_net_conn *c, const uint8_t *p, size_t n) {
  if (!c->ssl) {
    for (;;) {
      ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
      if (k >= 0) return (long)k;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? -2 : -1;
    }
  }
  if (n > (1u << 30)) n = 1u << 30;
  pipe_guard g;
  guard_on(&g);
  size_t k = 0;
  long r;
  if (SSL_write_ex(c->ssl, p, n, &k) == 1) {
    /* The records wait in the write buffer until flushed: whole, or the stream is broken. */
    r = BIO_flush(SSL_get_wbio(c->ssl)) == 1 ? (long)k : -1;
  } else {
    int e = SSL_get_error(c->ssl, 0);
    r = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? -2 : -1;
  }
  int saved = errno;
  ERR_clear_error();
  errno = saved;
  guard_off(&g);
  return r;
}

weft_status weft_net_conn_connect(weft_net_conn *c, weft_net_tls *t, char *err, size_t errlen) {
  SSL *ssl = new_ssl(t, c->fd);
  if (!ssl) {
    snprintf(err, errlen, "out of memory for TLS");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  pipe_guard g;
  guard_on(&g);
  errno = 0;
  int r = SSL_connect(ssl);
  int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, r), saved = errno;
  guard_off(&g);
  if (r == 1) {
    c->ssl = ssl;
    return WEFT_OK;
  }
  char why[160];
  int reason = last_reason(why, sizeof why);
  if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
      reason == SSL_R_UNEXPECTED_RECORD)
    snprintf(err, errlen,
             "the worker does not speak TLS (it answered in plaintext: %s); start it with --tls, or leave "
             "WEFT_REMOTE_TLS unset for a worker on loopback without it",
             why);
  else if (reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR || reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
           reason == SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER || reason == SSL_R_BAD_PSK)
    snprintf(err, errlen, "the worker refused TLS's handshake (%s): its shared secret differs from this client's",
             why);
  else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    snprintf(err, errlen, "TLS handshake failed: %s",
             saved == EAGAIN || saved == EWOULDBLOCK ? "the worker did not answer in time"
             : saved                                  ? strerror(saved)
                                                      : "the worker closed the connection (its secret differs, "
                                                        "or it does not speak TLS)");
  else snprintf(err, errlen, "TLS handshake failed (%s)", why);
  SSL_free(ssl);
  return WEFT_ERR_IO;
}

int weft_net_conn_send_all(weft_net_conn *c, const uint8_t *p, size_t n) {
  if (!c->ssl) return weft_net_send_all(c->fd, p, n);
  pipe_guard g;
  guard_on(&g);
  int ok = 1;
  while (n && ok) {
    int chunk = n > (1u << 30) ? 1 << 30 : (int)n;
    size_t k = 0;
    if (SSL_write_ex(c->ssl, p, (size_t)chunk, &k) != 1 || k == 0) {
      ok = 0;
      ERR_clear_error();
      break;
    }
    p += k;
    n -= k;
  }
  if (ok && BIO_flush(SSL_get_wbio(c->ssl)) != 1) ok = 0;
  guard_off(&g);
  return ok;
}

int weft_net_conn_recv_all(weft_net_conn *c, uint8_t *p, size_t n) {
  if (!c->ssl) return weft_net_recv_all(c->fd, p, n);
  while (n) {
    size_t k = 0;
    if (SSL_read_ex(c->ssl, p, n, &k) != 1 || k == 0) {
      int saved = errno;
      ERR_clear_error();
      errno = saved;
      return 0;
    }
    p += k;
    n -= k;
  }
  return 1;
}

int weft_net_conn_send3(weft_net_conn *c, const uint8_t *const piece[3], const size_t len[3]) {
  if (!c->ssl) {
    /* Header, payload and tail in one sendmsg where the kernel takes them whole: a small request is one
     * segment on the wire, not three (each a wakeup on the peer). */
    struct iovec iov[3];
    size_t total = 0;
    for (int i = 0; i < 3; i++) {
      iov[i].iov_base = (void *)piece[i];
      iov[i].iov_len = piece[i] ? len[i] : 0;
      total += iov[i].iov_len;
    }
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = 3;
    ssize_t k;
    while ((k = sendmsg(c->fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (k < 0) return 0;
    if ((size_t)k == total) return 1;
    /* A partial send: finish piece by piece. */
    size_t done = (size_t)k;
    for (int i = 0; i < 3; i++) {
      size_t n = iov[i].iov_len;
      if (done >= n) {
        done -= n;
        continue;
      }
      if (!weft_net_send_all(c->fd, (const uint8_t *)iov[i].iov_base + done, n - done)) return 0;
      done = 0;
    }
    return 1;
  }
  /* Pieces that fit one record go in one (a small request is one record, one segment); large ones are
   * written as they are, without a copy. */
  enum { RECORD = 16384 };
  uint8_t small[RECORD];
  size_t used = 0;
  for (int i = 0; i < 3; i++) {
    size_t n = piece[i] ? len[i] : 0;
    if (!n) continue;
    if (used + n <= RECORD) {
      memcpy(small + used, piece[i], n);
      used += n;
      continue;
    }
    if (used && !weft_net_conn_send_all(c, small, used)) return 0;
    used = 0;
    if (!weft_net_conn_send_all(c, piece[i], n)) return 0;
  }
  return !used || weft_net_conn_send_all(c, small, used);
}

int weft_net_conn_pending(const weft_net_conn *c) { return c->ssl && SSL_has_pending((SSL *)c->ssl); }

const char *weft_net_conn_describe(const weft_net_conn *c, char *buf, size_t n) {
  if (!c->ssl) {
    snprintf(buf, n, "plain TCP");
    return buf;
  }
  SSL *ssl = c->ssl;
  const SSL_CIPHER *ci = SSL_get_current_cipher(ssl);
  int ktls = 0;
#ifdef BIO_get_ktls_send
  ktls = BIO_get_ktls_send(SSL_get_wbio(ssl)) > 0;
#endif
  snprintf(buf, n, "%s (%s, PSK from the shared secret%s)", SSL_get_version(ssl), ci ? SSL_CIPHER_get_name(ci) : "?",
           ktls ? ", kTLS" : "");
  return buf;
}

void weft_net_conn_close(weft_net_conn *c) {
  if (c->ssl) {
    pipe_guard g;
    guard_on(&g);
    SSL_shutdown(c->ssl); /* close_notify, without waiting for the peer's */
    guard_off(&g);
    SSL_free(c->ssl);
    ERR_clear_error();
    c->ssl = NULL;
  }
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}
