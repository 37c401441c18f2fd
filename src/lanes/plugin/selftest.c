/* selftest.c - a plugin's admission self-test, run by the helper executable weft-plugin-check (never in
 * the caller's process): loads the plugin, probes it, runs every op each lane claims and compares the bits
 * with weft's reference, and writes its findings as lines to a pipe the caller reads (plugin.c).
 *
 * The cases cover small shapes in every form of each op and matmuls with large k (up to 4099) and odd m,
 * n and k, so a lane that fuses multiply-adds or reorders the sum only past some size is caught; the
 * transformer ops get their optional operands left out and given, odd widths, repeated token rows (the
 * embedding backward's accumulation order), sumsq over several chunks, int32 index operands and int32 data,
 * and inputs with NaNs of several payloads, +-inf, -0 and subnormals. Every output is compared bit for bit,
 * NaNs too (the reference stores every NaN as 0x7fc00000). A lane that fails a version-1 op is refused;
 * one that fails a transformer op is admitted without it (selftest_lane). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/optable.h"
#include "../../core/reference.h"
#include "../../core/reference_tx.h"
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
static float next_value(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  uint32_t r = *state;
  float v = (float)((r >> 8) & 0xffffu) / 65536.0f + 0.5f;
  v = v * (float)(1u << ((r >> 4) & 3u));
  return (r & 1u) ? -v : v;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The special values the transformer ops' cases sprinkle among their inputs: NaNs of several payloads and
 * both signs, +-inf, -0, +0, subnormals (the smallest, a mid one, negative) and the largest normal. */
static const uint32_t SPECIALS[] = {0x7fc00000u, 0xffc00001u, 0x7fa00005u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                    0x00000000u, 0x00000001u, 0x00400123u, 0x807fffffu, 0x7f7fffffu};
#define NSPECIALS (sizeof SPECIALS / sizeof SPECIALS[0])

/* Input fills. */
enum {
  FILL_PLAIN = 0,   /* full mantissas in +-[0.5, 8) */
  FILL_EDGE = 1,    /* the version-1 specials at the start: -0, NaN, inf, 0 */
  FILL_SPARSE = 2,  /* plain, with every 7th element one of SPECIALS in turn */
  FILL_WIDE = 3,    /* magnitudes from 2^-24 to 2^6, and every 11th element one of SPECIALS */
  FILL_TARGETS = 4  /* probabilities in [0, 0.8) (softmax_xent's targets) */
};

static void fill(float *x, size_t n, uint32_t *state, int how) {
  for (size_t i = 0; i < n; i++) {
    float v = next_value(state);
    if (how == FILL_WIDE) v = v * from_bits((uint32_t)(103 + (*state >> 11) % 30) << 23); /* 2^-24 .. 2^5 */
    if (how == FILL_TARGETS) v = (v < 0 ? -v : v) * 0.1f;
    x[i] = v;
  }
  if (how == FILL_EDGE && n >= 4) {
    x[0] = -0.0f;
    x[1] = __builtin_nanf("");
    x[2] = __builtin_inff();
    x[3] = 0.0f;
  }
  const size_t stride = how == FILL_SPARSE ? 7 : how == FILL_WIDE ? 11 : 0;
  for (size_t i = 3, k = *state % NSPECIALS; stride && i < n; i += stride, k = (k + 1) % NSPECIALS)
    x[i] = from_bits(SPECIALS[k]);
}

/* One op case: the op (its fields filled as the core fills them), each operand's element count (0: not
 * given, NULL), how float inputs are filled, and for int32 inputs the range [0, ilimit) of their values
 * (0: any 32 bits, for data that is only moved). Outputs the op reads as well as writes (the op table's
 * out_reads) start from the same values on both sides; the others from a sentinel NaN the op must
 * overwrite. */
typedef struct st_case {
  weft_op op;
  size_t nin[WEFT_OP_MAX_IN], nout[WEFT_OP_MAX_OUT];
  int how;
  int64_t ilimit[WEFT_OP_MAX_IN];
  char what[96];
} st_case;

#define ST_OPERANDS (WEFT_OP_MAX_IN + WEFT_OP_MAX_OUT)

/* Runs the case on the lane and on the reference; 0 and a reason in why when a bit differs (NaNs too: the
 * reference stores every NaN as 0x7fc00000, and so must the lane). Operand i < WEFT_OP_MAX_IN is in[i],
 * the rest out[i - WEFT_OP_MAX_IN]. */
static int run_case(const weft_lane_vtable *vt, void *self, const st_case *sc, uint32_t seed, char *why, size_t len) {
  uint32_t *host[ST_OPERANDS] = {0};
  weft_buffer *buf[ST_OPERANDS] = {0};
  size_t n[ST_OPERANDS];
  const uint32_t out_reads = weft_optable[sc->op.kind].out_reads;
  const char *name = weft_op_kind_str(sc->op.kind);
  int ok = 0;
  weft_op ref = sc->op, lane = sc->op;
  uint32_t *got = NULL;
  for (int i = 0; i < ST_OPERANDS; i++) n[i] = i < WEFT_OP_MAX_IN ? sc->nin[i] : sc->nout[i - WEFT_OP_MAX_IN];
  for (int i = 0; i < ST_OPERANDS; i++) {
    if (!n[i]) continue;
    const int is_in = i < WEFT_OP_MAX_IN, o = i - WEFT_OP_MAX_IN;
    const weft_dtype dt = is_in ? sc->op.in_dtype[i] : sc->op.out_dtype[o];
    host[i] = calloc(n[i], sizeof(uint32_t));
    if (!host[i]) {
      snprintf(why, len, "%s: out of host memory for the self-test", name);
      goto done;
    }
    if (dt == WEFT_DTYPE_I32) {
      const int64_t lim = is_in ? sc->ilimit[i] : 0;
      for (size_t e = 0; e < n[i]; e++) {
        seed = seed * 1664525u + 1013904223u;
        host[i][e] = lim > 0 ? (uint32_t)((seed >> 7) % (uint32_t)lim) : seed ^ (seed >> 13);
      }
    } else if (is_in || (out_reads >> o) & 1u) {
      int how = sc->how;
      if (sc->op.kind == WEFT_OP_SOFTMAX_XENT && i == 1) how = FILL_TARGETS;
      if (!is_in) how = FILL_PLAIN; /* accumulators (axpy's y too) start finite: specials come through inputs */
      fill((float *)host[i], n[i], &seed, how);
    } else {
      for (size_t e = 0; e < n[i]; e++) host[i][e] = 0x7fa5a5a5u; /* a NaN the op must overwrite */
    }
    weft_status st = vt->buffer_alloc(self, n[i] * sizeof(uint32_t), &buf[i]);
    if (st == WEFT_OK) st = vt->upload(self, buf[i], 0, host[i], n[i] * sizeof(uint32_t));
    if (st != WEFT_OK) {
      snprintf(why, len, "%s: allocating or uploading %zu elements failed: %s%s%s", name, n[i], weft_status_str(st),
               child_err[0] ? ": " : "", child_err);
      goto done;
    }
  }
  for (int i = 0; i < WEFT_OP_MAX_IN; i++) ref.in[i] = host[i], lane.in[i] = buf[i];
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++)
    ref.out[o] = host[WEFT_OP_MAX_IN + o], lane.out[o] = buf[WEFT_OP_MAX_IN + o];
  weft_status st = vt->run(self, &lane);
  if (st == WEFT_OK && vt->size > offsetof(weft_lane_vtable, sync) && vt->sync) st = vt->sync(self);
  if (st != WEFT_OK) {
    snprintf(why, len, "%s (%s): the lane failed it: %s%s%s", name, sc->what, weft_status_str(st),
             child_err[0] ? ": " : "", child_err);
    goto done;
  }
  if (sc->op.kind < WEFT_OP_V1_COUNT) {
    weft_reference_run(&ref);
  } else {
    weft_lane_host host_ch = {NULL, child_report};
    child_err[0] = '\0';
    if ((st = weft_optable_host_run(&ref, &host_ch)) != WEFT_OK) {
      snprintf(why, len, "%s (%s): the reference refused the case (a self-test bug): %s", name, sc->what, child_err);
      goto done;
    }
  }
  ok = 1;
  for (int i = WEFT_OP_MAX_IN; i < ST_OPERANDS && ok; i++) {
    if (!n[i]) continue;
    got = malloc(n[i] * sizeof(uint32_t));
    if (!got || vt->download(self, buf[i], 0, got, n[i] * sizeof(uint32_t)) != WEFT_OK) {
      snprintf(why, len, "%s: downloading the result failed%s%s", name, child_err[0] ? ": " : "", child_err);
      ok = 0;
      break;
    }
    for (size_t e = 0; e < n[i]; e++)
      if (got[e] != host[i][e]) {
        const int o = i - WEFT_OP_MAX_IN;
        const char *oname = weft_optable[sc->op.kind].out_name[o];
        const int nan_rule = (got[e] & 0x7fffffffu) > 0x7f800000u && got[e] != 0x7fc00000u;
        snprintf(why, len,
                 "%s (%s): wrong bits at output %s element %zu: got 0x%08x (%.9g), the reference gives 0x%08x (%.9g)%s",
                 name, sc->what, oname ? oname : "?", e, got[e], (double)from_bits(got[e]), host[i][e],
                 (double)from_bits(host[i][e]), nan_rule ? "; every NaN stored must be 0x7fc00000" : "");
        ok = 0;
        break;
      }
    free(got);
    got = NULL;
  }
done:
  free(got);
  for (int i = 0; i < ST_OPERANDS; i++) {
    if (buf[i]) vt->buffer_free(self, buf[i]);
    free(host[i]);
  }
  return ok;
}

/* A case of op `kind` with every operand's dtype from the op table (WEFT_DT_SAME: `same`). */
static st_case base_case(weft_op_kind kind, weft_dtype same, const char *what) {
  st_case c;
  memset(&c, 0, sizeof c);
  c.op.kind = kind;
  c.op.contract = WEFT_CONTRACT_EXACT;
  const weft_optable_entry *e = &weft_optable[kind];
  for (int i = 0; i < WEFT_OP_MAX_IN; i++)
    c.op.in_dtype[i] = i < e->nin && e->in_dt[i] == WEFT_DT_I32 ? WEFT_DTYPE_I32
                       : i < e->nin && e->in_dt[i] == WEFT_DT_SAME ? same
                                                                   : WEFT_DTYPE_F32;
  for (int o = 0; o < WEFT_OP_MAX_OUT; o++)
    c.op.out_dtype[o] = o < e->nout && e->out_dt[o] == WEFT_DT_SAME ? same : WEFT_DTYPE_F32;
  snprintf(c.what, sizeof c.what, "%s", what);
  return c;
}

static st_case mm_case(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int bb) {
  st_case c = base_case(WEFT_OP_MATMUL, WEFT_DTYPE_F32, "");
  c.op.batch = batch, c.op.m = m, c.op.n = n, c.op.k = k;
  c.op.trans_a = ta, c.op.trans_b = tb, c.op.b_batched = bb;
  c.nin[0] = (size_t)(batch * m * k);
  c.nin[1] = (size_t)((bb ? batch : 1) * k * n);
  c.nout[0] = (size_t)(batch * m * n);
  snprintf(c.what, sizeof c.what, "batch %lld, m %lld, n %lld, k %lld%s%s%s", (long long)batch, (long long)m,
           (long long)n, (long long)k, ta ? ", a^T" : "", tb ? ", b^T" : "", bb ? ", b batched" : "");
  return c;
}

static st_case ew_case(weft_op_kind kind, int64_t rows, int64_t cols, int bcast) {
  st_case c = base_case(kind, WEFT_DTYPE_F32, "");
  c.op.rows = rows, c.op.cols = cols;
  c.op.alpha = 1.3710938f;
  c.how = kind != WEFT_OP_SUM_ROWS && kind != WEFT_OP_SOFTMAX_XENT ? FILL_EDGE : FILL_PLAIN;
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
  snprintf(c.what, sizeof c.what, "%lld x %lld%s", (long long)rows, (long long)cols, bcast ? ", y broadcast" : "");
  return c;
}

/* ---------------------------------------------------------------- the transformer ops' cases */

static const char *how_str(int how) { return how == FILL_SPARSE ? "specials" : how == FILL_WIDE ? "wide, specials" : "plain"; }

static st_case embedding_case(int backward, int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int use_pos,
                              int tables, int how) {
  st_case c = base_case(backward ? WEFT_OP_EMBEDDING_BACKWARD : WEFT_OP_EMBEDDING, WEFT_DTYPE_F32, "");
  const size_t bt = (size_t)(B * T);
  c.how = how;
  if (!backward) {
    c.nin[0] = bt, c.ilimit[0] = V;
    c.nin[1] = use_pos ? bt : 0, c.ilimit[1] = P;
    c.nin[2] = (size_t)(V * C), c.nin[3] = (size_t)(P * C);
    c.nout[0] = bt * (size_t)C;
  } else {
    c.nin[0] = bt * (size_t)C;
    c.nin[1] = bt, c.ilimit[1] = V;
    c.nin[2] = use_pos ? bt : 0, c.ilimit[2] = P;
    c.nout[0] = tables & 1 ? (size_t)(V * C) : 0;
    c.nout[1] = tables & 2 ? (size_t)(P * C) : 0;
    if (!(tables & 1)) V = (int64_t)1 << 31; /* a table not given bounds nothing (optable.c) */
    if (!(tables & 2)) P = (int64_t)1 << 31;
  }
  const int64_t ip[5] = {B, T, C, V, P};
  memcpy(c.op.iparam, ip, sizeof ip);
  c.op.rows = B * T, c.op.cols = C;
  snprintf(c.what, sizeof c.what, "B %lld, T %lld, C %lld, %s, %s%s", (long long)B, (long long)T, (long long)C,
           use_pos ? "pos given" : "pos NULL", how_str(how),
           backward && tables != 3 ? (tables == 1 ? ", dwte only" : ", dwpe only") : "");
  return c;
}

static st_case layernorm_case(int backward, int64_t N, int64_t C, int stats, int how) {
  st_case c = base_case(backward ? WEFT_OP_LAYERNORM_BACKWARD : WEFT_OP_LAYERNORM, WEFT_DTYPE_F32, "");
  const size_t nc = (size_t)(N * C);
  c.how = how;
  if (!backward) {
    c.nin[0] = nc, c.nin[1] = (size_t)C, c.nin[2] = (size_t)C;
    c.nout[0] = nc, c.nout[1] = stats ? (size_t)N : 0, c.nout[2] = stats ? (size_t)N : 0;
    c.op.fparam[0] = 1e-5f;
  } else {
    c.nin[0] = nc, c.nin[1] = nc, c.nin[2] = (size_t)N, c.nin[3] = (size_t)N, c.nin[4] = (size_t)C;
    c.nout[0] = nc, c.nout[1] = stats ? (size_t)C : 0, c.nout[2] = stats ? (size_t)C : 0;
  }
  c.op.iparam[0] = N, c.op.iparam[1] = C;
  c.op.rows = N, c.op.cols = C;
  snprintf(c.what, sizeof c.what, "N %lld, C %lld, %s%s", (long long)N, (long long)C, how_str(how),
           stats ? "" : backward ? ", dgamma/dbeta NULL" : ", mean/rstd NULL");
  return c;
}

static st_case elementwise_tx_case(weft_op_kind kind, int64_t n, int how) {
  st_case c = base_case(kind, WEFT_DTYPE_F32, "");
  c.how = how;
  c.nin[0] = (size_t)n, c.nout[0] = (size_t)n;
  if (kind == WEFT_OP_GELU_BACKWARD) c.nin[1] = (size_t)n;
  c.op.iparam[0] = n;
  c.op.rows = 1, c.op.cols = n;
  snprintf(c.what, sizeof c.what, "n %lld, %s", (long long)n, how_str(how));
  return c;
}

static st_case attention_case(weft_op_kind kind, int64_t B, int64_t T, int64_t C, int64_t NH, int with_opt, int how) {
  st_case c = base_case(kind, WEFT_DTYPE_F32, "");
  const size_t btc = (size_t)(B * T * C), att = (size_t)(B * NH * T * T);
  c.how = how;
  if (kind == WEFT_OP_ATTENTION) {
    c.nin[0] = 3 * btc;
    c.nout[0] = btc, c.nout[1] = att, c.nout[2] = with_opt ? att : 0;
  } else {
    c.nin[0] = btc, c.nin[1] = 3 * btc, c.nin[2] = att;
    c.nout[0] = 3 * btc;
  }
  c.op.iparam[0] = B, c.op.iparam[1] = T, c.op.iparam[2] = C, c.op.iparam[3] = NH;
  c.op.rows = B * T, c.op.cols = kind == WEFT_OP_ATTENTION ? C : 3 * C;
  snprintf(c.what, sizeof c.what, "B %lld, T %lld, C %lld, NH %lld, %s%s", (long long)B, (long long)T, (long long)C,
           (long long)NH, how_str(how), kind == WEFT_OP_ATTENTION && !with_opt ? ", preatt NULL" : "");
  return c;
}

static st_case attention_cached_case(int64_t B, int64_t Tmax, int64_t C, int64_t NH, int64_t t0, int64_t Tq, int with_att,
                                     int how) {
  st_case c = base_case(WEFT_OP_ATTENTION_CACHED, WEFT_DTYPE_F32, "");
  c.how = how;
  c.nin[0] = (size_t)(B * Tmax * 3 * C);
  c.nout[0] = (size_t)(B * Tq * C), c.nout[1] = with_att ? (size_t)(B * NH * Tq * Tmax) : 0;
  const int64_t ip[6] = {B, Tmax, C, NH, t0, Tq};
  memcpy(c.op.iparam, ip, sizeof ip);
  c.op.rows = B * Tq, c.op.cols = C;
  snprintf(c.what, sizeof c.what, "B %lld, Tmax %lld, C %lld, NH %lld, t0 %lld, Tq %lld, %s%s", (long long)B,
           (long long)Tmax, (long long)C, (long long)NH, (long long)t0, (long long)Tq, how_str(how),
           with_att ? "" : ", att NULL");
  return c;
}

static st_case softmax_case(int backward, int64_t R, int64_t T, float scale, int how) {
  st_case c = base_case(backward ? WEFT_OP_CAUSAL_SOFTMAX_BACKWARD : WEFT_OP_CAUSAL_SOFTMAX, WEFT_DTYPE_F32, "");
  const size_t n = (size_t)(R * T * T);
  c.how = how;
  c.nin[0] = n, c.nin[1] = backward ? n : 0, c.nout[0] = n;
  c.op.iparam[0] = R, c.op.iparam[1] = T, c.op.fparam[0] = scale;
  c.op.rows = R * T, c.op.cols = T;
  snprintf(c.what, sizeof c.what, "R %lld, T %lld, scale %.9g, %s", (long long)R, (long long)T, (double)scale, how_str(how));
  return c;
}

static st_case xent_case(int backward, int64_t N, int64_t V, int how) {
  st_case c = base_case(backward ? WEFT_OP_CROSSENTROPY_BACKWARD : WEFT_OP_CROSSENTROPY, WEFT_DTYPE_F32, "");
  c.how = how;
  c.nin[0] = (size_t)(N * V), c.nin[1] = (size_t)N, c.ilimit[1] = V;
  if (backward) c.nin[2] = (size_t)N;
  c.nout[0] = backward ? (size_t)(N * V) : (size_t)N;
  c.op.iparam[0] = N, c.op.iparam[1] = V;
  c.op.rows = backward ? N : 1, c.op.cols = backward ? V : N;
  snprintf(c.what, sizeof c.what, "N %lld, V %lld, %s", (long long)N, (long long)V, how_str(how));
  return c;
}

static st_case adamw_case(int64_t n, int64_t step, float wd, int how) {
  st_case c = base_case(WEFT_OP_ADAMW, WEFT_DTYPE_F32, "");
  c.how = how;
  c.nin[0] = (size_t)n, c.nout[0] = c.nout[1] = c.nout[2] = (size_t)n;
  c.op.iparam[0] = n;
  const float fp[7] = {3e-4f, 0.9f, 0.999f, 1e-8f, wd, weft_ref_adamw_bias_correction(0.9f, step),
                       weft_ref_adamw_bias_correction(0.999f, step)};
  memcpy(c.op.fparam, fp, sizeof fp);
  c.op.rows = 1, c.op.cols = n;
  snprintf(c.what, sizeof c.what, "n %lld, step %lld, weight decay %g, %s", (long long)n, (long long)step, (double)wd,
           how_str(how));
  return c;
}

static st_case sumsq_case(int64_t n, int how) {
  st_case c = base_case(WEFT_OP_SUMSQ, WEFT_DTYPE_F32, "");
  c.how = how;
  c.nin[0] = (size_t)n, c.nout[0] = 1;
  c.op.iparam[0] = n;
  c.op.rows = 1, c.op.cols = n;
  snprintf(c.what, sizeof c.what, "n %lld (chunks of %d), %s", (long long)n, WEFT_SUMSQ_CHUNK, how_str(how));
  return c;
}

static st_case permute_case(weft_dtype dt, int rank, const int64_t *dims, const int *perm) {
  st_case c = base_case(WEFT_OP_PERMUTE, dt, "");
  c.how = FILL_SPARSE;
  int64_t n = 1, packed = 0;
  c.op.iparam[0] = rank;
  for (int a = 0; a < 4; a++) {
    c.op.iparam[1 + a] = a < rank ? dims[a] : 1;
    n *= a < rank ? dims[a] : 1;
    packed |= (int64_t)(a < rank ? perm[a] : a) << (2 * a);
  }
  c.op.iparam[5] = packed;
  c.nin[0] = c.nout[0] = (size_t)n;
  c.op.rows = 1, c.op.cols = n;
  snprintf(c.what, sizeof c.what, "%s, rank %d, perm %d%d%d%d", dt == WEFT_DTYPE_I32 ? "int32" : "fp32", rank, perm[0],
           perm[1], rank > 2 ? perm[2] : 0, rank > 3 ? perm[3] : 0);
  return c;
}

static st_case copy_slice_case(weft_dtype dt, int64_t outer, int64_t src_len, int64_t dst_len, int64_t inner,
                               int64_t offset) {
  st_case c = base_case(WEFT_OP_COPY_SLICE, dt, "");
  c.how = FILL_SPARSE;
  c.nin[0] = (size_t)(outer * src_len * inner), c.nout[0] = (size_t)(outer * dst_len * inner);
  const int64_t ip[5] = {outer, src_len, dst_len, inner, offset};
  memcpy(c.op.iparam, ip, sizeof ip);
  c.op.rows = 1, c.op.cols = (int64_t)c.nin[0];
  snprintf(c.what, sizeof c.what, "%s, outer %lld, %lld rows into %lld at %lld, inner %lld",
           dt == WEFT_DTYPE_I32 ? "int32" : "fp32", (long long)outer, (long long)src_len, (long long)dst_len,
           (long long)offset, (long long)inner);
  return c;
}

/* The cases for one op kind: a few small shapes that still cover each form of the op (and, for matmul,
 * large k and odd shapes; for the transformer ops, their optional operands left out, odd widths and the
 * special values). At most ST_MAX_CASES. */
#define ST_MAX_CASES 8
static int cases_for(weft_op_kind kind, st_case *out) {
  int n = 0;
  switch (kind) {
  case WEFT_OP_MATMUL:
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
    break;
  case WEFT_OP_MATMUL_ACC:
    /* c starts from the filled values the op reads (out_reads) and each sum continues from them */
    out[n++] = mm_case(1, 5, 7, 33, 0, 0, 0);
    out[n++] = mm_case(2, 6, 3, 12, 1, 1, 1);
    out[n++] = mm_case(1, 7, 9, 2111, 1, 0, 0);
    for (int i = 0; i < n; i++) out[i].op.kind = WEFT_OP_MATMUL_ACC;
    break;
  case WEFT_OP_ADD:
    out[n++] = ew_case(kind, 3, 11, 0);
    out[n++] = ew_case(kind, 4, 7, 1);
    break;
  case WEFT_OP_SUM_ROWS: out[n++] = ew_case(kind, 9, 5, 0); break;
  case WEFT_OP_SOFTMAX_XENT: out[n++] = ew_case(kind, 3, 10, 0); break;
  case WEFT_OP_RELU:
  case WEFT_OP_RELU_BACKWARD:
  case WEFT_OP_SCALE:
  case WEFT_OP_AXPY: out[n++] = ew_case(kind, 1, 37, 0); break;
  case WEFT_OP_EMBEDDING:
  case WEFT_OP_EMBEDDING_BACKWARD: {
    /* V below B*T: rows repeat, so the backward's accumulation order per row shows */
    const int bw = kind == WEFT_OP_EMBEDDING_BACKWARD;
    out[n++] = embedding_case(bw, 2, 5, 13, 4, 7, 1, 3, FILL_PLAIN);
    out[n++] = embedding_case(bw, 3, 4, 9, 5, 4, 0, 3, FILL_SPARSE);
    out[n++] = embedding_case(bw, 1, 6, 33, 3, 6, 1, bw ? 1 : 3, FILL_WIDE);
    if (bw) out[n++] = embedding_case(bw, 2, 3, 5, 7, 3, 0, 2, FILL_SPARSE);
    break;
  }
  case WEFT_OP_LAYERNORM:
  case WEFT_OP_LAYERNORM_BACKWARD: {
    const int bw = kind == WEFT_OP_LAYERNORM_BACKWARD;
    out[n++] = layernorm_case(bw, 5, 19, 1, FILL_PLAIN);
    out[n++] = layernorm_case(bw, 4, 37, 1, FILL_SPARSE);
    out[n++] = layernorm_case(bw, 3, 64, 0, FILL_WIDE);
    out[n++] = layernorm_case(bw, 1, 1, 1, FILL_PLAIN);
    break;
  }
  case WEFT_OP_GELU:
  case WEFT_OP_GELU_BACKWARD:
    out[n++] = elementwise_tx_case(kind, 67, FILL_PLAIN);
    out[n++] = elementwise_tx_case(kind, 130, FILL_SPARSE);
    out[n++] = elementwise_tx_case(kind, 301, FILL_WIDE);
    break;
  case WEFT_OP_ATTENTION:
  case WEFT_OP_ATTENTION_BACKWARD:
    out[n++] = attention_case(kind, 2, 7, 12, 3, 1, FILL_PLAIN);
    out[n++] = attention_case(kind, 1, 9, 20, 2, 0, FILL_SPARSE);
    out[n++] = attention_case(kind, 1, 1, 8, 1, 1, FILL_PLAIN);
    out[n++] = attention_case(kind, 2, 5, 6, 3, 1, FILL_WIDE);
    break;
  case WEFT_OP_ATTENTION_CACHED:
    out[n++] = attention_cached_case(2, 9, 12, 3, 4, 3, 1, FILL_PLAIN);
    out[n++] = attention_cached_case(1, 8, 20, 2, 0, 1, 0, FILL_SPARSE);
    out[n++] = attention_cached_case(1, 6, 8, 2, 5, 1, 1, FILL_WIDE);
    out[n++] = attention_cached_case(2, 5, 6, 3, 0, 5, 0, FILL_PLAIN);
    break;
  case WEFT_OP_CAUSAL_SOFTMAX:
  case WEFT_OP_CAUSAL_SOFTMAX_BACKWARD: {
    const int bw = kind == WEFT_OP_CAUSAL_SOFTMAX_BACKWARD;
    out[n++] = softmax_case(bw, 3, 9, 0.35355339f, FILL_PLAIN);
    out[n++] = softmax_case(bw, 2, 13, 1.0f, FILL_SPARSE);
    out[n++] = softmax_case(bw, 4, 1, 0.25f, FILL_WIDE);
    break;
  }
  case WEFT_OP_CROSSENTROPY:
  case WEFT_OP_CROSSENTROPY_BACKWARD: {
    const int bw = kind == WEFT_OP_CROSSENTROPY_BACKWARD;
    out[n++] = xent_case(bw, 4, 1031, FILL_PLAIN);
    out[n++] = xent_case(bw, 3, 97, FILL_SPARSE);
    out[n++] = xent_case(bw, 2, 1, FILL_PLAIN);
    out[n++] = xent_case(bw, 5, 33, FILL_WIDE);
    break;
  }
  case WEFT_OP_ADAMW:
    out[n++] = adamw_case(300, 1, 0.1f, FILL_PLAIN);
    out[n++] = adamw_case(131, 3, 0.0f, FILL_SPARSE);
    out[n++] = adamw_case(77, 1000, 0.01f, FILL_WIDE);
    break;
  case WEFT_OP_SUMSQ:
    out[n++] = sumsq_case(2 * WEFT_SUMSQ_CHUNK + 37, FILL_PLAIN);
    out[n++] = sumsq_case(WEFT_SUMSQ_CHUNK, FILL_WIDE);
    out[n++] = sumsq_case(3, FILL_SPARSE);
    out[n++] = sumsq_case(0, FILL_PLAIN);
    break;
  case WEFT_OP_PERMUTE: {
    static const int64_t d4[4] = {2, 3, 4, 5}, d3[3] = {3, 7, 2}, d2[2] = {5, 9};
    static const int p4a[4] = {0, 2, 1, 3}, p4b[4] = {3, 1, 0, 2}, p3[3] = {2, 0, 1}, p2[2] = {1, 0};
    out[n++] = permute_case(WEFT_DTYPE_F32, 4, d4, p4a);
    out[n++] = permute_case(WEFT_DTYPE_I32, 4, d4, p4b);
    out[n++] = permute_case(WEFT_DTYPE_F32, 3, d3, p3);
    out[n++] = permute_case(WEFT_DTYPE_I32, 2, d2, p2);
    break;
  }
  case WEFT_OP_COPY_SLICE:
    out[n++] = copy_slice_case(WEFT_DTYPE_F32, 3, 2, 7, 5, 4);
    out[n++] = copy_slice_case(WEFT_DTYPE_I32, 2, 1, 9, 12, 8);
    out[n++] = copy_slice_case(WEFT_DTYPE_F32, 1, 3, 3, 4, 0);
    break;
  default: break;
  }
  return n;
}

/* The self-test of one lane; 1 when admitted, else 0 and the reason. *out_ops is the admitted op set (the
 * ops it offers less those refused), and refused[] says which ops were refused and why. */
static int selftest_lane(const weft_plugin_desc *pd, const weft_lane_vtable *vt, void *self, char *name,
                         size_t name_len, char *why, size_t len, int *out_cases, uint64_t *out_ops, char *refused,
                         size_t rlen) {
  *out_cases = 0;
  *out_ops = 0;
  refused[0] = '\0';
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
  const uint64_t offered = weft_lane_ops(&d) & WEFT_OPS_ALL; /* op numbers weft does not know are never routed */
  uint64_t admitted = offered;
  size_t rused = 0;
  weft_status (*supports)(void *, const weft_op *) = vt->size > offsetof(weft_lane_vtable, supports) ? vt->supports : NULL;
  for (int k = 0; k < WEFT_OP_COUNT; k++) {
    if (!(offered & WEFT_OP_BIT(k))) continue;
    st_case cases[ST_MAX_CASES];
    const int nc = cases_for((weft_op_kind)k, cases);
    const char *kname = weft_op_kind_str((weft_op_kind)k);
    if (!(pd->claims & WEFT_PLUGIN_CLAIM(k))) {
      /* An op it offers but does not claim must be declined, or the router would send it there untested. */
      if (!supports || supports(self, &cases[0].op) == WEFT_OK) {
        snprintf(why, len, "it does not claim %s but its supports slot does not decline it", kname);
        return 0;
      }
      admitted &= ~WEFT_OP_BIT(k);
      continue;
    }
    char detail[700] = "";
    int failed = 0;
    if (nc == 0) { /* nothing to prove it with: never routed there untested */
      snprintf(detail, sizeof detail, "admission has no cases for %s yet", kname);
      failed = 1;
    }
    for (int i = 0; i < nc && !failed; i++) {
      if (supports && supports(self, &cases[i].op) != WEFT_OK) {
        snprintf(detail, sizeof detail, "it claims %s but declines a %s case (%s)", kname, kname, cases[i].what);
        failed = 1;
        break;
      }
      child_err[0] = '\0';
      if (!run_case(vt, self, &cases[i], 0x5eed0000u + (uint32_t)(k * 16 + i), detail, sizeof detail)) failed = 1;
      else (*out_cases)++;
    }
    if (!failed) continue;
    if (k < WEFT_OP_V1_COUNT) { /* the base set: a lane that gets one of these wrong is not trusted at all */
      snprintf(why, len, "failed its self-test: %s", detail);
      return 0;
    }
    admitted &= ~WEFT_OP_BIT(k);
    if (rused < rlen)
      rused += (size_t)snprintf(refused + rused, rlen - rused, "%s%s", rused ? "; " : "", detail);
  }
  if (!admitted) {
    snprintf(why, len, "no op it offers passed its self-test%s%s", refused[0] ? ": " : "", refused);
    return 0;
  }
  *out_ops = admitted;
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
    char name[128], note[1000], refused[700];
    int ncases = 0;
    uint64_t ops = 0;
    if (selftest_lane(&pd, cs.lanes[i].vt, cs.lanes[i].self, name, sizeof name, why, sizeof why, &ncases, &ops, refused,
                      sizeof refused)) {
      int nops = 0, ntx = 0;
      for (int k = 0; k < WEFT_OP_COUNT; k++) nops += (ops >> k) & 1, ntx += k >= WEFT_OP_V1_COUNT && ((ops >> k) & 1);
      snprintf(note, sizeof note, "%d op cases of %d ops bit for bit against the reference, matmul up to k = 4099 and odd "
               "m, n, k%s%s%s",
               ncases, nops, ntx ? ", the transformer ops with NaN, inf, -0 and subnormal inputs and int32 operands" : "",
               refused[0] ? "; refused ops: " : "", refused);
      char hex[24];
      snprintf(hex, sizeof hex, "%llx", (unsigned long long)ops);
      put_line(fd, "ops", name, hex); /* before "pass": the caller reads both once the verdict is complete */
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
