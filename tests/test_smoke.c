#include <stdio.h>
#include "weft.h"
int main(void) {
  weft_fabric *f;
  if (weft_fabric_open(NULL, &f)) return 1;
  int64_t d[2] = {2, 2};
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4];
  weft_tensor *ta, *tb, *tc;
  weft_tensor_create(f, 2, d, a, &ta);
  weft_tensor_create(f, 2, d, b, &tb);
  weft_tensor_create(f, 2, d, NULL, &tc);
  if (weft_op_matmul(f, NULL, ta, 0, tb, 0, tc)) { printf("%s\n", weft_fabric_last_error(f)); return 1; }
  weft_tensor_read(tc, c, 4);
  printf("%g %g %g %g\n", c[0], c[1], c[2], c[3]);
  weft_fabric_close(f);
  return !(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
}
