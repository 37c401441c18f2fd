/* test_hostile_params.c - hostile hyperparameters and positions the core refuses or survives:
 *   1. weft_adamw_bias_correction(beta, step) is the loop of `step` multiplications (its bits, for betas that
 *      shrink, grow, alternate and stick), yet a huge step (a lying checkpoint: INT64_MAX) returns at once.
 *   2. weft_grad_clip refuses a max_norm that is negative (it would flip every gradient's sign) or NaN (it
 *      would never clip), naming max_norm, and leaves the gradients as they were.
 *   3. weft_op_adamw refuses NaN or infinite lr, eps and weight_decay, and betas outside [0, 1), naming the
 *      parameter, before anything is written.
 *   4. weft_op_attention_cached with t0 = INT64_MAX is a shape error whose message computes no overflowing sum
 *      (the sanitizer build stops on signed overflow). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tutil.h"

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: weft_adamw_bias_correction(0.9, INT64_MAX) did not return within 10 s (a hang)\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

/* the canonical definition, step by step */
static float naive_bias_correction(float beta, int64_t step) {
  float p = 1.0f;
  for (int64_t i = 0; i < step; i++) p = p * beta;
  float r = 1.0f - p;
  return isnan(r) ? tu_float(0x7fc00000u) : r;
}

static void test_bias_correction(void) {
  /* the bits of the loop, for betas that shrink, grow, alternate and stick */
  static const float betas[] = {0.9f, 0.95f, 0.999f, 0.5f, 0.0f, 1.0f, 1.5f, -0.5f, -1.0f, -1.5f, 2.0f, -2.0f};
  for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++)
    for (int64_t step = 1; step <= 3000; step += step < 40 ? 1 : 37) {
      const float got = weft_adamw_bias_correction(betas[b], step), want = naive_bias_correction(betas[b], step);
      TU_CHECK(tu_same_bits(got, want), "bias correction (%g, %lld): %a, the loop gives %a", (double)betas[b],
               (long long)step, (double)got, (double)want);
    }
  signal(SIGALRM, on_alarm);
  alarm(10);
  const float huge = weft_adamw_bias_correction(0.9f, INT64_MAX);
  const float neg = weft_adamw_bias_correction(-1.0f, INT64_MAX); /* odd: p = -1, 1 - p = 2 */
  alarm(0);
  TU_CHECK(huge == 1.0f, "bias correction (0.9, INT64_MAX) is %g, want 1", (double)huge);
  TU_CHECK(neg == 2.0f, "bias correction (-1, INT64_MAX) is %g, want 2 (an odd number of steps)", (double)neg);
}

static void test_bad_hyperparameters(void) {
  weft_fabric *f = NULL;
  TU_STATUS(tu_open("cpu", &f), WEFT_OK, "open");
  if (!f) return;
  const int64_t dims[1] = {4};
  const float g0[4] = {3, 4, 0, 0};
  weft_tensor *g = NULL, *p = NULL, *m = NULL, *v = NULL;
  weft_tensor_create(f, 1, dims, g0, &g);
  weft_tensor_create(f, 1, dims, g0, &p);
  weft_tensor_create(f, 1, dims, NULL, &m);
  weft_tensor_create(f, 1, dims, NULL, &v);
  float norm = 0, back[4];
  weft_tensor *grads[1] = {g};
  static const float bad_norms[] = {-1.0f, NAN};
  for (int i = 0; i < 2; i++) {
    TU_STATUS(weft_grad_clip(f, NULL, grads, 1, bad_norms[i], &norm), WEFT_ERR_INVALID_ARGUMENT, "grad_clip, bad max_norm");
    TU_CHECK(tu_contains(weft_fabric_last_error(f), "max_norm"), "grad_clip: the message '%s' does not name max_norm",
             weft_fabric_last_error(f));
    TU_CHECK(weft_tensor_read(g, back, 4) == WEFT_OK && memcmp(back, g0, sizeof g0) == 0,
             "grad_clip with max_norm %g changed the gradient", (double)bad_norms[i]);
  }
  static const struct {
    float lr, beta1, beta2, eps, wd;
    const char *what;
  } bad[] = {
      {NAN, 0.9f, 0.95f, 1e-8f, 0.0f, "lr"},           {INFINITY, 0.9f, 0.95f, 1e-8f, 0.0f, "lr"},
      {1e-3f, 1.0f, 0.95f, 1e-8f, 0.0f, "beta1"},      {1e-3f, 0.9f, NAN, 1e-8f, 0.0f, "beta2"},
      {1e-3f, 0.9f, 0.95f, NAN, 0.0f, "eps"},          {1e-3f, 0.9f, 0.95f, 1e-8f, INFINITY, "weight_decay"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    TU_STATUS(weft_op_adamw(f, NULL, p, g, m, v, bad[i].lr, bad[i].beta1, bad[i].beta2, bad[i].eps, bad[i].wd, 1),
              WEFT_ERR_INVALID_ARGUMENT, bad[i].what);
    TU_CHECK(tu_contains(weft_fabric_last_error(f), bad[i].what), "adamw: the message '%s' does not name %s",
             weft_fabric_last_error(f), bad[i].what);
    TU_CHECK(weft_tensor_read(p, back, 4) == WEFT_OK && memcmp(back, g0, sizeof g0) == 0,
             "adamw with a bad %s changed the parameters", bad[i].what);
  }
  /* 4: a hostile t0 */
  const int64_t dq[3] = {1, 2, 12}, d1[3] = {1, 1, 4};
  weft_tensor *q = NULL, *o1 = NULL;
  weft_tensor_create(f, 3, dq, NULL, &q);
  weft_tensor_create(f, 3, d1, NULL, &o1);
  TU_STATUS(weft_op_attention_cached(f, NULL, q, 2, INT64_MAX, o1, NULL), WEFT_ERR_SHAPE, "attention_cached, t0 INT64_MAX");
  weft_fabric_close(f);
}

int main(void) {
  const double start = tu_now();
  test_bad_hyperparameters();
  test_bias_correction(); /* last: a hang ends the run (SIGALRM) */
  return tu_finish("hostile_params", start);
}
