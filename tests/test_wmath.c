/* test_wmath.c - weft_expf and weft_logf: accuracy against libm's exp and log evaluated in double over a
 * sweep of every range, the special values, the overflow and underflow thresholds, and a fingerprint of
 * their bits (every exact lane transcribes these two functions step for step, so their bits are part of
 * the exact contract). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tutil.h"

/* Accuracy promised here (weft.h says "a few ulp"; measured: exp 1.18 ulp, log 1.52 ulp). Results in the
 * subnormal range are held to an absolute error in units of the smallest subnormal instead. */
#define MAX_ULP 2.0
#define MAX_SUBNORMAL_UNITS 1.0

/* Fingerprints of the bits over the fingerprint sweeps below. If one changes, weft_expf/weft_logf changed:
 * every lane's transcription (GLSL, CUDA, WGSL) must change with it, then update the value here. */
#define EXP_FINGERPRINT 0xb12c9ab8ec0d13e6ull
#define LOG_FINGERPRINT 0x3e2fb707335f1dc0ull

static double ulp_at(double v) {
  const double smallest = ldexp(1.0, -149);
  float f = (float)fabs(v);
  if (f < FLT_MIN) return smallest;
  int e;
  frexpf(f, &e);
  return ldexp(1.0, e - 24);
}

typedef struct err_stats {
  double max_ulp, max_sub;
  float at_ulp, at_sub;
  long n;
} err_stats;

static void record(err_stats *s, float x, float got, double want) {
  double err = fabs((double)got - want);
  s->n++;
  if (fabs(want) < (double)FLT_MIN) {
    err /= ldexp(1.0, -149);
    if (err > s->max_sub) s->max_sub = err, s->at_sub = x;
  } else {
    err /= ulp_at(want);
    if (err > s->max_ulp) s->max_ulp = err, s->at_ulp = x;
  }
}

static uint64_t fnv(uint64_t h, uint32_t v) {
  for (int i = 0; i < 4; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 1099511628211ull;
  return h;
}

static void check_bits(const char *what, float got, uint32_t want) {
  TU_CHECK(tu_same_bits(got, tu_float(want)), "%s = 0x%08x (%a), want 0x%08x (%a)", what, tu_bits(got), got, want,
           tu_float(want));
}

static void test_exp(void) {
  /* Sweep: every 1021st bit pattern, both signs, whose exp is finite and not flushed by the thresholds. */
  err_stats s;
  memset(&s, 0, sizeof s);
  for (uint64_t u = 0; u < 0x100000000ull; u += 1021) {
    float x = tu_float((uint32_t)u);
    if (!(x >= -104.0f && x <= 89.0f)) continue;
    double want = exp((double)x);
    if (want > (double)FLT_MAX) continue;
    record(&s, x, weft_expf(x), want);
  }
  /* Densely around 0, where the reduced argument is the whole argument. */
  for (float x = -0.75f; x <= 0.75f; x += 1.0e-6f) record(&s, x, weft_expf(x), exp((double)x));
  printf("weft_expf: %ld points, max %.3f ulp at %a, max %.3f subnormal units at %a\n", s.n, s.max_ulp,
         (double)s.at_ulp, s.max_sub, (double)s.at_sub);
  TU_CHECK(s.max_ulp <= MAX_ULP, "weft_expf is %.3f ulp off at %a (allowed %.1f)", s.max_ulp, (double)s.at_ulp, MAX_ULP);
  TU_CHECK(s.max_sub <= MAX_SUBNORMAL_UNITS, "weft_expf is %.3f subnormal units off at %a", s.max_sub, (double)s.at_sub);

  check_bits("weft_expf(0)", weft_expf(0.0f), 0x3f800000u);
  check_bits("weft_expf(-0)", weft_expf(-0.0f), 0x3f800000u);
  check_bits("weft_expf(+inf)", weft_expf(INFINITY), 0x7f800000u);
  check_bits("weft_expf(-inf)", weft_expf(-INFINITY), 0x00000000u);
  check_bits("weft_expf(FLT_MAX)", weft_expf(FLT_MAX), 0x7f800000u);
  check_bits("weft_expf(-FLT_MAX)", weft_expf(-FLT_MAX), 0x00000000u);
  check_bits("weft_expf(smallest subnormal)", weft_expf(tu_float(1)), 0x3f800000u);
  check_bits("weft_expf(-smallest subnormal)", weft_expf(tu_float(0x80000001u)), 0x3f800000u);
  TU_CHECK(isnan(weft_expf(NAN)), "weft_expf(NaN) is not NaN");
  TU_CHECK(isnan(weft_expf(-NAN)), "weft_expf(-NaN) is not NaN");

  /* Thresholds: around the largest finite result, the normal/subnormal boundary and the last non-zero
   * subnormal, every float must land on the same side as the correctly rounded value, within the bounds. */
  static const uint32_t centres[] = {0x42b17217u, 0xc2aeac50u, 0xc2cff1b4u};
  err_stats t;
  memset(&t, 0, sizeof t);
  for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++)
    for (int64_t d = -64; d <= 64; d++) {
      float x = tu_float((uint32_t)((int64_t)centres[c] + d));
      double want = exp((double)x);
      float rounded = (float)want, got = weft_expf(x);
      TU_CHECK(isinf(got) == isinf(rounded) && (got == 0.0f) == (rounded == 0.0f) &&
                   (got < FLT_MIN) == (rounded < FLT_MIN),
               "weft_expf(%a) = %a but exp rounds to %a: the wrong side of a threshold", (double)x, (double)got,
               (double)rounded);
      if (!isinf(rounded)) record(&t, x, got, want);
    }
  TU_CHECK(t.max_ulp <= MAX_ULP && t.max_sub <= MAX_SUBNORMAL_UNITS,
           "near the thresholds weft_expf is %.3f ulp / %.3f subnormal units off", t.max_ulp, t.max_sub);
}

static void test_log(void) {
  err_stats s;
  memset(&s, 0, sizeof s);
  /* Every 509th positive finite bit pattern, subnormals included. */
  for (uint32_t u = 1; u < 0x7f800000u; u += 509) {
    float x = tu_float(u);
    record(&s, x, weft_logf(x), log((double)x));
  }
  /* Densely around 1, where log is small and the polynomial carries all of it. */
  for (uint32_t u = 0x3f700000u; u < 0x3f880000u; u += 7) {
    float x = tu_float(u);
    if (x != 1.0f) record(&s, x, weft_logf(x), log((double)x));
  }
  /* Every power of two: the exponent path alone. */
  for (int e = -149; e <= 127; e++) record(&s, ldexpf(1.0f, e), weft_logf(ldexpf(1.0f, e)), (double)e * log(2.0));
  printf("weft_logf: %ld points, max %.3f ulp at %a\n", s.n, s.max_ulp, (double)s.at_ulp);
  TU_CHECK(s.max_ulp <= MAX_ULP, "weft_logf is %.3f ulp off at %a (allowed %.1f)", s.max_ulp, (double)s.at_ulp, MAX_ULP);

  check_bits("weft_logf(1)", weft_logf(1.0f), 0x00000000u);
  check_bits("weft_logf(+0)", weft_logf(0.0f), 0xff800000u);
  check_bits("weft_logf(-0)", weft_logf(-0.0f), 0xff800000u);
  check_bits("weft_logf(+inf)", weft_logf(INFINITY), 0x7f800000u);
  TU_CHECK(isnan(weft_logf(-INFINITY)), "weft_logf(-inf) is not NaN");
  TU_CHECK(isnan(weft_logf(-1.0f)), "weft_logf(-1) is not NaN");
  TU_CHECK(isnan(weft_logf(tu_float(0x80000001u))), "weft_logf(-smallest subnormal) is not NaN");
  TU_CHECK(isnan(weft_logf(NAN)), "weft_logf(NaN) is not NaN");
  TU_CHECK(isfinite(weft_logf(tu_float(1))) && weft_logf(tu_float(1)) < -103.0f,
           "weft_logf(smallest subnormal) = %a", (double)weft_logf(tu_float(1)));
  TU_CHECK(isfinite(weft_logf(FLT_MAX)) && weft_logf(FLT_MAX) > 88.0f, "weft_logf(FLT_MAX) = %a",
           (double)weft_logf(FLT_MAX));
}

/* exp and log undo each other to within their combined error on moderate arguments. */
static void test_roundtrip(void) {
  tu_rng r = {tu_seed()};
  double worst = 0;
  for (int i = 0; i < 100000; i++) {
    float x = tu_rng_float(&r, -80.0f, 80.0f);
    double back = (double)weft_logf(weft_expf(x));
    double err = fabs(back - (double)x) / (fabs((double)x) * ldexp(1.0, -23) + ldexp(1.0, -24));
    if (err > worst) worst = err;
  }
  printf("weft_logf(weft_expf(x)) on [-80, 80): max %.3f (relative ulps of x)\n", worst);
  TU_CHECK(worst <= 8.0, "weft_logf(weft_expf(x)) strays %.3f ulps from x", worst);
}

static void test_fingerprint(void) {
  uint64_t he = 1469598103934665603ull, hl = 1469598103934665603ull;
  for (uint64_t u = 0; u < 0x100000000ull; u += 65537) {
    float x = tu_float((uint32_t)u);
    he = fnv(he, tu_bits(weft_expf(x)) | (weft_expf(x) != weft_expf(x) ? 0x7fc00000u : 0u));
    hl = fnv(hl, tu_bits(weft_logf(x)) | (weft_logf(x) != weft_logf(x) ? 0x7fc00000u : 0u));
  }
  printf("fingerprints: exp 0x%016llx, log 0x%016llx\n", (unsigned long long)he, (unsigned long long)hl);
  TU_CHECK(he == EXP_FINGERPRINT, "weft_expf's bits changed (fingerprint 0x%016llx, recorded 0x%016llx): every lane's "
           "transcription must change with it; then record the new value", (unsigned long long)he, EXP_FINGERPRINT);
  TU_CHECK(hl == LOG_FINGERPRINT, "weft_logf's bits changed (fingerprint 0x%016llx, recorded 0x%016llx): every lane's "
           "transcription must change with it; then record the new value", (unsigned long long)hl, LOG_FINGERPRINT);
}

int main(void) {
  const double start = tu_now();
  test_exp();
  test_log();
  test_roundtrip();
  test_fingerprint();
  return tu_finish("wmath", start);
}
