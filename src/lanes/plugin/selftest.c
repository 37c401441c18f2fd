/* selftest.c - a plugin's admission self-test, run by the helper executable weft-plugin-check (never in
 * the caller's process): loads the plugin, probes it, runs every op each lane claims and compares the bits
 * with weft's reference, and writes its findings as lines to a pipe the caller reads (plugin.c).
 *
 * The cases cover small shapes in every form of each op and matmuls with large k (up to 4099) and odd m,
 * n and k, so a lane that fuses multiply-adds or reorders the sum only past some size is caught. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/reference.h"
#include "selftest.h"

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

/* The cases for one op kind: a few small shapes that still cover each form of the op (and, for matmul,
 * large k and odd shapes). At most ST_MAX_CASES. */
#define ST_MAX_CASES 8
static int cases_for(weft_op_kind kind, st_case *out) {
  int n = 0;
  if (kind == WEFT_OP_MATMUL) {
    out[n++] = mm_case(1, 5, 7, 33, 0, 0, 0);
    out[n++] = mm_case(3, 4, 6, 17, 1, 0, 1);
    out[n++] = mm_case(2, 3, 5, 9, 0, 1, 0);
    out[n++] = mm_case(2, 6, 3, 12, 1, 1, 1);
    /* Large k and shapes that are no multiple of any tile: a lane that fuses multiply-adds, or sums in
     * another order, only past some k or on full tiles differs here. About 0.4 M multiply-adds in all. */
    out[n++] = mm_case(1, 3, 5, 2100, 0, 0, 0);
    out[n++] = mm_case(1, 7, 9, 2111, 1, 1, 0);
    out[n++] = mm_case(2, 5, 3, 4099, 0, 1, 1);
    out[n++] = mm_case(1, 33, 17, 257, 1, 0, 0);
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
                         size_t name_len, char *why, size_t len, int *out_cases) {
  *out_cases = 0;
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
  if (d.ops & ~WEFT_OPS_V1) {
    snprintf(why, len, "the lane offers ops beyond the version-1 set (ops 0x%llx), which admission cannot check yet",
             (unsigned long long)d.ops);
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
  for (int k = 0; k < WEFT_OP_V1_COUNT; k++) {
    st_case cases[ST_MAX_CASES];
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
      (*out_cases)++;
    }
  }
  return 1;
}

void *weft_plugin_open(const char *load, const char *path, weft_plugin_desc *full, char *why, size_t len) {
  void *h = dlopen(load, RTLD_NOW | RTLD_LOCAL);
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

int weft_plugin_selftest(const char *load, const char *path, const weft_fabric_desc *fdesc, int fd) {
  weft_plugin_desc pd;
  char why[900];
  char hello[128];
  snprintf(hello, sizeof hello, "weft-plugin-check\t%d\t%d\n", WEFT_PLUGIN_ABI_VERSION, WEFT_LANE_ABI_VERSION);
  put(fd, hello);
  if (!weft_plugin_open(load, path, &pd, why, sizeof why)) {
    put_line(fd, "refuse", "", why);
    put(fd, "end\n");
    return 0;
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
    char name[128], note[200];
    int ncases = 0;
    if (selftest_lane(&pd, cs.lanes[i].vt, cs.lanes[i].self, name, sizeof name, why, sizeof why, &ncases)) {
      snprintf(note, sizeof note, "%d op cases bit for bit against the reference, matmul up to k = 4099 and odd m, n, k",
               ncases);
      put_line(fd, "pass", name, note);
    } else {
      put_line(fd, "fail", name, why);
    }
    /* What an NPU-kind lane says of itself; the caller checks the device's own counter (plugin.c). */
    if (strcmp(pd.kind, "npu") == 0) {
      char dev[64] = "", receipt[512] = "";
      if (pd.size >= offsetof(weft_plugin_desc, accel_device) + sizeof pd.accel_device && pd.accel_device &&
          !pd.accel_device(cs.lanes[i].self, dev, sizeof dev))
        dev[0] = '\0';
      put_line(fd, "npu", name, dev);
      if (pd.evidence && pd.evidence(cs.lanes[i].self, receipt, sizeof receipt) && receipt[0])
        put_line(fd, "claim", name, receipt);
    }
  }
  put(fd, "end\n");
  return 0;
}
