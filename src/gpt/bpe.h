/* bpe.h - GPT-2's byte-level BPE tokenizer: encoder.json (token string -> id) and vocab.bpe (the merges,
 * ranked by line), GPT-2's byte-to-unicode mapping, its pre-tokenizer
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written out by hand, encode and decode.
 *
 * Text is bytes, normally UTF-8. The pre-tokenizer classifies code points as letters, numbers, whitespace
 * (JavaScript's \s) and the rest with a compact table: ASCII and Latin-1 exactly, numbers by the
 * decimal-digit, superscript, fraction, roman-numeral and circled-number blocks, the rest by blocks of
 * punctuation, symbols, combining marks and emoji; any other code point counts as a letter. That is exact
 * for ASCII, the Latin, Greek, Cyrillic, CJK and emoji text tested, and an approximation for scripts whose
 * combining marks the table does not list (their words may split differently from the reference). Bytes
 * that are not valid UTF-8 each count as one "other" character; decode(encode(x)) == x for any bytes. */
#ifndef WEFT_GPT_BPE_H
#define WEFT_GPT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct weft_bpe weft_bpe;

/* Reads encoder.json and vocab.bpe. WEFT_ERR_IO when a file cannot be read, WEFT_ERR_INVALID_ARGUMENT
 * when one is not what it should be (err says which and why). */
WEFT_API weft_status weft_bpe_load(const char *encoder_json, const char *vocab_bpe, weft_bpe **out, char *err,
                                   size_t errlen);
WEFT_API void weft_bpe_free(weft_bpe *bpe);
/* Number of token ids (50257 for GPT-2: ids 0 .. n-1; 50256 is <|endoftext|>). */
WEFT_API int32_t weft_bpe_vocab_size(const weft_bpe *bpe);
/* The bytes of one token (not NUL-terminated; *len its length), or NULL for an id out of range. */
WEFT_API const unsigned char *weft_bpe_token_bytes(const weft_bpe *bpe, int32_t id, size_t *len);
/* Encodes len bytes of text into a malloc'd array *tokens of *ntokens ids (the caller frees it; NULL for
 * empty text). Special tokens are not recognised in the text: "<|endoftext|>" encodes as plain text. */
WEFT_API weft_status weft_bpe_encode(const weft_bpe *bpe, const char *text, size_t len, int32_t **tokens,
                                     size_t *ntokens);
/* Decodes n ids into a malloc'd NUL-terminated byte string *text of *len bytes (the caller frees it).
 * WEFT_ERR_INVALID_ARGUMENT for an id out of range. */
WEFT_API weft_status weft_bpe_decode(const weft_bpe *bpe, const int32_t *tokens, size_t n, char **text, size_t *len);

#endif
