/* reference_tx.c - the transformer ops' reference kernels: their canonical orders, written out plainly
 * (reference_tx.h describes the conventions; docs/DESIGN.md states every order in words).
 *
 * Built with -ffp-contract=off: every multiply and every add below is rounded on its own, in the order the
 * parentheses and temporaries show. "Ascending" always means a sequential loop from index 0 upward whose
 * accumulator starts at +0.0f (so an all -0 sum is +0). Every value stored to an output goes through
 * canon(), so every NaN stored is 0x7fc00000 whatever the inputs' payloads. */
#include "reference_tx.h"

#include <stdlib.h>
#include <string.h>

static float canon(float x) {
  if (x != x) {
    const uint32_t q = 0x7fc00000u;
    memcpy(&x, &q, sizeof x);
  }
  return x;
}

#define IX(a, b) ((size_t)(a) * (size_t)(b))

static weft_status check_index(const int32_t *idx, int64_t n, int64_t limit) {
  if (!idx) return WEFT_OK;
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || (int64_t)idx[i] >= limit) return WEFT_ERR_INVALID_ARGUMENT;
  return WEFT_OK;
}

/* EMBEDDING forward. For every (b, t) and c: p = pos ? pos[b,t] : t;
 *   out[b,t,c] = wte[tok[b,t], c] + wpe[p, c]          (one add)
 * Every index is checked before anything is written. */
weft_status weft_ref_embedding_forward(float *out, const int32_t *tok, const int32_t *pos, const float *wte,
                                       const float *wpe, int64_t B, int64_t T, int64_t C, int64_t V, int64_t P) {
  if (!out || !tok || !wte || !wpe) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || V < 0 || P < 0) return WEFT_ERR_SHAPE;
  if (check_index(tok, B * T, V) != WEFT_OK || check_index(pos, B * T, P) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  if (!pos && T > P) return WEFT_ERR_INVALID_ARGUMENT;
  for (int64_t bt = 0; bt < B * T; bt++) {
    const int64_t p = pos ? pos[bt] : bt % T;
    const float *w = wte + IX(tok[bt], C), *q = wpe + IX(p, C);
    float *o = out + IX(bt, C);
    for (int64_t c = 0; c < C; c++) o[c] = canon(w[c] + q[c]);
  }
  return WEFT_OK;
}

/* EMBEDDING backward. For (b, t) ascending (b outer), then c:
 *   dwte[tok[b,t], c] = dwte[tok[b,t], c] + dout[b,t,c]
 *   dwpe[p, c]        = dwpe[p, c] + dout[b,t,c]
 * So each table row receives its contributions in ascending (b, t) order, added to what it held: a lane
 * may compute rows in parallel (one row per token id) but must walk (b, t) ascending for each. */
weft_status weft_ref_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                                        const int32_t *pos, int64_t B, int64_t T, int64_t C, int64_t V, int64_t P) {
  if (!dout || !tok) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || V < 0 || P < 0) return WEFT_ERR_SHAPE;
  if (check_index(tok, B * T, V) != WEFT_OK || check_index(pos, B * T, P) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  if (!pos && T > P) return WEFT_ERR_INVALID_ARGUMENT;
  for (int64_t bt = 0; bt < B * T; bt++) {
    const int64_t p = pos ? pos[bt] : bt % T;
    const float *d = dout + IX(bt, C);
    if (dwte) {
      float *w = dwte + IX(tok[bt], C);
      for (int64_t c = 0; c < C; c++) w[c] = canon(w[c] + d[c]);
    }
    if (dwpe) {
      float *q = dwpe + IX(p, C);
      for (int64_t c = 0; c < C; c++) q[c] = canon(q[c] + d[c]);
    }
  }
  return WEFT_OK;
}

/* LAYERNORM forward, row by row (llm.c's layernorm_forward):
 *   invC = weft_recipf((float)C)
 *   s = 0; for c ascending: s = s + x[c];                 mean = s * invC
 *   v = 0; for c ascending: d = x[c] - mean; v = v + d * d; var = v * invC
 *   rstd = weft_rsqrtf(var + eps)
 *   for c: n = (x[c] - mean) * rstd; y[c] = (n * gamma[c]) + beta[c]
 * mean[row] = mean, rstd[row] = rstd. */
void weft_ref_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                                const float *beta, int64_t N, int64_t C, float eps) {
  const float invC = weft_recipf((float)C);
  for (int64_t r = 0; r < N; r++) {
    const float *xr = x + IX(r, C);
    float *yr = y + IX(r, C);
    float s = 0.0f;
    for (int64_t c = 0; c < C; c++) s = s + xr[c];
    const float mu = s * invC;
    float v = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float d = xr[c] - mu;
      float sq = d * d;
      v = v + sq;
    }
    const float var = v * invC;
    const float rs = weft_rsqrtf(var + eps);
    for (int64_t c = 0; c < C; c++) {
      float n = (xr[c] - mu) * rs;
      float o = n * gamma[c];
      yr[c] = canon(o + beta[c]);
    }
    if (mean) mean[r] = canon(mu);
    if (rstd) rstd[r] = canon(rs);
  }
}

/* LAYERNORM backward, row by row (llm.c's layernorm_backward), with mean and rstd from the forward:
 *   invC = weft_recipf((float)C)
 *   a = 0, b = 0; for c ascending: n = (x[c] - mean) * rstd; g = gamma[c] * dy[c];
 *                                  a = a + g; b = b + (g * n)
 *   a = a * invC; b = b * invC
 *   for c ascending: n = (x[c] - mean) * rstd; g = gamma[c] * dy[c];
 *     dbeta[c]  = dbeta[c] + dy[c]
 *     dgamma[c] = dgamma[c] + (n * dy[c])
 *     dx[c]     = ((g - a) - (n * b)) * rstd
 * Rows ascending, so dgamma and dbeta receive rows in ascending order. */
void weft_ref_layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                 const float *mean, const float *rstd, const float *gamma, int64_t N, int64_t C) {
  const float invC = weft_recipf((float)C);
  for (int64_t r = 0; r < N; r++) {
    const float *xr = x + IX(r, C), *dyr = dy + IX(r, C);
    float *dxr = dx + IX(r, C);
    const float mu = mean[r], rs = rstd[r];
    float a = 0.0f, b = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float n = (xr[c] - mu) * rs;
      float g = gamma[c] * dyr[c];
      a = a + g;
      float gn = g * n;
      b = b + gn;
    }
    a = a * invC;
    b = b * invC;
    for (int64_t c = 0; c < C; c++) {
      float n = (xr[c] - mu) * rs;
      float g = gamma[c] * dyr[c];
      if (dbeta) dbeta[c] = canon(dbeta[c] + dyr[c]);
      if (dgamma) {
        float ndy = n * dyr[c];
        dgamma[c] = canon(dgamma[c] + ndy);
      }
      float nb = n * b;
      float t = (g - a) - nb;
      dxr[c] = canon(t * rs);
    }
  }
}

#define GELU_S 0.79788458347320556640625f  /* sqrt(2/pi) rounded to fp32 */
#define GELU_K 0.044715001225471496582031f /* 0.044715f */
#define GELU_3K 0.13414500653743743896484f /* 0.134145f = 3 * 0.044715 rounded once */

/* GELU forward (tanh form), per element:
 *   c = ((GELU_K * x) * x) * x;  u = GELU_S * (x + c);  th = weft_tanhf(u)
 *   y = (0.5 * x) * (1 + th)
 * (so y(-inf) = -inf * 0 = NaN, as the formula says; y(+inf) = +inf.) */
void weft_ref_gelu_forward(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    float c = GELU_K * xi;
    c = c * xi;
    c = c * xi;
    float u = GELU_S * (xi + c);
    float th = weft_tanhf(u);
    float h = 0.5f * xi;
    y[i] = canon(h * (1.0f + th));
  }
}

/* GELU backward, per element, with sech^2(u) taken as 1 - th*th (no cosh, no division):
 *   c, u, th as in the forward;  sech2 = 1 - (th * th)
 *   l = 0.5 * (1 + th)
 *   r = (((0.5 * x) * sech2) * GELU_S) * (1 + ((GELU_3K * x) * x))
 *   dx = (l + r) * dy */
void weft_ref_gelu_backward(float *dx, const float *x, const float *dy, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    float c = GELU_K * xi;
    c = c * xi;
    c = c * xi;
    float u = GELU_S * (xi + c);
    float th = weft_tanhf(u);
    float sech2 = 1.0f - th * th;
    float l = 0.5f * (1.0f + th);
    float r = 0.5f * xi;
    r = r * sech2;
    r = r * GELU_S;
    float k = GELU_3K * xi;
    k = k * xi;
    r = r * (1.0f + k);
    dx[i] = canon((l + r) * dy[i]);
  }
}

/* One causal softmax row over columns 0..t of already scaled scores s[]: writes p[0..T). */
static void softmax_row(float *p, const float *s, int64_t t, int64_t T) {
  float mx = s[0];
  for (int64_t j = 1; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
  float sum = 0.0f;
  for (int64_t j = 0; j <= t; j++) {
    float e = weft_expf(s[j] - mx);
    p[j] = e;
    sum = sum + e;
  }
  const float inv = weft_recipf(sum);
  for (int64_t j = 0; j <= t; j++) p[j] = canon(p[j] * inv);
  for (int64_t j = t + 1; j < T; j++) p[j] = 0.0f;
}

/* CAUSAL SOFTMAX forward (unfused). Row t of each of the R [T,T] blocks:
 *   for j <= t: z[j] = scores[t,j] * scale
 *   mx = z[0]; for j ascending from 1 to t: mx = z[j] > mx ? z[j] : mx
 *   sum = 0; for j ascending to t: e[j] = weft_expf(z[j] - mx); sum = sum + e[j]
 *   inv = weft_recipf(sum); probs[t,j] = e[j] * inv for j <= t, +0 for j > t.
 * A fused attention's att is the same bits when its scores come from the same dot products. */
void weft_ref_causal_softmax_forward(float *probs, const float *scores, int64_t R, int64_t T, float scale) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t t = 0; t < T; t++) {
      const float *s = scores + IX(r * T + t, T);
      float *p = probs + IX(r * T + t, T);
      /* scale into p first (p[j] only depends on s[j], so p may alias nothing else we read later) */
      for (int64_t j = 0; j <= t; j++) p[j] = s[j] * scale;
      softmax_row(p, p, t, T);
    }
}

/* CAUSAL SOFTMAX backward. Row t:
 *   dot = 0; for j ascending to t: dot = dot + probs[t,j] * dprobs[t,j]
 *   dscores[t,j] = (probs[t,j] * (dprobs[t,j] - dot)) * scale for j <= t, +0 for j > t. */
void weft_ref_causal_softmax_backward(float *dscores, const float *probs, const float *dprobs, int64_t R, int64_t T,
                                      float scale) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t t = 0; t < T; t++) {
      const float *p = probs + IX(r * T + t, T), *dp = dprobs + IX(r * T + t, T);
      float *ds = dscores + IX(r * T + t, T);
      float dot = 0.0f;
      for (int64_t j = 0; j <= t; j++) {
        float pd = p[j] * dp[j];
        dot = dot + pd;
      }
      for (int64_t j = 0; j <= t; j++) {
        float g = p[j] * (dp[j] - dot);
        ds[j] = canon(g * scale);
      }
      for (int64_t j = t + 1; j < T; j++) ds[j] = 0.0f;
    }
}

/* ATTENTION forward (fused, causal). hs = C/NH, scale = weft_rsqrtf((float)hs). For head h, with
 * q[t] = qkv[b,t, h*hs ..], k[t] = qkv[b,t, C + h*hs ..], v[t] = qkv[b,t, 2C + h*hs ..]:
 *   for t, for j <= t: d = 0; for i ascending: d = d + q[t][i] * k[j][i];  z[j] = d * scale
 *   preatt[b,h,t,j] = z[j] for j <= t, -inf for j > t
 *   att[b,h,t,:] = the causal softmax row of z (as in CAUSAL SOFTMAX, z already scaled)
 *   out[b,t,h*hs+i] = 0; for j ascending to t: out = out + att[b,h,t,j] * v[j][i]
 * Unfused with a matmul for q.k^T (ascending from 0, the same dot products), CAUSAL SOFTMAX with the same
 * scale and a matmul att @ v gives these bits too, while no masked k or v is inf or NaN (the matmul
 * multiplies the masked zeros by them; the fused op never touches them). */
weft_status weft_ref_attention_forward(float *out, float *preatt, float *att, const float *qkv, int64_t B, int64_t T,
                                       int64_t C, int64_t NH) {
  if (!out || !att || !qkv) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0) return WEFT_ERR_SHAPE;
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  const float ninf = -__builtin_inff();
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const float *q = qkv + IX(b * T + t, C3) + IX(h, hs);
        float *a = att + IX((b * NH + h) * T + t, T);
        for (int64_t j = 0; j <= t; j++) {
          const float *k = qkv + IX(b * T + j, C3) + (size_t)C + IX(h, hs);
          float d = 0.0f;
          for (int64_t i = 0; i < hs; i++) {
            float pr = q[i] * k[i];
            d = d + pr;
          }
          a[j] = d * scale;
        }
        if (preatt) {
          float *pa = preatt + IX((b * NH + h) * T + t, T);
          for (int64_t j = 0; j <= t; j++) pa[j] = canon(a[j]);
          for (int64_t j = t + 1; j < T; j++) pa[j] = ninf;
        }
        softmax_row(a, a, t, T);
        float *o = out + IX(b * T + t, C) + IX(h, hs);
        for (int64_t i = 0; i < hs; i++) {
          float acc = 0.0f;
          for (int64_t j = 0; j <= t; j++) {
            float pv = a[j] * qkv[IX(b * T + j, C3) + (size_t)(2 * C) + IX(h, hs) + (size_t)i];
            acc = acc + pv;
          }
          o[i] = canon(acc);
        }
      }
  return WEFT_OK;
}

/* ATTENTION_CACHED (decode): query positions t = t0 .. t0+Tq-1 over a KV cache qkv[B,Tmax,3C] whose rows
 * 0 .. t0+Tq-1 are filled. For each (b, h, t), ascending, exactly the ATTENTION forward's row t above:
 *   z[j] = (sum over i ascending of q[t][i] * k[j][i], from 0) * scale for j ascending to t,
 *   mx = z[0], then z[j] > mx ? z[j] : mx for j ascending from 1; e[j] = weft_expf(z[j] - mx);
 *   sum = e[0] + e[1] + ... (ascending, from 0); inv = weft_recipf(sum); p[j] = e[j] * inv (canonical);
 *   out[b, t-t0, h*hs+i] = 0 + p[0] * v[0][i] + p[1] * v[1][i] + ... + p[t] * v[t][i], ascending.
 * So out's row r has the bits of row t0+r of ATTENTION's out over the first t0+Tq positions (and att's row
 * r those of its att row t0+r, widened with zeros to Tmax). att [B,NH,Tq,Tmax] may be NULL (a row of
 * scratch is used). Rows of qkv past t0+Tq-1 are never read. */
weft_status weft_ref_attention_cached(float *out, float *att, const float *qkv, int64_t B, int64_t Tmax, int64_t C,
                                      int64_t NH, int64_t t0, int64_t Tq) {
  if (!out || !qkv) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || Tmax < 0 || C < 0 || NH <= 0 || C % NH != 0 || t0 < 0 || Tq < 0 || t0 + Tq > Tmax)
    return WEFT_ERR_SHAPE;
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  float *row = NULL;
  if (!att && B * NH * Tq > 0 && !(row = malloc(sizeof(float) * (size_t)Tmax))) return WEFT_ERR_OUT_OF_MEMORY;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t r = 0; r < Tq; r++) {
        const int64_t t = t0 + r;
        const float *q = qkv + IX(b * Tmax + t, C3) + IX(h, hs);
        float *a = att ? att + IX((b * NH + h) * Tq + r, Tmax) : row;
        for (int64_t j = 0; j <= t; j++) {
          const float *k = qkv + IX(b * Tmax + j, C3) + (size_t)C + IX(h, hs);
          float d = 0.0f;
          for (int64_t i = 0; i < hs; i++) {
            float pr = q[i] * k[i];
            d = d + pr;
          }
          a[j] = d * scale;
        }
        softmax_row(a, a, t, Tmax);
        float *o = out + IX(b * Tq + r, C) + IX(h, hs);
        for (int64_t i = 0; i < hs; i++) {
          float acc = 0.0f;
          for (int64_t j = 0; j <= t; j++) {
            float pv = a[j] * qkv[IX(b * Tmax + j, C3) + (size_t)(2 * C) + IX(h, hs) + (size_t)i];
            acc = acc + pv;
          }
          o[i] = canon(acc);
        }
      }
  free(row);
  return WEFT_OK;
}

/* ATTENTION backward (fused, causal), from dout[B,T,C], qkv and att; per (b, h), with q, k, v as above:
 *   datt[t][j] = 0; for i ascending: datt = datt + v[j][i] * dout[b,t,h*hs+i]        (j <= t)
 *   ds[t][j]   = the CAUSAL SOFTMAX backward of row t: (att[t][j] * (datt[t][j] - dot_t)) * scale
 *   dq[t][i]   = 0; for j ascending 0..t:   dq = dq + ds[t][j] * k[j][i]
 *   dk[j][i]   = 0; for t ascending j..T-1: dk = dk + ds[t][j] * q[t][i]
 *   dv[j][i]   = 0; for t ascending j..T-1: dv = dv + att[t][j] * dout[b,t,h*hs+i]
 * written into dqkv's q, k and v parts. (The unfused form - matmuls over all T with the masked zeros -
 * gives the same bits under the same proviso as the forward.) */
weft_status weft_ref_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int64_t B,
                                        int64_t T, int64_t C, int64_t NH) {
  if (!dqkv || !dout || !qkv || !att) return WEFT_ERR_INVALID_ARGUMENT;
  if (B < 0 || T < 0 || C < 0 || NH <= 0 || C % NH != 0) return WEFT_ERR_SHAPE;
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = weft_rsqrtf((float)hs);
  float *ds = malloc(IX(T, T) * sizeof *ds + 1);
  if (!ds) return WEFT_ERR_OUT_OF_MEMORY;
#define Q(t) (qkv + IX(b * T + (t), C3) + IX(h, hs))
#define K(t) (Q(t) + (size_t)C)
#define V(t) (Q(t) + (size_t)(2 * C))
#define DO(t) (dout + IX(b * T + (t), C) + IX(h, hs))
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      const float *ab = att + IX((b * NH + h) * T, T);
      for (int64_t t = 0; t < T; t++) {
        float *dst = ds + IX(t, T);
        const float *a = ab + IX(t, T);
        for (int64_t j = 0; j <= t; j++) {
          float d = 0.0f;
          for (int64_t i = 0; i < hs; i++) {
            float pr = V(j)[i] * DO(t)[i];
            d = d + pr;
          }
          dst[j] = d; /* datt for now */
        }
        float dot = 0.0f;
        for (int64_t j = 0; j <= t; j++) {
          float pd = a[j] * dst[j];
          dot = dot + pd;
        }
        for (int64_t j = 0; j <= t; j++) {
          float g = a[j] * (dst[j] - dot);
          dst[j] = g * scale;
        }
      }
      for (int64_t t = 0; t < T; t++) {
        float *dq = dqkv + IX(b * T + t, C3) + IX(h, hs), *dk = dq + (size_t)C, *dv = dq + (size_t)(2 * C);
        for (int64_t i = 0; i < hs; i++) {
          float acc = 0.0f;
          for (int64_t j = 0; j <= t; j++) {
            float pr = ds[IX(t, T) + (size_t)j] * K(j)[i];
            acc = acc + pr;
          }
          dq[i] = canon(acc);
          float ak = 0.0f, av = 0.0f;
          for (int64_t u = t; u < T; u++) {
            float pk = ds[IX(u, T) + (size_t)t] * Q(u)[i];
            ak = ak + pk;
            float pv = ab[IX(u, T) + (size_t)t] * DO(u)[i];
            av = av + pv;
          }
          dk[i] = canon(ak);
          dv[i] = canon(av);
        }
      }
    }
#undef Q
#undef K
#undef V
#undef DO
  free(ds);
  return WEFT_OK;
}

/* One row's max and log-sum-exp, as SOFTMAX_XENT in reference.c computes them. */
static void lse_row(const float *z, int64_t V, float *mx_out, float *ls_out) {
  float mx = z[0];
  for (int64_t j = 1; j < V; j++) mx = z[j] > mx ? z[j] : mx;
  float s = 0.0f;
  for (int64_t j = 0; j < V; j++) s = s + weft_expf(z[j] - mx);
  *mx_out = mx;
  *ls_out = weft_logf(s);
}

/* CROSS-ENTROPY forward, row by row, with integer targets - SOFTMAX_XENT's order (reference.c) with a
 * one-hot target row, whose loss it reproduces bit for bit:
 *   mx = z[0]; for j ascending from 1: mx = z[j] > mx ? z[j] : mx
 *   s = 0; for j ascending: s = s + weft_expf(z[j] - mx);  ls = weft_logf(s)
 *   losses[n] = -((z[tgt] - mx) - ls) */
weft_status weft_ref_crossentropy_forward(float *losses, const float *logits, const int32_t *targets, int64_t N,
                                          int64_t V) {
  if (!losses || !logits || !targets) return WEFT_ERR_INVALID_ARGUMENT;
  if (N < 0 || V <= 0) return WEFT_ERR_SHAPE;
  if (check_index(targets, N, V) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  for (int64_t n = 0; n < N; n++) {
    const float *z = logits + IX(n, V);
    float mx, ls;
    lse_row(z, V, &mx, &ls);
    float lsm = (z[targets[n]] - mx) - ls;
    losses[n] = canon(-lsm);
  }
  return WEFT_OK;
}

/* CROSS-ENTROPY backward, row by row (mx and ls recomputed exactly as in the forward):
 *   dlogits[n,j] = (weft_expf((z[j] - mx) - ls) - (j == tgt ? 1 : 0)) * dloss[n]
 * With dloss[n] = 1/N this is SOFTMAX_XENT's gradient for one-hot targets, bit for bit. */
weft_status weft_ref_crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                                           const float *dloss, int64_t N, int64_t V) {
  if (!dlogits || !logits || !targets || !dloss) return WEFT_ERR_INVALID_ARGUMENT;
  if (N < 0 || V <= 0) return WEFT_ERR_SHAPE;
  if (check_index(targets, N, V) != WEFT_OK) return WEFT_ERR_INVALID_ARGUMENT;
  for (int64_t n = 0; n < N; n++) {
    const float *z = logits + IX(n, V);
    float *g = dlogits + IX(n, V);
    float mx, ls;
    lse_row(z, V, &mx, &ls);
    for (int64_t j = 0; j < V; j++) {
      float lsm = (z[j] - mx) - ls;
      float p = weft_expf(lsm);
      float ind = j == targets[n] ? 1.0f : 0.0f;
      g[j] = canon((p - ind) * dloss[n]);
    }
  }
  return WEFT_OK;
}

/* ADAMW bias correction: p = 1; repeat t times: p = p * beta; return 1 - p. */
float weft_ref_adamw_bias_correction(float beta, int64_t t) {
  float p = 1.0f;
  for (int64_t i = 0; i < t; i++) {
    /* Once the product repeats with period 1 or 2 (decayed to 0, stuck at 1 or inf, alternating sign), the
     * rest of the loop is known from the parity of the steps left: a huge step returns at once, same bits.
     * (p * beta * beta has p's sign, so == here means the same bits, -0 and +0 included.) */
    if (p != p) break;
    const float q = p * beta;
    if (q * beta == p) {
      if ((t - i) & 1) p = q;
      break;
    }
    p = q;
  }
  return canon(1.0f - p);
}

/* ADAMW step (llm.c's adamw_update with decoupled weight decay), bc1 and bc2 the bias corrections:
 *   once: o1 = 1 - beta1; o2 = 1 - beta2; r1 = weft_recipf(bc1); r2 = weft_recipf(bc2)
 *   per element, g = grad[i], p = param[i]:
 *     m = (beta1 * m) + (o1 * g)
 *     v = (beta2 * v) + ((o2 * g) * g)
 *     mh = m * r1;  vh = v * r2
 *     den = weft_sqrtf(vh) + eps
 *     u = (mh * weft_recipf(den)) + (weight_decay * p)
 *     param = p - (lr * u) */
void weft_ref_adamw(float *param, const float *grad, float *m, float *v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float bc1, float bc2) {
  const float o1 = 1.0f - beta1, o2 = 1.0f - beta2;
  const float r1 = weft_recipf(bc1), r2 = weft_recipf(bc2);
  for (int64_t i = 0; i < n; i++) {
    const float g = grad[i], p = param[i];
    float mm = beta1 * m[i];
    float mg = o1 * g;
    mm = mm + mg;
    float vv = beta2 * v[i];
    float vg = o2 * g;
    vg = vg * g;
    vv = vv + vg;
    float mh = mm * r1, vh = vv * r2;
    float den = weft_sqrtf(vh) + eps;
    float u = mh * weft_recipf(den);
    float wd = weight_decay * p;
    u = u + wd;
    float step = lr * u;
    m[i] = canon(mm);
    v[i] = canon(vv);
    param[i] = canon(p - step);
  }
}

/* SUMSQ (chunked):
 *   for chunk c = [c*K, min((c+1)*K, n)) ascending, K = WEFT_SUMSQ_CHUNK:
 *     p = 0; for i ascending in the chunk: sq = x[i] * x[i]; p = p + sq
 *     acc = acc + p
 *   returns canon(acc) */
float weft_ref_sumsq(const float *x, int64_t n, float acc) {
  for (int64_t c0 = 0; c0 < n; c0 += WEFT_SUMSQ_CHUNK) {
    const int64_t c1 = n - c0 < WEFT_SUMSQ_CHUNK ? n : c0 + WEFT_SUMSQ_CHUNK;
    float p = 0.0f;
    for (int64_t i = c0; i < c1; i++) {
      float sq = x[i] * x[i];
      p = p + sq;
    }
    acc = acc + p;
  }
  return canon(acc);
}

/* GLOBAL-NORM CLIP:
 *   ss = 0; for tensor k ascending: ss = weft_ref_sumsq(g_k, n_k, ss)   (SUMSQ's chunked order)
 *   norm = weft_sqrtf(ss)
 *   if norm > max_norm: sc = max_norm * weft_recipf(norm); every g[i] = g[i] * sc (else unchanged)
 *   returns norm (a NaN norm compares false: nothing is scaled, and the NaN is returned). */
float weft_ref_grad_clip(float *const *grads, const int64_t *sizes, int64_t ntensors, float max_norm) {
  float ss = 0.0f;
  for (int64_t k = 0; k < ntensors; k++) ss = weft_ref_sumsq(grads[k], sizes[k], ss);
  const float norm = weft_sqrtf(ss);
  if (norm > max_norm) {
    const float sc = max_norm * weft_recipf(norm);
    for (int64_t k = 0; k < ntensors; k++)
      for (int64_t i = 0; i < sizes[k]; i++) grads[k][i] = canon(grads[k][i] * sc);
  }
  return canon(norm);
}

void weft_ref_permute(uint32_t *y, const uint32_t *x, const int64_t xd[4], const int perm[4]) {
  int64_t xs[4]; /* x's strides */
  xs[3] = 1;
  for (int a = 2; a >= 0; a--) xs[a] = xs[a + 1] * xd[a + 1];
  int64_t yd[4], st[4];
  for (int a = 0; a < 4; a++) yd[a] = xd[perm[a]], st[a] = xs[perm[a]];
  size_t o = 0;
  for (int64_t i0 = 0; i0 < yd[0]; i0++)
    for (int64_t i1 = 0; i1 < yd[1]; i1++)
      for (int64_t i2 = 0; i2 < yd[2]; i2++) {
        const uint32_t *src = x + i0 * st[0] + i1 * st[1] + i2 * st[2];
        for (int64_t i3 = 0; i3 < yd[3]; i3++) y[o++] = src[i3 * st[3]];
      }
}

void weft_ref_copy_slice(void *dst, const void *src, int64_t outer, int64_t src_len, int64_t dst_len, int64_t inner,
                         int64_t offset) {
  const char *s = src;
  char *d = dst;
  const size_t row = (size_t)(src_len * inner) * 4;
  for (int64_t o = 0; o < outer; o++)
    memmove(d + (size_t)((o * dst_len + offset) * inner) * 4, s + (size_t)o * row, row);
}
