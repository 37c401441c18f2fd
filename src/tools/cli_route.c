/* cli_route.c - `weft route` (where would this op run, and why: every lane's predicted cost split into
 * wait, transfer, alpha and compute) and `weft calibrate` (measure every lane now, with progress, and show
 * the fitted cost lines). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ shared */

/* "1.23 ms" style: seconds in the unit that keeps three to four digits. */
static const char *fmt_time(double s, char *buf, size_t len) {
  if (s == 0) snprintf(buf, len, "0");
  else if (s >= 1e6) snprintf(buf, len, "%.3g s", s); /* an absurd shape's years stay readable, with the unit */
  else if (s < 1e-3) snprintf(buf, len, "%.2f us", s * 1e6);
  else if (s < 1) snprintf(buf, len, "%.3f ms", s * 1e3);
  else snprintf(buf, len, "%.3f s", s);
  return buf;
}

static const char *fmt_rate(weft_cost_class cls, double beta, char *buf, size_t len) {
  if (beta <= 0) snprintf(buf, len, "free");
  else if (cls == WEFT_COST_MATMUL) snprintf(buf, len, "%.2f GFLOP/s", beta * 1e-9);
  else if (cls == WEFT_COST_ELEMENTWISE) snprintf(buf, len, "%.2f Gelem/s", beta * 1e-9);
  else snprintf(buf, len, "%.2f GB/s", beta * 1e-9);
  return buf;
}

static const char *source_name(int source) {
  switch (source) {
  case WEFT_COST_MEASURED: return "measured now";
  case WEFT_COST_CACHED: return "cached";
  case WEFT_COST_SET: return "set";
  default: return "prior (not measured)";
  }
}

static void note_to_stderr(void *ctx, const char *line) {
  (void)ctx;
  fprintf(stderr, "  %s\n", line);
}

/* ------------------------------------------------------------------------------------------- route */

void weft_cli_route_help(FILE *out) {
  fprintf(out,
          "Usage: weft route [--explain] OP SHAPE [--contract C] [--lanes LIST] [--cpu-threads N] [--json]\n"
          "\n"
          "Asks the router where an op of this shape would run, with its inputs on the host, and prints the\n"
          "chosen lane. With --explain, also every lane's predicted cost split into the wait until the lane is\n"
          "free, the transfers (inputs up, and the result back when the caller works on host data), the fixed\n"
          "dispatch cost alpha and the compute (work / beta), and which cost lines those came from. Lanes\n"
          "without a measured model are calibrated first (once; the result is cached).\n"
          "\n"
          "OP is one of matmul, add, relu, relu_backward, scale, axpy, sum_rows, softmax_xent.\n"
          "SHAPE for matmul: N (square), MxKxN, or BxMxKxN (a batch of B); for the others: ROWSxCOLS or N.\n"
          "\n"
          "Options:\n"
          "  --explain          print every lane's predicted cost and why the choice (default: the lane name)\n"
          "  --contract C       exact (default), fp32, tf32 or bf16\n"
          "  --lanes LIST       consider only these lane kinds or names, comma-separated\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per CPU this process may run on)\n"
          "  --json             print the explanation as JSON\n"
          "  -h, --help         show this help\n"
          "\n"
          "Example: weft route --explain matmul 512\n");
}

/* The largest dimension a shape may give (a matrix of 2^31 x 2^31 is already past what a tensor can hold). */
#define ROUTE_MAX_DIM (1ll << 31)

/* Parses "AxBxC" into up to four numbers, each 1 .. ROUTE_MAX_DIM. */
static int parse_shape(const char *s, int64_t *v, int *count) {
  *count = 0;
  const char *p = s;
  while (*p) {
    char *end;
    long long x = strtoll(p, &end, 10);
    if (end == p || x < 1 || x > ROUTE_MAX_DIM || *count == 4) return -1;
    v[(*count)++] = x;
    if (*end == '\0') break;
    if (*end != 'x' && *end != 'X') return -1;
    p = end + 1;
    if (!*p) return -1;
  }
  return *count ? 0 : -1;
}

static cJSON *explanation_json(const weft_route_explanation *e, const weft_route_query *q) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "op", weft_op_kind_str(e->op));
  cJSON_AddStringToObject(root, "contract", weft_contract_str(e->contract));
  if (q->op == WEFT_OP_MATMUL) {
    cJSON_AddNumberToObject(root, "batch", (double)q->batch);
    cJSON_AddNumberToObject(root, "m", (double)q->m);
    cJSON_AddNumberToObject(root, "k", (double)q->k);
    cJSON_AddNumberToObject(root, "n", (double)q->n);
  } else {
    cJSON_AddNumberToObject(root, "rows", (double)q->rows);
    cJSON_AddNumberToObject(root, "cols", (double)q->cols);
  }
  cJSON_AddNumberToObject(root, "work", e->work);
  if (e->chosen >= 0) cJSON_AddStringToObject(root, "chosen", e->lanes[e->chosen].lane);
  else cJSON_AddNullToObject(root, "chosen");
  cJSON *lanes = cJSON_AddArrayToObject(root, "lanes");
  for (size_t i = 0; i < e->nlanes; i++) {
    const weft_route_cost *c = &e->lanes[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(lanes, o);
    cJSON_AddStringToObject(o, "lane", c->lane);
    cJSON_AddBoolToObject(o, "eligible", c->eligible);
    if (!c->eligible) {
      cJSON_AddStringToObject(o, "why_not", c->why_not);
      continue;
    }
    cJSON_AddNumberToObject(o, "wait_s", c->wait);
    cJSON_AddNumberToObject(o, "transfer_s", c->transfer);
    cJSON_AddNumberToObject(o, "alpha_s", c->alpha);
    cJSON_AddNumberToObject(o, "compute_s", c->compute);
    cJSON_AddNumberToObject(o, "total_s", c->total);
  }
  return root;
}

/* 1 when a live lane honouring `contract` still routes on a built-in prior (it was never measured). */
static int any_prior(weft_fabric *f, weft_contract contract) {
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    weft_cost_line l;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || li.failed || !(li.contracts & WEFT_CONTRACT_BIT(contract)))
      continue;
    if (weft_fabric_cost_model(f, i, WEFT_COST_MATMUL, contract, &l) == WEFT_OK && l.source == WEFT_COST_PRIOR) return 1;
  }
  return 0;
}

static void print_explanation(weft_fabric *f, const weft_route_explanation *e, const weft_route_query *q) {
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  if (q->op == WEFT_OP_MATMUL)
    printf("%s [%lld,%lld,%lld].[%lld,%lld] (%.4g MFLOP), contract %s, inputs on the host\n\n", weft_op_kind_str(e->op),
           (long long)q->batch, (long long)q->m, (long long)q->k, (long long)q->k, (long long)q->n, e->work * 1e-6,
           weft_contract_str(e->contract));
  else
    printf("%s [%lld,%lld], contract %s, inputs on the host\n\n", weft_op_kind_str(e->op), (long long)q->rows,
           (long long)q->cols, weft_contract_str(e->contract));
  /* the lane column as wide as the longest name: remote:<host:port>/<lane> names run long */
  int w = 16;
  for (size_t i = 0; i < e->nlanes; i++) w = (int)strlen(e->lanes[i].lane) > w ? (int)strlen(e->lanes[i].lane) : w;
  printf("  %-*s %12s %12s %12s %12s %12s\n", w, "lane", "wait", "transfer", "alpha", "compute", "total");
  for (size_t i = 0; i < e->nlanes; i++) {
    const weft_route_cost *c = &e->lanes[i];
    if (!c->eligible) {
      printf("  %-*s %s\n", w, c->lane, c->why_not);
      continue;
    }
    weft_cost_line l;
    int prior = weft_fabric_cost_model(f, i, e->op == WEFT_OP_MATMUL ? WEFT_COST_MATMUL : WEFT_COST_ELEMENTWISE,
                                       e->contract, &l) == WEFT_OK && l.source == WEFT_COST_PRIOR;
    printf("  %-*s %12s %12s %12s %12s %12s%s%s\n", w, c->lane, fmt_time(c->wait, b1, sizeof b1),
           fmt_time(c->transfer, b2, sizeof b2), fmt_time(c->alpha, b3, sizeof b3), fmt_time(c->compute, b4, sizeof b4),
           fmt_time(c->total, b5, sizeof b5), (int)i == e->chosen ? "   <- chosen" : "",
           prior ? "   (not measured: built-in prior)" : "");
  }
  if (e->chosen < 0) {
    printf("\nno lane can run it: %s\n", weft_fabric_last_error(f));
    return;
  }
  int next = -1;
  for (size_t i = 0; i < e->nlanes; i++)
    if ((int)i != e->chosen && e->lanes[i].eligible && (next < 0 || e->lanes[i].total < e->lanes[next].total))
      next = (int)i;
  const weft_route_cost *ch = &e->lanes[e->chosen];
  printf("\nchosen: %s", ch->lane);
  if (next >= 0)
    printf(", predicted %.2fx faster than the next best, %s", ch->total > 0 ? e->lanes[next].total / ch->total : 0.0,
           e->lanes[next].lane);
  else printf(", the only lane that can run it");
  printf("\n\ncost lines used (t = alpha + work / beta):\n");
  weft_cost_class cls = e->op == WEFT_OP_MATMUL ? WEFT_COST_MATMUL : WEFT_COST_ELEMENTWISE;
  for (size_t i = 0; i < e->nlanes; i++) {
    if (!e->lanes[i].eligible) continue;
    weft_cost_line l, up, down;
    weft_fabric_cost_model(f, i, cls, e->contract, &l);
    weft_fabric_cost_model(f, i, WEFT_COST_UPLOAD, e->contract, &up);
    weft_fabric_cost_model(f, i, WEFT_COST_DOWNLOAD, e->contract, &down);
    printf("  %-*s %s: alpha %s, beta %s, x%.2f refinement (%s)", w, e->lanes[i].lane, weft_cost_class_str(cls),
           fmt_time(l.alpha, b1, sizeof b1), fmt_rate(cls, l.beta, b2, sizeof b2), l.refine, source_name(l.source));
    if (up.beta > 0)
      printf("; upload %s + %s, download %s + %s", fmt_time(up.alpha, b3, sizeof b3),
             fmt_rate(WEFT_COST_UPLOAD, up.beta, b4, sizeof b4), fmt_time(down.alpha, b5, sizeof b5),
             fmt_rate(WEFT_COST_DOWNLOAD, down.beta, b1, sizeof b1));
    printf("\n");
  }
}

int weft_cli_route(int argc, char **argv) {
  static const struct option longopts[] = {
      {"explain", no_argument, NULL, 'e'},           {"contract", required_argument, NULL, 'c'},
      {"lanes", required_argument, NULL, 'l'},       {"cpu-threads", required_argument, NULL, 't'},
      {"json", no_argument, NULL, 'j'},              {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int explain = 0, json = 0, c;
  long v;
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  weft_route_query q;
  memset(&q, 0, sizeof q);
  optind = 0;
  opterr = 0;
  if (weft_cli_check_long_options("route", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case 'e': explain = 1; break;
    case 'c': rc = weft_cli_parse_contract("route", "--contract", optarg, &q.contract); break;
    case 'l': rc = weft_cli_parse_lanes("route", "--lanes", optarg, &desc.lanes); break;
    case 't':
      if (!(rc = weft_cli_parse_long("route", "--cpu-threads", optarg, 1, 4096, &v))) desc.cpu_threads = (int)v;
      break;
    case 'j': json = 1; break;
    case 'h': weft_cli_route_help(stdout); return WEFT_CLI_OK;
    default: return weft_cli_option_error("route", c, argv);
    }
    if (rc) return rc;
  }
  if (argc - optind != 2) return weft_cli_usage_error("route", "wants an op and a shape, e.g. 'matmul 512'");
  /* The ops whose cost a shape describes: matmul by its m, k, n, the others by a [rows, cols] operand. The
   * transformer ops' costs depend on more than one [rows, cols] (heads, context, vocabulary), so the tool does
   * not pretend to explain them from one. */
  weft_op_kind kind = WEFT_OP_COUNT;
  const int known = weft_op_kind_parse(argv[optind], &kind) == WEFT_OK;
  if (!known || kind >= WEFT_OP_V1_COUNT)
    return weft_cli_usage_error("route", "%s '%s': OP is one of matmul, add, relu, relu_backward, scale, axpy, sum_rows, softmax_xent",
                                known ? "no shape of this tool describes the op" : "unknown op", argv[optind]);
  q.op = kind;
  int64_t d[4];
  int nd;
  if (parse_shape(argv[optind + 1], d, &nd) != 0)
    return weft_cli_usage_error("route", "shape '%s' is not N, AxB, AxBxC or AxBxCxD with whole numbers from 1 to %lld",
                                argv[optind + 1], ROUTE_MAX_DIM);
  if (q.op == WEFT_OP_MATMUL) {
    if (nd == 2) return weft_cli_usage_error("route", "a matmul shape is N, MxKxN or BxMxKxN");
    q.batch = nd == 4 ? d[0] : 1;
    q.m = nd == 1 ? d[0] : d[nd - 3];
    q.k = nd == 1 ? d[0] : d[nd - 2];
    q.n = nd == 1 ? d[0] : d[nd - 1];
  } else {
    if (nd > 2) return weft_cli_usage_error("route", "a %s shape is N or ROWSxCOLS", weft_op_kind_str(q.op));
    q.rows = d[0];
    q.cols = nd == 2 ? d[1] : d[0];
  }
  if (!json) desc.on_note = note_to_stderr; /* calibration progress, when a lane has no model yet */
  weft_fabric *f = weft_cli_open("route", &desc);
  if (!f) return WEFT_CLI_FAILED;
  /* weft_route_explain is a query that measures nothing: the tool measures the lanes without a model
   * first, as routing would at its first choice between lanes */
  if (desc.calibration == WEFT_CALIBRATION_AUTO && weft_fabric_lane_count(f) > 1 && any_prior(f, q.contract))
    weft_fabric_calibration_wait(f); /* only the lanes the cache has no model for */
  weft_route_explanation e;
  weft_status st = weft_route_explain(f, &q, &e);
  int rc = WEFT_CLI_OK;
  if (st != WEFT_OK) {
    fprintf(stderr, "weft route: %s: %s\n", weft_status_str(st), weft_fabric_last_error(f));
    rc = WEFT_CLI_FAILED;
  } else if (json) {
    rc = weft_cli_print_json(explanation_json(&e, &q));
  } else if (explain) {
    print_explanation(f, &e, &q);
  } else if (e.chosen >= 0) {
    printf("%s\n", e.lanes[e.chosen].lane);
  }
  if (rc == WEFT_CLI_OK && e.chosen < 0) {
    if (!explain && !json) fprintf(stderr, "weft route: %s\n", weft_fabric_last_error(f));
    rc = WEFT_CLI_FAILED;
  }
  weft_fabric_close(f);
  return rc;
}

/* --------------------------------------------------------------------------------------- calibrate */

void weft_cli_calibrate_help(FILE *out) {
  fprintf(out,
          "Usage: weft calibrate [--lanes LIST] [--cpu-threads N] [--quiet] [--json]\n"
          "\n"
          "Measures every lane now: a short sweep of matmul sizes per contract the lane honours, elementwise\n"
          "sizes and (for device lanes) transfer sizes, each point the median of repeats; fits the fixed cost\n"
          "alpha and the throughput beta of each, and writes them to the cache the router reads\n"
          "($XDG_CACHE_HOME/weft/calibration.json, else ~/.cache/weft/). Progress goes to stderr.\n"
          "\n"
          "Options:\n"
          "  --lanes LIST       calibrate only these lane kinds or names, comma-separated\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per CPU this process may run on)\n"
          "  --quiet            no progress lines\n"
          "  --json             print the fitted lines as JSON\n"
          "  -h, --help         show this help\n");
}

int weft_cli_calibrate(int argc, char **argv) {
  static const struct option longopts[] = {
      {"lanes", required_argument, NULL, 'l'}, {"cpu-threads", required_argument, NULL, 't'},
      {"quiet", no_argument, NULL, 'q'},       {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
  };
  int quiet = 0, json = 0, c;
  long v;
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  optind = 0;
  opterr = 0;
  if (weft_cli_check_long_options("calibrate", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case 'l': rc = weft_cli_parse_lanes("calibrate", "--lanes", optarg, &desc.lanes); break;
    case 't':
      if (!(rc = weft_cli_parse_long("calibrate", "--cpu-threads", optarg, 1, 4096, &v))) desc.cpu_threads = (int)v;
      break;
    case 'q': quiet = 1; break;
    case 'j': json = 1; break;
    case 'h': weft_cli_calibrate_help(stdout); return WEFT_CLI_OK;
    default: return weft_cli_option_error("calibrate", c, argv);
    }
    if (rc) return rc;
  }
  if (optind < argc) return weft_cli_usage_error("calibrate", "takes no arguments, got '%s'", argv[optind]);
  if (!quiet) desc.on_note = note_to_stderr;
  /* weft_fabric_calibrate measures every lane whatever the cache held, and rewrites the cache */
  weft_fabric *f = weft_cli_open("calibrate", &desc);
  if (!f) return WEFT_CLI_FAILED;
  double t0 = weft_cli_now();
  weft_status st = weft_fabric_calibrate(f);
  double took = weft_cli_now() - t0;
  char path[1024] = "";
  weft_cost_cache_path(path, sizeof path);
  char b1[32], b2[32];
  cJSON *root = json ? cJSON_CreateObject() : NULL;
  cJSON *lines = root ? cJSON_AddArrayToObject(root, "lines") : NULL;
  if (!json) printf("\n  %-16s %-12s %12s %18s %7s  %s\n", "lane", "line", "alpha", "beta", "points", "source");
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++)
      for (int k = 0; k < (cls == WEFT_COST_MATMUL ? WEFT_CONTRACT_COUNT : 1); k++) {
        if (cls == WEFT_COST_MATMUL && !(li.contracts & WEFT_CONTRACT_BIT(k))) continue;
        weft_cost_line l;
        weft_fabric_cost_model(f, i, (weft_cost_class)cls, (weft_contract)k, &l);
        if (l.source != WEFT_COST_MEASURED) continue;
        char name[48];
        if (cls == WEFT_COST_MATMUL) snprintf(name, sizeof name, "matmul.%s", weft_contract_str((weft_contract)k));
        else snprintf(name, sizeof name, "%s", weft_cost_class_str((weft_cost_class)cls));
        if (json) {
          cJSON *o = cJSON_CreateObject();
          cJSON_AddItemToArray(lines, o);
          cJSON_AddStringToObject(o, "lane", li.name);
          cJSON_AddStringToObject(o, "line", name);
          cJSON_AddNumberToObject(o, "alpha_s", l.alpha);
          cJSON_AddNumberToObject(o, "beta", l.beta);
          cJSON_AddNumberToObject(o, "points", l.points);
        } else {
          printf("  %-16s %-12s %12s %18s %7d  %s\n", li.name, name, fmt_time(l.alpha, b1, sizeof b1),
                 fmt_rate((weft_cost_class)cls, l.beta, b2, sizeof b2), l.points, source_name(l.source));
        }
      }
  }
  int rc = st == WEFT_OK ? WEFT_CLI_OK : WEFT_CLI_FAILED;
  if (json) {
    cJSON_AddNumberToObject(root, "seconds", took);
    cJSON_AddStringToObject(root, "cache", path);
    if (st != WEFT_OK) cJSON_AddStringToObject(root, "error", weft_fabric_last_error(f));
    if (weft_cli_print_json(root) != WEFT_CLI_OK) rc = WEFT_CLI_FAILED;
  } else {
    printf("\ncalibrated %zu lane%s in %.2f s; cache: %s\n", weft_fabric_lane_count(f),
           weft_fabric_lane_count(f) == 1 ? "" : "s", took,
           st == WEFT_ERR_IO ? "NOT WRITTEN (below)" : *path ? path : "(none: no home directory)");
    if (st != WEFT_OK) fprintf(stderr, "weft calibrate: %s: %s\n", weft_status_str(st), weft_fabric_last_error(f));
  }
  weft_fabric_close(f);
  return rc;
}
