/* weft.c - the `weft` command-line tool (placeholder main, being written). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "bench") == 0) return weft_cli_bench(argc - 1, argv + 1);
  weft_fabric *f;
  if (weft_fabric_open(NULL, &f) != WEFT_OK) {
    fprintf(stderr, "weft: %s\n", weft_open_error());
    return 1;
  }
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    printf("%s  %s  %s\n", li.name, li.device, li.details);
  }
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *n, *r;
    weft_fabric_absent_info(f, i, &n, &r);
    printf("absent %s: %s\n", n, r);
  }
  weft_fabric_close(f);
  return 0;
}
