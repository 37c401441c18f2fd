/* cli_mlp.c - `weft mlp`: trains a one-hidden-layer perceptron on scikit-learn's handwritten digits (the
 * data file Debian's python3-sklearn installs), with every op of the forward pass, the backward pass and the
 * SGD update going through the fabric (routed, or pinned round-robin to check that lanes agree). Reports a
 * line per epoch, where the ops ran, and a fingerprint of the final weights so that runs on different lanes
 * can be compared bit for bit. Everything random (split, shuffles, initial weights) is drawn on the host
 * from one seed, so the lanes are the only thing that differs between two runs. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cli.h"

/* Where Debian's python3-sklearn puts the digits: 1797 rows of 64 pixels (0..16, an 8x8 image) and a label. */
#define DIGITS_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
#define DIGITS_PIXELS 64
#define DIGITS_CLASSES 10
#define DIGITS_MAX_VALUE 16
/* Far more than the file holds: a cap so that a wrong file cannot make us allocate without bound. */
#define DIGITS_MAX_ROWS 1000000
#define MIN_SAMPLES 10 /* a held-out fifth of at least two samples, and something to train on */

#define DEFAULT_HIDDEN 64
#define DEFAULT_EPOCHS 30
#define DEFAULT_BATCH 32
#define DEFAULT_LR 0.2
#define DEFAULT_SEED 1

void weft_cli_mlp_help(FILE *out) {
  fprintf(out,
          "Usage: weft mlp [--data FILE] [--hidden N] [--epochs N] [--batch N] [--lr X] [--seed N] [--limit N]\n"
          "                [--contract C] [--lanes LIST] [--place auto|round-robin|layers|layers-rr]\n"
          "                [--cpu-threads N] [--mpi] [--json]\n"
          "\n"
          "Trains a 64-N-10 multilayer perceptron (relu hidden layer, softmax cross-entropy) on scikit-learn's\n"
          "handwritten digits (8x8 images, 1797 of them; Debian package python3-sklearn) with minibatch SGD.\n"
          "Every op of the forward pass, the backward pass and the update runs on the fabric: matmul (with\n"
          "transposes for the gradients), add (the bias), relu, relu_backward, softmax_xent, sum_rows (the bias\n"
          "gradients) and axpy (w = w - lr * grad); one scope per training step, so a GPU lane submits a step\n"
          "at once. Pixels are scaled to [0,1]; a seeded permutation holds out the last fifth for testing; the\n"
          "training rows are shuffled every epoch; weights start He-uniform, biases at zero. All of that is\n"
          "drawn on the host from --seed, so runs that differ only in their lanes start identically.\n"
          "\n"
          "Prints a line per epoch (mean training loss, training accuracy over the epoch, held-out accuracy,\n"
          "time), then where the ops ran and for how long, and a fingerprint of the final weights: under the\n"
          "exact contract it is the same whichever lanes did the work.\n"
          "\n"
          "Options:\n"
          "  --data FILE        the digits file, csv, gzip or plain (default %s)\n"
          "  --hidden N         hidden units (default %d)\n"
          "  --epochs N         passes over the training rows (default %d)\n"
          "  --batch N          rows per SGD step (default %d)\n"
          "  --lr X             learning rate (default %g)\n"
          "  --seed N           seed of the split, the shuffles and the initial weights (default %d)\n"
          "  --limit N          use only the first N rows of the seeded permutation (at least %d)\n"
          "  --contract C       exact (default: the same bits on every lane) or fp32\n"
          "  --lanes LIST       open only these lane kinds or names, comma-separated (cpu, vulkan, vulkan:0)\n"
          "  --place P          auto (default): the router picks each op's lane; round-robin: each op is pinned\n"
          "                     to the next lane in turn, one lane further every step, so tensors cross lanes\n"
          "                     at every op and every op meets every lane (a check that the lanes agree, not\n"
          "                     a fast way to train); layers: a pipeline - each layer (its forward, backward\n"
          "                     and update ops) pinned to one lane, the lane whose predicted cost for that\n"
          "                     layer's work is least; layers-rr: layer i on the i-th lane in turn. The\n"
          "                     activations cross lanes through the host. A trace shows where each layer\n"
          "                     ran and for how long\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per CPU this process may run on)\n"
          "  --mpi              data-parallel across the ranks of an MPI job (mpirun -np N weft mlp --mpi): each\n"
          "                     rank trains on its share of every batch (rank r the rows after rank r-1's) and\n"
          "                     the gradients are combined; under exact by a chained sum, so the weights are\n"
          "                     those of one process bit for bit whatever N (the fingerprint is the same);\n"
          "                     under fp32 by MPI_Allreduce, whose order depends on N. Rank 0 prints. Every\n"
          "                     batch (the last, short one too) needs at least N rows. A rank that dies or\n"
          "                     hangs ends the job with an error naming it (WEFT_MPI_TIMEOUT_MS, default 60 s)\n"
          "  --json             print the run as JSON instead of text\n"
          "  -h, --help         show this help\n"
          "\n"
          "Op times in the table are measured on lanes that finish an op before returning (the CPU) and the cost\n"
          "model's predictions on lanes that queue work (GPUs), and are labelled so.\n",
          DIGITS_PATH, DEFAULT_HIDDEN, DEFAULT_EPOCHS, DEFAULT_BATCH, DEFAULT_LR, DEFAULT_SEED, MIN_SAMPLES);
}

typedef struct mlp_opts {
  const char *data;
  const char *lanes;
  int cpu_threads;
  weft_contract contract;
  int hidden, epochs, batch;
  long limit; /* 0: every row */
  double lr;  /* as given; the update uses it rounded to float */
  uint64_t seed;
  int round_robin; /* --place round-robin: op by op */
  int layers;      /* --place layers (cost-based) or layers-rr: a lane per layer, a pipeline */
  int layers_rr;
  int json;
  int mpi; /* --mpi: data-parallel over the ranks of the MPI job */
} mlp_opts;

/* ------------------------------------------------------------------------------------------- data */

typedef struct digits {
  uint8_t *pixels; /* rows * DIGITS_PIXELS values 0..16 */
  uint8_t *labels; /* rows values 0..9 */
  size_t rows;
} digits;

static void digits_free(digits *d) {
  free(d->pixels);
  free(d->labels);
  memset(d, 0, sizeof *d);
}

/* Parses one csv line of 65 whole numbers into pixels and label; a message in err otherwise. */
static int parse_row(char *line, uint8_t *pixels, uint8_t *label, char *err, size_t errlen) {
  char *p = line;
  for (int field = 0; field <= DIGITS_PIXELS; field++) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    const int last = field == DIGITS_PIXELS;
    const long max = last ? DIGITS_CLASSES - 1 : DIGITS_MAX_VALUE;
    if (end == p || errno) {
      snprintf(err, errlen, "field %d is not a whole number", field + 1);
      return -1;
    }
    if (v < 0 || v > max) {
      snprintf(err, errlen, "field %d is %ld, outside 0..%ld (%s)", field + 1, v, max, last ? "a label" : "a pixel");
      return -1;
    }
    if (last) *label = (uint8_t)v;
    else pixels[field] = (uint8_t)v;
    while (*end == ' ' || *end == '\t') end++;
    if (!last) {
      if (*end != ',') {
        snprintf(err, errlen, "%d fields, expected %d (64 pixels then the label)", field + 1, DIGITS_PIXELS + 1);
        return -1;
      }
      p = end + 1;
    } else if (*end && *end != '\n' && *end != '\r') {
      snprintf(err, errlen, "more than %d fields (64 pixels then the label)", DIGITS_PIXELS + 1);
      return -1;
    }
  }
  return 0;
}

/* Reads the digits csv through zlib (which reads plain files as they are). Prints why on failure. */
static int digits_load(const char *path, digits *out) {
  memset(out, 0, sizeof *out);
  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz) {
    int e = errno;
    fprintf(stderr, "weft mlp: cannot open the digits data set '%s': %s\n", path,
            e ? strerror(e) : "out of memory");
    if (e == ENOENT && strcmp(path, DIGITS_PATH) == 0)
      fprintf(stderr, "It comes with scikit-learn: install Debian's python3-sklearn (apt-get install "
                      "python3-sklearn), or point --data at a copy of digits.csv.gz.\n");
    else if (e == ENOENT)
      fprintf(stderr, "scikit-learn ships it as sklearn/datasets/data/digits.csv.gz (Debian: python3-sklearn).\n");
    return -1;
  }
  size_t cap = 0;
  char line[1024], err[160];
  long lineno = 0;
  int rc = 0, bad_row = 0;
  while (gzgets(gz, line, sizeof line)) {
    lineno++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n' && !gzeof(gz)) {
      fprintf(stderr, "weft mlp: %s:%ld: line longer than %zu bytes: not the digits csv\n", path, lineno,
              sizeof line - 2);
      rc = -1;
      break;
    }
    if (strspn(line, " \t\r\n") == len) continue; /* a blank line, such as a trailing one */
    if (out->rows == DIGITS_MAX_ROWS) {
      fprintf(stderr, "weft mlp: %s: more than %d rows: not the digits csv\n", path, DIGITS_MAX_ROWS);
      rc = -1;
      break;
    }
    if (out->rows == cap) {
      size_t ncap = cap ? cap * 2 : 2048;
      uint8_t *px = realloc(out->pixels, ncap * DIGITS_PIXELS);
      if (px) out->pixels = px;
      uint8_t *lb = px ? realloc(out->labels, ncap) : NULL;
      if (!lb) {
        fprintf(stderr, "weft mlp: out of memory reading %s\n", path);
        rc = -1;
        break;
      }
      out->labels = lb;
      cap = ncap;
    }
    if (parse_row(line, out->pixels + out->rows * DIGITS_PIXELS, out->labels + out->rows, err, sizeof err) != 0) {
      bad_row = 1;
      rc = -1;
      break;
    }
    out->rows++;
  }
  int zerr = Z_OK;
  const char *zmsg = gzerror(gz, &zerr);
  if ((rc == 0 || bad_row) && zerr != Z_OK && zerr != Z_STREAM_END) {
    /* a truncated or corrupt gzip stream shows here, and its last line, cut short, as a bad row: the
     * stream is the cause worth naming */
    if (zerr == Z_ERRNO) fprintf(stderr, "weft mlp: cannot read %s: %s\n", path, strerror(errno));
    else fprintf(stderr, "weft mlp: cannot read the digits data set: %s\n", zmsg); /* zlib names the file */
    rc = -1;
  } else if (bad_row) {
    fprintf(stderr, "weft mlp: %s:%ld: %s\n", path, lineno, err);
  }
  gzclose(gz);
  if (rc == 0 && out->rows < MIN_SAMPLES) {
    fprintf(stderr, "weft mlp: %s holds %zu rows; training needs at least %d\n", path, out->rows, MIN_SAMPLES);
    rc = -1;
  }
  if (rc != 0) digits_free(out);
  return rc;
}

/* -------------------------------------------------------------------------------------------- rng */

/* xorshift64*, seeded through splitmix64 so that small seeds (0 included) give well-mixed states. One
 * stream per purpose, so that changing the epoch count does not change the initial weights. */
typedef struct mlp_rng {
  uint64_t s;
} mlp_rng;

enum { STREAM_SPLIT = 1, STREAM_INIT = 2, STREAM_SHUFFLE = 3 };

static void rng_seed(mlp_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t z = seed + stream * 0x9e3779b97f4a7c15ull + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  r->s = z ? z : 1; /* xorshift never leaves zero */
}

static uint64_t rng_next(mlp_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n) by multiply-shift: no division, bias below 2^-32 for the sizes used here. */
static uint32_t rng_below(mlp_rng *r, uint32_t n) { return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32); }

/* Uniform in [0, 1) on a 2^-24 grid: every value is an exact float. */
static float rng_unit(mlp_rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

static void shuffle(mlp_rng *r, uint32_t *v, size_t n) {
  for (size_t i = n; i > 1; i--) {
    uint32_t j = rng_below(r, (uint32_t)i);
    uint32_t t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

/* He-uniform: U(-sqrt(6/fan_in), +sqrt(6/fan_in)); sqrt is correctly rounded, so the bits are the same on
 * every machine (a normal draw would need libm's log and cos, which are not). */
static void he_uniform(mlp_rng *r, float *w, size_t n, int fan_in) {
  const float limit = sqrtf(6.0f / (float)fan_in);
  for (size_t i = 0; i < n; i++) {
    float u = rng_unit(r);
    w[i] = (u + u - 1.0f) * limit;
  }
}

/* ------------------------------------------------------------------------------------------ model */

/* The tensors of one batch size: a training step's (or the held-out pass's) activations and gradients. */
typedef struct mlp_batch {
  int64_t rows;
  weft_tensor *x, *t, *hpre, *h, *z, *loss, *dz, *dh;
  float *xh, *th, *zh; /* host staging: inputs, one-hot targets, logits read back */
} mlp_batch;

/* A layer's share of the work in pipeline placement: where it ran and what it cost the caller. */
typedef struct layer_trace {
  int lane;
  unsigned long long ops;
  double seconds; /* wall time of its op calls on the caller's thread */
} layer_trace;

typedef struct mlp {
  weft_fabric *f;
  const mlp_opts *o;
  int *lanes_ok;   /* lanes that honour the contract: the ones placement may pin to */
  size_t nlanes_ok;
  int layer;       /* the layer the next ops belong to (0: 64->H, 1: H->10) */
  layer_trace trace[2];
  weft_tensor *w1, *b1, *w2, *b2;     /* [64,H], [H], [H,10], [10] */
  weft_tensor *dw1, *db1, *dw2, *db2; /* their gradients */
  mlp_batch full, rest, eval;         /* training steps of --batch rows, the epoch's last short step, held out */
  size_t nlanes;
  unsigned long long next_op; /* round-robin: the lane of the next op, counted without bound */
  const char *failed_op;      /* the op that failed, for the message */
  int rank, ranks;            /* --mpi: this rank's share of each batch; 0 and 1 otherwise */
  char why[1024];             /* a failed step's message, kept past the scope's end */
} mlp;

/* Rank r's rows of a batch of `rows`: [lo, hi), the ranks' shares in rank order. */
static void share_of(const mlp *m, int64_t rows, int64_t *lo, int64_t *hi) {
  *lo = rows * m->rank / m->ranks;
  *hi = rows * (m->rank + 1) / m->ranks;
}

static const char *place_name(const mlp_opts *o) {
  return o->round_robin ? "round-robin" : o->layers_rr ? "layers-rr" : o->layers ? "layers" : "auto";
}

/* The options of the next op: routed, pinned to the next lane in turn, or pinned to its layer's lane. */
static weft_op_desc next_desc(mlp *m, const char *what) {
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.contract = m->o->contract;
  if (m->o->round_robin) d.lane = m->lanes_ok[m->next_op++ % m->nlanes_ok];
  else if (m->o->layers) d.lane = m->trace[m->layer].lane;
  m->failed_op = what;
  return d;
}

static weft_status tensor2(weft_fabric *f, int64_t r, int64_t c, const float *data, weft_tensor **out) {
  const int64_t dims[2] = {r, c};
  return weft_tensor_create(f, 2, dims, data, out);
}

static weft_status tensor1(weft_fabric *f, int64_t n, const float *data, weft_tensor **out) {
  return weft_tensor_create(f, 1, &n, data, out);
}

static void batch_free(mlp_batch *b) {
  weft_tensor *ts[] = {b->x, b->t, b->hpre, b->h, b->z, b->loss, b->dz, b->dh};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) weft_tensor_destroy(ts[i]);
  free(b->xh);
  free(b->th);
  free(b->zh);
  memset(b, 0, sizeof *b);
}

static weft_status batch_init(weft_fabric *f, mlp_batch *b, int64_t rows, int hidden) {
  memset(b, 0, sizeof *b);
  b->rows = rows;
  b->xh = malloc((size_t)rows * DIGITS_PIXELS * sizeof(float));
  b->th = calloc((size_t)rows * DIGITS_CLASSES, sizeof(float));
  b->zh = malloc((size_t)rows * DIGITS_CLASSES * sizeof(float));
  if (!b->xh || !b->th || !b->zh) return WEFT_ERR_OUT_OF_MEMORY;
  weft_status st;
  if ((st = tensor2(f, rows, DIGITS_PIXELS, NULL, &b->x)) || (st = tensor2(f, rows, DIGITS_CLASSES, NULL, &b->t)) ||
      (st = tensor2(f, rows, hidden, NULL, &b->hpre)) || (st = tensor2(f, rows, hidden, NULL, &b->h)) ||
      (st = tensor2(f, rows, DIGITS_CLASSES, NULL, &b->z)) || (st = tensor1(f, 1, NULL, &b->loss)) ||
      (st = tensor2(f, rows, DIGITS_CLASSES, NULL, &b->dz)) || (st = tensor2(f, rows, hidden, NULL, &b->dh)))
    return st;
  return WEFT_OK;
}

static void mlp_free(mlp *m) {
  weft_tensor *ts[] = {m->w1, m->b1, m->w2, m->b2, m->dw1, m->db1, m->dw2, m->db2};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) weft_tensor_destroy(ts[i]);
  batch_free(&m->full);
  batch_free(&m->rest);
  batch_free(&m->eval);
}

/* Weights from the init stream; biases and gradients zero. */
static weft_status mlp_init(mlp *m) {
  const int h = m->o->hidden;
  float *w1 = malloc((size_t)DIGITS_PIXELS * (size_t)h * sizeof(float));
  float *w2 = malloc((size_t)h * DIGITS_CLASSES * sizeof(float));
  weft_status st = WEFT_ERR_OUT_OF_MEMORY;
  if (w1 && w2) {
    mlp_rng r;
    rng_seed(&r, m->o->seed, STREAM_INIT);
    he_uniform(&r, w1, (size_t)DIGITS_PIXELS * (size_t)h, DIGITS_PIXELS);
    he_uniform(&r, w2, (size_t)h * DIGITS_CLASSES, h);
    weft_fabric *f = m->f;
    if (!(st = tensor2(f, DIGITS_PIXELS, h, w1, &m->w1)) && !(st = tensor1(f, h, NULL, &m->b1)) &&
        !(st = tensor2(f, h, DIGITS_CLASSES, w2, &m->w2)) && !(st = tensor1(f, DIGITS_CLASSES, NULL, &m->b2)) &&
        !(st = tensor2(f, DIGITS_PIXELS, h, NULL, &m->dw1)) && !(st = tensor1(f, h, NULL, &m->db1)))
      if (!(st = tensor2(f, h, DIGITS_CLASSES, NULL, &m->dw2))) st = tensor1(f, DIGITS_CLASSES, NULL, &m->db2);
  }
  free(w1);
  free(w2);
  return st;
}

#define TRY(call, what)                                                                                            \
  do {                                                                                                             \
    weft_op_desc d_ = next_desc(m, what);                                                                          \
    double t0_ = weft_cli_now();                                                                                   \
    weft_status st_ = (call);                                                                                      \
    m->trace[m->layer].seconds += weft_cli_now() - t0_;                                                            \
    m->trace[m->layer].ops++;                                                                                      \
    if (st_ != WEFT_OK) return st_;                                                                                \
  } while (0)

/* hpre = x.W1 + b1; h = relu(hpre); z = h.W2 + b2. */
static weft_status forward(mlp *m, mlp_batch *b) {
  m->layer = 0;
  TRY(weft_op_matmul(m->f, &d_, b->x, 0, m->w1, 0, b->hpre), "matmul x.W1");
  TRY(weft_op_add(m->f, &d_, b->hpre, m->b1, b->hpre), "add b1");
  TRY(weft_op_relu(m->f, &d_, b->hpre, b->h), "relu");
  m->layer = 1;
  TRY(weft_op_matmul(m->f, &d_, b->h, 0, m->w2, 0, b->z), "matmul h.W2");
  TRY(weft_op_add(m->f, &d_, b->z, m->b2, b->z), "add b2");
  return WEFT_OK;
}

/* The backward pass of --mpi: this rank's rows of a batch of `rows`; each weight and bias gradient summed
 * over the whole batch across the ranks (weft_mpi_grad_*: chained under exact, so the bits of one process). */
static weft_status backward_mpi(mlp *m, mlp_batch *b, int64_t rows) {
  weft_fabric *f = m->f;
  weft_mpi_grad *g = NULL;
  weft_op_params sx = {{rows}, {0}}; /* the mean over the whole batch, not this rank's rows */
  weft_tensor *const sx_in[2] = {b->z, b->t}, *const sx_out[2] = {b->loss, b->dz};
  TRY(weft_op_run(f, &d_, WEFT_OP_SOFTMAX_XENT, sx_in, 2, sx_out, 2, &sx), "softmax_xent");
  m->failed_op = "starting the gradients' reduction";
  weft_status st = weft_mpi_grad_begin(f, m->o->contract, &g);
  if (st != WEFT_OK) return st;
#define GTRY(call, what)                                                                                           \
  if (st == WEFT_OK) {                                                                                             \
    weft_op_desc d_ = next_desc(m, what);                                                                          \
    st = (call);                                                                                                   \
  }
  GTRY(weft_mpi_grad_matmul(g, &d_, b->h, 1, b->dz, 0, m->dw2), "matmul h^T.dz (across the ranks)");
  GTRY(weft_mpi_grad_sum_rows(g, &d_, b->dz, m->db2), "sum_rows dz (across the ranks)");
  GTRY(weft_op_matmul(f, &d_, b->dz, 0, m->w2, 1, b->dh), "matmul dz.W2^T");
  m->layer = 0;
  GTRY(weft_op_relu_backward(f, &d_, b->dh, b->hpre, b->dh), "relu_backward");
  GTRY(weft_mpi_grad_matmul(g, &d_, b->x, 1, b->dh, 0, m->dw1), "matmul x^T.dh (across the ranks)");
  GTRY(weft_mpi_grad_sum_rows(g, &d_, b->dh, m->db1), "sum_rows dh (across the ranks)");
#undef GTRY
  weft_status end = weft_mpi_grad_end(g);
  if (st == WEFT_OK && end != WEFT_OK) st = end, m->failed_op = "combining the gradients across the ranks";
  return st;
}

/* One SGD step on the batch already written into b->x and b->t: the loss and the logits are left in b.
 * --mpi: b holds this rank's share of a batch of `rows`. */
static weft_status train_step(mlp *m, mlp_batch *b, int64_t rows) {
  weft_fabric *f = m->f;
  weft_status st = forward(m, b);
  if (st != WEFT_OK) return st;
  if (m->o->mpi) {
    if ((st = backward_mpi(m, b, rows)) != WEFT_OK) return st;
    m->layer = 0;
    goto update;
  }
  /* dz = (softmax(z) - t) / rows: the gradient of the batch's mean loss */
  TRY(weft_op_softmax_xent(f, &d_, b->z, b->t, b->loss, b->dz), "softmax_xent");
  TRY(weft_op_matmul(f, &d_, b->h, 1, b->dz, 0, m->dw2), "matmul h^T.dz");
  TRY(weft_op_sum_rows(f, &d_, b->dz, m->db2), "sum_rows dz");
  TRY(weft_op_matmul(f, &d_, b->dz, 0, m->w2, 1, b->dh), "matmul dz.W2^T");
  m->layer = 0;
  TRY(weft_op_relu_backward(f, &d_, b->dh, b->hpre, b->dh), "relu_backward");
  TRY(weft_op_matmul(f, &d_, b->x, 1, b->dh, 0, m->dw1), "matmul x^T.dh");
  TRY(weft_op_sum_rows(f, &d_, b->dh, m->db1), "sum_rows dh");
update:;
  const float step = -(float)m->o->lr;
  TRY(weft_op_axpy(f, &d_, step, m->dw1, m->w1), "axpy W1");
  TRY(weft_op_axpy(f, &d_, step, m->db1, m->b1), "axpy b1");
  m->layer = 1;
  TRY(weft_op_axpy(f, &d_, step, m->dw2, m->w2), "axpy W2");
  TRY(weft_op_axpy(f, &d_, step, m->db2, m->b2), "axpy b2");
  return WEFT_OK;
}

/* Fills b's host inputs from the samples idx[0 .. b->rows): pixels / 16 (a power of two: exact) and one-hot
 * targets. */
static void stage(mlp_batch *b, const digits *d, const uint32_t *idx) {
  const float inv = 1.0f / (float)DIGITS_MAX_VALUE;
  memset(b->th, 0, (size_t)b->rows * DIGITS_CLASSES * sizeof(float));
  for (int64_t i = 0; i < b->rows; i++) {
    const uint8_t *px = d->pixels + (size_t)idx[i] * DIGITS_PIXELS;
    float *xr = b->xh + (size_t)i * DIGITS_PIXELS;
    for (int j = 0; j < DIGITS_PIXELS; j++) xr[j] = (float)px[j] * inv;
    b->th[(size_t)i * DIGITS_CLASSES + d->labels[idx[i]]] = 1.0f;
  }
}

/* Correct predictions among b's logits: argmax, ties to the lowest class. */
static size_t count_correct(const mlp_batch *b, const digits *d, const uint32_t *idx) {
  size_t correct = 0;
  for (int64_t i = 0; i < b->rows; i++) {
    const float *z = b->zh + (size_t)i * DIGITS_CLASSES;
    int best = 0;
    for (int j = 1; j < DIGITS_CLASSES; j++)
      if (z[j] > z[best]) best = j;
    correct += best == d->labels[idx[i]];
  }
  return correct;
}

/* FNV-1a over the bits of every weight and bias (W1, b1, W2, b2 in that order, little-endian, NaNs as one
 * pattern): equal fingerprints mean, beyond reasonable doubt, equal weights. */
static weft_status fingerprint(mlp *m, uint64_t *out) {
  weft_tensor *ts[] = {m->w1, m->b1, m->w2, m->b2};
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
    size_t n = weft_tensor_numel(ts[t]);
    float *v = malloc(n * sizeof *v);
    if (!v) return WEFT_ERR_OUT_OF_MEMORY;
    weft_status st = weft_tensor_read(ts[t], v, n);
    if (st != WEFT_OK) {
      free(v);
      return st;
    }
    for (size_t i = 0; i < n; i++) {
      uint32_t bits;
      memcpy(&bits, &v[i], sizeof bits);
      if (v[i] != v[i]) bits = 0x7fc00000u;
      for (int k = 0; k < 4; k++) h = (h ^ ((bits >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
    }
    free(v);
  }
  *out = h;
  return WEFT_OK;
}

/* ------------------------------------------------------------------------------------------ report */

/* "1.23 ms" style: seconds in the unit that keeps three to four digits. */
static const char *fmt_time(double s, char *buf, size_t len) {
  if (s == 0) snprintf(buf, len, "0");
  else if (s < 1e-3) snprintf(buf, len, "%.1f us", s * 1e6);
  else if (s < 1) snprintf(buf, len, "%.2f ms", s * 1e3);
  else snprintf(buf, len, "%.3f s", s);
  return buf;
}

typedef struct epoch_result {
  double loss, train_acc, heldout_acc, seconds, eval_seconds;
} epoch_result;

static const char *op_short(int kind) {
  return kind == WEFT_OP_RELU_BACKWARD ? "relu_bw" : kind == WEFT_OP_SOFTMAX_XENT ? "xent" : weft_op_kind_str((weft_op_kind)kind);
}

static void print_lane_table(weft_fabric *f, const weft_lane_stats *stats, size_t nlanes, double train_s) {
  int used[WEFT_OP_COUNT] = {0};
  double total = 0;
  int any_predicted = 0, any_measured = 0;
  for (size_t i = 0; i < nlanes; i++) {
    for (int k = 0; k < WEFT_OP_COUNT; k++) used[k] |= stats[i].ops[k] != 0;
    total += stats[i].seconds;
    uint64_t n = 0;
    for (int k = 0; k < WEFT_OP_COUNT; k++) n += stats[i].ops[k];
    if (n) {
      if (stats[i].seconds_measured) any_measured = 1;
      else any_predicted = 1;
    }
  }
  printf("\nwhere the ops ran (training and held-out passes):\n  %-12s", "lane");
  for (int k = 0; k < WEFT_OP_COUNT; k++)
    if (used[k]) printf(" %8s", op_short(k));
  printf(" %9s %10s %-10s %6s\n", "ops", "op time", "", "share");
  for (size_t i = 0; i < nlanes; i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    uint64_t n = 0;
    printf("  %-12s", li.name);
    for (int k = 0; k < WEFT_OP_COUNT; k++) {
      n += stats[i].ops[k];
      if (used[k]) printf(" %8llu", (unsigned long long)stats[i].ops[k]);
    }
    char b[32];
    printf(" %9llu %10s %-10s %5.1f%%\n", (unsigned long long)n, fmt_time(stats[i].seconds, b, sizeof b),
           stats[i].seconds_measured ? "measured" : "predicted", total > 0 ? 100.0 * stats[i].seconds / total : 0.0);
  }
  char b[32];
  printf("  op time: measured around each op on lanes that finish it before returning; the cost model's\n"
         "  prediction on lanes that queue work. Share: of the lanes' op times. Training and held-out passes\n"
         "  took %s of wall time in all (ops, transfers, reading the logits back, host work).\n",
         fmt_time(train_s, b, sizeof b));
  if (any_measured && any_predicted) printf("  (the shares mix measured and predicted times)\n");
}

/* ------------------------------------------------------------------------------------------- run */

static int parse_lr(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > 1e6)
    return weft_cli_usage_error("mlp", "--lr wants a learning rate above 0 and at most 1e6 (such as 0.1), got '%s'", s);
  *out = v;
  return WEFT_CLI_OK;
}

static int parse_opts(int argc, char **argv, mlp_opts *o) {
  static const struct option longopts[] = {
      {"data", required_argument, NULL, 'd'},     {"hidden", required_argument, NULL, 'H'},
      {"epochs", required_argument, NULL, 'e'},   {"batch", required_argument, NULL, 'b'},
      {"lr", required_argument, NULL, 'r'},       {"seed", required_argument, NULL, 's'},
      {"limit", required_argument, NULL, 'n'},    {"contract", required_argument, NULL, 'c'},
      {"lanes", required_argument, NULL, 'l'},    {"place", required_argument, NULL, 'p'},
      {"cpu-threads", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
      {"mpi", no_argument, NULL, 'M'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
  };
  memset(o, 0, sizeof *o);
  o->data = DIGITS_PATH;
  o->hidden = DEFAULT_HIDDEN, o->epochs = DEFAULT_EPOCHS, o->batch = DEFAULT_BATCH;
  o->lr = DEFAULT_LR, o->seed = DEFAULT_SEED;
  int c;
  long v;
  optind = 0;
  opterr = 0;
  if (weft_cli_check_long_options("mlp", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = WEFT_CLI_OK;
    switch (c) {
    case 'd': o->data = optarg; break;
    case 'H':
      if (!(rc = weft_cli_parse_long("mlp", "--hidden", optarg, 1, 65536, &v))) o->hidden = (int)v;
      break;
    case 'e':
      if (!(rc = weft_cli_parse_long("mlp", "--epochs", optarg, 1, 100000, &v))) o->epochs = (int)v;
      break;
    case 'b':
      if (!(rc = weft_cli_parse_long("mlp", "--batch", optarg, 1, DIGITS_MAX_ROWS, &v))) o->batch = (int)v;
      break;
    case 'r': rc = parse_lr(optarg, &o->lr); break;
    case 's':
      if (!(rc = weft_cli_parse_long("mlp", "--seed", optarg, 0, 2147483647L, &v))) o->seed = (uint64_t)v;
      break;
    case 'n': rc = weft_cli_parse_long("mlp", "--limit", optarg, MIN_SAMPLES, DIGITS_MAX_ROWS, &o->limit); break;
    case 'c':
      rc = weft_cli_parse_contract("mlp", "--contract", optarg, &o->contract);
      if (!rc && o->contract != WEFT_CONTRACT_EXACT && o->contract != WEFT_CONTRACT_FP32)
        rc = weft_cli_usage_error("mlp", "--contract wants exact or fp32 (tensor-unit contracts are for matmul "
                                         "only), got '%s'",
                                  optarg);
      break;
    case 'l': rc = weft_cli_parse_lanes("mlp", "--lanes", optarg, &o->lanes); break;
    case 'p':
      o->round_robin = o->layers = o->layers_rr = 0;
      if (strcmp(optarg, "auto") == 0) {
      } else if (strcmp(optarg, "round-robin") == 0) o->round_robin = 1;
      else if (strcmp(optarg, "layers") == 0) o->layers = 1;
      else if (strcmp(optarg, "layers-rr") == 0) o->layers = o->layers_rr = 1;
      else rc = weft_cli_usage_error("mlp", "--place wants auto, round-robin, layers or layers-rr, got '%s'", optarg);
      break;
    case 't':
      if (!(rc = weft_cli_parse_long("mlp", "--cpu-threads", optarg, 1, 4096, &v))) o->cpu_threads = (int)v;
      break;
    case 'j': o->json = 1; break;
    case 'M': o->mpi = 1; break;
    case 'h': weft_cli_mlp_help(stdout); return -1;
    default: return weft_cli_option_error("mlp", c, argv);
    }
    if (rc) return rc;
  }
  if (optind < argc) return weft_cli_usage_error("mlp", "takes no arguments, got '%s'", argv[optind]);
  if (o->mpi && !weft_mpi_built())
    return weft_cli_usage_error("mlp", "--mpi: %s", weft_mpi_last_error());
  if (o->mpi && weft_mpi_size() == 1 && !weft_mpi_launched())
    return weft_cli_usage_error("mlp", "--mpi trains across the ranks of an MPI job: run it under mpirun "
                                       "(mpirun -np 4 weft mlp --mpi)");
  if (o->mpi && (o->round_robin || o->layers))
    return weft_cli_usage_error("mlp", "--mpi goes with --place auto (each rank routes its own ops)");
  return WEFT_CLI_OK;
}

static cJSON *run_json(const mlp_opts *o, weft_fabric *f, size_t n, size_t ntrain, size_t ntest,
                       const epoch_result *ep, int epochs, uint64_t fp, const weft_lane_stats *stats, double train_s) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "data", o->data);
  cJSON_AddNumberToObject(root, "samples", (double)n);
  cJSON_AddNumberToObject(root, "train", (double)ntrain);
  cJSON_AddNumberToObject(root, "heldout", (double)ntest);
  cJSON_AddNumberToObject(root, "hidden", o->hidden);
  cJSON_AddNumberToObject(root, "batch", o->batch);
  cJSON_AddNumberToObject(root, "lr", o->lr);
  cJSON_AddNumberToObject(root, "seed", (double)o->seed);
  cJSON_AddStringToObject(root, "contract", weft_contract_str(o->contract));
  cJSON_AddStringToObject(root, "place", place_name(o));
  cJSON *arr = cJSON_AddArrayToObject(root, "epochs");
  for (int e = 0; e < epochs; e++) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, j);
    cJSON_AddNumberToObject(j, "epoch", e + 1);
    cJSON_AddNumberToObject(j, "loss", ep[e].loss);
    cJSON_AddNumberToObject(j, "train_accuracy", ep[e].train_acc);
    cJSON_AddNumberToObject(j, "heldout_accuracy", ep[e].heldout_acc);
    cJSON_AddNumberToObject(j, "seconds", ep[e].seconds);
    cJSON_AddNumberToObject(j, "eval_seconds", ep[e].eval_seconds);
  }
  cJSON_AddNumberToObject(root, "heldout_accuracy", epochs ? ep[epochs - 1].heldout_acc : 0.0);
  cJSON_AddNumberToObject(root, "seconds", train_s);
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fp);
  cJSON_AddStringToObject(root, "fingerprint", hex);
  double total = 0;
  size_t nlanes = weft_fabric_lane_count(f);
  for (size_t i = 0; i < nlanes; i++) total += stats[i].seconds;
  cJSON *lanes = cJSON_AddArrayToObject(root, "lanes");
  for (size_t i = 0; i < nlanes; i++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, i, &li);
    cJSON *l = cJSON_CreateObject();
    cJSON_AddItemToArray(lanes, l);
    cJSON_AddStringToObject(l, "lane", li.name);
    cJSON *ops = cJSON_AddObjectToObject(l, "ops");
    for (int k = 0; k < WEFT_OP_COUNT; k++)
      if (stats[i].ops[k]) cJSON_AddNumberToObject(ops, weft_op_kind_str((weft_op_kind)k), (double)stats[i].ops[k]);
    cJSON_AddNumberToObject(l, "seconds", stats[i].seconds);
    cJSON_AddBoolToObject(l, "seconds_measured", stats[i].seconds_measured);
    cJSON_AddNumberToObject(l, "share", total > 0 ? stats[i].seconds / total : 0.0);
    cJSON_AddNumberToObject(l, "bytes_up", (double)stats[i].bytes_up);
    cJSON_AddNumberToObject(l, "bytes_down", (double)stats[i].bytes_down);
  }
  return root;
}

/* Whether a lane's cost lines were measured just now rather than read from the cache: did routing calibrate? */
static int calibrated_now(weft_fabric *f) {
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_cost_line l;
    if (weft_fabric_cost_model(f, i, WEFT_COST_ELEMENTWISE, WEFT_CONTRACT_EXACT, &l) == WEFT_OK &&
        l.source == WEFT_COST_MEASURED)
      return 1;
  }
  return 0;
}

/* Routing measures the lanes that have no cost model the first time it has to choose between lanes (a
 * query such as weft_route_explain never does): one routed matmul of this shape, on scratch tensors, makes
 * that happen now. */
static void measure_models(weft_fabric *f, weft_contract contract, int64_t m, int64_t k, int64_t n) {
  const int64_t da[2] = {m, k}, db[2] = {k, n}, dc[2] = {m, n};
  weft_tensor *a = NULL, *b = NULL, *c = NULL;
  weft_op_desc d = WEFT_OP_DESC_INIT;
  d.contract = contract;
  if (weft_tensor_create(f, 2, da, NULL, &a) == WEFT_OK && weft_tensor_create(f, 2, db, NULL, &b) == WEFT_OK &&
      weft_tensor_create(f, 2, dc, NULL, &c) == WEFT_OK)
    weft_op_matmul(f, &d, a, 0, b, 0, c); /* a failure shows again at the first real op */
  weft_fabric_sync(f);
  weft_tensor_destroy(a), weft_tensor_destroy(b), weft_tensor_destroy(c);
}

/* Pipeline placement: a lane per layer. layers-rr: layer i on the i-th lane that honours the contract.
 * layers: the lane whose predicted cost for the layer's step work is least - three matmuls of its shape
 * (forward and the two gradients) and its elementwise ops - with inputs from the host, as the router sees
 * them (lanes without a model are calibrated first, once). */
static void place_layers(mlp *m) {
  const int64_t in[2] = {DIGITS_PIXELS, m->o->hidden}, out[2] = {m->o->hidden, DIGITS_CLASSES};
  if (!m->o->layers_rr && m->nlanes_ok > 1) measure_models(m->f, m->o->contract, m->o->batch, in[0], out[0]);
  for (int l = 0; l < 2; l++) {
    if (m->o->layers_rr) {
      m->trace[l].lane = m->lanes_ok[(size_t)l % m->nlanes_ok];
      continue;
    }
    double best = -1;
    m->trace[l].lane = m->lanes_ok[0];
    for (size_t j = 0; j < m->nlanes_ok; j++) {
      int lane = m->lanes_ok[j];
      weft_route_query q;
      memset(&q, 0, sizeof q);
      q.op = WEFT_OP_MATMUL, q.contract = m->o->contract, q.batch = 1, q.m = m->o->batch, q.k = in[l], q.n = out[l];
      weft_route_explanation e;
      if (weft_route_explain(m->f, &q, &e) != WEFT_OK || !e.lanes[lane].eligible) continue;
      double cost = 3 * e.lanes[lane].total;
      memset(&q, 0, sizeof q);
      q.op = WEFT_OP_ADD, q.contract = m->o->contract, q.rows = m->o->batch, q.cols = out[l];
      if (weft_route_explain(m->f, &q, &e) == WEFT_OK && e.lanes[lane].eligible) cost += 4 * e.lanes[lane].total;
      if (best < 0 || cost < best) best = cost, m->trace[l].lane = lane;
    }
  }
}

static void print_trace(weft_fabric *f, const mlp *m) {
  static const char *const names[2] = {"layer 1 (64 -> hidden: matmul, add, relu; grads; update)",
                                       "layer 2 (hidden -> 10: matmul, add, softmax_xent; grads; update)"};
  printf("\npipeline trace (each layer pinned to one lane; time: the op calls on the caller's thread - on a\n"
         "lane that queues work this is the enqueueing, its device time lands where results are read):\n");
  for (int l = 0; l < 2; l++) {
    weft_lane_info li;
    weft_fabric_lane_info(f, (size_t)m->trace[l].lane, &li);
    char b[32];
    printf("  %-66s on %-10s %8llu ops  %s\n", names[l], li.name, m->trace[l].ops,
           fmt_time(m->trace[l].seconds, b, sizeof b));
  }
}

int weft_cli_mlp(int argc, char **argv) {
  mlp_opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc < 0) return WEFT_CLI_OK; /* --help */
  if (rc) return rc;

  digits d;
  if (digits_load(o.data, &d) != 0) return WEFT_CLI_FAILED;
  uint32_t *perm = malloc(d.rows * sizeof *perm);
  epoch_result *ep = calloc((size_t)o.epochs, sizeof *ep);
  weft_lane_stats *stats = NULL;
  mlp m;
  memset(&m, 0, sizeof m);
  m.o = &o;
  rc = WEFT_CLI_FAILED;
  if (!perm || !ep) {
    fprintf(stderr, "weft mlp: out of memory\n");
    goto done;
  }
  for (size_t i = 0; i < d.rows; i++) perm[i] = (uint32_t)i;
  mlp_rng split_rng, shuffle_rng;
  rng_seed(&split_rng, o.seed, STREAM_SPLIT);
  rng_seed(&shuffle_rng, o.seed, STREAM_SHUFFLE);
  shuffle(&split_rng, perm, d.rows);
  const size_t n = o.limit > 0 && (size_t)o.limit < d.rows ? (size_t)o.limit : d.rows;
  const size_t ntest = n / 5, ntrain = n - ntest;
  uint32_t *train_idx = perm, *test_idx = perm + ntrain;

  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = o.lanes;
  desc.cpu_threads = o.cpu_threads;
  m.f = weft_cli_open("mlp", &desc);
  if (!m.f) goto done;
  weft_fabric *f = m.f;
  m.nlanes = weft_fabric_lane_count(f);
  stats = calloc(m.nlanes, sizeof *stats);
  m.lanes_ok = calloc(m.nlanes, sizeof *m.lanes_ok);
  if (m.lanes_ok)
    for (size_t i = 0; i < m.nlanes; i++) {
      weft_lane_info li;
      if (weft_fabric_lane_info(f, i, &li) == WEFT_OK && !li.failed && (li.contracts & WEFT_CONTRACT_BIT(o.contract)))
        m.lanes_ok[m.nlanes_ok++] = (int)i;
    }
  if (m.lanes_ok && m.nlanes_ok == 0) {
    fprintf(stderr, "weft mlp: no lane honours the %s contract (see 'weft devices')\n", weft_contract_str(o.contract));
    goto done;
  }
  if (o.layers && m.lanes_ok) place_layers(&m);
  if (!stats || !m.lanes_ok) {
    fprintf(stderr, "weft mlp: out of memory\n");
    goto done;
  }
  const int64_t rest_rows = (int64_t)(ntrain % (size_t)o.batch);
  m.rank = o.mpi ? weft_mpi_rank() : 0;
  m.ranks = o.mpi ? weft_mpi_size() : 1;
  if (o.mpi && (o.batch < m.ranks || (rest_rows && rest_rows < m.ranks))) {
    fprintf(stderr, "weft mlp: --mpi over %d ranks needs at least %d rows in every batch: --batch %d leaves a last "
            "batch of %lld of the %zu training rows (change --batch or --limit)\n", m.ranks, m.ranks, o.batch,
            (long long)rest_rows, ntrain);
    rc = WEFT_CLI_USAGE;
    goto done;
  }
  int64_t lo, hi, rest_lo, rest_hi;
  share_of(&m, o.batch, &lo, &hi);
  share_of(&m, rest_rows, &rest_lo, &rest_hi);
  weft_status st = mlp_init(&m);
  if (st == WEFT_OK && ntrain >= (size_t)o.batch) st = batch_init(f, &m.full, hi - lo, o.hidden);
  if (st == WEFT_OK && rest_rows) st = batch_init(f, &m.rest, rest_hi - rest_lo, o.hidden);
  if (st == WEFT_OK) st = batch_init(f, &m.eval, (int64_t)ntest, o.hidden);
  if (st != WEFT_OK) {
    fprintf(stderr, "weft mlp: cannot set up the model: %s: %s\n", weft_status_str(st), weft_fabric_last_error(f));
    goto done;
  }
  /* the held-out inputs never change: stage them once */
  stage(&m.eval, &d, test_idx);
  if ((st = weft_tensor_write(m.eval.x, m.eval.xh, (size_t)ntest * DIGITS_PIXELS)) != WEFT_OK) {
    fprintf(stderr, "weft mlp: %s: %s\n", weft_status_str(st), weft_fabric_last_error(f));
    goto done;
  }

  if (!o.json) {
    printf("digits: %zu samples from %s; %zu to train on, %zu held out (seed %llu)\n", n, o.data, ntrain, ntest,
           (unsigned long long)o.seed);
    printf("model: %d-%d-%d relu MLP, batch %d, lr %g, %d epoch%s, contract %s; ops %s over", DIGITS_PIXELS, o.hidden,
           DIGITS_CLASSES, o.batch, o.lr, o.epochs, o.epochs == 1 ? "" : "s", weft_contract_str(o.contract),
           o.round_robin ? "pinned round-robin" : o.layers ? "pinned a lane per layer" : "routed");
    if (o.mpi)
      printf(" (rank 0 of %d data-parallel ranks, %s; the table below is rank 0's)", m.ranks,
             o.contract == WEFT_CONTRACT_EXACT ? "gradients chained across the ranks: the bits of one process"
                                               : "gradients added by MPI_Allreduce: not bit-stable across rank counts");
    for (size_t i = 0; i < m.nlanes; i++) {
      weft_lane_info li;
      weft_fabric_lane_info(f, i, &li);
      printf("%s %s", i ? "," : "", li.name);
    }
    printf("\n");
    if (o.layers)
      for (int l = 0; l < 2; l++) {
        weft_lane_info li;
        weft_fabric_lane_info(f, (size_t)m.trace[l].lane, &li);
        printf("layer %d on %s (%s)\n", l + 1, li.name, o.layers_rr ? "round-robin" : "least predicted cost");
      }
  }
  /* Routing measures lanes that have no cost model the first time it has to choose: ask it once now, so
   * that calibration does not land in the first epoch's time. */
  if (!o.round_robin && !o.layers && m.nlanes > 1) {
    double t0 = weft_cli_now();
    measure_models(f, o.contract, o.batch, DIGITS_PIXELS, o.hidden);
    if (!o.json && calibrated_now(f))
      printf("calibrated the lanes' cost models in %.2f s (cached for the next run)\n", weft_cli_now() - t0);
  }
  weft_fabric_reset_stats(f);
  m.trace[0].ops = m.trace[1].ops = 0;
  m.trace[0].seconds = m.trace[1].seconds = 0;
  if (!o.json) printf("\n");

  double train_s = 0;
  for (int e = 0; e < o.epochs; e++) {
    double t0 = weft_cli_now(), loss_sum = 0;
    size_t correct = 0;
    shuffle(&shuffle_rng, train_idx, ntrain);
    for (size_t at = 0; at < ntrain;) {
      const int64_t rows = ntrain - at >= (size_t)o.batch ? o.batch : rest_rows;
      mlp_batch *b = rows == o.batch ? &m.full : &m.rest;
      const size_t mine = at + (size_t)(rows == o.batch ? lo : rest_lo); /* --mpi: this rank's share */
      stage(b, &d, train_idx + mine);
      m.failed_op = "writing the batch";
      if ((st = weft_tensor_write(b->x, b->xh, (size_t)b->rows * DIGITS_PIXELS)) != WEFT_OK ||
          (st = weft_tensor_write(b->t, b->th, (size_t)b->rows * DIGITS_CLASSES)) != WEFT_OK)
        goto op_failed;
      if ((st = weft_scope_begin(f)) != WEFT_OK) goto op_failed;
      m.next_op++; /* round-robin: a step has as many ops as lanes could divide, so shift by one each step */
      st = train_step(&m, b, rows);
      if (st != WEFT_OK) snprintf(m.why, sizeof m.why, "%s", weft_fabric_last_error(f));
      weft_status st_end = weft_scope_end(f);
      if (st == WEFT_OK && st_end != WEFT_OK) st = st_end, m.failed_op = "ending the step's scope";
      if (st != WEFT_OK) goto op_failed;
      float loss;
      m.failed_op = "reading the loss and logits";
      if ((st = weft_tensor_read(b->loss, &loss, 1)) != WEFT_OK ||
          (st = weft_tensor_read(b->z, b->zh, (size_t)b->rows * DIGITS_CLASSES)) != WEFT_OK)
        goto op_failed;
      loss_sum += (double)loss * (double)rows; /* --mpi: this rank's share of the batch's mean */
      correct += count_correct(b, &d, train_idx + mine);
      at += (size_t)rows;
    }
    if (o.mpi) {
      /* the ranks' shares, added in rank order (a report: the weights do not depend on it) */
      double v[2] = {loss_sum, (double)correct};
      m.failed_op = "adding the ranks' losses";
      if ((st = weft_mpi_sum_ordered(v, 2)) != WEFT_OK) {
        fprintf(stderr, "weft mlp: %s: %s\n", m.failed_op, weft_mpi_last_error());
        goto done;
      }
      loss_sum = v[0], correct = (size_t)v[1];
    }
    double t1 = weft_cli_now();
    if ((st = weft_scope_begin(f)) != WEFT_OK) goto op_failed;
    st = forward(&m, &m.eval);
    weft_status st_end = weft_scope_end(f);
    if (st == WEFT_OK && st_end != WEFT_OK) st = st_end, m.failed_op = "ending the held-out pass's scope";
    if (st != WEFT_OK) goto op_failed;
    m.failed_op = "reading the held-out logits";
    if ((st = weft_tensor_read(m.eval.z, m.eval.zh, (size_t)ntest * DIGITS_CLASSES)) != WEFT_OK) goto op_failed;
    double t2 = weft_cli_now();
    ep[e].loss = loss_sum / (double)ntrain;
    ep[e].train_acc = (double)correct / (double)ntrain;
    ep[e].heldout_acc = (double)count_correct(&m.eval, &d, test_idx) / (double)ntest;
    ep[e].seconds = t2 - t0;
    ep[e].eval_seconds = t2 - t1;
    train_s += t2 - t0;
    if (!o.json) {
      char b[32];
      printf("epoch %*d/%d  loss %.4f  train %6.2f%%  held-out %6.2f%%  %s\n", o.epochs >= 100 ? 3 : 2, e + 1,
             o.epochs, ep[e].loss, 100.0 * ep[e].train_acc, 100.0 * ep[e].heldout_acc,
             fmt_time(ep[e].seconds, b, sizeof b));
      fflush(stdout);
    }
  }

  /* the counters before the fingerprint's reads, which are not training */
  for (size_t i = 0; i < m.nlanes; i++) weft_fabric_lane_stats(f, i, &stats[i]);
  uint64_t fp = 0;
  m.failed_op = "reading the weights back";
  if ((st = fingerprint(&m, &fp)) != WEFT_OK) goto op_failed;
  if (o.json) {
    rc = weft_cli_print_json(run_json(&o, f, n, ntrain, ntest, ep, o.epochs, fp, stats, train_s));
  } else {
    print_lane_table(f, stats, m.nlanes, train_s);
    if (o.layers) print_trace(f, &m);
    char b[32];
    printf("\nheld-out accuracy %.2f%% (%zu of %zu digits), %s per epoch on average\n",
           100.0 * ep[o.epochs - 1].heldout_acc, (size_t)(ep[o.epochs - 1].heldout_acc * (double)ntest + 0.5), ntest,
           fmt_time(train_s / o.epochs, b, sizeof b));
    printf("weights fingerprint %016llx (FNV-1a over the bits of W1, b1, W2, b2)\n", (unsigned long long)fp);
    rc = WEFT_CLI_OK;
  }
  goto done;

op_failed:
  fprintf(stderr, "weft mlp: %s%s: %s: %s\n", o.mpi && m.ranks > 1 ? (m.rank ? "a rank other than 0: " : "rank 0: ") : "",
          m.failed_op ? m.failed_op : "training", weft_status_str(st), m.why[0] ? m.why : weft_fabric_last_error(f));
done:
  mlp_free(&m);
  free(m.lanes_ok);
  weft_fabric_close(m.f);
  free(stats);
  free(ep);
  free(perm);
  digits_free(&d);
  return rc;
}
