/* cli_util.c - small helpers shared by the CLI's subcommands: clock and median, option and usage-error
 * handling, opening a fabric with a readable failure, printing JSON. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

/* Edit distance (insertions, deletions, substitutions, adjacent swaps), capped: enough to catch typos. */
static size_t distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t d[64][64];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

const char *weft_cli_suggest(const char *word, const char *const *candidates, size_t count) {
  const char *best = NULL;
  size_t best_d = 3, len = strlen(word);
  for (size_t i = 0; i < count; i++) {
    size_t d = distance(word, candidates[i]);
    /* a short word is allowed one edit, a longer one two */
    if (d < best_d && d <= (len <= 4 ? 1u : 2u)) best = candidates[i], best_d = d;
  }
  return best;
}

int weft_cli_option_error(const char *cmd, int ret, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  if (ret == ':') return weft_cli_usage_error(cmd, "option '%s' needs a value", arg);
  /* "-5": a negative number where a size or count was meant, not an option */
  if (arg[0] == '-' && (arg[1] >= '0' && arg[1] <= '9'))
    return weft_cli_usage_error(cmd, "'%s' is a negative number; sizes and counts are whole numbers >= 1", arg);
  if (optopt) return weft_cli_usage_error(cmd, "unknown option '-%c'", optopt);
  return weft_cli_usage_error(cmd, "unknown option '%s'", arg);
}

int weft_cli_check_long_options(const char *cmd, int argc, char **argv, const struct option *longopts) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) break; /* the rest are arguments */
    if (a[0] != '-' || a[1] != '-') continue;
    const char *name = a + 2;
    const size_t len = strcspn(name, "=");
    const struct option *hit = NULL;
    for (const struct option *o = longopts; o->name; o++)
      if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) hit = o;
    if (!hit) {
      /* not getopt's unique-prefix match: an abbreviation (or a typo) is named, with the option it may mean */
      const char *names[64];
      size_t n = 0;
      char word[64];
      for (const struct option *o = longopts; o->name && n < 64; o++) names[n++] = o->name;
      snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word - 1 ? len : sizeof word - 1), name);
      const char *guess = weft_cli_suggest(word, names, n);
      for (size_t k = 0; !guess && len && k < n; k++)
        if (strncmp(names[k], name, len) == 0) guess = names[k];
      if (guess) return weft_cli_usage_error(cmd, "unknown option '--%s'; did you mean '--%s'?", word, guess);
      return weft_cli_usage_error(cmd, "unknown option '--%s'", word);
    }
    if (hit->has_arg == no_argument && name[len] == '=')
      return weft_cli_usage_error(cmd, "option '--%s' takes no value, got '%s'", hit->name, a);
    if (hit->has_arg == required_argument && name[len] != '=') i++; /* its value, whatever it looks like */
  }
  return WEFT_CLI_OK;
}

int weft_cli_parse_lanes(const char *cmd, const char *opt, const char *s, const char **out) {
  if (strspn(s, ", \t") == strlen(s))
    return weft_cli_usage_error(cmd, "%s wants lane kinds or names, comma-separated (cpu,vulkan:0), got '%s'", opt, s);
  *out = s;
  return WEFT_CLI_OK;
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

/* After a lane filter that matched nothing: the lanes there are, and the one each unknown word most
 * likely meant. */
static void list_lanes(const char *cmd, const weft_fabric_desc *asked) {
  weft_fabric_desc d = *asked;
  d.lanes = NULL;
  d.calibration = WEFT_CALIBRATION_OFF;
  d.on_note = NULL;
  weft_fabric *f = NULL;
  if (weft_fabric_open(&d, &f) != WEFT_OK) return;
  size_t n = weft_fabric_lane_count(f);
  const char **names = calloc(2 * n + 1, sizeof *names);
  size_t nn = 0;
  fprintf(stderr, "weft %s: the lanes here are:", cmd);
  for (size_t i = 0; i < n; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK) continue;
    fprintf(stderr, "%s %s", i ? "," : "", li.name);
    if (names) {
      names[nn++] = li.name;
      int dup = 0;
      for (size_t k = 0; k < nn; k++) dup |= strcmp(names[k], li.kind) == 0;
      if (!dup) names[nn++] = li.kind;
    }
  }
  fprintf(stderr, " (--lanes takes kinds or names, comma-separated; 'weft devices' says more)\n");
  for (const char *p = asked->lanes; names && *p;) {
    size_t len = strcspn(p, ",");
    char word[64];
    if (len && len < sizeof word) {
      memcpy(word, p, len);
      word[len] = '\0';
      const char *guess = weft_cli_suggest(word, names, nn);
      if (strcasecmp(word, "gpu") == 0)
        fprintf(stderr, "weft %s: 'gpu': GPUs are the lanes of the kinds vulkan (vulkan:N) and cuda (cuda:N)\n", cmd);
      else if (guess && strcmp(guess, word) != 0) fprintf(stderr, "weft %s: '%s': did you mean '%s'?\n", cmd, word, guess);
    }
    p += len;
    if (*p) p++;
  }
  free(names);
  weft_fabric_close(f);
}

/* A command that takes no notes of its own still says what a person should know: lines beginning "weft: "
 * (lanes being measured for the router and where the results are kept, a cache that could not be read or
 * written); calibration progress stays silent. */
static void person_notes(void *ctx, const char *line) {
  (void)ctx;
  if (strncmp(line, "weft: ", 6) == 0) fprintf(stderr, "%s\n", line);
}

/* 1 when `word` of a lane filter names something: a lane of the fabric (its name or kind), a lane looked for
 * and absent (a kind this build or machine lacks: 'weft devices' says why), or a lane of a documented kind
 * ("cuda:1" where there is one GPU, "opencl" without the plugin). A word that is none of those (a typo) would
 * otherwise be dropped without a word while the rest of the filter opens. */
static int filter_word_known(weft_fabric *f, const char *word) {
  static const char *const kinds[] = {"cpu", "vulkan", "cuda", "opencl", "remote", "browser", "mpi", "npu", "plugin"};
  const size_t kl = strcspn(word, ":");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strlen(kinds[i]) == kl && strncmp(kinds[i], word, kl) == 0) return 1;
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) == WEFT_OK && (strcmp(li.name, word) == 0 || strcmp(li.kind, word) == 0))
      return 1;
  }
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && strlen(name) == kl && strncmp(name, word, kl) == 0)
      return 1;
  }
  return 0;
}

weft_fabric *weft_cli_open(const char *cmd, const weft_fabric_desc *asked) {
  weft_fabric *f = NULL;
  weft_fabric_desc d = *asked;
  if (!d.on_note) d.on_note = person_notes;
  const weft_fabric_desc *desc = &d;
  weft_status st = weft_fabric_open(desc, &f);
  if (st != WEFT_OK) {
    const char *why = weft_open_error();
    fprintf(stderr, "weft %s: cannot open the fabric: %s%s%s\n", cmd, weft_status_str(st), *why ? ": " : "", why);
    if (st == WEFT_ERR_NOT_FOUND && desc && desc->lanes && *desc->lanes) list_lanes(cmd, desc);
    return NULL;
  }
  for (const char *p = desc->lanes; p && *p;) {
    const size_t len = strcspn(p, ",");
    char word[256];
    snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word - 1 ? len : sizeof word - 1), p);
    if (len && !filter_word_known(f, word)) {
      fprintf(stderr, "weft %s: --lanes names '%s', which is no lane kind or name here\n", cmd, word);
      list_lanes(cmd, desc);
      weft_fabric_close(f);
      return NULL;
    }
    p += len;
    if (*p) p++;
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
