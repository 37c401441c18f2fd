/* fabric.c - the fabric's lanes: probing the lane providers into lane slots, absent lanes, a lane going
 * down and coming back, scopes and synchronisation across lanes, the lanes' cost lines as the public API
 * reads and sets them. The core (docs/DESIGN.md, "Layers"): weft_fabric_open and _close, above it in
 * sched/open.c, assemble a fabric from these parts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cost/cost.h"
#include "fpenv.h"
#include "hostcopy.h"
#include "internal.h"
#include "optable.h"
#include "testing.h"

/* A down lane that can come back is asked again after 20 ms, then twice as long after each refusal, up to
 * 5 s: a restarted worker is back in use within seconds, and a dead one costs one cheap call now and then. */
#define REVIVE_FIRST_S 0.02
#define REVIVE_MAX_S 5.0

static char *dup_str(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s ? s : "", n);
  return d;
}

static weft_status host_report(void *ctx, weft_status status, const char *fmt, va_list args) {
  if (weft_hostq_report(status, fmt, args)) return status; /* a queued op: kept for the next wait */
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

static weft_status add_lane_checked(weft_fabric *f, const weft_lane_vtable *vt, void *self, int apply_filter) {
  if (!vt || vt->abi_version != WEFT_LANE_ABI_VERSION || vt->size < offsetof(weft_lane_vtable, supports)) {
    if (vt && vt->destroy && vt->size >= offsetof(weft_lane_vtable, buffer_alloc)) vt->destroy(self);
    char why[160];
    snprintf(why, sizeof why, "a lane built against lane ABI version %u was refused; this weft speaks version %d",
             vt ? (unsigned)vt->abi_version : 0u, WEFT_LANE_ABI_VERSION);
    add_absent(f, "lane", why);
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
  if (apply_filter && !filter_takes(f->lanes_filter, slot.desc.kind, slot.desc.name)) {
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
  if (grown) f->lanes = grown;
  weft_route_cost *r1 = grown ? realloc(f->route, (f->nlanes + 1) * sizeof *r1) : NULL;
  if (r1) f->route = r1;
  weft_route_cost *r2 = r1 ? realloc(f->explain, (f->nlanes + 1) * sizeof *r2) : NULL;
  if (r2) f->explain = r2;
  if (!r2) {
    slot.vt.destroy(self);
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  weft_cost_init_lane(&slot);
  /* a second fabric opens the same lane for measuring it in the background; a browser slot is one tab's */
  slot.reopenable = apply_filter && strcmp(slot.desc.kind, "browser") != 0;
  if (slot.desc.flags & WEFT_LANE_STARTS_DOWN) {
    /* a slot waiting for its device (a browser tab): routed once revive says it is there */
    slot.failed = 1;
    snprintf(slot.down_why, sizeof slot.down_why, "is down: waiting for its device to attach");
    if (slot.vt.revive) {
      slot.retry_at = 0;
      slot.backoff = REVIVE_FIRST_S;
      f->revive_at = 0;
    }
  }
  f->lanes[f->nlanes++] = slot;
  f->models_ready = 0;
  f->lanes_epoch++;
  weft_route_forget(f);
  return WEFT_OK;
}

static weft_status add_lane(void *ctx, const weft_lane_vtable *vt, void *self) {
  return add_lane_checked(ctx, vt, self, 1);
}

weft_status weft_core_init(weft_fabric *f, const weft_fabric_desc *desc, char *err, size_t err_len) {
  f->desc = *desc;
  f->lanes_filter = desc->lanes ? dup_str(desc->lanes) : NULL;
  if (desc->lanes && !f->lanes_filter) { /* not every lane instead of those asked for */
    snprintf(err, err_len, "weft_fabric_open: out of host memory for the lane filter");
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  f->desc.lanes = f->lanes_filter;
  f->host.ctx = f;
  f->host.report = host_report;
  f->last_lane = -1;
  f->clock = weft_monotonic_seconds;
  f->revive_at = INFINITY;
  if (desc->calibration < WEFT_CALIBRATION_AUTO || desc->calibration > WEFT_CALIBRATION_OFF) {
    snprintf(err, err_len, "weft_fabric_open: calibration is %d; use WEFT_CALIBRATION_AUTO, _FORCE or _OFF",
             desc->calibration);
    free(f->lanes_filter);
    f->lanes_filter = NULL;
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  return WEFT_OK;
}

void weft_core_probe(weft_fabric *f) {
  weft_lane_sink sink = {f, add_lane, add_absent};
  weft_probe_args args = {&f->desc, &f->host};
  for (size_t p = 0; p < weft_lane_provider_count; p++) {
    const weft_lane_provider *prov = &weft_lane_providers[p];
    /* Plugin lanes have their own kinds ("opencl"): the plugin provider applies the filter per plugin. */
    if (strcmp(prov->kind, "plugin") != 0 && !filter_wants_kind(f->lanes_filter, prov->kind)) {
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
}

void weft_core_release(weft_fabric *f) {
  weft_hostq_finish(f);
  weft_hostq_stop(f);
  while (f->tensors) weft_tensor_destroy(f->tensors);
  for (size_t i = 0; i < f->nlanes; i++) f->lanes[i].vt.destroy(f->lanes[i].self);
  for (size_t i = 0; i < f->nabsent; i++) free(f->absent[i].name), free(f->absent[i].reason);
  free(f->absent);
  free(f->lanes);
  free(f->route);
  free(f->explain);
  weft_hostcopy_release(f->copier);
  free(f->lanes_filter);
  f->absent = NULL, f->lanes = NULL, f->route = f->explain = NULL, f->copier = NULL, f->lanes_filter = NULL;
  f->nabsent = f->nlanes = 0;
}

static weft_status cost_args(const weft_fabric *f, size_t lane, weft_cost_class cls, weft_contract contract) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (lane >= f->nlanes)
    return weft_fail((weft_fabric *)f, WEFT_ERR_NOT_FOUND, "lane index %zu: the fabric has %zu lanes", lane, f->nlanes);
  if ((unsigned)cls >= WEFT_COST_CLASS_COUNT)
    return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "cost class %d is not a weft_cost_class", (int)cls);
  /* only matmul lines are kept per contract; the other classes ignore it, whatever its value */
  if (cls == WEFT_COST_MATMUL && (unsigned)contract >= WEFT_CONTRACT_COUNT)
    return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "contract %d is not a weft_contract", (int)contract);
  return WEFT_OK;
}

weft_status weft_fabric_cost_model(const weft_fabric *f, size_t lane, weft_cost_class cls, weft_contract contract,
                                   weft_cost_line *out_line) {
  if (out_line) memset(out_line, 0, sizeof *out_line);
  weft_status st = cost_args(f, lane, cls, contract);
  if (st != WEFT_OK) return st;
  if (!out_line)
    return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_cost_model: out_line is NULL");
  *out_line = weft_cost_state_of(&f->lanes[lane], cls, contract)->line;
  return WEFT_OK;
}

weft_status weft_fabric_set_cost_model(weft_fabric *f, size_t lane, weft_cost_class cls, weft_contract contract,
                                       double alpha, double beta) {
  weft_status st = cost_args(f, lane, cls, contract);
  if (st != WEFT_OK) return st;
  if (!(alpha >= 0) || !(beta >= 0) || alpha > 1e6 || beta > 1e30)
    return weft_fail(f, WEFT_ERR_INVALID_ARGUMENT,
                     "weft_fabric_set_cost_model: alpha %g s and beta %g per s must be finite and >= 0 (alpha at "
                     "most 1e6 s, beta at most 1e30 per s)", alpha, beta);
  weft_cost_state *c = weft_cost_state_of(&f->lanes[lane], cls, contract);
  memset(c, 0, sizeof *c);
  c->line.alpha = alpha; /* memset above: no measured points, the line alone */
  c->line.beta = beta;
  c->line.refine = 1.0;
  c->line.source = WEFT_COST_SET;
  /* a transfer model the caller sets holds for registered memory too */
  if (cls == WEFT_COST_UPLOAD || cls == WEFT_COST_DOWNLOAD) f->lanes[lane].cost[cls][WEFT_XFER_PINNED] = *c;
  f->lanes[lane].calib_tried = 1; /* a model the caller set is not measured over */
  weft_route_forget(f);
  return WEFT_OK;
}

size_t weft_fabric_lane_count(const weft_fabric *f) { return f ? f->nlanes : 0; }

weft_status weft_fabric_lane_info(const weft_fabric *f, size_t index, weft_lane_info *out_info) {
  if (out_info) memset(out_info, 0, sizeof *out_info);
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out_info) return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_info: out_info is NULL");
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
  out_info->revivable = s->vt.revive != NULL;
  out_info->ops = weft_lane_ops(&s->desc);
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
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out_name || !out_reason)
    return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_absent_info: out_name or out_reason is NULL");
  if (index >= f->nabsent)
    return weft_fail((weft_fabric *)f, WEFT_ERR_NOT_FOUND, "absent lane index %zu: the fabric has %zu absent lanes",
                     index, f->nabsent);
  *out_name = f->absent[index].name;
  *out_reason = f->absent[index].reason;
  return WEFT_OK;
}

int weft_fabric_last_lane(const weft_fabric *f) { return f ? f->last_lane : -1; }

static void revive_schedule(weft_fabric *f) {
  f->revive_at = INFINITY;
  for (size_t i = 0; i < f->nlanes; i++)
    if (f->lanes[i].failed && f->lanes[i].vt.revive && f->lanes[i].retry_at < f->revive_at)
      f->revive_at = f->lanes[i].retry_at;
}

void weft_lane_mark_failed(weft_fabric *f, int lane) {
  if (lane < 0 || (size_t)lane >= f->nlanes) return;
  weft_lane_slot *s = &f->lanes[lane];
  if (!s->failed) {
    s->failed = 1;
    f->lanes_epoch++;
    snprintf(s->down_why, sizeof s->down_why, "is down: %.170s", f->err[0] ? f->err : "it failed");
    s->backoff = REVIVE_FIRST_S;
    s->retry_at = weft_fabric_now(f) + s->backoff;
    s->busy_until = 0;
    weft_busy_recompute(f);
    revive_schedule(f);
    /* What the lane held is gone with it (a lost device, a dead worker): release the records, and mark the
     * values that lived nowhere else, to be computed again from their recipes. */
    for (weft_tensor *t = f->tensors; t; t = t->next) {
      if (t->buf[lane]) s->vt.buffer_free(s->self, t->buf[lane]);
      t->buf[lane] = NULL;
      if (!t->valid[lane]) continue;
      t->valid[lane] = 0;
      if (lane < 63) t->where &= ~((uint64_t)1 << (lane + 1));
      int elsewhere = t->host_valid;
      for (size_t i = 0; i < f->nlanes; i++) elsewhere |= t->valid[i];
      if (!elsewhere) t->lost = f->lost = 1, t->lost_lane = lane;
    }
  }
  weft_route_forget(f);
}

void weft_lane_revive_soon(const weft_lane_host *host) {
  if (host && host->report == host_report) atomic_store(&((weft_fabric *)host->ctx)->revive_poke, 1);
}

void weft_lanes_revive(weft_fabric *f, int all) {
  /* A lane that came up in the background asks to be asked now, whatever its backoff says. */
  if (atomic_exchange(&f->revive_poke, 0)) all = 1;
  double now = weft_fabric_now(f);
  int changed = 0;
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    if (!s->failed || !s->vt.revive || (!all && now < s->retry_at)) continue;
    char saved[WEFT_ERR_LEN];
    memcpy(saved, f->err, sizeof saved); /* the lane's answer must not replace the caller's last error */
    f->err[0] = '\0';
    weft_fpenv env; /* a revived lane may start threads: they inherit the clean environment */
    weft_fpenv_enter(&env);
    weft_status st = s->vt.revive(s->self);
    weft_fpenv_leave(&env);
    if (st == WEFT_OK) {
      s->failed = 0;
      f->lanes_epoch++;
      s->down_why[0] = '\0';
      s->busy_until = 0;
      f->models_ready = 0; /* a lane that never had a model is measured before routing counts on it */
      weft_note(f, 0, "weft: lane %s is back", s->desc.name);
      changed = 1;
    } else {
      if (f->err[0]) snprintf(s->down_why, sizeof s->down_why, "is down: %.170s", f->err);
      s->backoff = s->backoff * 2 < REVIVE_MAX_S ? s->backoff * 2 : REVIVE_MAX_S;
      s->retry_at = now + s->backoff;
    }
    memcpy(f->err, saved, sizeof saved);
  }
  revive_schedule(f);
  if (changed) weft_route_forget(f);
}

weft_status weft_fabric_revive(weft_fabric *f, size_t *out_up) {
  if (out_up) *out_up = 0;
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  weft_lanes_revive(f, 1);
  size_t up = 0;
  for (size_t i = 0; i < f->nlanes; i++) up += !f->lanes[i].failed;
  if (out_up) *out_up = up;
  return WEFT_OK;
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

weft_status weft_core_scope_begin(weft_fabric *f) {
  weft_status st = each_lane(f, offsetof(weft_lane_vtable, scope_begin), "scope_begin");
  if (st == WEFT_OK) f->in_scope = 1;
  return st;
}

/* After a wait for every lane, none is busy, whatever the cost model predicted for the work queued on it
 * (a prediction from uncalibrated priors can be off by orders of magnitude and would keep a lane "busy"). */
static void lanes_idle(weft_fabric *f) {
  double now = weft_fabric_now(f);
  for (size_t i = 0; i < f->nlanes; i++)
    if (f->lanes[i].busy_until > now) f->lanes[i].busy_until = now;
  weft_busy_recompute(f);
}

weft_status weft_scope_end(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!f->in_scope) return weft_fail(f, WEFT_ERR_STATE, "weft_scope_end: no scope is open");
  f->in_scope = 0;
  f->err[0] = '\0';
  weft_status st = each_lane(f, offsetof(weft_lane_vtable, scope_end), "scope_end");
  if (st == WEFT_OK) lanes_idle(f);
  return st;
}

weft_status weft_fabric_sync(weft_fabric *f) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  f->err[0] = '\0';
  weft_status qst = weft_hostq_finish(f);
  /* a queued op that failed and that no read or op has reported yet (its outputs still hold the failure) */
  if (qst == WEFT_OK) qst = weft_hostq_take_unreported(f);
  weft_status st = each_lane(f, offsetof(weft_lane_vtable, sync), "sync");
  if (st == WEFT_OK) st = qst;
  if (st == WEFT_OK) lanes_idle(f);
  return st;
}

weft_status weft_testing_add_lane(weft_fabric *f, const weft_lane_vtable *vt, void *self) {
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  size_t before = f->nlanes;
  weft_status st = add_lane_checked(f, vt, self, 0);
  if (st != WEFT_OK || f->nlanes == before) return st != WEFT_OK ? st : WEFT_ERR_INVALID_ARGUMENT;
  /* live tensors need a slot for the new lane */
  for (weft_tensor *t = f->tensors; t; t = t->next) {
    weft_buffer **b = realloc(t->buf, f->nlanes * sizeof *b);
    if (b) t->buf = b;
    uint8_t *v = b ? realloc(t->valid, f->nlanes) : NULL;
    if (!v) return WEFT_ERR_OUT_OF_MEMORY;
    t->valid = v;
    t->buf[f->nlanes - 1] = NULL;
    t->valid[f->nlanes - 1] = 0;
  }
  return WEFT_OK;
}

int weft_testing_lane_idle(weft_fabric *f, size_t lane) {
  if (!f || lane >= f->nlanes || !f->lanes[lane].vt.idle) return -1;
  return f->lanes[lane].vt.idle(f->lanes[lane].self) ? 1 : 0;
}

weft_status weft_testing_lane_flush(weft_fabric *f, size_t lane) {
  if (!f || lane >= f->nlanes) return WEFT_ERR_INVALID_ARGUMENT;
  return f->lanes[lane].vt.flush ? f->lanes[lane].vt.flush(f->lanes[lane].self) : WEFT_OK;
}

weft_status weft_testing_cache_store(weft_fabric *f, size_t lane, double alpha, double beta) {
  if (!f || lane >= f->nlanes) return WEFT_ERR_INVALID_ARGUMENT;
  weft_cost_line *l = &f->lanes[lane].cost[WEFT_COST_ELEMENTWISE][0].line;
  l->alpha = alpha, l->beta = beta, l->source = WEFT_COST_MEASURED, l->points = 1;
  return weft_cost_cache_save(f);
}

void weft_testing_set_clock(weft_fabric *f, double (*clock)(void *ctx), void *ctx) {
  if (!f) return;
  f->clock = clock ? clock : weft_monotonic_seconds;
  f->clock_ctx = clock ? ctx : NULL;
}

weft_status weft_fabric_lane_stats(const weft_fabric *f, size_t lane, weft_lane_stats *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!f) return WEFT_ERR_INVALID_ARGUMENT;
  if (!out) return weft_fail((weft_fabric *)f, WEFT_ERR_INVALID_ARGUMENT, "weft_fabric_lane_stats: out_stats is NULL");
  if (lane >= f->nlanes)
    return weft_fail((weft_fabric *)f, WEFT_ERR_NOT_FOUND, "lane index %zu: the fabric has %zu lanes", lane, f->nlanes);
  *out = f->lanes[lane].stats;
  out->seconds_measured = weft_lane_is_host(f, (int)lane);
  return WEFT_OK;
}

void weft_fabric_reset_stats(weft_fabric *f) {
  if (!f) return;
  for (size_t i = 0; i < f->nlanes; i++) memset(&f->lanes[i].stats, 0, sizeof f->lanes[i].stats);
}
