/* test_open_errors.c - every way weft_fabric_open fails leaves a message in weft_open_error(): bad
 * arguments, a lane filter that opens nothing, and host memory running out (calloc is wrapped at link
 * time, -Wl,--wrap=calloc, so the test can make the next allocation fail). */
#include <stdlib.h>
#include <string.h>

#include "tutil.h"
#include "weft.h"

void *__real_calloc(size_t n, size_t size);
static int fail_next_calloc;
void *__wrap_calloc(size_t n, size_t size) {
  if (fail_next_calloc) {
    fail_next_calloc = 0;
    return NULL;
  }
  return __real_calloc(n, size);
}

/* Opens with `d`, expecting `want` and a message containing `needle`; a good open before clears the
 * message, so an empty one after a failure is caught. */
static void expect(const weft_fabric_desc *d, int null_out, int oom, weft_status want, const char *needle,
                   const char *what) {
  weft_fabric *f = NULL;
  if (tu_open("cpu", &f) == WEFT_OK) weft_fabric_close(f);
  TU_CHECK(weft_open_error()[0] == '\0', "%s: a good open leaves no open error ('%s')", what, weft_open_error());
  fail_next_calloc = oom;
  weft_status st = weft_fabric_open(d, null_out ? NULL : &f);
  fail_next_calloc = 0;
  TU_CHECK(st == want, "%s: %s, want %s", what, weft_status_str(st), weft_status_str(want));
  TU_CHECK(weft_open_error()[0] != '\0' && tu_contains(weft_open_error(), needle), "%s: open error '%s', want '%s'",
           what, weft_open_error(), needle);
  if (st == WEFT_OK) weft_fabric_close(f);
}

int main(void) {
  double start = tu_now();
  weft_fabric_desc d = tu_desc();
  d.lanes = "cpu";
  expect(&d, 1, 0, WEFT_ERR_INVALID_ARGUMENT, "out_fabric", "NULL out_fabric");
  d.cpu_threads = -2;
  expect(&d, 0, 0, WEFT_ERR_INVALID_ARGUMENT, "cpu_threads", "negative cpu_threads");
  d.cpu_threads = 0;
  d.calibration = 7;
  expect(&d, 0, 0, WEFT_ERR_INVALID_ARGUMENT, "calibration", "unknown calibration");
  d.calibration = WEFT_CALIBRATION_OFF;
  d.lanes = "nosuchlane";
  expect(&d, 0, 0, WEFT_ERR_NOT_FOUND, "no lane", "a filter that opens nothing");
  d.lanes = "cpu";
  expect(&d, 0, 1, WEFT_ERR_OUT_OF_MEMORY, "memory", "no memory for the fabric");
  return tu_finish("open_errors", start);
}
