/* kernels.cl - the OpenCL lane's kernels under the exact contract: each a transcription of
 * src/core/reference.c (and weft_expf/weft_logf of src/core/wmath.c), step for step. Built without
 * -cl-mad-enable or fast-math options, and with contraction off, so every multiply and every add is rounded
 * on its own: acc = acc + prod never becomes a fused multiply-add. */
#pragma OPENCL FP_CONTRACT OFF

/* Every result a kernel stores goes through canon: a NaN becomes the canonical quiet NaN 0x7fc00000
 * (src/core/reference.h), whatever NaN the device made, so NaN results have the same bits on every lane.
 * Tested on the bits, which no compiler assumption about NaN can change. */
static float canon(float v) { return (as_uint(v) & 0x7fffffffu) > 0x7f800000u ? as_float(0x7fc00000u) : v; }

/* MATMUL: one work-item per c[p, i, j]; global size (n, m, batch). */
__kernel void weft_matmul(__global const float *a, __global const float *b, __global float *c, long m, long n, long k,
                          int trans_a, int trans_b, int b_batched) {
  const long j = (long)get_global_id(0), i = (long)get_global_id(1), p = (long)get_global_id(2);
  if (i >= m || j >= n) return;
  a += p * m * k;
  b += b_batched ? p * k * n : 0;
  c += p * m * n;
  float acc = 0.0f;
  for (long q = 0; q < k; q++) {
    const float av = trans_a ? a[q * m + i] : a[i * k + q];
    const float bv = trans_b ? b[j * k + q] : b[q * n + j];
    const float prod = av * bv;
    acc = acc + prod;
  }
  c[i * n + j] = canon(acc);
}

#define EW_ADD 1
#define EW_RELU 2
#define EW_RELU_BACKWARD 3
#define EW_SCALE 4
#define EW_AXPY 5

/* The elementwise ops, one work-item per element; `op` is the weft_op_kind. */
__kernel void weft_elementwise(__global const float *x, __global const float *y, __global float *out, long count,
                               long cols, int y_broadcast, float alpha, int op) {
  const long e = (long)get_global_id(0);
  if (e >= count) return;
  const float xv = x[e];
  if (op == EW_ADD) {
    out[e] = canon(xv + y[y_broadcast ? e % cols : e]);
  } else if (op == EW_RELU) {
    out[e] = xv > 0.0f ? xv : (xv != xv ? canon(xv) : 0.0f);
  } else if (op == EW_RELU_BACKWARD) {
    out[e] = y[e] > 0.0f ? canon(xv) : 0.0f;
  } else if (op == EW_SCALE) {
    out[e] = canon(alpha * xv);
  } else if (op == EW_AXPY) {
    const float prod = alpha * xv;
    out[e] = canon(prod + out[e]);
  }
}

/* SUM_ROWS: one work-item per column, rows ascending. */
__kernel void weft_sum_rows(__global const float *x, __global float *out, long rows, long cols) {
  const long j = (long)get_global_id(0);
  if (j >= cols) return;
  float acc = 0.0f;
  for (long i = 0; i < rows; i++) acc = acc + x[i * cols + j];
  out[j] = canon(acc);
}

static float pow2i(int n) { return as_float((uint)(n + 127) << 23); }

static float weft_expf(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return as_float(0x7f800000u);
  if (x < -103.97208404541015625f) return 0.0f;
  float n = floor(x * 1.44269502925872802734375f + 0.5f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.98412698e-4f;
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333377e-3f;
  p = p * r + 4.16666679e-2f;
  p = p * r + 1.66666672e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int e = (int)n;
  if (e > 127) return p * pow2i(127) * pow2i(e - 127);
  if (e < -126) return p * pow2i(e + 64) * pow2i(-64);
  return p * pow2i(e);
}

__constant float LOG_C[14] = {
    1.000000000e+00f,  -5.000000000e-01f, 3.333333433e-01f,  -2.500000298e-01f, 1.999998242e-01f,
    -1.666648984e-01f, 1.428636611e-01f,  -1.250664145e-01f, 1.110298857e-01f,  -9.878969938e-02f,
    9.054505080e-02f,  -9.342882037e-02f, 9.089755267e-02f,  -4.717759788e-02f};

static float weft_logf(float x) {
  if (x != x) return x;
  if (x < 0.0f) return as_float(0x7fc00000u);
  if (x == 0.0f) return as_float(0xff800000u);
  if (x == as_float(0x7f800000u)) return x;
  int e = 0;
  if (x < 1.17549435e-38f) {
    x = x * 8388608.0f;
    e = -23;
  }
  uint u = as_uint(x);
  e += (int)((u >> 23) & 0xffu) - 127;
  float m = as_float((u & 0x007fffffu) | 0x3f800000u);
  if (m > 1.41421353816986083984375f) {
    m = m * 0.5f;
    e = e + 1;
  }
  float f = m - 1.0f;
  float q = LOG_C[13];
  for (int i = 12; i >= 0; i--) q = q * f + LOG_C[i];
  float l = q * f;
  float fe = (float)e;
  return fe * 0.693145751953125f + (l + fe * 1.428606765330187045e-06f);
}

/* SOFTMAX_XENT, one work-item per row: the row's gradient (when want_grad) and its loss into row_loss. */
__kernel void weft_softmax_rows(__global const float *z, __global const float *t, __global float *grad,
                                __global float *row_loss, long rows, long cols, float inv_rows, int want_grad) {
  const long i = (long)get_global_id(0);
  if (i >= rows) return;
  __global const float *zr = z + i * cols;
  __global const float *tr = t + i * cols;
  float mx = zr[0];
  for (long j = 1; j < cols; j++) mx = zr[j] > mx ? zr[j] : mx;
  float s = 0.0f;
  for (long j = 0; j < cols; j++) s = s + weft_expf(zr[j] - mx);
  const float ls = weft_logf(s);
  float acc = 0.0f;
  for (long j = 0; j < cols; j++) {
    const float lsm = (zr[j] - mx) - ls;
    const float prod = tr[j] * lsm;
    acc = acc + prod;
    if (want_grad) grad[i * cols + j] = canon((weft_expf(lsm) - tr[j]) * inv_rows);
  }
  row_loss[i] = canon(-acc);
}

/* The loss: the rows' losses summed in row order, then scaled, by one work-item. */
__kernel void weft_softmax_loss(__global const float *row_loss, __global float *loss, long rows, float inv_rows) {
  if (get_global_id(0) != 0) return;
  float tot = 0.0f;
  for (long i = 0; i < rows; i++) tot = tot + row_loss[i];
  loss[0] = canon(tot * inv_rows);
}

/* ============================================================================ the transformer ops
 *
 * Each a transcription of its reference kernel in src/core/reference_tx.c, with the scalar functions of
 * src/core/wmath.c below (weft_recipf, weft_rsqrtf, weft_sqrtf, weft_tanhf) step for step: nothing divides
 * or takes a square root in hardware (OpenCL, like Vulkan, leaves division 2.5 ulp loose unless
 * -cl-fp32-correctly-rounded-divide-sqrt, so these are built from multiplies and adds), every multiply and
 * add is its own rounded operation (FP_CONTRACT OFF above, no mad or fma anywhere), and every float stored
 * goes through canon. One work-item per independent output (or per row whose outputs share a reduction),
 * each reduction one sequential loop in the reference's ascending order from +0: the work-items only run
 * side by side, never share a sum. Index operands are int32 and were checked on the host; a kernel still
 * skips an index out of range rather than read outside a buffer. Sizes are longs (a table of 50,257 x 768
 * floats has more elements than an int indexes comfortably after multiplication). */

static float scale2(float x, int k) {
  if (k > 127) return x * pow2i(127) * pow2i(k - 127);
  if (k < -126) return x * pow2i(k + 64) * pow2i(-64);
  return x * pow2i(k);
}

static float split_exp(float x, int *e_out) {
  int e = 0;
  if (x < 1.17549435e-38f) {
    x = x * 16777216.0f;
    e = -24;
  }
  uint u = as_uint(x);
  *e_out = e + (int)((u >> 23) & 0xffu) - 127;
  return as_float((u & 0x007fffffu) | 0x3f800000u);
}

static float recip_mant(float m) {
  float r = 1.41176474094390869140625f - 0.470588237047195434570312f * m;
  for (int i = 0; i < 4; i++) {
    float e = 1.0f - m * r;
    r = r + r * e;
  }
  return r;
}

static float weft_recipf(float x) {
  if (x != x) return as_float(0x7fc00000u);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a == 0.0f) return as_uint(x) ? as_float(0xff800000u) : as_float(0x7f800000u);
  if (a == as_float(0x7f800000u)) return s * 0.0f;
  int e;
  float m = split_exp(a, &e);
  return s * scale2(recip_mant(m), -e);
}

static float rsqrt_mant(float m) {
  float y = as_float(0x5f3759dfu - (as_uint(m) >> 1));
  float h = 0.5f * m;
  for (int i = 0; i < 3; i++) {
    float t = h * y;
    t = t * y;
    t = 1.5f - t;
    y = y * t;
  }
  float t = h * y;
  t = t * y;
  t = 0.5f - t;
  y = y + y * t;
  return y;
}

static float split_exp_even(float x, int *e_out) {
  int e;
  float m = split_exp(x, &e);
  if (e & 1) {
    m = m * 2.0f;
    e = e - 1;
  }
  *e_out = e;
  return m;
}

static float weft_rsqrtf(float x) {
  if (x != x || x < 0.0f) return as_float(0x7fc00000u);
  if (x == 0.0f) return as_uint(x) == 0x80000000u ? as_float(0xff800000u) : as_float(0x7f800000u);
  if (x == as_float(0x7f800000u)) return 0.0f;
  int e;
  float m = split_exp_even(x, &e);
  return scale2(rsqrt_mant(m), -e / 2);
}

static float weft_sqrtf(float x) {
  if (x != x || x < 0.0f) return as_float(0x7fc00000u);
  if (x == 0.0f || x == as_float(0x7f800000u)) return x;
  int e;
  float m = split_exp_even(x, &e);
  float y = rsqrt_mant(m);
  float s = m * y;
  float r = m - s * s;
  s = s + (0.5f * y) * r;
  return scale2(s, e / 2);
}

__constant float TANH_C[12] = {
    -3.333333432674407958984375e-01f, 1.333333402872085571289062e-01f,  -5.396825447678565979003906e-02f,
    2.186948806047439575195312e-02f,  -8.863235823810100555419922e-03f, 3.592127934098243713378906e-03f,
    -1.455834368243813514709473e-03f, 5.900274263694882392883301e-04f,  -2.391291200183331966400146e-04f,
    9.691537707112729549407959e-05f,  -3.927832221961580216884613e-05f, 1.591890577401500195264816e-05f};

static float weft_tanhf(float x) {
  if (x != x) return as_float(0x7fc00000u);
  float a = x < 0.0f ? -x : x;
  float s = x < 0.0f ? -1.0f : 1.0f;
  if (a < 0.000244140625f) return x;
  if (a >= 10.0f) return s;
  float t;
  if (a < 0.75f) {
    float z = a * a;
    float p = TANH_C[11];
    for (int i = 10; i >= 0; i--) p = p * z + TANH_C[i];
    t = a + a * (z * p);
  } else {
    float ex = weft_expf(a + a);
    t = 1.0f - 2.0f * weft_recipf(ex + 1.0f);
  }
  return s * t;
}

/* ------------------------------------------------------------------------------------------ embedding */

/* EMBEDDING: one work-item per out[bt, c] = wte[tok[bt], c] + wpe[p, c], p = pos[bt] (has_pos) or bt % T. */
__kernel void weft_tx_embedding(__global const int *tok, __global const int *pos, __global const float *wte,
                                __global const float *wpe, __global float *out, long BT, long T, long C, long V, long P,
                                int has_pos) {
  const long e = (long)get_global_id(0);
  if (e >= BT * C) return;
  const long bt = e / C, c = e - bt * C;
  const long tk = tok[bt], ps = has_pos ? (long)pos[bt] : bt % T;
  if (tk < 0 || tk >= V || ps < 0 || ps >= P) return;
  out[e] = canon(wte[tk * C + c] + wpe[ps * C + c]);
}

/* The backward's table row of position i: idx[i] (has_idx) or i % T. */
static long emb_row(__global const int *idx, int has_idx, long i, long T) { return has_idx ? (long)idx[i] : i % T; }

/* One work-item per position i of the batch: links[i] = the next position j > i with the same table row
 * (-1: none), links[n + i] = 1 when i is the first position of its row. */
__kernel void weft_tx_embed_links(__global const int *idx, __global int *links, long n, long T, int has_idx) {
  const long i = (long)get_global_id(0);
  if (i >= n) return;
  const long r = emb_row(idx, has_idx, i, T);
  int next = -1, head = 1;
  for (long j = i + 1; j < n; j++)
    if (emb_row(idx, has_idx, j, T) == r) {
      next = (int)j;
      break;
    }
  for (long j = 0; j < i && head; j++)
    if (emb_row(idx, has_idx, j, T) == r) head = 0;
  links[i] = next;
  links[n + i] = head;
}

/* EMBEDDING_BACKWARD into one table: one work-item per (first position i of a row, channel c) walks that
 * row's positions through the links, ascending: tab[row, c] = tab[row, c] + dout[j, c] for each - the
 * reference's order for every row, no atomics. */
__kernel void weft_tx_embed_bwd(__global const int *idx, __global const int *links, __global const float *dout,
                                __global float *tab, long n, long T, long C, long rows, int has_idx) {
  const long e = (long)get_global_id(0);
  if (e >= n * C) return;
  const long i = e / C, c = e - i * C;
  if (!links[n + i]) return;
  const long r = emb_row(idx, has_idx, i, T);
  if (r < 0 || r >= rows) return;
  float acc = tab[r * C + c];
  for (long j = i; j >= 0; j = links[j]) acc = acc + dout[j * C + c];
  tab[r * C + c] = canon(acc); /* a NaN stays a NaN through the adds: canonical at the end is enough */
}

/* ------------------------------------------------------------------------------------------ layernorm */

/* LAYERNORM: one work-item per row (its sums, then its outputs; y may be x). flags 1: mean, 2: rstd. */
__kernel void weft_tx_layernorm(__global const float *x, __global const float *gamma, __global const float *beta,
                                __global float *y, __global float *mean, __global float *rstd, long N, long C, float eps,
                                int flags) {
  const long r = (long)get_global_id(0);
  if (r >= N) return;
  const float invC = weft_recipf((float)C);
  __global const float *xr = x + r * C;
  __global float *yr = y + r * C;
  float s = 0.0f;
  for (long c = 0; c < C; c++) s = s + xr[c];
  const float mu = s * invC;
  float v = 0.0f;
  for (long c = 0; c < C; c++) {
    const float d = xr[c] - mu;
    const float sq = d * d;
    v = v + sq;
  }
  const float var = v * invC;
  const float rs = weft_rsqrtf(var + eps);
  for (long c = 0; c < C; c++) {
    const float nrm = (xr[c] - mu) * rs;
    const float o = nrm * gamma[c];
    yr[c] = canon(o + beta[c]);
  }
  if (flags & 1) mean[r] = canon(mu);
  if (flags & 2) rstd[r] = canon(rs);
}

/* LAYERNORM_BACKWARD's dx: one work-item per row (dx may be dy: each dy[c] is read before dx[c] is written,
 * and dgamma, dbeta were accumulated before this runs). */
__kernel void weft_tx_layernorm_dx(__global const float *dy, __global const float *x, __global const float *mean,
                                   __global const float *rstd, __global const float *gamma, __global float *dx, long N,
                                   long C) {
  const long r = (long)get_global_id(0);
  if (r >= N) return;
  const float invC = weft_recipf((float)C);
  __global const float *xr = x + r * C, *dyr = dy + r * C;
  __global float *dxr = dx + r * C;
  const float mu = mean[r], rs = rstd[r];
  float a = 0.0f, b = 0.0f;
  for (long c = 0; c < C; c++) {
    const float nrm = (xr[c] - mu) * rs;
    const float g = gamma[c] * dyr[c];
    a = a + g;
    const float gn = g * nrm;
    b = b + gn;
  }
  a = a * invC;
  b = b * invC;
  for (long c = 0; c < C; c++) {
    const float nrm = (xr[c] - mu) * rs;
    const float g = gamma[c] * dyr[c];
    const float nb = nrm * b;
    const float t = (g - a) - nb;
    dxr[c] = canon(t * rs);
  }
}

/* LAYERNORM_BACKWARD's dgamma and dbeta: one work-item per channel, rows ascending, continuing what they
 * hold. flags 1: dgamma, 2: dbeta. */
__kernel void weft_tx_layernorm_dgb(__global const float *dy, __global const float *x, __global const float *mean,
                                    __global const float *rstd, __global float *dgamma, __global float *dbeta, long N,
                                    long C, int flags) {
  const long c = (long)get_global_id(0);
  if (c >= C) return;
  float g = (flags & 1) ? dgamma[c] : 0.0f, b = (flags & 2) ? dbeta[c] : 0.0f;
  for (long r = 0; r < N; r++) {
    const float d = dy[r * C + c];
    const float nrm = (x[r * C + c] - mean[r]) * rstd[r];
    b = b + d;
    const float nd = nrm * d;
    g = g + nd;
  }
  if (flags & 1) dgamma[c] = canon(g);
  if (flags & 2) dbeta[c] = canon(b);
}

/* ----------------------------------------------------------------------------------------------- gelu */

#define GELU_S 0.79788458347320556640625f
#define GELU_K 0.044715001225471496582031f
#define GELU_3K 0.13414500653743743896484f

/* GELU: one work-item per element (y may be x). */
__kernel void weft_tx_gelu(__global const float *x, __global float *y, long n) {
  const long i = (long)get_global_id(0);
  if (i >= n) return;
  const float xi = x[i];
  float c = GELU_K * xi;
  c = c * xi;
  c = c * xi;
  const float u = GELU_S * (xi + c);
  const float th = weft_tanhf(u);
  const float h = 0.5f * xi;
  y[i] = canon(h * (1.0f + th));
}

/* GELU_BACKWARD: one work-item per element (dx may be x or dy). */
__kernel void weft_tx_gelu_backward(__global const float *x, __global const float *dy, __global float *dx, long n) {
  const long i = (long)get_global_id(0);
  if (i >= n) return;
  const float xi = x[i];
  float c = GELU_K * xi;
  c = c * xi;
  c = c * xi;
  const float u = GELU_S * (xi + c);
  const float th = weft_tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float l = 0.5f * (1.0f + th);
  float r = 0.5f * xi;
  r = r * sech2;
  r = r * GELU_S;
  float k = GELU_3K * xi;
  k = k * xi;
  r = r * (1.0f + k);
  dx[i] = canon((l + r) * dy[i]);
}

/* ------------------------------------------------------------------------------------- causal softmax */

/* The reference's softmax_row over p[0..t] holding already scaled scores: max, exponentials, their sum
 * ascending, the scaling by its reciprocal; +0 after column t. */
static void softmax_row(__global float *p, long t, long T) {
  float mx = p[0];
  for (long j = 1; j <= t; j++) mx = p[j] > mx ? p[j] : mx;
  float sum = 0.0f;
  for (long j = 0; j <= t; j++) {
    const float e = weft_expf(p[j] - mx);
    p[j] = e;
    sum = sum + e;
  }
  const float inv = weft_recipf(sum);
  for (long j = 0; j <= t; j++) p[j] = canon(p[j] * inv);
  for (long j = t + 1; j < T; j++) p[j] = 0.0f;
}

/* CAUSAL_SOFTMAX: one work-item per row of the R [T,T] blocks (probs may be scores: each score is read, then
 * its scaled value written in its place, before the row's softmax). */
__kernel void weft_tx_softmax(__global const float *s, __global float *p, long rows, long T, float scale) {
  const long row = (long)get_global_id(0);
  if (row >= rows) return;
  const long t = row % T;
  __global const float *sr = s + row * T;
  __global float *pr = p + row * T;
  for (long j = 0; j <= t; j++) pr[j] = sr[j] * scale;
  softmax_row(pr, t, T);
}

/* CAUSAL_SOFTMAX_BACKWARD: one work-item per row (dscores may be dprobs). */
__kernel void weft_tx_softmax_backward(__global const float *p, __global const float *dp, __global float *ds, long rows,
                                       long T, float scale) {
  const long row = (long)get_global_id(0);
  if (row >= rows) return;
  const long t = row % T;
  __global const float *pr = p + row * T, *dpr = dp + row * T;
  __global float *dsr = ds + row * T;
  float dot = 0.0f;
  for (long j = 0; j <= t; j++) {
    const float pd = pr[j] * dpr[j];
    dot = dot + pd;
  }
  for (long j = 0; j <= t; j++) {
    const float g = pr[j] * (dpr[j] - dot);
    dsr[j] = canon(g * scale);
  }
  for (long j = t + 1; j < T; j++) dsr[j] = 0.0f;
}

/* ------------------------------------------------------------------------------------------ attention */

/* ATTENTION and ATTENTION_CACHED: one work-item per (b, h, r), query position t = t0 + r over a qkv of T
 * positions (Tmax for the cached op; t0 = 0 and Tq = T for the fused one): the scaled scores of keys
 * j <= t into att's row (its length T), preatt's row (flags 1), the softmax in place, then out[b, r, h*hs+i].
 * att is the caller's or scratch. */
__kernel void weft_tx_attention(__global const float *qkv, __global float *out, __global float *att,
                                __global float *preatt, long BNH, long T, long C, long NH, long t0, long Tq, int flags) {
  const long g = (long)get_global_id(0);
  if (g >= BNH * Tq) return;
  const long bh = g / Tq, r = g - bh * Tq, b = bh / NH, h = bh - b * NH, t = t0 + r;
  const long hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  __global const float *q = qkv + (b * T + t) * C3 + h * hs;
  __global float *a = att + g * T;
  for (long j = 0; j <= t; j++) {
    __global const float *k = qkv + (b * T + j) * C3 + C + h * hs;
    float d = 0.0f;
    for (long i = 0; i < hs; i++) {
      const float pr = q[i] * k[i];
      d = d + pr;
    }
    a[j] = d * scale;
  }
  if (flags & 1) {
    __global float *pa = preatt + g * T;
    for (long j = 0; j <= t; j++) pa[j] = canon(a[j]);
    for (long j = t + 1; j < T; j++) pa[j] = as_float(0xff800000u); /* -inf */
  }
  softmax_row(a, t, T);
  __global float *o = out + (b * Tq + r) * C + h * hs;
  for (long i = 0; i < hs; i++) {
    float acc = 0.0f;
    for (long j = 0; j <= t; j++) {
      const float pv = a[j] * qkv[(b * T + j) * C3 + 2 * C + h * hs + i];
      acc = acc + pv;
    }
    o[i] = canon(acc);
  }
}

/* ATTENTION_BACKWARD, first pass: one work-item per (b, h, t): datt[t][j] = v[j] . dout[t] for j <= t into
 * the scratch ds, then the causal softmax backward of the row in place (the reference's T*T buffer). */
__kernel void weft_tx_attention_ds(__global const float *qkv, __global const float *dout, __global const float *att,
                                   __global float *ds, long BNH, long T, long C, long NH) {
  const long g = (long)get_global_id(0);
  if (g >= BNH * T) return;
  const long bh = g / T, t = g - bh * T, b = bh / NH, h = bh - b * NH;
  const long hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  __global const float *dor = dout + (b * T + t) * C + h * hs;
  __global const float *a = att + g * T;
  __global float *dst = ds + g * T;
  for (long j = 0; j <= t; j++) {
    __global const float *v = qkv + (b * T + j) * C3 + 2 * C + h * hs;
    float d = 0.0f;
    for (long i = 0; i < hs; i++) {
      const float pr = v[i] * dor[i];
      d = d + pr;
    }
    dst[j] = d;
  }
  float dot = 0.0f;
  for (long j = 0; j <= t; j++) {
    const float pd = a[j] * dst[j];
    dot = dot + pd;
  }
  for (long j = 0; j <= t; j++) {
    const float gg = a[j] * (dst[j] - dot);
    dst[j] = gg * scale;
  }
}

/* ATTENTION_BACKWARD, second pass: one work-item per (b, h, t, i): dq from ds's row t over keys j <= t, dk
 * and dv from ds's and att's column t over queries u >= t, each ascending from +0. */
__kernel void weft_tx_attention_dqkv(__global const float *qkv, __global const float *dout, __global const float *att,
                                     __global const float *ds, __global float *dqkv, long BNH, long T, long C, long NH) {
  const long hs = C / NH, C3 = 3 * C;
  const long e = (long)get_global_id(0);
  if (e >= BNH * T * hs) return;
  const long g = e / hs, i = e - g * hs, bh = g / T, t = g - bh * T, b = bh / NH, h = bh - b * NH;
  __global const float *dsb = ds + bh * T * T, *ab = att + bh * T * T;
  float acc = 0.0f;
  for (long j = 0; j <= t; j++) {
    const float pr = dsb[t * T + j] * qkv[(b * T + j) * C3 + C + h * hs + i];
    acc = acc + pr;
  }
  float ak = 0.0f, av = 0.0f;
  for (long u = t; u < T; u++) {
    const float pk = dsb[u * T + t] * qkv[(b * T + u) * C3 + h * hs + i];
    ak = ak + pk;
    const float pv = ab[u * T + t] * dout[(b * T + u) * C + h * hs + i];
    av = av + pv;
  }
  __global float *dq = dqkv + (b * T + t) * C3 + h * hs + i;
  dq[0] = canon(acc);
  dq[C] = canon(ak);
  dq[2 * C] = canon(av);
}

/* ------------------------------------------------------------------------------------- cross-entropy */

/* CROSSENTROPY and its backward's first pass: one work-item per row, its max and log-sum-exp (the
 * reference's lse_row) into stats[2n], stats[2n + 1], and (want_loss) the row's loss. */
__kernel void weft_tx_xent_rows(__global const float *z, __global const int *tgt, __global float *stats,
                                __global float *loss, long N, long V, int want_loss) {
  const long n = (long)get_global_id(0);
  if (n >= N) return;
  __global const float *zr = z + n * V;
  float mx = zr[0];
  for (long j = 1; j < V; j++) mx = zr[j] > mx ? zr[j] : mx;
  float s = 0.0f;
  for (long j = 0; j < V; j++) s = s + weft_expf(zr[j] - mx);
  const float ls = weft_logf(s);
  stats[2 * n] = mx;
  stats[2 * n + 1] = ls;
  const long tg = tgt[n];
  if (want_loss && tg >= 0 && tg < V) {
    const float lsm = (zr[tg] - mx) - ls;
    loss[n] = canon(-lsm);
  }
}

/* CROSSENTROPY_BACKWARD: one work-item per logit, from its row's stats (the forward's exact values). */
__kernel void weft_tx_xent_grad(__global const float *z, __global const int *tgt, __global const float *stats,
                                __global const float *dloss, __global float *g, long N, long V) {
  const long e = (long)get_global_id(0);
  if (e >= N * V) return;
  const long n = e / V, j = e - n * V;
  const float lsm = (z[e] - stats[2 * n]) - stats[2 * n + 1];
  const float p = weft_expf(lsm);
  const float ind = j == (long)tgt[n] ? 1.0f : 0.0f;
  g[e] = canon((p - ind) * dloss[n]);
}

/* ---------------------------------------------------------------------------------------------- adamw */

/* ADAMW: one work-item per parameter, in place on param, m and v. */
__kernel void weft_tx_adamw(__global const float *grad, __global float *param, __global float *m, __global float *v,
                            long n, float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2) {
  const long i = (long)get_global_id(0);
  if (i >= n) return;
  const float o1 = 1.0f - beta1, o2 = 1.0f - beta2;
  const float r1 = weft_recipf(bc1), r2 = weft_recipf(bc2);
  const float g = grad[i], p = param[i];
  float mm = beta1 * m[i];
  const float mg = o1 * g;
  mm = mm + mg;
  float vv = beta2 * v[i];
  float vg = o2 * g;
  vg = vg * g;
  vv = vv + vg;
  const float mh = mm * r1, vh = vv * r2;
  const float den = weft_sqrtf(vh) + eps;
  float u = mh * weft_recipf(den);
  const float wdp = wd * p;
  u = u + wdp;
  const float step = lr * u;
  m[i] = canon(mm);
  v[i] = canon(vv);
  param[i] = canon(p - step);
}

/* ---------------------------------------------------------------------------------------------- sumsq */

#define SUMSQ_CHUNK 4096 /* WEFT_SUMSQ_CHUNK (weft_lane.h): part of the canonical order */

/* SUMSQ, first pass: one work-item per chunk, its partial from +0 over its elements ascending. */
__kernel void weft_tx_sumsq_chunks(__global const float *x, __global float *part, long n) {
  const long c = (long)get_global_id(0);
  const long c0 = c * SUMSQ_CHUNK;
  if (c0 >= n) return;
  const long c1 = n - c0 < SUMSQ_CHUNK ? n : c0 + SUMSQ_CHUNK;
  float p = 0.0f;
  for (long i = c0; i < c1; i++) {
    const float sq = x[i] * x[i];
    p = p + sq;
  }
  part[c] = p;
}

/* SUMSQ, second pass: one work-item adds the partials to acc, left to right. */
__kernel void weft_tx_sumsq_add(__global const float *part, __global float *acc, long nch) {
  if (get_global_id(0) != 0) return;
  float a = acc[0];
  for (long c = 0; c < nch; c++) a = a + part[c];
  acc[0] = canon(a);
}

/* ------------------------------------------------------------------------------------ permute and copy */

/* PERMUTE: one work-item per output element (row-major over y's dims d0..d3), a copy of 32 bits: y[idx] =
 * x[i0 s0 + i1 s1 + i2 s2 + i3 s3], s the strides in x of y's axes. NaN payloads travel intact. */
__kernel void weft_tx_permute(__global const uint *x, __global uint *y, long count, long d1, long d2, long d3, long s0,
                              long s1, long s2, long s3) {
  const long e = (long)get_global_id(0);
  if (e >= count) return;
  long r = e;
  const long i3 = r % d3;
  r /= d3;
  const long i2 = r % d2;
  r /= d2;
  const long i1 = r % d1, i0 = r / d1;
  y[e] = x[i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3];
}

/* COPY_SLICE: one work-item per source element: dst[o, offset + i, r] = src[o, i, r], bits unchanged. */
__kernel void weft_tx_copy_slice(__global const uint *src, __global uint *dst, long outer, long src_len, long dst_len,
                                 long inner, long offset) {
  const long e = (long)get_global_id(0);
  if (e >= outer * src_len * inner) return;
  const long r = e % inner, oi = e / inner, i = oi % src_len, o = oi / src_len;
  dst[(o * dst_len + offset + i) * inner + r] = src[e];
}
