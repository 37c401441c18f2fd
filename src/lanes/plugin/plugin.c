/* plugin.c - the plugin lane provider: finds the plugins named by the fabric's options and WEFT_PLUGIN_PATH,
 * and admits a plugin's lanes only after they passed a self-test of every op they claim. Refusals become
 * absent lanes with the reason.
 *
 * Admission: the plugin file is read once into a sealed private copy (memfd) and hashed (SHA-256). The
 * helper executable weft-plugin-check, spawned with posix_spawn (this process may already run threads: the
 * CPU pool, drivers), loads that copy through /proc/self/fd and runs the self-test (selftest.c); its
 * verdict comes back over a pipe. A plugin that crashes or hangs takes only the helper down. The caller's
 * process runs none of a plugin's code (not even its constructors) until it passed, and then loads the
 * very copy that was tested: a file replaced on disk meanwhile changes nothing. A verdict is kept for the
 * life of the process per content hash, so a second fabric spawns nothing.
 *
 * An NPU-kind lane is admitted only when the accel device it names advanced its own busy counter
 * (<sysfs>/class/accel/accelN/device/npu_busy_time_us) while the helper ran: this process reads the
 * counter before the spawn and after the helper ended, so the plugin cannot write the proof itself. */
#define _GNU_SOURCE /* memfd_create, pipe2, strsignal, dladdr */
#include <dirent.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef WEFT_PLUGIN_SHA256
#include <openssl/evp.h>
#endif

#include "core/envnum.h"
#include "selftest.h"
#include "weft_plugin.h"

extern char **environ;

#define VERDICT_MAX 16384
/* PoCL compiles its kernels with LLVM the first time: seconds, not milliseconds. */
#define ADMIT_TIMEOUT_S 120
/* A plugin file larger than this is refused (it is copied into memory). */
#define PLUGIN_MAX_BYTES ((off_t)1 << 30)
#define ACCEL_MAX 16

/* --------------------------------------------------------------------------------------------- admission */

typedef struct verdict {
  char *key;    /* the content's SHA-256 in hex ("" without OpenSSL: never matched) */
  char *text;   /* the helper's lines, NPU lanes' lines rewritten by the counter check, plus "note" lines */
  char *refuse; /* set when the plugin as a whole is refused */
  char *notes;  /* "lane\tnote\0" per admitted lane, then "\0": weft_plugin_admission's answers */
  int fd;       /* the sealed copy that was tested, kept open: what this process loads */
  void *handle; /* dlopen handle once loaded */
} verdict;

static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;
static verdict **verdicts; /* pointers, so an entry handed out never moves */
static size_t nverdicts;

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Copies the file at path into a sealed memfd and hashes it; the fd (close-on-exec) or -1 and a reason. */
static int copy_sealed(const char *path, char *hex, size_t hexlen, char *why, size_t len) {
  hex[0] = '\0';
  int src = open(path, O_RDONLY | O_CLOEXEC);
  if (src < 0) {
    snprintf(why, len, "cannot be opened: %s", strerror(errno));
    return -1;
  }
  struct stat sb;
  if (fstat(src, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > PLUGIN_MAX_BYTES) {
    snprintf(why, len, "is not a regular file of at most 1 GiB");
    close(src);
    return -1;
  }
  int fd = memfd_create("weft-plugin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    snprintf(why, len, "no private copy could be made to test and load: memfd_create: %s", strerror(errno));
    close(src);
    return -1;
  }
#ifdef WEFT_PLUGIN_SHA256
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  int md_ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
#endif
  char buf[1 << 16];
  int ok = 1;
  for (;;) {
    ssize_t got = read(src, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      snprintf(why, len, "could not be read: %s", strerror(errno));
      ok = 0;
    }
    if (got <= 0) break;
#ifdef WEFT_PLUGIN_SHA256
    md_ok = md_ok && EVP_DigestUpdate(md, buf, (size_t)got) == 1;
#endif
    for (ssize_t off = 0; off < got && ok;) {
      ssize_t w = write(fd, buf + off, (size_t)(got - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        snprintf(why, len, "no private copy could be made: %s", strerror(errno));
        ok = 0;
      }
      off += w > 0 ? w : 0;
    }
    if (!ok) break;
  }
  close(src);
  if (ok && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    snprintf(why, len, "its private copy could not be sealed: %s", strerror(errno));
    ok = 0;
  }
#ifdef WEFT_PLUGIN_SHA256
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int dlen = 0;
  md_ok = md_ok && EVP_DigestFinal_ex(md, digest, &dlen) == 1;
  EVP_MD_CTX_free(md);
  if (ok && md_ok)
    for (unsigned int i = 0; i < dlen && 2 * i + 2 < hexlen; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
#else
  (void)hexlen;
#endif
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The helper executable: WEFT_PLUGIN_CHECK, else next to the object holding this code (libweft.so, or the
 * executable weft is linked into), else weft's installed libexec path, else its build tree. */
static int find_helper(char *out, size_t len, char *why, size_t wlen) {
  const char *env = getenv("WEFT_PLUGIN_CHECK");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    if (access(out, X_OK) == 0) return 1;
    snprintf(why, wlen, "its self-test could not start: WEFT_PLUGIN_CHECK=%.300s is not an executable (%s)", env,
             strerror(errno));
    return 0;
  }
  Dl_info info;
  if (dladdr((void *)find_helper, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(out, len, "%.*s/weft-plugin-check", (int)(slash - info.dli_fname), info.dli_fname);
    if (access(out, X_OK) == 0) return 1;
  }
#ifdef WEFT_PLUGIN_CHECK_INSTALLED
  snprintf(out, len, "%s", WEFT_PLUGIN_CHECK_INSTALLED);
  if (access(out, X_OK) == 0) return 1;
#endif
#ifdef WEFT_PLUGIN_CHECK_BUILT
  snprintf(out, len, "%s", WEFT_PLUGIN_CHECK_BUILT);
  if (access(out, X_OK) == 0) return 1;
#endif
  snprintf(why, wlen,
           "its self-test could not start: the helper weft-plugin-check was not found (next to the weft library, "
           "in weft's libexec folder; WEFT_PLUGIN_CHECK names it)");
  return 0;
}

/* ------------------------------------------------------------------------------------- NPU busy counters */

static const char *sysfs_root(void) {
  const char *root = getenv("WEFT_SYSFS_ROOT");
  return root && *root ? root : "/sys";
}

/* 1 when name is "accel" and digits only (no path can be smuggled in). */
static int accel_name_ok(const char *name) {
  if (strncmp(name, "accel", 5) != 0 || !name[5] || strlen(name) > 16) return 0;
  for (const char *p = name + 5; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  return 1;
}

/* The device's npu_busy_time_us; 0 and *ok = 0 when it cannot be read. */
static unsigned long long busy_us(const char *dev, int *ok) {
  char path[1200];
  snprintf(path, sizeof path, "%s/class/accel/%s/device/npu_busy_time_us", sysfs_root(), dev);
  *ok = 0;
  FILE *fp = fopen(path, "re");
  if (!fp) return 0;
  unsigned long long v = 0;
  *ok = fscanf(fp, "%llu", &v) == 1;
  fclose(fp);
  return v;
}

typedef struct counters {
  int n;
  char dev[ACCEL_MAX][20];
  unsigned long long us[ACCEL_MAX];
  int ok[ACCEL_MAX];
} counters;

/* Every accel device's counter, read before the helper starts. */
static void counters_read(counters *c) {
  memset(c, 0, sizeof *c);
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/class/accel", sysfs_root());
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && c->n < ACCEL_MAX) {
    if (!accel_name_ok(e->d_name)) continue;
    snprintf(c->dev[c->n], sizeof c->dev[c->n], "%.16s", e->d_name); /* accel_name_ok: <= 16 */
    c->us[c->n] = busy_us(e->d_name, &c->ok[c->n]);
    c->n++;
  }
  closedir(d);
}

/* Appends printf-style text to the verdict text (cap bytes). */
static void text_add(char *text, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void text_add(char *text, size_t cap, const char *fmt, ...) {
  size_t used = strlen(text);
  if (used + 1 >= cap) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(text + used, cap - used, fmt, args);
  va_end(args);
}

/* The field of line "tag\tname\t<field>" in text, copied into out; 1 when found. */
static int line_field(const char *text, const char *tag, const char *name, char *out, size_t len) {
  size_t tl = strlen(tag), nl = strlen(name);
  for (const char *p = text, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1)
    if (strncmp(p, tag, tl) == 0 && p[tl] == '\t' && strncmp(p + tl + 1, name, nl) == 0 && p[tl + 1 + nl] == '\t') {
      const char *f = p + tl + 1 + nl + 1;
      snprintf(out, len, "%.*s", (int)(eol - f), f);
      return 1;
    }
  return 0;
}

/* Rewrites the helper's lines into the verdict: each "pass" of an NPU-kind lane stays a pass only when the
 * device it names advanced its counter between `before` and now; every admitted lane gets a "note" line
 * (what was verified, what was only claimed). */
static void settle(const char *raw, const counters *before, char *text, size_t cap) {
  text[0] = '\0';
  char kind[64] = "";
  for (const char *p = raw, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1)
    if (strncmp(p, "desc\t", 5) == 0) {
      const char *t = strchr(p + 5, '\t');
      if (t && t < eol) snprintf(kind, sizeof kind, "%.*s", (int)(eol - t - 1), t + 1);
    }
  for (const char *p = raw, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1) {
    if (strncmp(p, "pass\t", 5) != 0) {
      text_add(text, cap, "%.*s\n", (int)(eol - p + 0), p);
      continue;
    }
    char name[200], summary[1100], claim[520] = "", dev[64] = "";
    const char *t = strchr(p + 5, '\t');
    if (!t || t > eol) continue;
    snprintf(name, sizeof name, "%.*s", (int)(t - p - 5), p + 5);
    snprintf(summary, sizeof summary, "%.*s", (int)(eol - t - 1), t + 1);
    line_field(raw, "claim", name, claim, sizeof claim);
    if (strcmp(kind, "npu") != 0) {
      text_add(text, cap, "pass\t%s\t\nnote\t%s\tverified: %s%s%s\n", name, name, summary,
               claim[0] ? "; claimed: " : "", claim);
      continue;
    }
    line_field(raw, "npu", name, dev, sizeof dev);
    for (char *q = claim; *q; q++)
      if (*q == '\t') *q = ' ';
    if (!dev[0] || !accel_name_ok(dev)) {
      text_add(text, cap,
               "fail\t%s\tnpu claimed, not verified: the lane names no /sys/class/accel device (accel_device slot%s%s), "
               "so no device counter can show the NPU ran its self-test%s%s\n",
               name, dev[0] ? " gave " : "", dev, claim[0] ? "; it claimed: " : "", claim);
      continue;
    }
    int ok_before = 0, ok_after = 0;
    unsigned long long b = 0, a = busy_us(dev, &ok_after);
    for (int i = 0; i < before->n; i++)
      if (strcmp(before->dev[i], dev) == 0) b = before->us[i], ok_before = before->ok[i];
    if (!ok_before || !ok_after) {
      text_add(text, cap,
               "fail\t%s\tnpu claimed, not verified: %s/class/accel/%s/device/npu_busy_time_us could not be read "
               "%s its self-test (no such NPU, or a driver without the counter)%s%s\n",
               name, sysfs_root(), dev, ok_before ? "after" : "before", claim[0] ? "; it claimed: " : "", claim);
    } else if (a <= b) {
      text_add(text, cap,
               "fail\t%s\tnpu claimed, not verified: %s's npu_busy_time_us stayed at %llu us during its self-test, so "
               "the NPU ran none of it%s%s\n",
               name, dev, b, claim[0] ? "; it claimed: " : "", claim);
    } else {
      text_add(text, cap, "pass\t%s\t\nnote\t%s\tverified: %s; %s's npu_busy_time_us advanced %llu us during it%s%s\n",
               name, name, summary, dev, a - b, claim[0] ? "; claimed: " : "", claim);
    }
  }
}

/* Spawns the helper on the sealed copy fd and collects its verdict; *refuse gets a reason when it gave no
 * complete verdict. */
static void admit(int fd, const char *path, const weft_fabric_desc *fdesc, char *text, size_t cap, char *refuse,
                  size_t rlen) {
  text[0] = '\0';
  refuse[0] = '\0';
  long timeout_s = ADMIT_TIMEOUT_S;
  if (weft_env_long("WEFT_PLUGIN_TIMEOUT", 1, 86400, &timeout_s) < 0) {
    /* a mistake said, never the default in silence (envnum.h) */
    snprintf(refuse, rlen, "WEFT_PLUGIN_TIMEOUT is '%.60s'; it takes a whole number of seconds from 1 to 86400 "
             "(default %d)", getenv("WEFT_PLUGIN_TIMEOUT"), ADMIT_TIMEOUT_S);
    return;
  }
  char helper[PATH_MAX + 32];
  if (!find_helper(helper, sizeof helper, refuse, rlen)) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(refuse, rlen, "its self-test could not start: pipe: %s", strerror(errno));
    return;
  }
  /* The helper's fds 3 (the plugin) and 4 (the verdict), from copies above 10 so dup2 never meets itself. */
  int pfd = fcntl(fd, F_DUPFD_CLOEXEC, 10), wfd = fcntl(fds[1], F_DUPFD_CLOEXEC, 10);
  close(fds[1]);
  char *raw = malloc(cap);
  if (pfd < 0 || wfd < 0 || !raw) {
    snprintf(refuse, rlen, "its self-test could not start: %s", raw ? strerror(errno) : "out of memory");
    if (pfd >= 0) close(pfd);
    if (wfd >= 0) close(wfd);
    close(fds[0]);
    free(raw);
    return;
  }
  raw[0] = '\0';
  char threads[24];
  snprintf(threads, sizeof threads, "%d", fdesc->cpu_threads);
  char *argv[] = {"weft-plugin-check", "3", "4", (char *)path, (char *)(fdesc->lanes ? fdesc->lanes : ""), threads, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd, 3);
  posix_spawn_file_actions_adddup2(&fa, wfd, 4);
  counters before;
  counters_read(&before);
  fflush(stdout);
  fflush(stderr);
  pid_t pid;
  int rc = posix_spawn(&pid, helper, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pfd);
  close(wfd);
  if (rc != 0) {
    snprintf(refuse, rlen, "its self-test could not start: %.300s: %s", helper, strerror(rc));
    close(fds[0]);
    free(raw);
    return;
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t used = 0;
  int timed_out = 0;
  for (;;) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long left_ms = (long)timeout_s * 1000 - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
    if (left_ms <= 0) {
      timed_out = 1;
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int r = poll(&p, 1, (int)left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char chunk[1024];
    ssize_t got = read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    size_t take = (size_t)got < cap - 1 - used ? (size_t)got : cap - 1 - used;
    memcpy(raw + used, chunk, take);
    used += take;
    raw[used] = '\0';
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int ended = strstr(raw, "\nend\n") != NULL;
  char hello[80];
  snprintf(hello, sizeof hello, "weft-plugin-check\t%d\t%d\n", WEFT_PLUGIN_ABI_VERSION, WEFT_LANE_ABI_VERSION);
  if (timed_out)
    snprintf(refuse, rlen, "its self-test did not finish within %ld s and was killed (WEFT_PLUGIN_TIMEOUT sets the limit)",
             timeout_s);
  else if (WIFSIGNALED(status))
    snprintf(refuse, rlen, "its self-test crashed (signal %d, %s); the plugin is not loaded", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else if (strncmp(raw, hello, strlen(hello)) != 0 && strncmp(raw, "weft-plugin-check\t", 18) == 0)
    snprintf(refuse, rlen, "its self-test ran in %.300s, built for another plugin ABI (want: %.*s): install a matching one",
             helper, (int)strlen(hello) - 1, hello);
  else if (!ended || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    snprintf(refuse, rlen, "its self-test crashed or exited before its verdict (exit status %d); the plugin is not loaded",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  settle(raw, &before, text, cap); /* refused or not: what it learnt names the plugin */
  free(raw);
}

/* The verdict for this plugin file, from the cache (same content) or a fresh self-test. Returns the entry
 * (owned by the cache) or NULL with a reason. */
static const verdict *verdict_get(const char *path, const weft_fabric_desc *fdesc, char *why, size_t wlen) {
  char key[160];
  int fd = copy_sealed(path, key, sizeof key, why, wlen);
  if (fd < 0) return NULL;
  pthread_mutex_lock(&verdict_lock);
  for (size_t i = 0; key[0] && i < nverdicts; i++)
    if (strcmp(verdicts[i]->key, key) == 0) {
      const verdict *v = verdicts[i];
      pthread_mutex_unlock(&verdict_lock);
      close(fd); /* the cached copy holds the same bytes */
      return v;
    }
  char *text = malloc(VERDICT_MAX), refuse[600];
  verdict *v = text ? calloc(1, sizeof *v) : NULL;
  verdict **grown = v ? realloc(verdicts, (nverdicts + 1) * sizeof *grown) : NULL;
  if (!grown) {
    free(text);
    free(v);
    close(fd);
    pthread_mutex_unlock(&verdict_lock);
    snprintf(why, wlen, "out of memory while admitting it");
    return NULL;
  }
  verdicts = grown;
  admit(fd, path, fdesc, text, VERDICT_MAX, refuse, sizeof refuse);
  /* A self-test that could not start says nothing of the plugin: kept, but never reused. */
  v->key = dup_str(strstr(refuse, "could not start") ? "" : key);
  v->text = text;
  v->refuse = refuse[0] ? dup_str(refuse) : NULL;
  v->fd = fd;
  size_t nlen = 0;
  v->notes = malloc(strlen(text) + 2);
  if (v->notes)
    for (const char *p = text, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1)
      if (strncmp(p, "note\t", 5) == 0) {
        memcpy(v->notes + nlen, p + 5, (size_t)(eol - p - 5));
        nlen += (size_t)(eol - p - 5);
        v->notes[nlen++] = '\0';
      }
  if (v->notes) v->notes[nlen] = '\0';
  if (!v->key || !v->notes || (refuse[0] && !v->refuse)) {
    free(v->key), free(v->text), free(v->refuse), free(v->notes), free(v);
    close(fd);
    pthread_mutex_unlock(&verdict_lock);
    snprintf(why, wlen, "out of memory while admitting it");
    return NULL;
  }
  verdicts[nverdicts] = v;
  nverdicts++;
  pthread_mutex_unlock(&verdict_lock);
  return v;
}

const char *weft_plugin_admission(const char *lane_name) {
  if (!lane_name) return NULL;
  const char *found = NULL;
  size_t nl = strlen(lane_name);
  pthread_mutex_lock(&verdict_lock);
  for (size_t i = nverdicts; i-- > 0 && !found;)
    for (const char *p = verdicts[i]->notes; *p && !found; p += strlen(p) + 1)
      if (strncmp(p, lane_name, nl) == 0 && p[nl] == '\t') found = p + nl + 1;
  pthread_mutex_unlock(&verdict_lock);
  return found;
}

/* Finds the line "tag\tname\t..." in a verdict; returns the reason field (up to the newline) or NULL. */
static const char *verdict_find(const char *text, const char *tag, const char *name, size_t *out_len) {
  size_t tl = strlen(tag), nl = strlen(name);
  for (const char *p = text; p && *p;) {
    const char *eol = strchr(p, '\n');
    if (!eol) break;
    if (strncmp(p, tag, tl) == 0 && p[tl] == '\t' && strncmp(p + tl + 1, name, nl) == 0 && p[tl + 1 + nl] == '\t') {
      const char *r = p + tl + 1 + nl + 1;
      *out_len = (size_t)(eol - r);
      return r;
    }
    p = eol + 1;
  }
  return NULL;
}

/* -------------------------------------------------------------------------------------- loading, probing */

/* ------------------------------------------------------------------------ lanes admitted without some ops */

/* A plugin lane admitted without some of the ops it offers (their self-test failed, or its supports slot
 * declines them): the fabric gets this wrapper, whose describe offers only the admitted ops (the router
 * never sends a lane an op outside its set) and whose other slots pass straight through. */
typedef struct masked_lane {
  weft_lane_vtable vt; /* the plugin lane's, slots beyond its size zeroed */
  void *self;
  uint64_t ops;        /* the admitted ops (never 0: such a lane is refused) */
} masked_lane;

static void m_describe(void *s, weft_lane_desc *out) {
  masked_lane *m = s;
  m->vt.describe(m->self, out);
  out->ops = (out->ops ? out->ops : WEFT_OPS_V1) & m->ops;
}
static void m_destroy(void *s) {
  masked_lane *m = s;
  m->vt.destroy(m->self);
  free(m);
}
static weft_status m_alloc(void *s, size_t bytes, weft_buffer **out) {
  masked_lane *m = s;
  return m->vt.buffer_alloc(m->self, bytes, out);
}
static void m_free(void *s, weft_buffer *b) {
  masked_lane *m = s;
  m->vt.buffer_free(m->self, b);
}
static weft_status m_upload(void *s, weft_buffer *b, size_t off, const void *src, size_t bytes) {
  masked_lane *m = s;
  return m->vt.upload(m->self, b, off, src, bytes);
}
static weft_status m_download(void *s, weft_buffer *b, size_t off, void *dst, size_t bytes) {
  masked_lane *m = s;
  return m->vt.download(m->self, b, off, dst, bytes);
}
static weft_status m_supports(void *s, const weft_op *op) {
  masked_lane *m = s;
  return m->vt.supports(m->self, op);
}
static weft_status m_run(void *s, const weft_op *op) {
  masked_lane *m = s;
  return m->vt.run(m->self, op);
}
static weft_status m_scope_begin(void *s) {
  masked_lane *m = s;
  return m->vt.scope_begin(m->self);
}
static weft_status m_scope_end(void *s) {
  masked_lane *m = s;
  return m->vt.scope_end(m->self);
}
static weft_status m_sync(void *s) {
  masked_lane *m = s;
  return m->vt.sync(m->self);
}
static weft_status m_flush(void *s) {
  masked_lane *m = s;
  return m->vt.flush(m->self);
}
static weft_status m_revive(void *s) {
  masked_lane *m = s;
  return m->vt.revive(m->self);
}
static weft_status m_host_register(void *s, void *ptr, size_t bytes) {
  masked_lane *m = s;
  return m->vt.host_register(m->self, ptr, bytes);
}
static void m_host_unregister(void *s, void *ptr, size_t bytes) {
  masked_lane *m = s;
  m->vt.host_unregister(m->self, ptr, bytes);
}
static int m_idle(void *s) {
  masked_lane *m = s;
  return m->vt.idle(m->self);
}
static int m_streaming(void *s, weft_buffer *buffer) {
  masked_lane *m = s;
  return m->vt.streaming(m->self, buffer);
}

/* Hands the lane to the sink offering only `ops`; the sink takes the wrapper (or destroys it). */
static weft_status add_masked(const weft_lane_sink *real, const weft_lane_vtable *vt, void *self, uint64_t ops) {
  masked_lane *m = calloc(1, sizeof *m);
  if (!m) {
    vt->destroy(self);
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  memcpy(&m->vt, vt, vt->size < sizeof m->vt ? vt->size : sizeof m->vt);
  m->self = self;
  m->ops = ops;
  /* The fabric copies the vtable it is given: this one need not outlive the call. */
  weft_lane_vtable w;
  memset(&w, 0, sizeof w);
  w.abi_version = WEFT_LANE_ABI_VERSION;
  w.size = sizeof w;
  w.describe = m_describe, w.destroy = m_destroy, w.buffer_alloc = m_alloc, w.buffer_free = m_free;
  w.upload = m_upload, w.download = m_download, w.run = m_run;
  w.supports = m->vt.supports ? m_supports : NULL;
  w.scope_begin = m->vt.scope_begin ? m_scope_begin : NULL;
  w.scope_end = m->vt.scope_end ? m_scope_end : NULL;
  w.sync = m->vt.sync ? m_sync : NULL;
  w.flush = m->vt.flush ? m_flush : NULL;
  w.revive = m->vt.revive ? m_revive : NULL;
  w.host_register = m->vt.host_register ? m_host_register : NULL;
  w.host_unregister = m->vt.host_unregister ? m_host_unregister : NULL;
  w.idle = m->vt.idle ? m_idle : NULL;
  w.streaming = m->vt.streaming ? m_streaming : NULL;
  return real->add_lane(real->ctx, &w, m);
}

/* The parent's probe goes through this sink: only lanes that passed reach the fabric, offering only the
 * ops that passed. */
typedef struct gate {
  const weft_lane_sink *real;
  const char *text;
  const char *plugin;
} gate;

static weft_status gate_add_lane(void *ctx, const weft_lane_vtable *vt, void *self) {
  gate *g = ctx;
  weft_lane_desc d;
  memset(&d, 0, sizeof d);
  if (vt && vt->abi_version == WEFT_LANE_ABI_VERSION && vt->size >= offsetof(weft_lane_vtable, supports) && vt->describe)
    vt->describe(self, &d);
  size_t len;
  if (d.name && verdict_find(g->text, "pass", d.name, &len)) {
    /* The admitted ops, from the verdict ("ops" line; none: a verdict without it admits nothing). */
    const char *hex = verdict_find(g->text, "ops", d.name, &len);
    char buf[24] = "";
    if (hex) snprintf(buf, sizeof buf, "%.*s", (int)(len < 20 ? len : 20), hex);
    const uint64_t admitted = strtoull(buf, NULL, 16);
    const uint64_t offered = d.ops ? d.ops : WEFT_OPS_V1;
    if (admitted && !(offered & ~admitted)) return g->real->add_lane(g->real->ctx, vt, self);
    if (admitted & offered) return add_masked(g->real, vt, self, admitted);
    vt->destroy(self);
    char why[300];
    snprintf(why, sizeof why, "plugin %s: the lane offers none of the ops its self-test admitted; refused", g->plugin);
    g->real->add_absent(g->real->ctx, d.name, why);
    return WEFT_OK;
  }
  if (vt && vt->size >= offsetof(weft_lane_vtable, buffer_alloc) && vt->destroy) vt->destroy(self);
  if (!d.name || !verdict_find(g->text, "fail", d.name, &len)) {
    char why[300];
    snprintf(why, sizeof why, "plugin %s added a lane its self-test did not see; refused", g->plugin);
    g->real->add_absent(g->real->ctx, d.name ? d.name : g->plugin, why);
  }
  return WEFT_OK;
}

static void gate_add_absent(void *ctx, const char *name, const char *reason) {
  gate *g = ctx;
  g->real->add_absent(g->real->ctx, name, reason);
}

/* 1 when the fabric's lane filter could take a lane of this plugin (its kind, "kind:...", "plugin"). */
static int filter_wants(const char *filter, const char *kind) {
  if (!filter || !*filter) return 1;
  const char *p = filter;
  size_t kl = strlen(kind);
  while (*p) {
    while (*p == ' ') p++;
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && p[len - 1] == ' ') len--;
    if ((len == 6 && strncmp(p, "plugin", 6) == 0) || (len >= kl && strncmp(p, kind, kl) == 0 && (len == kl || p[kl] == ':')))
      return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* The line's name and reason fields (tab-separated after the tag), copied into line; 0 if malformed. */
static int split_line(const char *p, const char *eol, char *line, size_t len, char **name, char **reason) {
  snprintf(line, len, "%.*s", (int)(eol - p), p);
  char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
  if (!t1 || !t2) return 0;
  *t1 = *t2 = '\0';
  *name = t1 + 1;
  *reason = t2 + 1;
  return 1;
}

/* Admits (or refuses) the plugin at `path` and adds what passed. The plugin's code runs in this process
 * only once its self-test, in the helper, passed. */
static void load_one(const char *path, const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char absent_name[300], why[1100], line[1100], *name, *reason;
  snprintf(absent_name, sizeof absent_name, "plugin:%s", base);
  verdict *v = (verdict *)verdict_get(path, args->desc, why, sizeof why);
  if (!v) {
    char msg[1400];
    snprintf(msg, sizeof msg, "%s: refused: %s", path, why);
    sink->add_absent(sink->ctx, absent_name, msg);
    return;
  }
  /* What the child learnt: the plugin's name and kind, then whether it was refused as a whole. */
  char kind[64] = "";
  int passed = 0, refused = v->refuse != NULL;
  for (const char *p = v->text, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1) {
    if (!split_line(p, eol, line, sizeof line, &name, &reason)) continue;
    if (strcmp(line, "desc") == 0) {
      snprintf(absent_name, sizeof absent_name, "plugin:%s", name);
      snprintf(kind, sizeof kind, "%s", reason);
    }
    passed += strcmp(line, "pass") == 0;
    refused |= strcmp(line, "refuse") == 0;
  }
  if (kind[0] && !filter_wants(args->desc->lanes, kind)) {
    sink->add_absent(sink->ctx, absent_name, "not requested (the fabric's lane filter leaves it out)");
    return;
  }
  if (v->refuse) {
    snprintf(why, sizeof why, "%s: refused: %s", path, v->refuse);
    sink->add_absent(sink->ctx, absent_name, why);
  }
  for (const char *p = v->text, *eol; (eol = strchr(p, '\n')) != NULL; p = eol + 1) {
    if (!split_line(p, eol, line, sizeof line, &name, &reason)) continue;
    if (strcmp(line, "refuse") == 0) {
      sink->add_absent(sink->ctx, absent_name, reason);
    } else if (strcmp(line, "fail") == 0) {
      snprintf(why, sizeof why, "%s, refused at admission: %s", absent_name, reason);
      sink->add_absent(sink->ctx, name, why);
    } else if (strcmp(line, "absent") == 0 && !passed) {
      /* With lanes to serve, the probe below says again what it misses. */
      sink->add_absent(sink->ctx, name, reason);
    }
  }
  if (refused || !passed) return;
  /* The very copy the helper tested (sealed: its bytes cannot change), never the path again. */
  weft_plugin_desc full;
  char load[64];
  snprintf(load, sizeof load, "/proc/self/fd/%d", v->fd);
  pthread_mutex_lock(&verdict_lock);
  void *h = weft_plugin_open(load, path, &full, why, sizeof why);
  if (h && !v->handle) v->handle = h;
  pthread_mutex_unlock(&verdict_lock);
  if (!h) {
    sink->add_absent(sink->ctx, absent_name, why);
    return;
  }
  /* Admitted lanes live in the plugin's code: it stays loaded for the life of the process. */
  gate g = {sink, v->text, full.name};
  weft_lane_sink gs = {&g, gate_add_lane, gate_add_absent};
  weft_status st = full.probe(args, &gs);
  if (st != WEFT_OK) {
    snprintf(why, sizeof why, "its probe failed after admission: %s", weft_status_str(st));
    sink->add_absent(sink->ctx, absent_name, why);
  }
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int is_so(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  return n > 3 && strcmp(d->d_name + n - 3, ".so") == 0;
}

/* Loads one entry of a path list: a file, or every *.so in a directory (in name order). */
static void load_entry(const char *entry, const weft_probe_args *args, const weft_lane_sink *sink) {
  struct stat sb;
  if (stat(entry, &sb) != 0) {
    char absent_name[2100];
    snprintf(absent_name, sizeof absent_name, "plugin:%s", entry);
    sink->add_absent(sink->ctx, absent_name, "no such file or directory");
    return;
  }
  if (!S_ISDIR(sb.st_mode)) {
    load_one(entry, args, sink);
    return;
  }
  struct dirent **names = NULL;
  int n = scandir(entry, &names, is_so, by_name);
  for (int i = 0; i < n; i++) {
    char path[2048 + 260];
    snprintf(path, sizeof path, "%s/%s", entry, names[i]->d_name);
    load_one(path, args, sink);
    free(names[i]);
  }
  free(names);
}

static void load_list(const char *list, const weft_probe_args *args, const weft_lane_sink *sink) {
  if (!list) return;
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0 && len < 2048) {
      char entry[2048];
      memcpy(entry, p, len);
      entry[len] = '\0';
      load_entry(entry, args, sink);
    }
    if (!end) break;
    p = end + 1;
  }
}

weft_status weft_plugin_probe(const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *opt = args->desc->plugins, *env = getenv("WEFT_PLUGIN_PATH");
  if ((!opt || !*opt) && (!env || !*env)) {
    sink->add_absent(sink->ctx, "plugin", "no plugin named (set WEFT_PLUGIN_PATH or weft_fabric_desc.plugins)");
    return WEFT_OK;
  }
  load_list(opt, args, sink);
  /* The same path in both lists is loaded once: the env copy is skipped when the option names it too. */
  if (env && (!opt || strcmp(opt, env) != 0)) load_list(env, args, sink);
  return WEFT_OK;
}
