/* gpt.h - GPT-2 (after llm.c) on weft's public API: the model resident as weft tensors, its forward and
 * backward, AdamW with global-norm clipping, generation with a KV cache, and a versioned checkpoint file.
 *
 * Parameters travel as one contiguous host buffer of floats in llm.c's order and shapes (weights [out,in]):
 *   wte[V,C] wpe[maxT,C] ln1w[L,C] ln1b[L,C] qkvw[L,3C,C] qkvb[L,3C] attprojw[L,C,C] attprojb[L,C]
 *   ln2w[L,C] ln2b[L,C] fcw[L,4C,C] fcb[L,4C] fcprojw[L,C,4C] fcprojb[L,C] lnfw[C] lnfb[C]
 * so any loader (llm.c's .bin, safetensors) hands weights over with weft_gpt_create. */
#ifndef WEFT_GPT_H
#define WEFT_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct weft_gpt_config {
  int L;    /* layers */
  int C;    /* channels */
  int NH;   /* heads (divides C) */
  int V;    /* vocabulary */
  int maxT; /* context */
} weft_gpt_config;

/* Where the ops run. */
/* RR: round robin, op i (in the order the model issues them) on the i-th live lane, in turn, of those that
 * offer that op under its contract (a test of placement, not a fast one). */
enum { WEFT_GPT_PLACE_AUTO = 0, WEFT_GPT_PLACE_LAYERS = 1, WEFT_GPT_PLACE_PINNED = 2, WEFT_GPT_PLACE_RR = 3 };

typedef struct weft_gpt_opts {
  int place;              /* WEFT_GPT_PLACE_* */
  int lane;               /* PLACE_PINNED: the lane (ops it does not offer go to the router) */
  weft_contract contract; /* the matmuls'; the other ops run exact under exact and fp32 under the others */
} weft_gpt_opts;

typedef struct weft_gpt weft_gpt;

/* Floats the parameter buffer holds; 0 (and a message in err) for a config out of range. */
size_t weft_gpt_param_count(const weft_gpt_config *cfg);
/* Checks a config: 1..1024 layers, C a multiple of NH, sizes that fit; writes why not into err. */
int weft_gpt_config_ok(const weft_gpt_config *cfg, char *err, size_t errlen);
/* GPT-2's initialisation from a seed, on the host, bit-reproducible everywhere (no libm): weights
 * ~N(0, 0.02) (residual projections 0.02/sqrt(2L)), biases 0, layernorm gains 1. */
void weft_gpt_init_params(const weft_gpt_config *cfg, uint64_t seed, float *params);

/* Makes the model's tensors on `f` from `params` (count floats, which must be weft_gpt_param_count). */
weft_status weft_gpt_create(weft_fabric *f, const weft_gpt_config *cfg, const float *params, size_t count,
                            const weft_gpt_opts *opts, weft_gpt **out);
void weft_gpt_destroy(weft_gpt *g);
const char *weft_gpt_last_error(const weft_gpt *g);
const weft_gpt_config *weft_gpt_get_config(const weft_gpt *g);
/* Called after each op the model issues (not its tensor reads and writes): what the op is ("qkv matmul",
 * "attention", ...), its layer (L: the embedding, the head, the loss), its kind, and the lane it asked for
 * (WEFT_LANE_AUTO: the router chose; weft_route_last then explains the choice). NULL turns it off. */
typedef void (*weft_gpt_op_hook)(void *ctx, const char *what, int layer, weft_op_kind kind, int lane);
void weft_gpt_set_op_hook(weft_gpt *g, weft_gpt_op_hook hook, void *ctx);
/* The lane layer l runs on (-1 for the router); l = L: the embedding and the head. */
int weft_gpt_layer_lane(const weft_gpt *g, int l);

/* Mean cross-entropy of targets given tokens (both B*T int32, T <= maxT); forward only. */
weft_status weft_gpt_loss(weft_gpt *g, const int32_t *tok, const int32_t *tgt, int B, int T, float *out_loss);
/* One training step: forward, backward, global-norm clip to max_norm (<= 0: none), AdamW (beta 0.9, 0.95,
 * eps 1e-8, weight decay on the matrices and embeddings) at lr. The step counter advances. A NaN or infinite
 * lr or weight_decay, or a NaN max_norm, is WEFT_ERR_INVALID_ARGUMENT before any op. */
weft_status weft_gpt_train_step(weft_gpt *g, const int32_t *tok, const int32_t *tgt, int B, int T, float lr,
                                float weight_decay, float max_norm, float *out_loss, float *out_norm);
/* Data-parallel training across the ranks of an MPI job (weft_mpi_init(WEFT_MPI_DATA_PARALLEL)): each rank
 * calls weft_gpt_train_step with its share of every batch of `batch` sequences (rank r the sequences after
 * rank r-1's); the loss is the mean over the whole batch (out_loss: this rank's share of it) and every
 * gradient is summed over the whole batch across the ranks (weft_mpi_grad_*: under exact chained, so the
 * weights are those of one process bit for bit; under fp32 MPI_Allreduce). 0 turns it off. */
weft_status weft_gpt_set_data_parallel(weft_gpt *g, int batch);
/* Logits of the last position of tok[0..T-1] (batch 1) into out (V floats). */
weft_status weft_gpt_logits(weft_gpt *g, const int32_t *tok, int T, float *out);
/* Logits of every position: tok B*T int32, out B*T*V floats ([B,T,V], row-major). */
weft_status weft_gpt_logits_all(weft_gpt *g, const int32_t *tok, int B, int T, float *out);

/* Generation: prefill `prompt` (n >= 1) with batched ops, then decode `ntok` tokens one at a time with a KV
 * cache, each decode step recorded in one scope. temperature <= 0: greedy (a NaN or infinite one is
 * WEFT_ERR_INVALID_ARGUMENT); top_k <= 0: the whole vocabulary. *rng is the sampler's state (splitmix64), advanced. out gets ntok tokens. prompt + ntok must
 * fit in maxT. decode_seconds (may be NULL): the decode steps' time. */
weft_status weft_gpt_generate(weft_gpt *g, const int32_t *prompt, int n, int ntok, float temperature, int top_k,
                              uint64_t *rng, int32_t *out, double *decode_seconds);

/* Parameters (and AdamW moments) back to the host, in the layout above. */
weft_status weft_gpt_read_params(weft_gpt *g, float *params, size_t count);
weft_status weft_gpt_read_moments(weft_gpt *g, float *m, float *v, size_t count);
weft_status weft_gpt_write_moments(weft_gpt *g, const float *m, const float *v, size_t count);
int64_t weft_gpt_step(const weft_gpt *g);
void weft_gpt_set_step(weft_gpt *g, int64_t step);

/* FNV-1a 64 over the floats' bits. */
uint64_t weft_gpt_fingerprint(const float *p, size_t n);
/* splitmix64: the next number of the generator. */
uint64_t weft_gpt_rand(uint64_t *state);

/* Checkpoint: "WEFTGPT1" magic, u32 version, the config, the step, the data generator's state, the
 * parameters, AdamW's m and v, and an FNV-1a 64 checksum of everything before it (little-endian). */
#define WEFT_GPT_CKPT_VERSION 1
weft_status weft_gpt_checkpoint_save(weft_gpt *g, const char *path, uint64_t rng_state, char *err, size_t errlen);
/* Reads a checkpoint: *out_params, *out_m, *out_v malloc'ed (free them), each count floats. A missing,
 * truncated, corrupted or inconsistent file is WEFT_ERR_IO / WEFT_ERR_INVALID_ARGUMENT with err saying so. */
weft_status weft_gpt_checkpoint_load(const char *path, weft_gpt_config *cfg, int64_t *step, uint64_t *rng_state,
                          float **out_params, float **out_m, float **out_v, char *err, size_t errlen);

#endif
