/* cli_bench.c - `weft bench` (placeholder, being written). */
#include <stdio.h>

#include "cli.h"

int weft_cli_bench(int argc, char **argv) {
  (void)argc, (void)argv;
  fprintf(stderr, "weft bench: not written yet\n");
  return 1;
}
