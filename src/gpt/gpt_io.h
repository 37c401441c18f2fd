/* gpt_io.h - GPT-2 weights in the file formats people have: Hugging Face `model.safetensors` (the tensor
 * names of the `gpt2` repository) and llm.c's `gpt2_124M.bin`, read into one contiguous float buffer and
 * written back (the tests write small files of both formats themselves).
 *
 * The buffer holds the parameters in llm.c's order and shapes, weights as [out, in], for L layers, C
 * channels, V tokens, maxT positions:
 *   wte[V,C] wpe[maxT,C] ln1w[L,C] ln1b[L,C] qkvw[L,3C,C] qkvb[L,3C] attprojw[L,C,C] attprojb[L,C]
 *   ln2w[L,C] ln2b[L,C] fcw[L,4C,C] fcb[L,4C] fcprojw[L,C,4C] fcprojb[L,C] lnfw[C] lnfb[C]
 * (WEFT_GPT_NTENSORS tensors, WEFT_GPT_T_* name their index). wte always has V rows: an llm.c file's
 * padded rows (Vp > V) are dropped on load and written as zeros on save.
 *
 * Nothing in a file is trusted: every size and offset is checked against the file's size before anything
 * is allocated or read, so a wrong, truncated or lying file gets WEFT_ERR_IO (a file that cannot be read)
 * or WEFT_ERR_INVALID_ARGUMENT (a file that is not a valid checkpoint) with a message naming the problem,
 * and an allocation is never larger than what the file itself holds. */
#ifndef WEFT_GPT_IO_H
#define WEFT_GPT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* L layers, C channels, NH heads, V tokens (the real vocabulary, not llm.c's padded one), maxT positions. */
typedef struct {
  int L, C, NH, V, maxT;
} weft_gpt_io_config;

enum {
  WEFT_GPT_T_WTE, WEFT_GPT_T_WPE, WEFT_GPT_T_LN1W, WEFT_GPT_T_LN1B, WEFT_GPT_T_QKVW, WEFT_GPT_T_QKVB,
  WEFT_GPT_T_ATTPROJW, WEFT_GPT_T_ATTPROJB, WEFT_GPT_T_LN2W, WEFT_GPT_T_LN2B, WEFT_GPT_T_FCW, WEFT_GPT_T_FCB,
  WEFT_GPT_T_FCPROJW, WEFT_GPT_T_FCPROJB, WEFT_GPT_T_LNFW, WEFT_GPT_T_LNFB, WEFT_GPT_NTENSORS
};

/* The file formats weft_gpt_load recognises. */
typedef enum { WEFT_GPT_FORMAT_SAFETENSORS = 1, WEFT_GPT_FORMAT_LLMC = 2 } weft_gpt_format;

/* Element counts of the WEFT_GPT_NTENSORS tensors for cfg (sizes may be NULL) and their total in *total.
 * WEFT_ERR_SHAPE for a non-positive size or NH not dividing C, WEFT_ERR_OVERFLOW when a count does not fit. */
WEFT_API weft_status weft_gpt_io_sizes(const weft_gpt_io_config *cfg, size_t sizes[WEFT_GPT_NTENSORS],
                                       size_t *total);

/* Reads a checkpoint, detecting its format from its first bytes: llm.c's (int32 magic 20240326; version 3
 * fp32, version 5 bf16 converted to fp32) or safetensors (dtype F32, F16 or BF16, converted to fp32;
 * Conv1D weights transposed to [out, in]; a `transformer.` prefix accepted; the causal-mask buffers
 * h.{i}.attn.bias / masked_bias and a tied lm_head.weight ignored; any other tensor refused).
 * On entry cfg->NH is a hint used only for a safetensors file without a config.json beside it (its
 * "n_head"): > 0 takes it, 0 means C/64. On success *cfg is the file's configuration, *params a malloc'd
 * buffer of *nparams floats in the order above (the caller frees it), and *format (may be NULL) what the
 * file was. On failure nothing is allocated and err (errlen bytes, may be NULL) says why. */
WEFT_API weft_status weft_gpt_load(const char *path, weft_gpt_io_config *cfg, float **params, size_t *nparams,
                                   char *err, size_t errlen);
/* weft_gpt_load and the detected format. */
WEFT_API weft_status weft_gpt_load_ex(const char *path, weft_gpt_io_config *cfg, float **params, size_t *nparams,
                                      weft_gpt_format *format, char *err, size_t errlen);

/* Writes params (in the order above, weft_gpt_io_sizes' total) as an llm.c checkpoint, version 3 (fp32),
 * with wte padded to Vp rows of zeros (Vp 0: V rounded up to a multiple of 128, as llm.c does; else Vp >= V). */
WEFT_API weft_status weft_gpt_save_llmc(const char *path, const weft_gpt_io_config *cfg, const float *params,
                                        int Vp, char *err, size_t errlen);

/* Writes params as a Hugging Face safetensors file with the `gpt2` repository's names and layouts (F32,
 * Conv1D weights as [in, out], no prefix, no mask buffers). With write_config set, also writes a
 * config.json (n_layer, n_embd, n_head, vocab_size, n_positions, model_type "gpt2") in the same folder. */
WEFT_API weft_status weft_gpt_save_safetensors(const char *path, const weft_gpt_io_config *cfg, const float *params,
                                               int write_config, char *err, size_t errlen);

#endif
