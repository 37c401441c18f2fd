/* cli_bench.c - `weft bench`: matmuls of growing size on every lane that honours the contract, each point
 * timed as host data in, op pinned to the lane, host result out (cli_measure.c); every lane's result checked
 * against the first lane's (same bits under the exact contract); then the same op left to the router, its
 * pick and time against the measured best lane, the crossover size of each pair of lanes (measured, and
 * predicted by the cost model), and the routing decision's own cost; a table, JSON, CSV or an SVG plot. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_REPEATS 5
#define DEFAULT_MAX_SECONDS 2.0
#define MAX_SIZE 16384 /* three 16384^2 fp32 matrices are 3 GiB: beyond that a typo, not a benchmark */

static const int64_t default_sizes[] = {16, 32, 64, 128, 256, 512, 1024};

void weft_cli_bench_help(FILE *out) {
  fprintf(out,
          "Usage: weft bench [--sizes LIST] [--contract C] [--lanes LIST] [--repeats N] [--max-seconds S]\n"
          "                  [--cpu-threads N] [--no-route] [--plot FILE.svg] [--json | --csv]\n"
          "\n"
          "Times square matmuls c = a.b (n x n x n) on every lane that honours the contract. Each run writes\n"
          "both inputs from host memory, runs the matmul pinned to the lane and reads the result back, so the\n"
          "time is what a caller holding host data pays. A point is the median of the runs after one warm-up.\n"
          "Every lane's result is checked against the first lane's: the same bits under the exact contract,\n"
          "within the fp32 error bound under fp32. A difference is flagged and makes the exit status 1.\n"
          "\n"
          "Options:\n"
          "  --sizes LIST       matrix sizes n, comma-separated (default 16,32,64,128,256,512,1024)\n"
          "  --contract C       precision contract: exact (default), fp32 (any accumulation order), or the\n"
          "                     tensor units' tf32 and bf16\n"
          "  --lanes LIST       bench only these lane kinds or names, comma-separated (cpu,vulkan:0)\n"
          "  --repeats N        timed runs per point after the warm-up (default %d; points under a few\n"
          "                     milliseconds get more, up to 30 ms of runs, so their median means something)\n"
          "  --max-seconds S    time budget per point (default %g): fewer runs when they would not fit; a lane\n"
          "                     skips the larger sizes once one of its points takes longer, and any size\n"
          "                     where one run is predicted (from its last point, by the work) to take longer\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per CPU this process may run on)\n"
          "  --no-route         do not time the routed op (lanes only; no calibration)\n"
          "  --plot FILE.svg    also draw time against size as SVG, log-log: a line per lane, the router's\n"
          "                     picks ringed, crossovers measured (dashed) and predicted (dotted)\n"
          "  --json             print the results as JSON instead of a table\n"
          "  --csv              print the results as CSV, one row per size and lane ('routed' rows: the pick)\n"
          "  -h, --help         show this help\n"
          "\n"
          "Routing (with two lanes or more): lanes the calibration cache has no model for are measured first,\n"
          "before the table. Each size then also runs with the lane left to the router, in alternation with\n"
          "the best lane of that size, and the table shows the pick, both times of that pairing and their\n"
          "ratio routed/best; below it the geometric mean of that ratio, each pair of lanes' crossover size\n"
          "(measured, and predicted by the cost model) and the cost of one routing decision.\n",
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
  int no_route;
  const char *plot;
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

/* The routed op at one size, against the best lane measured at that size. */
typedef struct routed_cell {
  int ran;
  weft_cli_point point;
  weft_cli_point best_point; /* the best lane's time, measured in alternation with the routed runs */
  int picked;  /* index into bench_run.lanes of the lane it went to, or -1 (a lane not benched) */
  char picked_name[64];
  int best;    /* index into bench_run.lanes of the fastest lane at this size, -1 if none ran */
  double ratio; /* point.median_s / best_point.median_s: the two times printed beside it */
} routed_cell;

/* Where two lanes' times cross. */
typedef struct crossover {
  int a, b;             /* lane indices (bench_run.lanes) */
  double measured_n;    /* 0: no crossing inside the sweep */
  int faster_above;     /* which of a, b is faster above the measured crossing (or throughout when none) */
  double predicted_n;   /* from the cost model; 0: none in 1..65536 */
} crossover;

typedef struct bench_run {
  bench_opts o;
  int route;         /* time the routed op: routing asked for and two lanes or more to choose between */
  weft_fabric *f;
  bench_lane *lanes;
  size_t nlanes;
  bench_cell *cells; /* [size][lane] */
  char (*skipped)[256];
  size_t nskipped; /* lanes present but not benched (contract, failed), with why */
  int mismatches;
  int failures;
  routed_cell *routed; /* [size] */
  crossover *cross;
  size_t ncross;
  double geomean;       /* of routed/best over the sizes where both ran; 0 if none */
  double decision_us;   /* one routing decision (weft_route_explain), microseconds */
  double *predicted;    /* [size][lane]: the cost model's time for the point, seconds (0: none) */
} bench_run;

static bench_cell *cell(bench_run *r, size_t s, size_t l) { return &r->cells[s * r->nlanes + l]; }

/* The bench lane of a fabric lane index, or -1. */
static int bench_lane_of(const bench_run *r, int fabric_index) {
  for (size_t l = 0; l < r->nlanes; l++)
    if (r->lanes[l].index == fabric_index) return (int)l;
  return -1;
}

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
  if (r->route)
    printf("routed: the same op with the lane left to the router, timed in alternation with the fastest lane of\n"
           "that size (best); ratio = routed ms / best ms of that pairing\n");
  printf("\n%6s", "n");
  for (size_t l = 0; l < r->nlanes; l++) printf(" | %*s", lane_width(&r->lanes[l]), r->lanes[l].info.name);
  if (r->route) printf(" | %27s | %27s | %6s", "routed", "best", "ratio");
  printf(" | check\n%6s", "");
  for (size_t l = 0; l < r->nlanes; l++) printf(" | %*s", lane_width(&r->lanes[l]), "ms   GFLOP/s");
  if (r->route) printf(" | %27s | %27s | %6s", "ms  (pick)", "ms  (lane)", "");
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
  if (r->route) {
    const routed_cell *rc = &r->routed[s];
    if (rc->ran) {
      char buf[96], bbuf[96] = "-", rbuf[16] = "-";
      double ms = rc->point.median_s * 1e3;
      /* four significant digits: the ratio beside them can be checked from them */
      snprintf(buf, sizeof buf, "%.4g  (%s)", ms, rc->picked_name);
      if (rc->best >= 0) {
        double bms = rc->best_point.median_s * 1e3;
        snprintf(bbuf, sizeof bbuf, "%.4g  (%s)", bms, r->lanes[rc->best].info.name);
        snprintf(rbuf, sizeof rbuf, "%.3f", rc->ratio);
      }
      printf(" | %27s | %27s | %6s", buf, bbuf, rbuf);
    } else {
      printf(" | %27s | %27s | %6s", "-", "-", "-");
    }
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
  if (!r->o.no_route && !r->route && r->nlanes == 1)
    printf("%srouted: not timed, with one lane there is nothing to choose\n", any++ ? "" : "\n");
  if (r->route) {
    printf("\nrouted/best, geometric mean over the sizes: ");
    if (r->geomean > 0) printf("%.3f\n", r->geomean);
    else printf("- (no size with both)\n");
    for (size_t i = 0; i < r->ncross; i++) {
      const crossover *x = &r->cross[i];
      const char *na = r->lanes[x->a].info.name, *nb = r->lanes[x->b].info.name;
      printf("crossover %s / %s: ", na, nb);
      if (x->measured_n > 0)
        printf("measured at n = %.0f (%s faster above)", x->measured_n, r->lanes[x->faster_above].info.name);
      else if (x->faster_above >= 0)
        printf("none measured: %s faster at every size both ran", r->lanes[x->faster_above].info.name);
      else printf("not measured (the lanes never ran the same size)");
      if (x->predicted_n > 0) printf("; predicted by the cost model at n = %.0f\n", x->predicted_n);
      else printf("; the cost model predicts none for n in 1..65536\n");
    }
    printf("routing decision: %.3f us per op (weft_route_explain, averaged)\n", r->decision_us);
  }
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
          !cJSON_AddStringToObject(p, "check", check_name(c->check)) ||
          !(r->predicted && r->predicted[s * r->nlanes + l] > 0
                ? cJSON_AddNumberToObject(p, "predicted_ms", r->predicted[s * r->nlanes + l] * 1e3)
                : cJSON_AddNullToObject(p, "predicted_ms")))
        goto oom;
    }
  if (r->route) {
    cJSON *routed = cJSON_AddArrayToObject(root, "routed");
    if (!routed) goto oom;
    for (size_t s = 0; s < r->o.nsizes; s++) {
      const routed_cell *rc = &r->routed[s];
      if (!rc->ran) continue;
      cJSON *p = cJSON_CreateObject();
      if (!cJSON_AddItemToArray(routed, p)) {
        cJSON_Delete(p);
        goto oom;
      }
      if (!cJSON_AddNumberToObject(p, "n", (double)r->o.sizes[s]) || !cJSON_AddStringToObject(p, "picked", rc->picked_name) ||
          !cJSON_AddNumberToObject(p, "ms", rc->point.median_s * 1e3) ||
          !(rc->best >= 0 ? cJSON_AddStringToObject(p, "best_lane", r->lanes[rc->best].info.name)
                          : cJSON_AddNullToObject(p, "best_lane")) ||
          !(rc->best >= 0 ? cJSON_AddNumberToObject(p, "best_ms", rc->best_point.median_s * 1e3)
                          : cJSON_AddNullToObject(p, "best_ms")) ||
          !(rc->best >= 0 ? cJSON_AddNumberToObject(p, "ratio", rc->ratio) : cJSON_AddNullToObject(p, "ratio")))
        goto oom;
    }
    if (!(r->geomean > 0 ? cJSON_AddNumberToObject(root, "geomean_ratio", r->geomean)
                         : cJSON_AddNullToObject(root, "geomean_ratio")) ||
        !cJSON_AddNumberToObject(root, "route_decision_us", r->decision_us))
      goto oom;
    cJSON *cross = cJSON_AddArrayToObject(root, "crossovers");
    if (!cross) goto oom;
    for (size_t i = 0; i < r->ncross; i++) {
      const crossover *x = &r->cross[i];
      cJSON *o = cJSON_CreateObject();
      if (!cJSON_AddItemToArray(cross, o)) {
        cJSON_Delete(o);
        goto oom;
      }
      if (!cJSON_AddStringToObject(o, "a", r->lanes[x->a].info.name) ||
          !cJSON_AddStringToObject(o, "b", r->lanes[x->b].info.name) ||
          !(x->measured_n > 0 ? cJSON_AddNumberToObject(o, "measured_n", x->measured_n)
                              : cJSON_AddNullToObject(o, "measured_n")) ||
          !(x->faster_above >= 0 ? cJSON_AddStringToObject(o, "faster_above", r->lanes[x->faster_above].info.name)
                                 : cJSON_AddNullToObject(o, "faster_above")) ||
          !(x->predicted_n > 0 ? cJSON_AddNumberToObject(o, "predicted_n", x->predicted_n)
                               : cJSON_AddNullToObject(o, "predicted_n")))
        goto oom;
    }
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
  /* a 'routed' row: ms is the routed time, best_ms the best lane's (best_lane) in the same alternation,
   * ratio = ms / best_ms; a lane's row: predicted_ms is the cost model's time for that point */
  printf("n,lane,ms,min_ms,gflops,repeats,check,picked,best_lane,best_ms,ratio,predicted_ms\n");
  for (size_t s = 0; s < r->o.nsizes; s++)
    for (size_t l = 0; l < r->nlanes; l++) {
      const bench_cell *c = cell(r, s, l);
      if (!c->ran) continue;
      printf("%lld,", (long long)r->o.sizes[s]);
      csv_field(r->lanes[l].info.name);
      printf(",%.6f,%.6f,%.4f,%d,%s,,,,,", c->point.median_s * 1e3, c->point.min_s * 1e3,
             gflops(r->o.sizes[s], c->point.median_s), c->point.repeats, check_name(c->check));
      if (r->predicted && r->predicted[s * r->nlanes + l] > 0) printf("%.6f", r->predicted[s * r->nlanes + l] * 1e3);
      printf("\n");
    }
  for (size_t s = 0; r->route && s < r->o.nsizes; s++) {
    const routed_cell *rc = &r->routed[s];
    if (!rc->ran) continue;
    printf("%lld,routed,%.6f,%.6f,%.4f,%d,,", (long long)r->o.sizes[s], rc->point.median_s * 1e3,
           rc->point.min_s * 1e3, gflops(r->o.sizes[s], rc->point.median_s), rc->point.repeats);
    csv_field(rc->picked_name);
    if (rc->best >= 0) {
      putchar(',');
      csv_field(r->lanes[rc->best].info.name);
      printf(",%.6f,%.6f,\n", rc->best_point.median_s * 1e3, rc->ratio);
    } else {
      printf(",,,,\n");
    }
  }
}

/* ------------------------------------------------------------------------------------------- the run */

static int parse_args(int argc, char **argv, bench_opts *o) {
  static const struct option longopts[] = {
      {"sizes", required_argument, NULL, 's'},       {"contract", required_argument, NULL, 'c'},
      {"lanes", required_argument, NULL, 'l'},       {"repeats", required_argument, NULL, 'r'},
      {"max-seconds", required_argument, NULL, 'm'}, {"cpu-threads", required_argument, NULL, 't'},
      {"json", no_argument, NULL, 'j'},              {"csv", no_argument, NULL, 'v'},
      {"no-route", no_argument, NULL, 'n'},          {"plot", required_argument, NULL, 'p'},
      {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
  };
  long v;
  int json = 0, csv = 0;
  optind = 0; /* glibc: 0 restarts getopt from scratch */
  opterr = 0;
  int c;
  if (weft_cli_check_long_options("bench", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case 's':
      free(o->sizes);
      rc = weft_cli_parse_sizes("bench", "--sizes", optarg, MAX_SIZE, &o->sizes, &o->nsizes);
      break;
    case 'c': rc = weft_cli_parse_contract("bench", "--contract", optarg, &o->contract); break;
    case 'l': rc = weft_cli_parse_lanes("bench", "--lanes", optarg, &o->lanes); break;
    case 'r':
      if (!(rc = weft_cli_parse_long("bench", "--repeats", optarg, 1, WEFT_CLI_MAX_REPEATS, &v))) o->repeats = (int)v;
      break;
    case 'm': rc = weft_cli_parse_seconds("bench", "--max-seconds", optarg, &o->max_seconds); break;
    case 't':
      if (!(rc = weft_cli_parse_long("bench", "--cpu-threads", optarg, 1, 4096, &v))) o->cpu_threads = (int)v;
      break;
    case 'j': json = 1; break;
    case 'v': csv = 1; break;
    case 'n': o->no_route = 1; break;
    case 'p': o->plot = optarg; break;
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
  if (r->route) {
    /* The router's turn: the same op, lane left to the fabric, timed in alternation with the best lane so
     * the ratio between them is not the machine's mood; its result is checked like a lane's. */
    routed_cell *rc = &r->routed[s];
    rc->best = -1;
    for (size_t l = 0; l < r->nlanes; l++) {
      const bench_cell *c = cell(r, s, l);
      if (c->ran && (rc->best < 0 || c->point.median_s < cell(r, s, (size_t)rc->best)->point.median_s))
        rc->best = (int)l;
    }
    weft_cli_point_desc d = {WEFT_LANE_AUTO, r->o.contract, n, n, n, r->o.repeats, r->o.max_seconds};
    weft_status st = rc->best >= 0 ? weft_cli_measure_matmul_pair(r->f, &d, r->lanes[rc->best].index, a, b,
                                                                  have_ref ? got : ref, &rc->point, &rc->best_point)
                                   : weft_cli_measure_matmul(r->f, &d, a, b, have_ref ? got : ref, &rc->point);
    if (st != WEFT_OK) {
      fprintf(stderr, "weft bench: the routed op failed at n = %lld: %s: %s\n", (long long)n, weft_status_str(st),
              weft_fabric_last_error(r->f));
      r->failures++;
    } else {
      rc->ran = 1;
      rc->picked = bench_lane_of(r, rc->point.lane);
      weft_lane_info li;
      if (weft_fabric_lane_info(r->f, (size_t)rc->point.lane, &li) == WEFT_OK)
        snprintf(rc->picked_name, sizeof rc->picked_name, "%s", li.name);
      float diff;
      if (have_ref && compare(ref, got, count, n, r->o.contract, &diff) == CHECK_DIFFERS) {
        fprintf(stderr, "weft bench: the routed result at n = %lld differs from the reference lane's (max |diff| %g)\n",
                (long long)n, (double)diff);
        r->mismatches++;
      }
      if (rc->best >= 0) rc->ratio = rc->point.median_s / rc->best_point.median_s;
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

/* Where lanes a and b cross, from the measured points: the first pair of consecutive sizes (both ran)
 * where the faster lane changes, interpolated in log-log. */
static void measured_crossover(bench_run *r, crossover *x) {
  double prev_n = 0, prev_r = 0;
  x->measured_n = 0;
  x->faster_above = -1;
  for (size_t s = 0; s < r->o.nsizes; s++) {
    const bench_cell *ca = cell(r, s, (size_t)x->a), *cb = cell(r, s, (size_t)x->b);
    if (!ca->ran || !cb->ran || ca->point.median_s <= 0 || cb->point.median_s <= 0) continue;
    double lr = log(ca->point.median_s / cb->point.median_s); /* > 0: b faster */
    double ln = log((double)r->o.sizes[s]);
    if (prev_n != 0 && x->measured_n == 0 && (lr > 0) != (prev_r > 0)) {
      x->measured_n = exp(prev_n + (ln - prev_n) * prev_r / (prev_r - lr));
    }
    prev_n = ln, prev_r = lr;
    x->faster_above = lr > 0 ? x->b : x->a;
  }
}

/* Where the cost model says a and b cross for square matmuls from host data: a sign change of the
 * predicted difference on a log grid, then bisection on whole n. */
static void predicted_crossover(bench_run *r, crossover *x) {
  x->predicted_n = 0;
  int fa = r->lanes[x->a].index, fb = r->lanes[x->b].index;
  double prev = 0;
  int64_t prev_n = 0;
  for (int64_t n = 1; n <= 65536; n = n < 4 ? n + 1 : n + n / 4) {
    weft_route_query q = {WEFT_OP_MATMUL, r->o.contract, 1, n, n, n, 0, 0};
    weft_route_explanation e;
    /* bench's points are steady states, whose tensors' memory is registered with the lanes by then */
    if (weft_route_explain_registered(r->f, &q, &e) != WEFT_OK || !e.lanes[fa].eligible || !e.lanes[fb].eligible) return;
    double d = e.lanes[fa].total - e.lanes[fb].total;
    if (prev_n && (d > 0) != (prev > 0)) {
      int64_t lo = prev_n, hi = n;
      while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        weft_route_query qm = {WEFT_OP_MATMUL, r->o.contract, 1, mid, mid, mid, 0, 0};
        weft_route_explain_registered(r->f, &qm, &e);
        double dm = e.lanes[fa].total - e.lanes[fb].total;
        if ((dm > 0) == (prev > 0)) lo = mid;
        else hi = mid;
      }
      x->predicted_n = (double)hi;
      return;
    }
    prev = d, prev_n = n;
  }
}

/* The routing summary: the geometric mean of routed/best, every pair's crossovers, one decision's cost. */
static int summarize(bench_run *r) {
  r->predicted = calloc(r->o.nsizes * r->nlanes, sizeof *r->predicted);
  if (!r->predicted) return WEFT_CLI_FAILED;
  for (size_t s = 0; s < r->o.nsizes; s++) {
    int64_t n = r->o.sizes[s];
    weft_route_query q = {WEFT_OP_MATMUL, r->o.contract, 1, n, n, n, 0, 0};
    weft_route_explanation e;
    if (weft_route_explain_registered(r->f, &q, &e) != WEFT_OK) continue;
    for (size_t l = 0; l < r->nlanes; l++)
      if (cell(r, s, l)->ran && e.lanes[r->lanes[l].index].eligible)
        r->predicted[s * r->nlanes + l] = e.lanes[r->lanes[l].index].total;
  }
  double logsum = 0;
  int count = 0;
  for (size_t s = 0; s < r->o.nsizes; s++)
    if (r->routed[s].ran && r->routed[s].best >= 0 && r->routed[s].ratio > 0) logsum += log(r->routed[s].ratio), count++;
  r->geomean = count ? exp(logsum / count) : 0;
  size_t pairs = r->nlanes * (r->nlanes - 1) / 2;
  r->cross = calloc(pairs ? pairs : 1, sizeof *r->cross);
  if (!r->cross) return WEFT_CLI_FAILED;
  for (size_t a = 0; a < r->nlanes; a++)
    for (size_t b = a + 1; b < r->nlanes; b++) {
      crossover *x = &r->cross[r->ncross++];
      x->a = (int)a, x->b = (int)b;
      measured_crossover(r, x);
      predicted_crossover(r, x);
    }
  /* A decision is what weft_route_explain does for a shape: every lane's predicted finish time and the
   * least. Timed over many calls; the first ones (and any calibration they set off) are outside. */
  weft_route_query q = {WEFT_OP_MATMUL, r->o.contract, 1, 64, 64, 64, 0, 0};
  weft_route_explanation e;
  for (int i = 0; i < 1000; i++) weft_route_explain(r->f, &q, &e);
  const int calls = 200000;
  double t0 = weft_cli_now();
  for (int i = 0; i < calls; i++) {
    q.m = 64 + (i & 7); /* vary the shape so nothing is hoisted out of the loop */
    weft_route_explain(r->f, &q, &e);
  }
  r->decision_us = (weft_cli_now() - t0) / calls * 1e6;
  return WEFT_CLI_OK;
}

/* ------------------------------------------------------------------------------------------ the plot */

static const char *const PALETTE[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
#define NPALETTE (sizeof PALETTE / sizeof PALETTE[0])

/* --plot FILE: an SVG, so a name that promises another format is refused before anything runs, and the
 * file is opened then (a path that cannot be written fails at once, not after the whole bench). */
static int plot_open(bench_run *r, FILE **out) {
  static const char *const other[] = {".png", ".jpg", ".jpeg", ".gif", ".pdf", ".webp", ".bmp", ".tif", ".tiff"};
  const char *dot = strrchr(r->o.plot, '.');
  for (size_t i = 0; dot && i < sizeof other / sizeof other[0]; i++)
    if (strcasecmp(dot, other[i]) == 0)
      return weft_cli_usage_error("bench", "--plot writes SVG, not %s: name the file .svg (e.g. bench.svg)", dot + 1);
  *out = fopen(r->o.plot, "w");
  if (!*out) return weft_cli_usage_error("bench", "--plot: cannot write %s: %s", r->o.plot, strerror(errno));
  return WEFT_CLI_OK;
}

/* time against size, log-log: a line per lane with a dot per measured point, ticks at the sizes measured;
 * the router's picks as rings (in the picked lane's colour) drawn under the lanes' points so they hide
 * none; crossovers measured (dashed) and predicted by the cost model (dotted). Plain SVG. */
static int write_plot(bench_run *r, FILE *fp) {
  const double W = 980, H = 580, L = 90, R = 270, T = 60, B = 70;
  double nmin = 1e300, nmax = 0, tmin = 1e300, tmax = 0;
  for (size_t s = 0; s < r->o.nsizes; s++) {
    for (size_t l = 0; l < r->nlanes; l++) {
      const bench_cell *c = cell(r, s, l);
      if (!c->ran) continue;
      double n = (double)r->o.sizes[s], t = c->point.median_s;
      nmin = n < nmin ? n : nmin, nmax = n > nmax ? n : nmax;
      tmin = t < tmin ? t : tmin, tmax = t > tmax ? t : tmax;
    }
    if (r->route && r->routed[s].ran) {
      double t = r->routed[s].point.median_s;
      tmin = t < tmin ? t : tmin, tmax = t > tmax ? t : tmax;
    }
  }
  if (nmax <= 0) {
    fclose(fp);
    fprintf(stderr, "weft bench: nothing was measured, so there is no plot\n");
    return WEFT_CLI_FAILED;
  }
  double lx0 = log10(nmin) - 0.08, lx1 = log10(nmax) + 0.08, ly0 = floor(log10(tmin)), ly1 = ceil(log10(tmax));
  if (ly1 <= ly0) ly1 = ly0 + 1;
#define PX(n) (L + (log10(n) - lx0) / (lx1 - lx0) * (W - L - R))
#define PY(t) (H - B - (log10(t) - ly0) / (ly1 - ly0) * (H - T - B))
  fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
              "font-size=\"13\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H);
  fprintf(fp, "<text x=\"%.0f\" y=\"28\" font-size=\"17\" font-weight=\"bold\">weft bench: matmul n x n x n, %s "
              "contract, host data in and out</text>\n",
          L, weft_contract_str(r->o.contract));
  /* x: a tick at every size measured */
  for (size_t s = 0; s < r->o.nsizes; s++) {
    int any = 0;
    for (size_t l = 0; l < r->nlanes; l++) any |= cell(r, s, l)->ran;
    if (!any) continue;
    double x = PX((double)r->o.sizes[s]);
    fprintf(fp, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#e4e4e4\"/>\n", x, T, x, H - B);
    fprintf(fp, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#333\"/>\n", x, H - B, x, H - B + 5);
    fprintf(fp, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%lld</text>\n", x, H - B + 19,
            (long long)r->o.sizes[s]);
  }
  /* y: decades */
  for (double d = ly0; d <= ly1 + 1e-9; d++) {
    double y = PY(pow(10, d));
    const char *label[] = {"1 ns", "10 ns", "100 ns", "1 us", "10 us", "100 us", "1 ms", "10 ms", "100 ms", "1 s", "10 s",
                           "100 s"};
    int li = (int)d + 9;
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", L, y, W - R, y);
    if (li >= 0 && li < 12) fprintf(fp, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 8, y + 4, label[li]);
  }
  fprintf(fp, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", L, T,
          W - L - R, H - T - B);
  fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">matrix size n (log scale)</text>\n", (L + W - R) / 2,
          H - 25);
  fprintf(fp, "<text transform=\"translate(22,%.0f) rotate(-90)\" text-anchor=\"middle\">time per matmul (log scale)</text>\n",
          (T + H - B) / 2);
  /* crossovers: measured dashed, predicted dotted, each labelled */
  int label_row = 0;
  for (size_t i = 0; i < r->ncross; i++) {
    const crossover *x = &r->cross[i];
    for (int kind = 0; kind < 2; kind++) {
      double n = kind ? x->predicted_n : x->measured_n;
      if (n <= 0 || log10(n) < lx0 || log10(n) > lx1) continue;
      double px = PX(n);
      fprintf(fp, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"%s\" stroke-dasharray=\"%s\"/>\n", px,
              T, px, H - B, kind ? "#999" : "#444", kind ? "2,3" : "6,4");
      fprintf(fp, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\" fill=\"%s\">%s/%s %s n&#8776;%.0f</text>\n", px + 4,
              T + 16 + 15.0 * label_row++, kind ? "#777" : "#333", r->lanes[x->a].info.name, r->lanes[x->b].info.name,
              kind ? "predicted" : "measured", n);
    }
  }
  /* the router's picks first, as rings, so the lanes' points stay visible inside them */
  if (r->route)
    for (size_t s = 0; s < r->o.nsizes; s++) {
      const routed_cell *rc = &r->routed[s];
      if (!rc->ran) continue;
      const char *col = rc->picked >= 0 ? PALETTE[(size_t)rc->picked % NPALETTE] : "#999";
      fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\">"
                  "<title>n=%lld routed to %s: %.4g ms</title></circle>\n",
              PX((double)r->o.sizes[s]), PY(rc->point.median_s), col, (long long)r->o.sizes[s], rc->picked_name,
              rc->point.median_s * 1e3);
    }
  /* a line per lane, a dot per point */
  for (size_t l = 0; l < r->nlanes; l++) {
    const char *col = PALETTE[l % NPALETTE];
    fprintf(fp, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
    for (size_t s = 0; s < r->o.nsizes; s++)
      if (cell(r, s, l)->ran) fprintf(fp, "%.1f,%.1f ", PX((double)r->o.sizes[s]), PY(cell(r, s, l)->point.median_s));
    fprintf(fp, "\"/>\n");
    for (size_t s = 0; s < r->o.nsizes; s++)
      if (cell(r, s, l)->ran)
        fprintf(fp, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s n=%lld: %.4g ms</title></circle>\n",
                PX((double)r->o.sizes[s]), PY(cell(r, s, l)->point.median_s), col, r->lanes[l].info.name,
                (long long)r->o.sizes[s], cell(r, s, l)->point.median_s * 1e3);
    double ly = T + 10 + 22.0 * (double)l;
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"/>\n", W - R + 15,
            ly, W - R + 40, ly, col);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", W - R + 46, ly + 4, r->lanes[l].info.name);
  }
  double ly = T + 10 + 22.0 * (double)r->nlanes;
  if (r->route) {
    fprintf(fp, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"8\" fill=\"none\" stroke=\"#555\" stroke-width=\"2\"/>\n",
            W - R + 27, ly);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\">routed (ring: the pick's colour)</text>\n", W - R + 46, ly + 4);
    ly += 22;
    if (r->geomean > 0)
      fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">routed/best: %.3f (geometric mean)</text>\n", W - R + 15,
              ly + 4, r->geomean);
    ly += 22;
  }
  if (r->ncross) {
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#444\" stroke-dasharray=\"6,4\"/>\n",
            W - R + 15, ly, W - R + 40, ly);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\">crossover, measured</text>\n", W - R + 46, ly + 4);
    ly += 22;
    fprintf(fp, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\" stroke-dasharray=\"2,3\"/>\n",
            W - R + 15, ly, W - R + 40, ly);
    fprintf(fp, "<text x=\"%.0f\" y=\"%.0f\">crossover, predicted</text>\n", W - R + 46, ly + 4);
  }
#undef PX
#undef PY
  fprintf(fp, "</svg>\n");
  if (ferror(fp) | (fclose(fp) != 0)) {
    fprintf(stderr, "weft bench: writing the plot %s failed\n", r->o.plot);
    return WEFT_CLI_FAILED;
  }
  fprintf(stderr, "weft bench: wrote the plot to %s\n", r->o.plot);
  return WEFT_CLI_OK;
}

/* ----------------------------------------------------------------------------------------- progress */

/* Notes from the fabric: while the lanes are measured before the table, one line overwritten in place on
 * a terminal, or a line per lane in a pipe; after that, each note on a line of its own. */
typedef struct progress {
  int tty, measuring, shown;
  char cache_note[1200];
} progress;

static void on_note(void *ctx, const char *line) {
  progress *p = ctx;
  if (strncmp(line, "no calibration cache at ", 24) == 0) {
    snprintf(p->cache_note, sizeof p->cache_note, "%s", line);
    return;
  }
  if (!p->measuring) {
    fprintf(stderr, "%s\n", line);
    return;
  }
  if (strncmp(line, "weft: measuring", 15) == 0) return; /* bench says it its own way */
  if (p->tty) {
    fprintf(stderr, "\r\033[Kweft bench: measuring the lanes for the router: %.90s", line);
    p->shown = 1;
  } else if (strncmp(line, "calibrating ", 12) == 0) {
    fprintf(stderr, "weft bench: %s\n", line);
  }
  fflush(stderr);
}

/* 1 when a lane being benched still routes on a built-in prior for the contract. */
static int any_prior(bench_run *r) {
  for (size_t l = 0; l < r->nlanes; l++) {
    weft_cost_line line;
    if (weft_fabric_cost_model(r->f, (size_t)r->lanes[l].index, WEFT_COST_MATMUL, r->o.contract, &line) == WEFT_OK &&
        line.source == WEFT_COST_PRIOR)
      return 1;
  }
  return 0;
}

/* Before the table: the lanes the cache has no model for are measured now, so no timed point pays for it. */
static void calibrate_first(bench_run *r, progress *p) {
  if (!any_prior(r)) return;
  char path[1024] = "";
  weft_cost_cache_path(path, sizeof path);
  if (p->cache_note[0]) fprintf(stderr, "weft bench: no calibration cache yet (%s): measuring the lanes first\n", path);
  else fprintf(stderr, "weft bench: measuring the lanes the calibration cache (%s) has no model for\n", path);
  fflush(stderr);
  p->measuring = 1;
  double t0 = weft_cli_now();
  weft_status st = weft_fabric_calibration_wait(r->f);
  p->measuring = 0;
  if (p->tty && p->shown) fprintf(stderr, "\r\033[K");
  if (st != WEFT_OK)
    fprintf(stderr, "weft bench: measuring the lanes failed (%s: %s); routing uses estimates\n", weft_status_str(st),
            weft_fabric_last_error(r->f));
  else fprintf(stderr, "weft bench: lanes measured in %.1f s\n", weft_cli_now() - t0);
  fflush(stderr);
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
  FILE *plot = NULL;
  if (r.o.plot && (rc = plot_open(&r, &plot)) != WEFT_CLI_OK) {
    free(r.o.sizes);
    return rc;
  }
  progress prog = {isatty(2), 0, 0, ""};
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = r.o.lanes;
  desc.cpu_threads = r.o.cpu_threads;
  /* The routed runs need the cost model: lanes the cache lacks are measured before the table, with
   * progress on stderr. --no-route pins every op, so nothing is measured or written. */
  desc.calibration = r.o.no_route ? WEFT_CALIBRATION_OFF : WEFT_CALIBRATION_AUTO;
  desc.on_note = on_note;
  desc.note_ctx = &prog;
  r.f = weft_cli_open("bench", &desc);
  if (!r.f) {
    if (plot) fclose(plot), unlink(r.o.plot);
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
    r.routed = calloc(r.o.nsizes, sizeof *r.routed);
    if (!r.cells || !r.routed) {
      fprintf(stderr, "weft bench: out of memory\n");
      rc = WEFT_CLI_FAILED;
    }
  }
  r.route = !r.o.no_route && r.nlanes > 1;
  if (rc == WEFT_CLI_OK && r.route) calibrate_first(&r, &prog);
  if (rc == WEFT_CLI_OK) {
    if (r.o.format == OUT_TABLE) table_header(&r);
    for (size_t s = 0; s < r.o.nsizes && rc == WEFT_CLI_OK; s++) {
      rc = bench_size(&r, s);
      if (rc == WEFT_CLI_OK && r.o.format == OUT_TABLE) table_row(&r, s);
    }
  }
  if (rc == WEFT_CLI_OK && r.route) rc = summarize(&r);
  if (plot) {
    if (rc == WEFT_CLI_OK) rc = write_plot(&r, plot);
    else fclose(plot), unlink(r.o.plot);
  }
  if (rc == WEFT_CLI_OK) {
    if (r.o.format == OUT_TABLE) table_notes(&r);
    else if (r.o.format == OUT_JSON) rc = weft_cli_print_json(build_json(&r));
    else print_csv(&r);
    if (rc == WEFT_CLI_OK && (r.mismatches || r.failures)) rc = WEFT_CLI_FAILED;
  }
  weft_fabric_close(r.f);
  free(r.cells);
  free(r.routed);
  free(r.cross);
  free(r.predicted);
  free(r.lanes);
  free(r.skipped);
  free(r.o.sizes);
  return rc;
}
