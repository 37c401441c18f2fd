/* cli_util.c - small helpers shared by the CLI's subcommands: clock and median, option and usage-error
 * handling, opening a fabric with a readable failure, printing JSON. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

double weft_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double weft_cli_median(double *v, size_t n) {
  if (n == 0) return 0.0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int weft_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "weft%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  vfprintf(stderr, fmt, args);
  va_end(args);
  fprintf(stderr, "\nRun 'weft%s%s --help' for usage.\n", cmd ? " " : "", cmd ? cmd : "");
  return WEFT_CLI_USAGE;
}

int weft_cli_option_error(const char *cmd, int ret, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  if (ret == ':') return weft_cli_usage_error(cmd, "option '%s' needs a value", arg);
  if (optopt) return weft_cli_usage_error(cmd, "unknown option '-%c'", optopt);
  return weft_cli_usage_error(cmd, "unknown option '%s'", arg);
}

int weft_cli_parse_long(const char *cmd, const char *opt, const char *s, long min, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > max)
    return weft_cli_usage_error(cmd, "%s wants a whole number from %ld to %ld, got '%s'", opt, min, max, s);
  *out = v;
  return WEFT_CLI_OK;
}

int weft_cli_parse_seconds(const char *cmd, const char *opt, const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v <= 0)
    return weft_cli_usage_error(cmd, "%s wants a number of seconds above 0, got '%s'", opt, s);
  *out = v;
  return WEFT_CLI_OK;
}

int weft_cli_parse_sizes(const char *cmd, const char *opt, const char *s, int64_t max, int64_t **out,
                         size_t *out_count) {
  *out = NULL;
  *out_count = 0;
  size_t cap = 1;
  for (const char *p = s; *p; p++) cap += *p == ',';
  int64_t *v = calloc(cap, sizeof *v);
  if (!v) {
    fprintf(stderr, "weft %s: out of memory\n", cmd);
    return WEFT_CLI_FAILED;
  }
  size_t n = 0;
  const char *p = s;
  for (;;) {
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p || (*end && *end != ',') || x < 1 || x > max) {
      free(v);
      return weft_cli_usage_error(cmd, "%s wants sizes from 1 to %lld separated by commas (64,128,256), got '%s'",
                                  opt, (long long)max, s);
    }
    v[n++] = x;
    if (!*end) break;
    p = end + 1;
  }
  *out = v;
  *out_count = n;
  return WEFT_CLI_OK;
}

int weft_cli_parse_contract(const char *cmd, const char *opt, const char *s, weft_contract *out) {
  if (weft_contract_parse(s, out) == WEFT_OK) return WEFT_CLI_OK;
  char names[128] = "";
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) {
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", c ? ", " : "", weft_contract_str((weft_contract)c));
  }
  return weft_cli_usage_error(cmd, "%s wants one of %s, got '%s'", opt, names, s);
}

weft_fabric *weft_cli_open(const char *cmd, const weft_fabric_desc *desc) {
  weft_fabric *f = NULL;
  weft_status st = weft_fabric_open(desc, &f);
  if (st != WEFT_OK) {
    const char *why = weft_open_error();
    fprintf(stderr, "weft %s: cannot open the fabric: %s%s%s\n", cmd, weft_status_str(st), *why ? ": " : "", why);
    return NULL;
  }
  return f;
}

int weft_cli_print_json(cJSON *root) {
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) {
    fprintf(stderr, "weft: out of memory while writing JSON\n");
    return WEFT_CLI_FAILED;
  }
  puts(text);
  cJSON_free(text);
  return WEFT_CLI_OK;
}
