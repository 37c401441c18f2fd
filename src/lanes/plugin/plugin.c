/* plugin.c - the plugin lane provider: finds the plugins named by the fabric's options and WEFT_PLUGIN_PATH,
 * loads them (dlopen), refuses those built against another ABI, and admits a plugin's lanes only after they
 * passed a self-test of every op they claim, run in a child process so that a plugin that crashes or hangs
 * is refused instead of taking the caller down. Refusals become absent lanes with the reason.
 *
 * The caller's process runs none of a plugin's code (not even its constructors: dlopen happens in the child
 * first) until the plugin passed. A verdict is kept for the life of the process (per file, device, inode
 * and modification time): a second fabric does not fork again, and a child is never forked from a process
 * in which the plugin's runtime already started threads. */
#define _GNU_SOURCE /* pipe2, strsignal */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../core/reference.h"
#include "weft_plugin.h"

#define VERDICT_MAX 8192
/* PoCL compiles its kernels with LLVM the first time: seconds, not milliseconds. */
#define ADMIT_TIMEOUT_S 120

/* ------------------------------------------------------------------------------------------ the self-test */

/* The child's error channel: the last message a lane reported. */
static char child_err[512];
static weft_status child_report(void *ctx, weft_status st, const char *fmt, va_list args) {
  (void)ctx;
  vsnprintf(child_err, sizeof child_err, fmt, args);
  return st;
}

/* Writes all of `s` to fd, ignoring what cannot be written (the parent then sees no verdict). */
static void put(int fd, const char *s) {
  size_t n = strlen(s);
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w, n -= (size_t)w;
  }
}

/* One line "tag\tname\treason\n", tabs and newlines in the fields made spaces. */
static void put_line(int fd, const char *tag, const char *name, const char *reason) {
  char line[1024];
  snprintf(line, sizeof line, "%s\t%s\t%s", tag, name ? name : "", reason ? reason : "");
  for (char *p = line + strlen(tag) + 1; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  size_t len = strlen(line);
  if (len + 1 < sizeof line) line[len] = '\n', line[len + 1] = '\0';
  put(fd, line);
}

typedef struct child_lane {
  const weft_lane_vtable *vt;
  void *self;
} child_lane;

typedef struct child_sink {
  int fd;
  child_lane lanes[16];
  int nlanes;
} child_sink;

static weft_status child_add_lane(void *ctx, const weft_lane_vtable *vt, void *self) {
  child_sink *cs = ctx;
  if (cs->nlanes >= (int)(sizeof cs->lanes / sizeof cs->lanes[0])) return WEFT_ERR_OUT_OF_MEMORY;
  cs->lanes[cs->nlanes].vt = vt;
  cs->lanes[cs->nlanes].self = self;
  cs->nlanes++;
  return WEFT_OK;
}

static void child_add_absent(void *ctx, const char *name, const char *reason) {
  put_line(((child_sink *)ctx)->fd, "absent", name, reason);
}

/* Values with full mantissas and a spread of exponents and signs, so a fused multiply-add or another
 * summation order changes bits. */
static void fill(float *x, size_t n, uint32_t *state, int specials) {
  for (size_t i = 0; i < n; i++) {
    *state = *state * 1664525u + 1013904223u;
    uint32_t r = *state;
    float v = (float)((r >> 8) & 0xffffu) / 65536.0f + 0.5f;
    v = v * (float)(1u << ((r >> 4) & 3u));
    x[i] = (r & 1u) ? -v : v;
  }
  if (specials && n >= 4) {
    x[0] = -0.0f;
    x[1] = __builtin_nanf("");
    x[2] = __builtin_inff();
    x[3] = 0.0f;
  }
}

static int same_bits(float a, float b) {
  if (a != a && b != b) return 1;
  uint32_t ua, ub;
  memcpy(&ua, &a, 4);
  memcpy(&ub, &b, 4);
  return ua == ub;
}

/* One op case: inputs of the given element counts; out counts 0 means that output is not used. */
typedef struct st_case {
  weft_op op;
  size_t nin[2], nout[2];
  int specials; /* NaN, inf and signed zeros among the inputs */
} st_case;

/* Runs the case on the lane and on the reference; 0 and a reason in why when the bits differ. */
static int run_case(const weft_lane_vtable *vt, void *self, const st_case *sc, uint32_t seed, char *why, size_t len) {
  float *host[4] = {NULL, NULL, NULL, NULL};
  weft_buffer *buf[4] = {NULL, NULL, NULL, NULL};
  size_t n[4] = {sc->nin[0], sc->nin[1], sc->nout[0], sc->nout[1]};
  int ok = 0;
  weft_op ref = sc->op, lane = sc->op;
  float *got = NULL;
  for (int i = 0; i < 4; i++) {
    if (!n[i]) continue;
    host[i] = calloc(n[i], sizeof(float));
    if (!host[i]) goto done;
    if (i < 2) fill(host[i], n[i], &seed, sc->specials);
    if (i >= 2 && sc->op.kind == WEFT_OP_AXPY) fill(host[i], n[i], &seed, 0);
    if (sc->op.kind == WEFT_OP_SOFTMAX_XENT && i == 1) /* targets: probabilities in [0, 1) */
      for (size_t e = 0; e < n[i]; e++) host[i][e] = host[i][e] < 0 ? -host[i][e] * 0.1f : host[i][e] * 0.1f;
    weft_status st = vt->buffer_alloc(self, n[i] * sizeof(float), &buf[i]);
    if (st == WEFT_OK) st = vt->upload(self, buf[i], 0, host[i], n[i] * sizeof(float));
    if (st != WEFT_OK) {
      snprintf(why, len, "%s: allocating or uploading %zu floats failed: %s%s%s", weft_op_kind_str(sc->op.kind), n[i],
               weft_status_str(st), child_err[0] ? ": " : "", child_err);
      goto done;
    }
  }
  for (int i = 0; i < 2; i++) {
    ref.in[i] = host[i], lane.in[i] = buf[i];
    ref.out[i] = host[2 + i], lane.out[i] = buf[2 + i];
  }
  weft_status st = vt->run(self, &lane);
  if (st == WEFT_OK && vt->size > offsetof(weft_lane_vtable, sync) && vt->sync) st = vt->sync(self);
  if (st != WEFT_OK) {
    snprintf(why, len, "%s: the lane failed it: %s%s%s", weft_op_kind_str(sc->op.kind), weft_status_str(st),
             child_err[0] ? ": " : "", child_err);
    goto done;
  }
  weft_reference_run(&ref);
  ok = 1;
  for (int i = 2; i < 4 && ok; i++) {
    if (!n[i]) continue;
    got = malloc(n[i] * sizeof(float));
    if (!got || vt->download(self, buf[i], 0, got, n[i] * sizeof(float)) != WEFT_OK) {
      snprintf(why, len, "%s: downloading the result failed%s%s", weft_op_kind_str(sc->op.kind), child_err[0] ? ": " : "",
               child_err);
      ok = 0;
      break;
    }
    for (size_t e = 0; e < n[i]; e++)
      if (!same_bits(got[e], host[i][e])) {
        snprintf(why, len, "%s: wrong bits at output %d element %zu: got %.9g, the reference gives %.9g",
                 weft_op_kind_str(sc->op.kind), i - 2, e, (double)got[e], (double)host[i][e]);
        ok = 0;
        break;
      }
    free(got);
    got = NULL;
  }
done:
  free(got);
  for (int i = 0; i < 4; i++) {
    if (buf[i]) vt->buffer_free(self, buf[i]);
    free(host[i]);
  }
  return ok;
}

static st_case mm_case(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int bb) {
  st_case c;
  memset(&c, 0, sizeof c);
  c.op.kind = WEFT_OP_MATMUL;
  c.op.batch = batch, c.op.m = m, c.op.n = n, c.op.k = k;
  c.op.trans_a = ta, c.op.trans_b = tb, c.op.b_batched = bb;
  c.nin[0] = (size_t)(batch * m * k);
  c.nin[1] = (size_t)((bb ? batch : 1) * k * n);
  c.nout[0] = (size_t)(batch * m * n);
  return c;
}

static st_case ew_case(weft_op_kind kind, int64_t rows, int64_t cols, int bcast) {
  st_case c;
  memset(&c, 0, sizeof c);
  c.op.kind = kind;
  c.op.rows = rows, c.op.cols = cols;
  c.op.alpha = 1.3710938f;
  c.specials = kind != WEFT_OP_SUM_ROWS && kind != WEFT_OP_SOFTMAX_XENT;
  size_t count = (size_t)(rows * cols);
  c.nin[0] = count;
  c.nout[0] = count;
  switch (kind) {
  case WEFT_OP_ADD:
    c.op.y_broadcast = bcast;
    c.nin[1] = bcast ? (size_t)cols : count;
    break;
  case WEFT_OP_RELU_BACKWARD: c.nin[1] = count; break;
  case WEFT_OP_SUM_ROWS: c.nout[0] = (size_t)cols; break;
  case WEFT_OP_SOFTMAX_XENT:
    c.nin[1] = count;
    c.nout[0] = 1;
    c.nout[1] = count;
    c.op.inv_rows = 1.0f / (float)rows;
    break;
  default: break;
  }
  return c;
}

/* The cases for one op kind: a few small shapes that still cover each form of the op. */
static int cases_for(weft_op_kind kind, st_case *out) {
  int n = 0;
  if (kind == WEFT_OP_MATMUL) {
    out[n++] = mm_case(1, 5, 7, 33, 0, 0, 0);
    out[n++] = mm_case(3, 4, 6, 17, 1, 0, 1);
    out[n++] = mm_case(2, 3, 5, 9, 0, 1, 0);
    out[n++] = mm_case(2, 6, 3, 12, 1, 1, 1);
  } else if (kind == WEFT_OP_ADD) {
    out[n++] = ew_case(kind, 3, 11, 0);
    out[n++] = ew_case(kind, 4, 7, 1);
  } else if (kind == WEFT_OP_SUM_ROWS) {
    out[n++] = ew_case(kind, 9, 5, 0);
  } else if (kind == WEFT_OP_SOFTMAX_XENT) {
    out[n++] = ew_case(kind, 3, 10, 0);
  } else {
    out[n++] = ew_case(kind, 1, 37, 0);
  }
  return n;
}

/* The self-test of one lane; 1 when admitted, else 0 and the reason. */
static int selftest_lane(const weft_plugin_desc *pd, const weft_lane_vtable *vt, void *self, char *name,
                         size_t name_len, char *why, size_t len) {
  snprintf(name, name_len, "%s:?", pd->name);
  if (!vt || vt->abi_version != WEFT_LANE_ABI_VERSION || vt->size < offsetof(weft_lane_vtable, supports) ||
      !vt->describe) {
    snprintf(why, len, "its lane vtable is of another lane ABI version (this weft speaks %d)", WEFT_LANE_ABI_VERSION);
    return 0;
  }
  weft_lane_desc d;
  memset(&d, 0, sizeof d);
  vt->describe(self, &d);
  if (d.name) snprintf(name, name_len, "%s", d.name);
  if (!d.name || !d.kind || !vt->buffer_alloc || !vt->buffer_free || !vt->upload || !vt->download || !vt->run) {
    snprintf(why, len, "the lane left required vtable slots or its name empty");
    return 0;
  }
  if (strcmp(d.kind, pd->kind) != 0) {
    snprintf(why, len, "the plugin says kind '%s' but its lane says '%s'", pd->kind, d.kind);
    return 0;
  }
  if (!(d.contracts & WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT))) {
    snprintf(why, len, "the lane does not honour the exact contract, the only one admission can check bit for bit");
    return 0;
  }
  weft_status (*supports)(void *, const weft_op *) = vt->size > offsetof(weft_lane_vtable, supports) ? vt->supports : NULL;
  for (int k = 0; k < WEFT_OP_COUNT; k++) {
    st_case cases[4];
    int nc = cases_for((weft_op_kind)k, cases);
    if (!(pd->claims & WEFT_PLUGIN_CLAIM(k))) {
      /* An op it does not claim must be declined, or the router would send it there untested. */
      if (!supports || supports(self, &cases[0].op) == WEFT_OK) {
        snprintf(why, len, "it does not claim %s but its supports slot does not decline it",
                 weft_op_kind_str((weft_op_kind)k));
        return 0;
      }
      continue;
    }
    for (int i = 0; i < nc; i++) {
      if (supports && supports(self, &cases[i].op) != WEFT_OK) {
        snprintf(why, len, "it claims %s but declines a %s case", weft_op_kind_str((weft_op_kind)k),
                 weft_op_kind_str((weft_op_kind)k));
        return 0;
      }
      child_err[0] = '\0';
      char detail[600];
      if (!run_case(vt, self, &cases[i], 0x5eed0000u + (uint32_t)(k * 16 + i), detail, sizeof detail)) {
        snprintf(why, len, "failed its self-test: %s", detail);
        return 0;
      }
    }
  }
  if (strcmp(pd->kind, "npu") == 0) {
    char receipt[512] = "";
    if (!pd->evidence || !pd->evidence(self, receipt, sizeof receipt) || !receipt[0]) {
      snprintf(why, len, "no evidence that the NPU ran the work: the plugin's evidence slot %s",
               pd->evidence ? "returned no receipt from its platform" : "is empty");
      return 0;
    }
  }
  return 1;
}

/* Loads the plugin and checks its descriptor; NULL and a reason when it is not one this weft can use.
 * `full` gets the descriptor padded with empty slots (an older, smaller descriptor has no evidence slot). */
static void *plugin_open(const char *path, weft_plugin_desc *full, char *why, size_t len) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, len, "cannot be loaded: %s", e ? e : "dlopen failed");
    return NULL;
  }
  weft_plugin_entry_fn entry;
  *(void **)&entry = dlsym(h, WEFT_PLUGIN_ENTRY_SYMBOL);
  const weft_plugin_desc *pd = entry ? entry() : NULL;
  if (!pd) {
    snprintf(why, len, "%s: not a weft plugin (no %s symbol, or it returned NULL)", path, WEFT_PLUGIN_ENTRY_SYMBOL);
  } else if (pd->abi_version != WEFT_PLUGIN_ABI_VERSION || pd->size < offsetof(weft_plugin_desc, evidence)) {
    snprintf(why, len,
             "%s was built against weft plugin ABI version %u; this weft speaks version %d: rebuild the plugin "
             "against this weft's weft_plugin.h",
             path, (unsigned)pd->abi_version, WEFT_PLUGIN_ABI_VERSION);
  } else if (!pd->name || !*pd->name || !pd->kind || !*pd->kind || !pd->probe) {
    snprintf(why, len, "%s: its descriptor has no name, kind or probe", path);
  } else if (pd->lane_abi_version != WEFT_LANE_ABI_VERSION) {
    snprintf(why, len, "%s: built against lane ABI version %u; this weft speaks version %d (weft_lane.h)", path,
             (unsigned)pd->lane_abi_version, WEFT_LANE_ABI_VERSION);
  } else {
    memset(full, 0, sizeof *full);
    memcpy(full, pd, pd->size < sizeof *full ? pd->size : sizeof *full);
    return h;
  }
  dlclose(h);
  return NULL;
}

/* The child: loads the plugin, probes, tests every lane, writes one line per finding and "end". Never
 * returns. Lines: "desc\tname\tkind", "refuse\t\treason" (the plugin as a whole), "pass\tlane\t",
 * "fail\tlane\treason", "absent\tname\treason" (what the probe said is missing). */
static void child_main(const char *path, const weft_fabric_desc *fdesc, int fd) {
  weft_plugin_desc pd;
  char why[900];
  if (!plugin_open(path, &pd, why, sizeof why)) {
    put_line(fd, "refuse", "", why);
    put(fd, "end\n");
    _exit(0);
  }
  put_line(fd, "desc", pd.name, pd.kind);
  child_sink cs;
  memset(&cs, 0, sizeof cs);
  cs.fd = fd;
  weft_lane_host host = {NULL, child_report};
  weft_probe_args args = {fdesc, &host};
  weft_lane_sink sink = {&cs, child_add_lane, child_add_absent};
  child_err[0] = '\0';
  weft_status st = pd.probe(&args, &sink);
  if (st != WEFT_OK) {
    snprintf(why, sizeof why, "its probe failed: %s%s%s", weft_status_str(st), child_err[0] ? ": " : "", child_err);
    put_line(fd, "refuse", "", why);
  }
  for (int i = 0; i < cs.nlanes; i++) {
    char name[128];
    if (selftest_lane(&pd, cs.lanes[i].vt, cs.lanes[i].self, name, sizeof name, why, sizeof why))
      put_line(fd, "pass", name, "");
    else
      put_line(fd, "fail", name, why);
  }
  put(fd, "end\n");
  _exit(0);
}

/* --------------------------------------------------------------------------------------------- admission */

typedef struct verdict {
  char *key;
  char *text;   /* the child's lines */
  char *refuse; /* set when the plugin as a whole is refused */
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

/* Forks the self-test and collects its lines; *refuse gets a reason when it gave no complete verdict. */
static void admit(const char *path, const weft_fabric_desc *fdesc, char *text, size_t cap, char *refuse,
                  size_t rlen) {
  text[0] = '\0';
  refuse[0] = '\0';
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(refuse, rlen, "its self-test could not start: pipe: %s", strerror(errno));
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(refuse, rlen, "its self-test could not start: fork: %s", strerror(errno));
    close(fds[0]), close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    child_main(path, fdesc, fds[1]);
  }
  close(fds[1]);
  int timeout_s = ADMIT_TIMEOUT_S;
  const char *env = getenv("WEFT_PLUGIN_TIMEOUT");
  if (env && atoi(env) > 0) timeout_s = atoi(env);
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
    memcpy(text + used, chunk, take);
    used += take;
    text[used] = '\0';
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int ended = strstr(text, "end\n") == text || strstr(text, "\nend\n") != NULL;
  if (timed_out)
    snprintf(refuse, rlen, "its self-test did not finish within %d s and was killed (WEFT_PLUGIN_TIMEOUT sets the limit)",
             timeout_s);
  else if (WIFSIGNALED(status))
    snprintf(refuse, rlen, "its self-test crashed (signal %d, %s); the plugin is not loaded", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else if (!ended || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    snprintf(refuse, rlen, "its self-test crashed or exited before its verdict (exit status %d); the plugin is not loaded",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* The verdict for this plugin file, from the cache or a fresh self-test. Returns the entry (owned by the
 * cache) or NULL when out of memory. */
static const verdict *verdict_get(const char *path, const weft_fabric_desc *fdesc) {
  struct stat sb;
  char key[1200], *real = realpath(path, NULL); /* one verdict for one file, however it is named */
  if (real) path = real;
  if (stat(path, &sb) == 0)
    snprintf(key, sizeof key, "%s|%llu|%llu|%lld", path, (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino,
             (long long)sb.st_mtime);
  else
    snprintf(key, sizeof key, "%s", path);
  pthread_mutex_lock(&verdict_lock);
  for (size_t i = 0; i < nverdicts; i++)
    if (strcmp(verdicts[i]->key, key) == 0) {
      const verdict *v = verdicts[i];
      pthread_mutex_unlock(&verdict_lock);
      free(real);
      return v;
    }
  char *text = malloc(VERDICT_MAX), refuse[600];
  verdict *v = text ? calloc(1, sizeof *v) : NULL;
  verdict **grown = v ? realloc(verdicts, (nverdicts + 1) * sizeof *grown) : NULL;
  if (!grown) {
    free(text);
    free(v);
    free(real);
    pthread_mutex_unlock(&verdict_lock);
    return NULL;
  }
  verdicts = grown;
  admit(path, fdesc, text, VERDICT_MAX, refuse, sizeof refuse);
  free(real);
  v->key = dup_str(key);
  v->text = text;
  v->refuse = refuse[0] ? dup_str(refuse) : NULL;
  if (!v->key || (refuse[0] && !v->refuse)) {
    free(v->key), free(v->text), free(v->refuse), free(v);
    pthread_mutex_unlock(&verdict_lock);
    return NULL;
  }
  verdicts[nverdicts] = v;
  nverdicts++;
  pthread_mutex_unlock(&verdict_lock);
  return v;
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

/* The parent's probe goes through this sink: only lanes that passed reach the fabric. */
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
  if (d.name && verdict_find(g->text, "pass", d.name, &len)) return g->real->add_lane(g->real->ctx, vt, self);
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
 * only once its self-test, in a child, passed. */
static void load_one(const char *path, const weft_probe_args *args, const weft_lane_sink *sink) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char absent_name[300], why[1100], line[1100], *name, *reason;
  snprintf(absent_name, sizeof absent_name, "plugin:%s", base);
  const verdict *v = verdict_get(path, args->desc);
  if (!v) {
    sink->add_absent(sink->ctx, absent_name, "out of memory while admitting it");
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
  weft_plugin_desc full;
  void *h = plugin_open(path, &full, why, sizeof why);
  if (!h) { /* the file changed since its self-test */
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
