/* cli_util.c - small helpers shared by the CLI's subcommands. */
#include <time.h>

#include "cli.h"

double weft_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
