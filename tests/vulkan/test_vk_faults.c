/* test_vk_faults.c - the Vulkan lane failing without taking weft down: an out-of-memory allocation, a kernel
 * the driver cannot build and a lost device (each injected through the lane's test hook) come back as
 * statuses with messages; out of memory leaves the lane in the fabric, the other two mark it failed, and the
 * CPU lane goes on computing. Nothing aborts. */
#include <string.h>

#include "lanes/vulkan/vk_internal.h"
#include "vkt.h"

static weft_tensor *square(weft_fabric *f, float v) {
  float data[16 * 16];
  for (int i = 0; i < 16 * 16; i++) data[i] = v;
  int64_t dims[2] = {16, 16};
  weft_tensor *t = NULL;
  TU_STATUS(weft_tensor_create(f, 2, dims, data, &t), WEFT_OK, "create");
  return t;
}

static int lane_failed(weft_fabric *f, int lane) {
  weft_lane_info info;
  weft_fabric_lane_info(f, (size_t)lane, &info);
  return info.failed;
}

/* The CPU lane still computes a product: 16 ones times 16 twos per element. */
static void cpu_goes_on(weft_fabric *f, const char *after) {
  weft_tensor *a = square(f, 1.0f), *b = square(f, 2.0f), *c = square(f, 0.0f);
  weft_status st = weft_op_matmul(f, NULL, a, 0, b, 0, c);
  TU_CHECK(st == WEFT_OK, "after %s, a matmul still runs: %s (%s)", after, weft_status_str(st), weft_fabric_last_error(f));
  float got[16 * 16];
  TU_STATUS(weft_tensor_read(c, got, 16 * 16), WEFT_OK, "read");
  TU_CHECK(got[0] == 32.0f && got[255] == 32.0f, "after %s, the result is right: %g", after, (double)got[0]);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
}

int main(void) {
  double start = tu_now();
  weft_fabric *f;
  int lane;
  if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan faults", start);
  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};

  /* 1. Out of device memory: a status and a message; the lane stays; the next op there works. */
  weft_tensor *a = square(f, 1.0f), *b = square(f, 2.0f), *c = square(f, 0.0f);
  weft_vk_inject_fault = WEFT_VK_FAULT_OOM;
  weft_status st = weft_op_matmul(f, &d, a, 0, b, 0, c);
  TU_STATUS(st, WEFT_ERR_OUT_OF_MEMORY, "matmul when device memory runs out");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "out of device memory"), "the message says so: %s",
           weft_fabric_last_error(f));
  TU_CHECK(!lane_failed(f, lane), "running out of memory does not fail the lane");
  TU_STATUS(weft_op_matmul(f, &d, a, 0, b, 0, c), WEFT_OK, "the same matmul once memory is there");
  float got[16 * 16];
  TU_STATUS(weft_tensor_read(c, got, 16 * 16), WEFT_OK, "read");
  TU_CHECK(got[0] == 32.0f, "and it is right: %g", (double)got[0]);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
  weft_fabric_close(f);

  /* 2. A kernel the driver cannot build: the lane fails, the fabric goes on. */
  if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan faults", start);
  d.lane = lane;
  weft_tensor *x = square(f, 3.0f), *y = square(f, 0.0f);
  weft_vk_inject_fault = WEFT_VK_FAULT_PIPELINE;
  st = weft_op_relu(f, &d, x, y);
  TU_STATUS(st, WEFT_ERR_LANE_FAILED, "relu when its kernel cannot be built");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "compiling the elementwise kernel"), "the message names the kernel: %s",
           weft_fabric_last_error(f));
  TU_CHECK(lane_failed(f, lane), "the lane is marked failed");
  TU_STATUS(weft_op_relu(f, &d, x, y), WEFT_ERR_LANE_FAILED, "pinned to the failed lane");
  TU_STATUS(weft_op_relu(f, NULL, x, y), WEFT_OK, "routed elsewhere");
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync skips the failed lane");
  cpu_goes_on(f, "a kernel failure");
  weft_tensor_destroy(x), weft_tensor_destroy(y);
  weft_fabric_close(f);

  /* 3. The device is lost while work runs: the wait reports it, the lane fails, a result that lived only
   * there is computed again on another lane from what made it, and everything else goes on. */
  if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan faults", start);
  d.lane = lane;
  x = square(f, 3.0f), y = square(f, 0.0f);
  TU_STATUS(weft_op_scale(f, &d, 2.0f, x, y), WEFT_OK, "scale on the lane");
  weft_vk_inject_fault = WEFT_VK_FAULT_DEVICE_LOST;
  st = weft_fabric_sync(f);
  TU_STATUS(st, WEFT_ERR_LANE_FAILED, "sync when the device is lost");
  TU_CHECK(tu_contains(weft_fabric_last_error(f), "lost"), "the message says the device was lost: %s",
           weft_fabric_last_error(f));
  TU_CHECK(lane_failed(f, lane), "the lane is marked failed");
  st = weft_tensor_read(y, got, 16 * 16);
  TU_STATUS(st, WEFT_OK, "reading a result that lived only on the lost device");
  TU_CHECK(got[0] == 6.0f && got[255] == 6.0f, "it was computed again elsewhere: %g", (double)got[0]);
  TU_STATUS(weft_op_scale(f, NULL, 2.0f, x, x), WEFT_OK, "an op on the host's copy");
  TU_STATUS(weft_tensor_read(x, got, 16 * 16), WEFT_OK, "read it");
  TU_CHECK(got[0] == 6.0f, "computed elsewhere: %g", (double)got[0]);
  cpu_goes_on(f, "a lost device");
  weft_tensor_destroy(x), weft_tensor_destroy(y);
  weft_fabric_close(f);
  return tu_finish("vulkan faults", start);
}
