/* cli_bench.c - `weft bench`: matmuls of growing size on every lane that honours the contract, each point
 * timed as host data in, op pinned to the lane, host result out (cli_measure.c); every lane's result checked
 * against the first lane's (same bits under the exact contract); a table, JSON or CSV. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_REPEATS 5
#define DEFAULT_MAX_SECONDS 2.0
#define MAX_SIZE 16384 /* three 16384^2 fp32 matrices are 3 GiB: beyond that a typo, not a benchmark */

static const int64_t default_sizes[] = {16, 32, 64, 128, 256, 512, 1024};

void weft_cli_bench_help(FILE *out) {
  fprintf(out,
          "Usage: weft bench [--sizes LIST] [--contract exact|fp32] [--lanes LIST] [--repeats N]\n"
          "                  [--max-seconds S] [--cpu-threads N] [--json | --csv]\n"
          "\n"
          "Times square matmuls c = a.b (n x n x n) on every lane that honours the contract. Each run writes\n"
          "both inputs from host memory, runs the matmul pinned to the lane and reads the result back, so the\n"
          "time is what a caller holding host data pays. A point is the median of the runs after one warm-up.\n"
          "Every lane's result is checked against the first lane's: the same bits under the exact contract,\n"
          "within the fp32 error bound under fp32. A difference is flagged and makes the exit status 1.\n"
          "\n"
          "Options:\n"
          "  --sizes LIST       matrix sizes n, comma-separated (default 16,32,64,128,256,512,1024)\n"
          "  --contract C       precision contract: exact (default) or fp32 (any accumulation order)\n"
          "  --lanes LIST       bench only these lane kinds or names, comma-separated (cpu,vulkan:0)\n"
          "  --repeats N        timed runs per point after the warm-up (default %d)\n"
          "  --max-seconds S    time budget per point (default %g): fewer runs when they would not fit; a lane\n"
          "                     skips the larger sizes once one of its points takes longer, and any size\n"
          "                     where one run is predicted (from its last point, by the work) to take longer\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per online core)\n"
          "  --json             print the results as JSON instead of a table\n"
          "  --csv              print the results as CSV, one row per size and lane\n"
          "  -h, --help         show this help\n",
          DEFAULT_REPEATS, DEFAULT_MAX_SECONDS);
}

typedef enum output_format { OUT_TABLE, OUT_JSON, OUT_CSV } output_format;

typedef struct bench_opts {
  int64_t *sizes;
  size_t nsizes;
  weft_contract contract;
  const char *lanes;
  int repeats;
  double max_seconds;
  int cpu_threads;
  output_format format;
} bench_opts;

/* A lane being benched, and where its budget stopped it. */
typedef struct bench_lane {
  int index;
  weft_lane_info info;
  int64_t limit_n;        /* > 0: the point at this size went over budget, so larger sizes are skipped */
  int64_t last_n;         /* the largest size measured so far, and its median: predicts the next one */
  double last_median_s;
  int sizes_skipped;      /* how many sizes the budget left out */
  char skip_reason[192];  /* why the first of them was left out */
  int failed;             /* an op failed: the lane is dropped from the rest of the run */
  char error[512];
} bench_lane;

typedef enum check_result { CHECK_NONE, CHECK_REFERENCE, CHECK_AGREES, CHECK_DIFFERS } check_result;

typedef struct bench_cell {
  int ran;
  int skipped; /* left out by the time budget */
  weft_cli_point point;
  check_result check;
  float max_abs_diff; /* against the reference lane, when it differs */
} bench_cell;

typedef struct bench_run {
  bench_opts o;
  weft_fabric *f;
  bench_lane *lanes;
  size_t nlanes;
  bench_cell *cells; /* [size][lane] */
  char (*skipped)[256];
  size_t nskipped; /* lanes present but not benched (contract, failed), with why */
  int mismatches;
  int failures;
} bench_run;

static bench_cell *cell(bench_run *r, size_t s, size_t l) { return &r->cells[s * r->nlanes + l]; }

static double gflops(int64_t n, double seconds) {
  return seconds > 0 ? 2.0 * (double)n * (double)n * (double)n / seconds * 1e-9 : 0.0;
}

/* Values in [-1, 1) with 24 significant bits, so every input is exact in fp32 and the same on every run. */
static void fill_inputs(float *v, size_t count, uint32_t seed) {
  uint32_t x = seed ? seed : 1;
  for (size_t i = 0; i < count; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v[i] = (float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
  }
}

/* Under exact: the same bits, NaNs compared normalised. Under any other contract: within the bound of two
 * fp32 dot products of length k over inputs in [-1, 1], each off by at most k*u*k (u = 2^-24). */
static check_result compare(const float *ref, const float *got, size_t count, int64_t k, weft_contract contract,
                            float *out_max_diff) {
  double tol = contract == WEFT_CONTRACT_EXACT ? 0.0 : 2.0 * (double)k * (double)k * ldexp(1.0, -24);
  float worst = 0.0f;
  int differs = 0;
  for (size_t i = 0; i < count; i++) {
    float x = ref[i], y = got[i];
    if (isnan(x) || isnan(y)) {
      if (!(isnan(x) && isnan(y))) differs = 1, worst = INFINITY;
      continue;
    }
    if (contract == WEFT_CONTRACT_EXACT ? memcmp(&x, &y, sizeof x) != 0 : fabs((double)x - (double)y) > tol)
      differs = 1;
    float d = fabsf(x - y);
    if (d > worst) worst = d;
  }
  *out_max_diff = worst;
  return differs ? CHECK_DIFFERS : CHECK_AGREES;
}

/* ----------------------------------------------------------------------------------------- table output */

static int lane_width(const bench_lane *l) {
  int w = (int)strlen(l->info.name);
  return w > 19 ? w : 19;
}

static void table_header(const bench_run *r) {
  printf("matmul n x n x n, contract %s: median of up to %d run%s after a warm-up, host data in and result out\n",
         weft_contract_str(r->o.contract), r->o.repeats, r->o.repeats == 1 ? "" : "s");
  for (size_t l = 0; l < r->nlanes; l++)
    printf("  %-9s %s%s%s\n", r->lanes[l].info.name, r->lanes[l].info.device, *r->lanes[l].info.details ? ", " : "",
           r->lanes[l].info.details);
  if (r->nlanes > 1)
    printf("check: each lane's result against %s's (%s)\n", r->lanes[0].info.name,
           r->o.contract == WEFT_CONTRACT_EXACT ? "the same bits" : "within the fp32 error bound");
  printf("\n%6s", "n");
  for (size_t l = 0; l < r->nlanes; l++) printf(" | %*s", lane_width(&r->lanes[l]), r->lanes[l].info.name);
  printf(" | check\n%6s", "");
  for (size_t l = 0; l < r->nlanes; l++) printf(" | %*s", lane_width(&r->lanes[l]), "ms   GFLOP/s");
  printf(" |\n");
  fflush(stdout);
}

static void table_row(bench_run *r, size_t s) {
  printf("%6lld", (long long)r->o.sizes[s]);
  int ran = 0, differs = 0;
  for (size_t l = 0; l < r->nlanes; l++) {
    bench_cell *c = cell(r, s, l);
    int w = lane_width(&r->lanes[l]);
    if (!c->ran) {
      printf(" | %*s", w, "-");
      continue;
    }
    char buf[64];
    double ms = c->point.median_s * 1e3;
    /* Four significant digits at least: the smallest points take a few microseconds. */
    snprintf(buf, sizeof buf, "%.*f %9.2f%s", ms < 0.1 ? 4 : 3, ms, gflops(r->o.sizes[s], c->point.median_s),
             c->check == CHECK_DIFFERS ? "!" : "");
    printf(" | %*s", w, buf);
    ran++;
    differs += c->check == CHECK_DIFFERS;
  }
  if (differs) {
    printf(" | DIFFERS:");
    for (size_t l = 0; l < r->nlanes; l++)
      if (cell(r, s, l)->check == CHECK_DIFFERS)
        printf(" %s (max |diff| %g)", r->lanes[l].info.name, (double)cell(r, s, l)->max_abs_diff);
    printf("\n");
  } else {
    printf(" | %s\n", ran < 2 ? "-" : r->o.contract == WEFT_CONTRACT_EXACT ? "same bits" : "within fp32 bound");
  }
  fflush(stdout);
}

static void table_notes(const bench_run *r) {
  int any = 0;
  for (size_t l = 0; l < r->nlanes; l++) {
    const bench_lane *b = &r->lanes[l];
    if (b->sizes_skipped)
      printf("%s%s: %d size%s skipped: %s, over the %g s budget (--max-seconds)\n", any++ ? "" : "\n",
             b->info.name, b->sizes_skipped, b->sizes_skipped == 1 ? "" : "s", b->skip_reason, r->o.max_seconds);
    if (b->failed) printf("%s%s: FAILED, dropped: %s\n", any++ ? "" : "\n", b->info.name, b->error);
  }
  for (size_t i = 0; i < r->nskipped; i++) printf("%snot benched: %s\n", any++ ? "" : "\n", r->skipped[i]);
  if (r->mismatches)
    printf("\n%d point%s from the reference lane: that is a bug in a lane, please report it.\n",
           r->mismatches, r->mismatches == 1 ? " DIFFERS" : "s DIFFER");
}

/* ----------------------------------------------------------------------------------------- JSON and CSV */

static const char *check_name(check_result c) {
  switch (c) {
  case CHECK_REFERENCE: return "reference";
  case CHECK_AGREES: return "agrees";
  case CHECK_DIFFERS: return "differs";
  default: return "alone";
  }
}

static cJSON *build_json(bench_run *r) {
  cJSON *root = cJSON_CreateObject();
  if (!cJSON_AddStringToObject(root, "weft_version", weft_version()) ||
      !cJSON_AddStringToObject(root, "op", "matmul") ||
      !cJSON_AddStringToObject(root, "contract", weft_contract_str(r->o.contract)) ||
      !cJSON_AddNumberToObject(root, "repeats", r->o.repeats) ||
      !cJSON_AddNumberToObject(root, "max_seconds", r->o.max_seconds))
    goto oom;
  cJSON *lanes = cJSON_AddArrayToObject(root, "lanes");
  if (!lanes) goto oom;
  for (size_t l = 0; l < r->nlanes; l++) {
    const bench_lane *b = &r->lanes[l];
    cJSON *o = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(lanes, o)) {
      cJSON_Delete(o);
      goto oom;
    }
    if (!cJSON_AddNumberToObject(o, "index", b->index) || !cJSON_AddStringToObject(o, "name", b->info.name) ||
        !cJSON_AddStringToObject(o, "kind", b->info.kind) || !cJSON_AddStringToObject(o, "device", b->info.device) ||
        !cJSON_AddStringToObject(o, "details", b->info.details) ||
        !(b->sizes_skipped ? cJSON_AddStringToObject(o, "skip_reason", b->skip_reason)
                           : cJSON_AddNullToObject(o, "skip_reason")) ||
        !(b->failed ? cJSON_AddStringToObject(o, "error", b->error) : cJSON_AddNullToObject(o, "error")))
      goto oom;
    cJSON *skipped = cJSON_AddArrayToObject(o, "skipped_sizes");
    if (!skipped) goto oom;
    for (size_t s = 0; s < r->o.nsizes; s++)
      if (cell(r, s, l)->skipped && !cJSON_AddItemToArray(skipped, cJSON_CreateNumber((double)r->o.sizes[s])))
        goto oom;
  }
  cJSON *points = cJSON_AddArrayToObject(root, "points");
  if (!points) goto oom;
  for (size_t s = 0; s < r->o.nsizes; s++)
    for (size_t l = 0; l < r->nlanes; l++) {
      const bench_cell *c = cell(r, s, l);
      if (!c->ran) continue;
      cJSON *p = cJSON_CreateObject();
      if (!cJSON_AddItemToArray(points, p)) {
        cJSON_Delete(p);
        goto oom;
      }
      if (!cJSON_AddNumberToObject(p, "n", (double)r->o.sizes[s]) ||
          !cJSON_AddStringToObject(p, "lane", r->lanes[l].info.name) ||
          !cJSON_AddNumberToObject(p, "ms", c->point.median_s * 1e3) ||
          !cJSON_AddNumberToObject(p, "min_ms", c->point.min_s * 1e3) ||
          !cJSON_AddNumberToObject(p, "gflops", gflops(r->o.sizes[s], c->point.median_s)) ||
          !cJSON_AddNumberToObject(p, "repeats", c->point.repeats) ||
          !cJSON_AddStringToObject(p, "check", check_name(c->check)))
        goto oom;
    }
  cJSON *skipped = cJSON_AddArrayToObject(root, "not_benched");
  if (!skipped || !cJSON_AddNumberToObject(root, "mismatches", r->mismatches)) goto oom;
  for (size_t i = 0; i < r->nskipped; i++)
    if (!cJSON_AddItemToArray(skipped, cJSON_CreateString(r->skipped[i]))) goto oom;
  return root;
oom:
  cJSON_Delete(root);
  return NULL;
}

/* A CSV field, quoted when it holds a separator or a quote. */
static void csv_field(const char *s) {
  if (!strpbrk(s, ",\"\n")) {
    fputs(s, stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    if (*s == '"') putchar('"');
    putchar(*s);
  }
  putchar('"');
}

static void print_csv(bench_run *r) {
  printf("n,lane,ms,min_ms,gflops,repeats,check\n");
  for (size_t s = 0; s < r->o.nsizes; s++)
    for (size_t l = 0; l < r->nlanes; l++) {
      const bench_cell *c = cell(r, s, l);
      if (!c->ran) continue;
      printf("%lld,", (long long)r->o.sizes[s]);
      csv_field(r->lanes[l].info.name);
      printf(",%.6f,%.6f,%.4f,%d,%s\n", c->point.median_s * 1e3, c->point.min_s * 1e3,
             gflops(r->o.sizes[s], c->point.median_s), c->point.repeats, check_name(c->check));
    }
}

/* ------------------------------------------------------------------------------------------- the run */

static int parse_args(int argc, char **argv, bench_opts *o) {
  static const struct option longopts[] = {
      {"sizes", required_argument, NULL, 's'},       {"contract", required_argument, NULL, 'c'},
      {"lanes", required_argument, NULL, 'l'},       {"repeats", required_argument, NULL, 'r'},
      {"max-seconds", required_argument, NULL, 'm'}, {"cpu-threads", required_argument, NULL, 't'},
      {"json", no_argument, NULL, 'j'},              {"csv", no_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
  };
  long v;
  int json = 0, csv = 0;
  optind = 0; /* glibc: 0 restarts getopt from scratch */
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case 's':
      free(o->sizes);
      rc = weft_cli_parse_sizes("bench", "--sizes", optarg, MAX_SIZE, &o->sizes, &o->nsizes);
      break;
    case 'c': rc = weft_cli_parse_contract("bench", "--contract", optarg, &o->contract); break;
    case 'l': o->lanes = optarg; break;
    case 'r':
      if (!(rc = weft_cli_parse_long("bench", "--repeats", optarg, 1, WEFT_CLI_MAX_REPEATS, &v))) o->repeats = (int)v;
      break;
    case 'm': rc = weft_cli_parse_seconds("bench", "--max-seconds", optarg, &o->max_seconds); break;
    case 't':
      if (!(rc = weft_cli_parse_long("bench", "--cpu-threads", optarg, 1, 4096, &v))) o->cpu_threads = (int)v;
      break;
    case 'j': json = 1; break;
    case 'v': csv = 1; break;
    case 'h': weft_cli_bench_help(stdout); return -1;
    default: return weft_cli_option_error("bench", c, argv);
    }
    if (rc) return rc;
  }
  if (optind < argc) return weft_cli_usage_error("bench", "takes no arguments, got '%s'", argv[optind]);
  if (json && csv) return weft_cli_usage_error("bench", "--json and --csv exclude each other: pick one");
  o->format = json ? OUT_JSON : csv ? OUT_CSV : OUT_TABLE;
  if (!o->sizes) {
    o->nsizes = sizeof default_sizes / sizeof default_sizes[0];
    o->sizes = malloc(sizeof default_sizes);
    if (!o->sizes) {
      fprintf(stderr, "weft bench: out of memory\n");
      return WEFT_CLI_FAILED;
    }
    memcpy(o->sizes, default_sizes, sizeof default_sizes);
  }
  return WEFT_CLI_OK;
}

/* Picks the lanes that can run the contract; the others are noted with why. */
static int select_lanes(bench_run *r) {
  size_t count = weft_fabric_lane_count(r->f);
  r->lanes = calloc(count, sizeof *r->lanes);
  r->skipped = calloc(count, sizeof *r->skipped);
  if (!r->lanes || !r->skipped) {
    fprintf(stderr, "weft bench: out of memory\n");
    return WEFT_CLI_FAILED;
  }
  for (size_t i = 0; i < count; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(r->f, i, &li) != WEFT_OK) continue;
    if (li.failed) {
      snprintf(r->skipped[r->nskipped++], sizeof r->skipped[0], "%s has failed and left the fabric", li.name);
    } else if (!(li.contracts & WEFT_CONTRACT_BIT(r->o.contract))) {
      snprintf(r->skipped[r->nskipped++], sizeof r->skipped[0], "%s does not honour the %s contract", li.name,
               weft_contract_str(r->o.contract));
    } else {
      r->lanes[r->nlanes].index = (int)i;
      r->lanes[r->nlanes++].info = li;
    }
  }
  return WEFT_CLI_OK;
}

/* 1 when the budget leaves size n out for this lane: a smaller point already went over it, or one run is
 * predicted (the largest point so far, scaled by the work) to take longer than the whole budget, which
 * keeps a slow lane from spending minutes on the one size that would tell it so. */
static int skip_for_budget(bench_run *r, bench_lane *lane, int64_t n) {
  const char *why = NULL;
  char buf[192];
  if (lane->limit_n > 0 && n > lane->limit_n) {
    why = "";
  } else if (lane->last_n > 0 && n > lane->last_n) {
    double scale = (double)n / (double)lane->last_n;
    double predicted = lane->last_median_s * scale * scale * scale;
    if (predicted > r->o.max_seconds) {
      snprintf(buf, sizeof buf, "one run at n = %lld would take about %.1f s (scaled from n = %lld)", (long long)n,
               predicted, (long long)lane->last_n);
      why = buf;
    }
  }
  if (!why) return 0;
  if (!lane->sizes_skipped++ && *why) snprintf(lane->skip_reason, sizeof lane->skip_reason, "%s", why);
  return 1;
}

/* Runs every lane at size index s; checks each result against the first lane that ran at this size. */
static int bench_size(bench_run *r, size_t s) {
  int64_t n = r->o.sizes[s];
  size_t count = (size_t)n * (size_t)n;
  float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
  float *ref = malloc(count * sizeof *ref), *got = malloc(count * sizeof *got);
  if (!a || !b || !ref || !got) {
    free(a), free(b), free(ref), free(got);
    fprintf(stderr, "weft bench: out of host memory for n = %lld\n", (long long)n);
    return WEFT_CLI_FAILED;
  }
  fill_inputs(a, count, 0x9e3779b9u);
  fill_inputs(b, count, 0x85ebca6bu);
  int have_ref = 0;
  for (size_t l = 0; l < r->nlanes; l++) {
    bench_lane *lane = &r->lanes[l];
    if (lane->failed) continue;
    bench_cell *c = cell(r, s, l);
    if (skip_for_budget(r, lane, n)) {
      c->skipped = 1;
      continue;
    }
    weft_cli_point_desc d = {lane->index, r->o.contract, n, n, n, r->o.repeats, r->o.max_seconds};
    weft_status st = weft_cli_measure_matmul(r->f, &d, a, b, have_ref ? got : ref, &c->point);
    if (st != WEFT_OK) {
      lane->failed = 1;
      snprintf(lane->error, sizeof lane->error, "n = %lld: %s: %s", (long long)n, weft_status_str(st),
               weft_fabric_last_error(r->f));
      fprintf(stderr, "weft bench: %s failed at %s\n", lane->info.name, lane->error);
      r->failures++;
      continue;
    }
    c->ran = 1;
    if (!have_ref) {
      c->check = CHECK_REFERENCE;
      have_ref = 1;
    } else {
      c->check = compare(ref, got, count, n, r->o.contract, &c->max_abs_diff);
      if (c->check == CHECK_DIFFERS) r->mismatches++;
    }
    if (n > lane->last_n) lane->last_n = n, lane->last_median_s = c->point.median_s;
    if (c->point.elapsed_s > r->o.max_seconds && (lane->limit_n == 0 || n < lane->limit_n)) {
      lane->limit_n = n;
      if (!lane->sizes_skipped)
        snprintf(lane->skip_reason, sizeof lane->skip_reason, "the n = %lld point took %.2f s", (long long)n,
                 c->point.elapsed_s);
    }
  }
  /* A lone result has nothing to be checked against. */
  int ran = 0;
  for (size_t l = 0; l < r->nlanes; l++) ran += cell(r, s, l)->ran;
  if (ran == 1)
    for (size_t l = 0; l < r->nlanes; l++)
      if (cell(r, s, l)->ran) cell(r, s, l)->check = CHECK_NONE;
  free(a), free(b), free(ref), free(got);
  return WEFT_CLI_OK;
}

int weft_cli_bench(int argc, char **argv) {
  bench_run r;
  memset(&r, 0, sizeof r);
  r.o.contract = WEFT_CONTRACT_EXACT;
  r.o.repeats = DEFAULT_REPEATS;
  r.o.max_seconds = DEFAULT_MAX_SECONDS;
  int rc = parse_args(argc, argv, &r.o);
  if (rc) {
    free(r.o.sizes);
    return rc < 0 ? WEFT_CLI_OK : rc; /* -1: --help was printed */
  }
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = r.o.lanes;
  desc.cpu_threads = r.o.cpu_threads;
  /* Every op is pinned to its lane, so the cost model is not consulted: no calibration, no cache writes. */
  desc.calibration = WEFT_CALIBRATION_OFF;
  r.f = weft_cli_open("bench", &desc);
  if (!r.f) {
    free(r.o.sizes);
    return WEFT_CLI_FAILED;
  }
  rc = select_lanes(&r);
  if (rc == WEFT_CLI_OK && r.nlanes == 0) {
    fprintf(stderr, "weft bench: no lane honours the %s contract (see 'weft devices')\n",
            weft_contract_str(r.o.contract));
    rc = WEFT_CLI_FAILED;
  }
  if (rc == WEFT_CLI_OK) {
    r.cells = calloc(r.o.nsizes * r.nlanes, sizeof *r.cells);
    if (!r.cells) {
      fprintf(stderr, "weft bench: out of memory\n");
      rc = WEFT_CLI_FAILED;
    }
  }
  if (rc == WEFT_CLI_OK) {
    if (r.o.format == OUT_TABLE) table_header(&r);
    for (size_t s = 0; s < r.o.nsizes && rc == WEFT_CLI_OK; s++) {
      rc = bench_size(&r, s);
      if (rc == WEFT_CLI_OK && r.o.format == OUT_TABLE) table_row(&r, s);
    }
  }
  if (rc == WEFT_CLI_OK) {
    if (r.o.format == OUT_TABLE) table_notes(&r);
    else if (r.o.format == OUT_JSON) rc = weft_cli_print_json(build_json(&r));
    else print_csv(&r);
    if (rc == WEFT_CLI_OK && (r.mismatches || r.failures)) rc = WEFT_CLI_FAILED;
  }
  weft_fabric_close(r.f);
  free(r.cells);
  free(r.lanes);
  free(r.skipped);
  free(r.o.sizes);
  return rc;
}
