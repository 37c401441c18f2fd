/* fabric.c - opening and closing a fabric: probing the lane providers, the lane list, absent lanes,
 * scopes and synchronisation across lanes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local char open_error[WEFT_ERR_LEN];

const char *weft_open_error(void) { return open_error; }

static char *dup_str(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s ? s : "", n);
  return d;
}

static weft_status host_report(void *ctx, weft_status status, const char *fmt, va_list args) {
  return weft_vfail((weft_fabric *)ctx, status, fmt, args);
}

/* 1 if the comma-separated filter names this lane's kind or its full name (an empty filter takes all). */
static int filter_takes(const char *filter, const char *kind, const char *name) {
  if (!filter || !*filter) return 1;
  const char *p = filter;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && *p == ' ') p++, len--;
    while (len && p[len - 1] == ' ') len--;
    if ((len == strlen(kind) && strncmp(p, kind, len) == 0) ||
        (name && len == strlen(name) && strncmp(p, name, len) == 0))
      return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

/* 1 if the filter could take any lane of this provider: its kind or a name starting with "kind:". */
static int filter_wants_kind(const char *filter, const char *kind) {
  if (!filter || !*filter) return 1;
  size_t kl = strlen(kind);
  const char *p = filter;
  while (*p) {
    while (*p == ' ') p++;
    if (strncmp(p, kind, kl) == 0 && (p[kl] == ',' || p[kl] == ':' || p[kl] == '\0' || p[kl] == ' ')) return 1;
    const char *end = strchr(p, ',');
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

static void add_absent(void *ctx, const char *name, const char *reason) {
  weft_fabric *f = ctx;
  weft_absent *a = realloc(f->absent, (f->nabsent + 1) * sizeof *a);
  if (!a) return; /* losing a diagnostic line is better than failing the open */
  f->absent = a;
  a[f->nabsent].name = dup_str(name);
  a[f->nabsent].reason = dup_str(reason);
  if (a[f->nabsent].name && a[f->nabsent].reason) f->nabsent++;
  else free(a[f->nabsent].name), free(a[f->nabsent].reason);
}

static weft_status add_lane(void *ctx, const weft_lane_vtable *vt, void *self) {
  weft_fabric *f = ctx;
  if (!vt || vt->abi_version != WEFT_LANE_ABI_VERSION || vt->size < offsetof(weft_lane_vtable, supports)) {
    if (vt && vt->destroy && vt->size >= offsetof(weft_lane_vtable, buffer_alloc)) vt->destroy(self);
    add_absent(f, "lane", "a lane was built against another lane ABI version and was refused");
    return WEFT_ERR_UNSUPPORTED;
  }
  weft_lane_slot slot;
  memset(&slot, 0, sizeof slot);
  memcpy(&slot.vt, vt, vt->size < sizeof slot.vt ? vt->size : sizeof slot.vt);
  slot.self = self;
  if (slot.vt.describe) slot.vt.describe(self, &slot.desc);
  if (!slot.vt.describe || !slot.vt.destroy || !slot.vt.buffer_alloc || !slot.vt.buffer_free ||
      !slot.vt.upload || !slot.vt.download || !slot.vt.run || !slot.desc.name || !slot.desc.kind) {
    if (slot.vt.destroy) slot.vt.destroy(self);
    add_absent(f, slot.desc.name ? slot.desc.name : "lane", "the lane left required vtable slots empty");
    return WEFT_ERR_UNSUPPORTED;
  }
  if (!filter_takes(f->lanes_filter, slot.desc.kind, slot.desc.name)) {
    add_absent(f, slot.desc.name, "not requested (the fabric's lane filter leaves it out)");
    slot.vt.destroy(self);
    return WEFT_OK;
  }
  for (size_t i = 0; i < f->nlanes; i++)
    if (strcmp(f->lanes[i].desc.name, slot.desc.name) == 0) {
      add_absent(f, slot.desc.name, "a lane of the same name is already in the fabric");
      slot.vt.destroy(self);
      return WEFT_ERR_INVALID_ARGUMENT;
    }
  weft_lane_slot *grown = realloc(f->lanes, (f->nlanes + 1) * sizeof *grown);
  if (!grown) {
    slot.vt.destroy(self);
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  f->lanes = grown;
  f->lanes[f->nlanes++] = slot;
  return WEFT_OK;
}

weft_status weft_fabric_open(const weft_fabric_desc *desc, weft_fabric **out_fabric) {
  open_error[0] = '\0';
  if (!out_fabric) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: out_fabric is NULL");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  *out_fabric = NULL;
  weft_fabric_desc defaults = WEFT_FABRIC_DESC_INIT;
  if (!desc) desc = &defaults;
  if (desc->cpu_threads < 0) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: cpu_threads is %d; use 0 for all cores or a count",
             desc->cpu_threads);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  weft_fabric *f = calloc(1, sizeof *f);
  if (!f) return WEFT_ERR_OUT_OF_MEMORY;
  f->desc = *desc;
  f->lanes_filter = desc->lanes ? dup_str(desc->lanes) : NULL;
  f->desc.lanes = f->lanes_filter;
  f->host.ctx = f;
  f->host.report = host_report;
  f->last_lane = -1;
  weft_lane_sink sink = {f, add_lane, add_absent};
  weft_probe_args args = {&f->desc, &f->host};
  for (size_t p = 0; p < weft_lane_provider_count; p++) {
    const weft_lane_provider *prov = &weft_lane_providers[p];
    if (!filter_wants_kind(f->lanes_filter, prov->kind)) {
      add_absent(f, prov->kind, "not requested (the fabric's lane filter leaves it out)");
      continue;
    }
    if (!prov->probe) {
      add_absent(f, prov->kind, prov->why);
      continue;
    }
    f->err[0] = '\0';
    weft_status st = prov->probe(&args, &sink);
    if (st != WEFT_OK) {
      char why[WEFT_ERR_LEN + 64];
      snprintf(why, sizeof why, "its probe failed: %s%s%s", weft_status_str(st), f->err[0] ? ": " : "", f->err);
      add_absent(f, prov->kind, why);
    }
  }
  f->err[0] = '\0';
  if (f->nlanes == 0) {
    snprintf(open_error, sizeof open_error, "weft_fabric_open: no lane could be opened%s%s",
             f->lanes_filter ? " with the lane filter " : "", f->lanes_filter ? f->lanes_filter : "");
    weft_fabric_close(f);
    return WEFT_ERR_NOT_FOUND;
  }
  *out_fabric = f;
  return WEFT_OK;
}

void weft_fabric_close(weft_fabric *f) {
  if (!f) return;
  while (f->tensors) weft_tensor_destroy(f->tensors);
  for (size_t i = 0; i < f->nlanes; i++) f->lanes[i].vt.destroy(f->lanes[i].self);
  for (size_t i = 0; i < f->nabsent; i++) free(f->absent[i].name), free(f->absent[i].reason);
  free(f->absent);
  free(f->lanes);
  free(f->lanes_filter);
  free(f);
}

size_t weft_fabric_lane_count(const weft_fabric *f) { return f ? f->nlanes : 0; }

weft_status weft_fabric_lane_info(const weft_fabric *f, size_t index, weft_lane_info *out_info) {
  if (out_info) memset(out_info, 0, sizeof *out_info);
  if (!f || !out_info) return WEFT_ERR_INVALID_ARGUMENT;
  if (index >= f->nlanes)
    return weft_fail((weft_fabric *)f, WEFT_ERR_NOT_FOUND, "lane index %zu: the fabric has %zu lanes", index,
                     f->nlanes);
  const weft_lane_slot *s = &f->lanes[index];
  out_info->name = s->desc.name;
  out_info->kind = s->desc.kind;
  out_info->device = s->desc.device ? s->desc.device : "";
  out_info->driver = s->desc.driver ? s->desc.driver : "";
  out_info->details = s->desc.details ? s->desc.details : "";
  out_info->contracts = s->desc.contracts;
  out_info->failed = s->failed;
  return WEFT_OK;
}

weft_status weft_fabric_lane_find(weft_fabric *f, const char *name, size_t *out_index) {
  if (out_index) *out_index = 0;
  if (!f || !name || !out_index) return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_find: NULL argument");
  char names[512] = "";
  for (size_t i = 0; i < f->nlanes; i++) {
    if (strcmp(f->lanes[i].desc.name, name) == 0) {
      *out_index = i;
      return WEFT_OK;
    }
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", f->lanes[i].desc.name);
  }
  return weft_fail(f, WEFT_ERR_NOT_FOUND, "no lane named '%s' in this fabric; lanes: %s", name, names);
}

size_t weft_fabric_absent_count(const weft_fabric *f) { return f ? f->nabsent : 0; }

weft_status weft_fabric_absent_info(const weft_fabric *f, size_t index, const char **out_name,
                                    const char **out_reason) {
  if (out_name) *out_name = NULL;
  if (out_reason) *out_reason = NULL;
  if (!f || !out_name || !out_reason) return WEFT_ERR_INVALID_ARGUMENT;
  if (index >= f->nabsent) return WEFT_ERR_NOT_FOUND;
  *out_name = f->absent[index].name;
  *out_reason = f->absent[index].reason;
  return WEFT_OK;
}

int weft_fabric_last_lane(const weft_fabric *f) { return f ? f->last_lane : -1; }

void weft_lane_mark_failed(weft_fabric *f, int lane) {
  if (lane >= 0 && (size_t)lane < f->nlanes) f->lanes[lane].failed = 1;
}

/* Runs one optional lane hook on every live lane; the first failure is reported, the rest still run. */
static weft_status each_lane(weft_fabric *f, size_t slot_offset, const char *what) {
  weft_status first = WEFT_OK;
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    weft_status (*fn)(void *);
    memcpy(&fn, (const char *)&s->vt + slot_offset, sizeof fn);
    if (s->failed || !fn) continue;
    weft_status st = fn(s->self);
    if (st == WEFT_ERR_LANE_FAILED) weft_lane_mark_failed(f, (int)i);
    if (st != WEFT_OK && first == WEFT_OK) {
      first = st;
      if (!f->err[0]) weft_fail(f, st, "%s failed on lane %s", what, s->desc.name);
    }
  }
  return first;
}

weft_status weft_scope_begin(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_scope_begin: a scope is already open (scopes do not nest)");
  f->err[0] = '\0';
  weft_status st = each_lane(f, offsetof(weft_lane_vtable, scope_begin), "scope_begin");
  if (st == WEFT_OK) f->in_scope = 1;
  return st;
}

weft_status weft_scope_end(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_scope_end: no scope is open");
  f->in_scope = 0;
  f->err[0] = '\0';
  return each_lane(f, offsetof(weft_lane_vtable, scope_end), "scope_end");
}

weft_status weft_fabric_sync(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  f->err[0] = '\0';
  return each_lane(f, offsetof(weft_lane_vtable, sync), "sync");
}
