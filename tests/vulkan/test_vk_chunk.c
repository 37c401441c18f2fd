/* test_vk_chunk.c - tensors larger than one storage-buffer binding. vulkan_max_binding caps the binding at
 * 1 KiB (about 250 floats), so small tensors already need the lane's chunking: matmuls split into row,
 * column and k blocks (k blocks continuing the sums in c), elementwise ops in element chunks (a broadcast
 * row wider than a binding too), sum_rows in row and column blocks, softmax_xent in row blocks. Every
 * result must keep the reference's bits, through each matmul kernel. */
#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

int main(void) {
  double start = tu_now();
  tu_rng r = {tu_seed()};
  weft_fabric_desc d = tu_desc();
  d.vulkan_max_binding = 1024;
  weft_fabric *f;
  int lane;
  if (!vkt_open(&d, &f, &lane)) return tu_finish("vulkan chunking", start);
  weft_lane_info info;
  weft_fabric_lane_info(f, (size_t)lane, &info);
  printf("%s: %s\n", info.name, info.details);
  TU_CHECK(tu_contains(info.details, "largest binding 1 KiB (capped by vulkan_max_binding)"),
           "the details show the forced cap: %s", info.details);

  for (int kern = 0; kern <= 4; kern++) {
    weft_vk_force_matmul_kernel = kern;
    for (int t = 0; t < 4; t++) {
      int ta = t & 1, tb = t >> 1;
      vkt_matmul(f, lane, &r, 1, 40, 50, 70, ta, tb, 0, 0);   /* k blocks: a row of b^T or a is 70 floats */
      vkt_matmul(f, lane, &r, 3, 20, 30, 10, ta, tb, 1, 0);   /* batched b: one batch entry per block */
      vkt_matmul(f, lane, &r, 5, 6, 7, 5, ta, tb, 0, 0);      /* small enough to group batch entries */
      vkt_matmul(f, lane, &r, 1, 2, 600, 3, ta, tb, 0, 0);    /* a row of c wider than a binding */
      vkt_matmul(f, lane, &r, 1, 12, 3, 700, ta, tb, 0, 1);  /* a row of a wider than a binding */
    }
  }
  weft_vk_force_matmul_kernel = 0;
  vkt_elementwise(f, lane, &r, WEFT_OP_ADD, 50, 37, 0, 1);
  vkt_elementwise(f, lane, &r, WEFT_OP_ADD, 50, 37, 1, 1);
  vkt_elementwise(f, lane, &r, WEFT_OP_ADD, 3, 300, 1, 1); /* the broadcast row itself exceeds a binding */
  vkt_elementwise(f, lane, &r, WEFT_OP_RELU, 50, 37, 0, 1);
  vkt_elementwise(f, lane, &r, WEFT_OP_RELU_BACKWARD, 50, 37, 0, 1);
  vkt_elementwise(f, lane, &r, WEFT_OP_SCALE, 50, 37, 0, 1);
  vkt_elementwise(f, lane, &r, WEFT_OP_AXPY, 50, 37, 0, 1);
  vkt_sum_rows(f, lane, &r, 100, 37, 1);
  vkt_sum_rows(f, lane, &r, 5, 300, 1);
  vkt_softmax(f, lane, &r, 100, 37, 4.0f, 1, 1);
  vkt_softmax(f, lane, &r, 9, 200, 4.0f, 1, 1);
  vkt_softmax(f, lane, &r, 40, 20, 4.0f, 1, 0);
  weft_fabric_close(f);
  return tu_finish("vulkan chunking", start);
}
