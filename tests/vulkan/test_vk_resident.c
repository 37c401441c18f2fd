/* test_vk_resident.c - residency on the Vulkan lane: an op's result lives on vulkan:0 only (no host copy
 * until it is read), a chain of ops keeps its intermediates there, inputs uploaded once stay current on
 * both sides, a host write makes the next op upload the new value, and reading leaves the value current on
 * both. Also: the lane describes itself (name, device, driver, limits). */
#include <string.h>

#include "vkt.h"

static void location_is(weft_tensor *t, const char *want, const char *what) {
  const char *got = weft_tensor_location(t);
  TU_CHECK(strcmp(got, want) == 0, "%s: location %s, want %s", what, got, want);
}

int main(void) {
  double start = tu_now();
  weft_fabric *f;
  int lane;
  if (!vkt_open(NULL, &f, &lane)) return tu_finish("vulkan residency", start);
  weft_lane_info info;
  TU_STATUS(weft_fabric_lane_info(f, (size_t)lane, &info), WEFT_OK, "lane info");
  TU_CHECK(strcmp(info.name, "vulkan:0") == 0 && strcmp(info.kind, "vulkan") == 0, "name %s kind %s", info.name, info.kind);
  TU_CHECK(info.device[0] != '\0', "the device has a name");
  TU_CHECK(tu_contains(info.driver, "Vulkan 1."), "the driver line gives the API version: %s", info.driver);
  TU_CHECK(tu_contains(info.details, "largest binding") && tu_contains(info.details, "invocations") &&
               tu_contains(info.details, "shared memory"),
           "the details give the limits: %s", info.details);
  TU_CHECK(info.contracts == (WEFT_CONTRACT_BIT(WEFT_CONTRACT_EXACT) | WEFT_CONTRACT_BIT(WEFT_CONTRACT_FP32)),
           "exact and fp32 contracts");

  weft_op_desc d = {WEFT_CONTRACT_EXACT, lane};
  int64_t dims[2] = {32, 32};
  float a[32 * 32], b[32 * 32], got[32 * 32];
  for (int i = 0; i < 32 * 32; i++) a[i] = (float)(i % 7), b[i] = (float)(i % 5) - 2.0f;
  weft_tensor *A, *B, *C, *D;
  weft_tensor_create(f, 2, dims, a, &A), weft_tensor_create(f, 2, dims, b, &B);
  weft_tensor_create(f, 2, dims, NULL, &C), weft_tensor_create(f, 2, dims, NULL, &D);
  location_is(A, "host", "a new tensor");
  TU_STATUS(weft_op_matmul(f, &d, A, 0, B, 0, C), WEFT_OK, "matmul");
  location_is(A, "host,vulkan:0", "an input after the op");
  location_is(C, "vulkan:0", "the result, not read yet");
  TU_STATUS(weft_op_relu(f, &d, C, D), WEFT_OK, "relu");
  TU_STATUS(weft_op_scale(f, &d, 2.0f, D, D), WEFT_OK, "scale");
  TU_STATUS(weft_op_add(f, &d, D, C, C), WEFT_OK, "add");
  location_is(C, "vulkan:0", "a chain's intermediate");
  location_is(D, "vulkan:0", "a chain's intermediate");
  TU_STATUS(weft_tensor_read(C, got, 32 * 32), WEFT_OK, "read");
  location_is(C, "host,vulkan:0", "after a read");
  /* c = 2 relu(ab) + ab, checked on the host. */
  int bad = 0;
  for (int i = 0; i < 32; i++)
    for (int j = 0; j < 32; j++) {
      float acc = 0.0f;
      for (int q = 0; q < 32; q++) acc = acc + a[i * 32 + q] * b[q * 32 + j];
      float want = 2.0f * (acc > 0.0f ? acc : 0.0f) + acc;
      bad += got[i * 32 + j] != want;
    }
  TU_CHECK(bad == 0, "the chain's values (%d wrong)", bad);
  /* A host write: the lane's copy is stale, the next op uploads the new value. */
  for (int i = 0; i < 32 * 32; i++) a[i] = 1.0f;
  TU_STATUS(weft_tensor_write(A, a, 32 * 32), WEFT_OK, "write");
  location_is(A, "host", "after a host write");
  TU_STATUS(weft_op_scale(f, &d, 3.0f, A, D), WEFT_OK, "scale of the new value");
  TU_STATUS(weft_tensor_read(D, got, 32 * 32), WEFT_OK, "read");
  bad = 0;
  for (int i = 0; i < 32 * 32; i++) bad += got[i] != 3.0f;
  TU_CHECK(bad == 0, "the op saw the written value (%d wrong)", bad);
  TU_STATUS(weft_fabric_sync(f), WEFT_OK, "sync with nothing pending");
  weft_fabric_close(f);
  return tu_finish("vulkan residency", start);
}
