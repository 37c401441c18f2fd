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
