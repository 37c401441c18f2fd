/* vkt.h - what the Vulkan lane's tests share: opening a fabric with the Vulkan lane (or saying why the test
 * is skipped), filling data with the values that break careless kernels, and running one op on the lane
 * and on the reference and comparing bit for bit (NaNs normalised). Built on tests/tutil.h. */
#ifndef WEFT_VKT_H
#define WEFT_VKT_H

#include "tutil.h"
#include "weft_lane.h"

/* Opens a fabric of the CPU lane and the Vulkan lanes (desc may be NULL for tu_desc()). Returns 1 with the
 * fabric and the index of vulkan:0; returns 0 after printing why the test is skipped when there is no
 * Vulkan lane (the fabric is then closed); a failed open is a failed check. */
int vkt_open(const weft_fabric_desc *desc, weft_fabric **out_fabric, int *out_lane);

/* Fills x with uniform values in [-1, 1) and, when `specials`, sprinkles NaN, +-inf, -0, subnormals and
 * large values among them. */
void vkt_fill(tu_rng *r, float *x, size_t n, int specials);

/* Fills x with random bit patterns whose exponents crowd the subnormal range and its edges (and reach
 * the top, infinities and NaN now and then): the inputs that tell an IEEE multiply or add from one that
 * flushes subnormals or rounds twice. */
void vkt_fill_bits(tu_rng *r, float *x, size_t n);

/* Compares got with want element by element (NaNs normalised); one failed check naming the first
 * difference and how many differ. */
void vkt_same(const char *what, const float *got, const float *want, size_t n);

/* Runs a matmul of the given form on `lane` and the reference, checks the bits. */
void vkt_matmul(weft_fabric *f, int lane, tu_rng *r, int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb,
                int b_batched, int specials);
/* Runs `kind` (add, relu, relu_backward, scale, axpy) on [rows, cols] data; y_broadcast for add. */
void vkt_elementwise(weft_fabric *f, int lane, tu_rng *r, weft_op_kind kind, int64_t rows, int64_t cols,
                     int y_broadcast, int specials);
void vkt_sum_rows(weft_fabric *f, int lane, tu_rng *r, int64_t rows, int64_t cols, int specials);
/* softmax_xent with loss and/or grad; `spread` scales the logits (large spreads make exp underflow into
 * subnormals and zero). */
void vkt_softmax(weft_fabric *f, int lane, tu_rng *r, int64_t rows, int64_t cols, float spread, int want_loss,
                 int want_grad);

#endif
