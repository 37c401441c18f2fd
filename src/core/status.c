/* status.c - status and contract names, versions, the fabric's last-error channel, notes and the clock: the
 * base every layer calls (docs/DESIGN.md, "Layers"). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "optable.h"
#include "state.h"

const char *weft_version(void) { return WEFT_VERSION_STRING; }
int weft_version_number(void) { return WEFT_VERSION_NUMBER; }

const char *weft_status_str(weft_status status) {
  switch (status) {
  case WEFT_OK: return "ok";
  case WEFT_ERR_INVALID_ARGUMENT: return "invalid argument";
  case WEFT_ERR_SHAPE: return "shape mismatch";
  case WEFT_ERR_OVERFLOW: return "size overflow";
  case WEFT_ERR_WRONG_FABRIC: return "tensor from another fabric";
  case WEFT_ERR_OUT_OF_MEMORY: return "out of memory";
  case WEFT_ERR_UNSUPPORTED: return "unsupported";
  case WEFT_ERR_LANE_FAILED: return "lane failed";
  case WEFT_ERR_NOT_FOUND: return "not found";
  case WEFT_ERR_STATE: return "invalid state";
  case WEFT_ERR_IO: return "i/o error";
  case WEFT_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

static const char *const CONTRACT_NAMES[WEFT_CONTRACT_COUNT] = {"exact", "fp32", "tf32", "bf16"};

const char *weft_contract_str(weft_contract contract) {
  return (unsigned)contract < WEFT_CONTRACT_COUNT ? CONTRACT_NAMES[contract] : "?";
}

weft_status weft_contract_parse(const char *name, weft_contract *out_contract) {
  if (out_contract) *out_contract = WEFT_CONTRACT_EXACT;
  if (!name || !out_contract) return WEFT_ERR_INVALID_ARGUMENT;
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++)
    if (strcmp(name, CONTRACT_NAMES[c]) == 0) {
      *out_contract = (weft_contract)c;
      return WEFT_OK;
    }
  return WEFT_ERR_INVALID_ARGUMENT;
}

const char *weft_op_kind_str(weft_op_kind kind) {
  return (unsigned)kind < WEFT_OP_COUNT ? weft_optable[kind].name : "?";
}

const char *weft_dtype_str(weft_dtype dtype) {
  return dtype == WEFT_DTYPE_F32 ? "f32" : dtype == WEFT_DTYPE_I32 ? "i32" : "?";
}

weft_status weft_op_kind_parse(const char *name, weft_op_kind *out_kind) {
  if (out_kind) *out_kind = WEFT_OP_MATMUL;
  if (!name || !out_kind) return WEFT_ERR_INVALID_ARGUMENT;
  for (int k = 0; k < WEFT_OP_COUNT; k++)
    if (strcmp(name, weft_optable[k].name) == 0) {
      *out_kind = (weft_op_kind)k;
      return WEFT_OK;
    }
  return WEFT_ERR_INVALID_ARGUMENT;
}

weft_status weft_vfail(weft_fabric *f, weft_status status, const char *fmt, va_list args) {
  if (f) vsnprintf(f->err, sizeof f->err, fmt, args);
  return status;
}

weft_status weft_fail(weft_fabric *f, weft_status status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  weft_vfail(f, status, fmt, args);
  va_end(args);
  return status;
}

weft_status weft_lane_report(const weft_lane_host *host, weft_status status, const char *fmt, ...) {
  if (!host || !host->report) return status;
  va_list args;
  va_start(args, fmt);
  host->report(host->ctx, status, fmt, args);
  va_end(args);
  return status;
}

const char *weft_fabric_last_error(const weft_fabric *fabric) { return fabric ? fabric->err : "no fabric"; }

double weft_monotonic_seconds(void *ctx) {
  (void)ctx;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void weft_note(const weft_fabric *f, int always, const char *fmt, ...) {
  char line[WEFT_ERR_LEN];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  if (f && f->desc.on_note) f->desc.on_note(f->desc.note_ctx, line);
  else if (always) fprintf(stderr, "%s\n", line);
}
