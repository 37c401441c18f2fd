/* bench_split.c - the data-parallel split against the best single lane: batched matmuls [B,n,n].[n,n] from
 * host data for growing B, each lane alone (pinned) and the fabric's own choice (auto: possibly split),
 * auto timed in blocks of runs alternating with blocks of the best lane, so machine noise falls on both
 * (the median over the pairs of blocks). Prints the ratio auto/best (the split must never lose: >= 0.97x the
 * best lane's speed means ratio <= 1.03), the same from the total times of all those runs (what a loop
 * pays, the fabric's timing of other candidates included), and the split's shares with each lane's
 * measured time.
 * Usage: bench_split [n] [max_batch]   (WEFT_BENCH_LANES=cpu,cuda opens only those lanes;
 * WEFT_BENCH_CONTRACT=fp32 runs under the fp32 contract instead of exact; WEFT_BENCH_BATCHED_B=1 gives
 * each entry its own b; WEFT_BENCH_CONTROL=1 runs the best lane in auto's place: the ratio the method reads
 * when nothing differs, the noise floor of the machine; WEFT_BENCH_PAIRS=N and WEFT_BENCH_SECONDS=S make a
 * row up to N pairs of blocks (at most 2001; 101 unless set) within S seconds (1 unless set): a longer row
 * reads the steady state, and prints the ratio of its first 101 pairs and of its later half beside) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "bench_util.h"

/* One run as a host-data caller sees it: write a and b, matmul, read c. The tensors wrap the caller's
 * arrays, so the writes and the read move nothing in the core: what is timed is the lanes' own work and
 * transfers, not a copy every lane would pay alike. */
static weft_contract contract = WEFT_CONTRACT_EXACT;

static double run(weft_fabric *f, int lane, weft_tensor *a, weft_tensor *b, weft_tensor *c, const float *ha,
                  const float *hb, float *hc) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.lane = lane;
  d.contract = contract;
  double t0 = bench_now();
  weft_tensor_write(a, ha, weft_tensor_numel(a));
  weft_tensor_write(b, hb, weft_tensor_numel(b));
  if (weft_op_matmul(f, &d, a, 0, b, 0, c) != WEFT_OK) {
    fprintf(stderr, "matmul failed: %s\n", weft_fabric_last_error(f));
    exit(1);
  }
  weft_tensor_read(c, hc, weft_tensor_numel(c));
  return bench_now() - t0;
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 128, maxb = argc > 2 ? atoll(argv[2]) : 64;
  weft_fabric *f;
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = getenv("WEFT_BENCH_LANES"); /* e.g. cpu,cuda: leave a slow lane out of a long run */
  const char *be = getenv("WEFT_BENCH_BATCHED_B"); /* 1: b is [B,n,n] too, one per entry */
  const int batched_b = be && strcmp(be, "1") == 0;
  const char *ctl = getenv("WEFT_BENCH_CONTROL"); /* 1: the best lane against itself */
  const int control = ctl && strcmp(ctl, "1") == 0;
  const char *ce = getenv("WEFT_BENCH_CONTRACT"); /* exact (default) or fp32 */
  if (ce && strcmp(ce, "fp32") == 0) contract = WEFT_CONTRACT_FP32;
  const char *pe = getenv("WEFT_BENCH_PAIRS"), *se = getenv("WEFT_BENCH_SECONDS");
  int max_pairs = pe ? atoi(pe) : 101;
  max_pairs = max_pairs < 3 ? 3 : max_pairs > 2001 ? 2001 : max_pairs;
  const double row_seconds = se && atof(se) > 0 ? atof(se) : 1.0;
  if (weft_fabric_open(&desc, &f) != WEFT_OK) return fprintf(stderr, "%s\n", weft_open_error()), 1;
  size_t nl = weft_fabric_lane_count(f);
  if (control) printf("CONTROL: the best lane runs in auto's place; the ratios are the machine's noise floor\n");
  printf("batched matmul [B,%lld,%lld].[%s%lld,%lld], %s, host data in and out; median of runs\n", (long long)n,
         (long long)n, batched_b ? "B," : "", (long long)n, (long long)n, weft_contract_str(contract));
  printf("%6s", "B");
  for (size_t l = 0; l < nl; l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, l, &li);
    if (li.contracts & WEFT_CONTRACT_BIT(contract)) printf(" %14s", li.name);
  }
  printf(" %14s %12s %7s %7s  split (lane: entries, measured ms)\n", "auto", "best", "ratio", "total");
  double worst = 0, worst_total = 0;
  for (int64_t B = 1; B <= maxb; B *= 2) {
    int64_t da[3] = {B, n, n}, db[3] = {B, n, n};
    size_t ca = (size_t)(B * n * n), cb = batched_b ? ca : (size_t)(n * n);
    float *ha = malloc(ca * sizeof(float)), *hb = malloc(cb * sizeof(float)), *hc = malloc(ca * sizeof(float));
    for (size_t i = 0; i < ca; i++) ha[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < cb; i++) hb[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    weft_tensor *a, *b, *c;
    weft_tensor_wrap(f, 3, da, ha, &a);
    if (batched_b) weft_tensor_wrap(f, 3, db, hb, &b);
    else weft_tensor_wrap(f, 2, db + 1, hb, &b);
    weft_tensor_wrap(f, 3, da, hc, &c);
    printf("%6lld", (long long)B);
    int best = -1;
    double best_t = 0;
    for (size_t l = 0; l < nl; l++) {
      weft_lane_info li;
      weft_fabric_lane_info(f, l, &li);
      if (!(li.contracts & WEFT_CONTRACT_BIT(contract))) continue;
      double t[9];
      run(f, (int)l, a, b, c, ha, hb, hc);
      int reps = 0;
      double start = bench_now();
      while (reps < 9 && (reps < 3 || bench_now() - start < 0.5)) t[reps] = run(f, (int)l, a, b, c, ha, hb, hc), reps++;
      qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
      printf(" %11.3f ms", t[reps / 2] * 1e3);
      if (best < 0 || t[reps / 2] < best_t) best = (int)l, best_t = t[reps / 2];
    }
    /* auto against the best lane in the steady state: blocks of 8 runs of each in turn, so each block runs as
     * a loop of that op does (not after the other's run, which leaves a pool spinning or a device's caches
     * cold) while machine drift still falls on both; the ratio is the median over the pairs of blocks of
     * auto's block median over best's (and, for the total, the sum of auto's runs over the sum of best's). Up
     * to 101 pairs in a second (unless set otherwise): small ops are noisy. The first auto runs of a shape
     * measure its candidates (the split and each lane near the best, three runs each, a device lane after
     * four untimed, a host lane after 1 ms of them): 32 runs before cover those where an op takes 0.1 ms or
     * more. Re-timing the others goes on at a budget of 0.5% of the time, so where lanes are near a tie
     * the choice settles over a thousand runs or so: a longer row (WEFT_BENCH_PAIRS) shows the steady state
     * against the first 101 pairs. */
    enum { BLOCK = 8, MAXPAIRS = 2001 };
    static double ta[MAXPAIRS * BLOCK], pr[MAXPAIRS], part[MAXPAIRS];
    double blk[BLOCK];
    const int subject = control ? best : WEFT_LANE_AUTO; /* what the auto columns time */
    for (int w = 0; w < 32; w++) run(f, subject, a, b, c, ha, hb, hc);
    int pairs = 0, nta = 0;
    double start = bench_now();
    int where[64] = {0}, splits = 0; /* where the auto runs went */
    char last_split[512] = "";
    double last_split_t = 0, sum_auto = 0, sum_best = 0;
    while (pairs < max_pairs && (pairs < 3 || bench_now() - start < row_seconds)) {
      for (int r = 0; r < BLOCK; r++) {
        blk[r] = ta[nta++] = run(f, subject, a, b, c, ha, hb, hc);
        sum_auto += blk[r];
        weft_split_report sr;
        if (weft_split_last(f, &sr) == WEFT_OK && sr.split && B >= 2) {
          splits++;
          int used = 0; /* the last split's shares, for when the auto runs settle on one lane */
          for (size_t i = 0; i < sr.nshares && used < (int)sizeof last_split - 64; i++)
            used += snprintf(last_split + used, sizeof last_split - (size_t)used, "%s%s: %lld, %.3f ms", i ? "; " : "",
                             sr.shares[i].lane, (long long)sr.shares[i].entries, sr.shares[i].seconds * 1e3);
          last_split_t = sr.seconds;
        } else if (weft_fabric_last_lane(f) >= 0 && weft_fabric_last_lane(f) < 64) {
          where[weft_fabric_last_lane(f)]++;
        }
      }
      qsort(blk, BLOCK, sizeof blk[0], bench_cmp_double);
      double auto_med = 0.5 * (blk[BLOCK / 2 - 1] + blk[BLOCK / 2]);
      for (int r = 0; r < BLOCK; r++) sum_best += blk[r] = run(f, best, a, b, c, ha, hb, hc);
      qsort(blk, BLOCK, sizeof blk[0], bench_cmp_double);
      pr[pairs++] = auto_med / (0.5 * (blk[BLOCK / 2 - 1] + blk[BLOCK / 2]));
    }
    run(f, WEFT_LANE_AUTO, a, b, c, ha, hb, hc); /* leaves the report for an auto run */
    weft_split_report rep;
    int have = weft_split_last(f, &rep) == WEFT_OK;
    qsort(ta, (size_t)nta, sizeof ta[0], bench_cmp_double);
    double first = 0, late = 0; /* a long row: the median over its first 101 pairs, and over its later half */
    if (pe) {
      const int nf = pairs < 101 ? pairs : 101, h = pairs / 2;
      memcpy(part, pr, sizeof pr[0] * (size_t)nf);
      qsort(part, (size_t)nf, sizeof part[0], bench_cmp_double);
      first = part[nf / 2];
      memcpy(part, pr + h, sizeof pr[0] * (size_t)(pairs - h));
      qsort(part, (size_t)(pairs - h), sizeof part[0], bench_cmp_double);
      late = part[(pairs - h) / 2];
    }
    qsort(pr, (size_t)pairs, sizeof pr[0], bench_cmp_double);
    double ratio = pr[pairs / 2];
    worst = ratio > worst ? ratio : worst;
    worst_total = sum_auto / sum_best > worst_total ? sum_auto / sum_best : worst_total;
    weft_lane_info bi;
    weft_fabric_lane_info(f, (size_t)best, &bi);
    printf(" %11.3f ms %12s %7.3f %7.3f  ", ta[nta / 2] * 1e3, bi.name, ratio, sum_auto / sum_best);
    if (have && rep.split) {
      for (size_t i = 0; i < rep.nshares; i++)
        printf("%s%s: %lld, %.3f ms", i ? "; " : "", rep.shares[i].lane, (long long)rep.shares[i].entries,
               rep.shares[i].seconds * 1e3);
    } else if (have && rep.ncandidates) {
      printf("measured:");
      for (size_t i = 0; i < rep.ncandidates; i++)
        printf("%s %s %.3f ms", i ? "," : "", rep.candidate[i], rep.candidate_seconds[i] * 1e3);
    } else if (B >= 2 && have) {
      printf("not split: %s alone (predicted %.3f ms; best split %.3f ms)", rep.single_lane,
             rep.predicted_single * 1e3, rep.predicted * 1e3);
    } else {
      weft_lane_info li;
      weft_fabric_lane_info(f, (size_t)weft_fabric_last_lane(f), &li);
      printf("batch 1: %s", li.name);
    }
    printf("  [auto runs:");
    if (splits) printf(" split x%d", splits);
    for (size_t l = 0; l < nl && l < 64; l++)
      if (where[l]) {
        weft_lane_info li;
        weft_fabric_lane_info(f, l, &li);
        printf(" %s x%d", li.name, where[l]);
      }
    printf("]");
    if (last_split[0] && !(have && rep.split)) printf(" last split %.3f ms: %s", last_split_t * 1e3, last_split);
    printf("\n");
    if (pe) printf("%6s %d pairs: the first 101 read %.3f, the later half %.3f\n", "", pairs, first, late);
    weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
    free(ha), free(hb), free(hc);
  }
  printf("worst auto/best: %.3f, in total time %.3f (the split never loses by more than 3%% when this is <= 1.03)\n",
         worst, worst_total);
  weft_fabric_close(f);
  return 0;
}
