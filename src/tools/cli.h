/* cli.h - shared pieces of the `weft` command-line tool: the command table's entry type, exit codes,
 * option parsing helpers, JSON output, and the timed measurement of one op that bench (and later
 * calibrate and route) reuse. */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "weft.h"

/* Exit codes: usage errors are distinct so scripts can tell "you called it wrong" from "it ran and failed". */
enum { WEFT_CLI_OK = 0, WEFT_CLI_FAILED = 1, WEFT_CLI_USAGE = 2 };

/* One subcommand. `run` gets argv[0] = the command's name; `help` prints its usage and options. */
typedef struct weft_cli_command {
  const char *name;
  const char *summary; /* one line for `weft --help` */
  int (*run)(int argc, char **argv);
  void (*help)(FILE *out);
} weft_cli_command;

int weft_cli_devices(int argc, char **argv);
void weft_cli_devices_help(FILE *out);
int weft_cli_bench(int argc, char **argv);
void weft_cli_bench_help(FILE *out);
int weft_cli_route(int argc, char **argv);
void weft_cli_route_help(FILE *out);
int weft_cli_calibrate(int argc, char **argv);
void weft_cli_calibrate_help(FILE *out);
int weft_cli_mlp(int argc, char **argv);
void weft_cli_mlp_help(FILE *out);
int weft_cli_worker(int argc, char **argv);
void weft_cli_worker_help(FILE *out);
int weft_cli_gpt(int argc, char **argv);
void weft_cli_gpt_help(FILE *out);
int weft_cli_serve(int argc, char **argv);
void weft_cli_serve_help(FILE *out);

/* ------------------------------------------------------------------------------------------ helpers */

/* Seconds on a monotonic clock. */
double weft_cli_now(void);
/* Median of n values (sorts `v` in place); 0 for n == 0. */
double weft_cli_median(double *v, size_t n);

/* Prints "weft <cmd>: <message>" and the pointer to --help on stderr; returns WEFT_CLI_USAGE. */
int weft_cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Turns a getopt_long error return ('?' unknown option, ':' missing value) into a usage error. `argv` and
 * the global optind/optopt are getopt's. */
int weft_cli_option_error(const char *cmd, int ret, char **argv);
/* Before getopt_long: every "--name" or "--name=value" in argv must name one of `longopts` exactly (getopt
 * alone takes any unique prefix, so "--lane" or "--js" would pass as another option), and one that takes
 * no value must not be given one. A usage error naming the option (and the one it likely meant) otherwise. */
struct option;
int weft_cli_check_long_options(const char *cmd, int argc, char **argv, const struct option *longopts);
/* A --lanes value: at least one lane kind or name (an empty list would open every lane). */
int weft_cli_parse_lanes(const char *cmd, const char *opt, const char *s, const char **out);
/* The candidate a mistyped word most likely meant (one or two edits away), or NULL. */
const char *weft_cli_suggest(const char *word, const char *const *candidates, size_t count);
/* Parses a whole number in [min, max]; on failure prints a usage error naming `opt` and returns
 * WEFT_CLI_USAGE, else WEFT_CLI_OK. */
int weft_cli_parse_long(const char *cmd, const char *opt, const char *s, long min, long max, long *out);
/* Parses a positive number of seconds (a decimal, > 0). */
int weft_cli_parse_seconds(const char *cmd, const char *opt, const char *s, double *out);
/* Parses "64,128,256" into a malloc'ed array of sizes in [1, max]. */
int weft_cli_parse_sizes(const char *cmd, const char *opt, const char *s, int64_t max, int64_t **out,
                         size_t *out_count);
/* Parses a contract name, with a usage error listing the names on failure. */
int weft_cli_parse_contract(const char *cmd, const char *opt, const char *s, weft_contract *out);

/* Opens a fabric with `desc`; on failure prints why (weft_open_error) and returns NULL. */
weft_fabric *weft_cli_open(const char *cmd, const weft_fabric_desc *desc);
/* Prints `root` as indented JSON followed by a newline and deletes it. Returns WEFT_CLI_FAILED when root is
 * NULL (a builder ran out of memory and gave up) or printing it ran out of memory. */
int weft_cli_print_json(cJSON *root);
/* A string for cJSON that is never NULL. */
static inline const char *weft_cli_str(const char *s) { return s ? s : ""; }

/* ------------------------------------------------------------------------------------- measurement */

/* The longest run of repeats one point may ask for. */
#define WEFT_CLI_MAX_REPEATS 1000

/* One timed point: c[m,n] = a[m,k] . b[k,n] with the host's data written in, the op run, and the result
 * read back to the host, so every run pays what a caller holding host data pays. */
typedef struct weft_cli_point_desc {
  int lane;               /* a lane index, or WEFT_LANE_AUTO to let the fabric choose */
  weft_contract contract;
  int64_t m, n, k;
  int repeats;            /* timed runs after one untimed warm-up, 1..WEFT_CLI_MAX_REPEATS */
  double max_seconds;     /* fewer repeats (at least one) when the warm-up says they would not fit; <= 0: none */
} weft_cli_point_desc;

typedef struct weft_cli_point {
  double median_s;  /* median of the timed runs: spikes from the rest of the machine do not move it */
  double min_s;
  double warmup_s;
  double elapsed_s; /* the whole point, warm-up included: what the time budget is checked against */
  int repeats;      /* timed runs actually done */
  int lane;         /* the lane the last run went to (weft_fabric_last_lane) */
} weft_cli_point;

/* Measures one matmul point. `a` (m*k floats) and `b` (k*n) are the inputs; the result of the last run is
 * left in `out_c` (m*n floats). On failure returns the status; the message is in weft_fabric_last_error. */
weft_status weft_cli_measure_matmul(weft_fabric *f, const weft_cli_point_desc *desc, const float *a, const float *b,
                                    float *out_c, weft_cli_point *out_point);

/* Measures the point `desc` and the same op pinned to `other_lane` in alternating runs, so load from the
 * rest of the machine falls on both alike: the fair way to compare the router's pick with the best lane.
 * out_c holds desc's result. */
weft_status weft_cli_measure_matmul_pair(weft_fabric *f, const weft_cli_point_desc *desc, int other_lane, const float *a,
                                         const float *b, float *out_c, weft_cli_point *out, weft_cli_point *out_other);

#endif
