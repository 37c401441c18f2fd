/* cli.h - shared pieces of the `weft` command-line tool. */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include "weft.h"

int weft_cli_bench(int argc, char **argv);
/* Seconds on a monotonic clock. */
double weft_cli_now(void);

#endif
