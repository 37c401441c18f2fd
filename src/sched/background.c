/* background.c - measuring lanes off the caller's path. The first time routing has to choose between lanes
 * that have no model (no cache entry yet), the lanes that can be opened a second time (every lane a
 * provider found, but browser tabs) are measured by a thread of their own in a fabric of their own, opened
 * with the same lanes and options; the caller's ops go on meanwhile, routed on the built-in priors. Each
 * lane's lines are handed over as soon as that lane is done (and written to the cache by the thread), and
 * the op path takes them at its next routing decision: one pointer test while nothing is pending. Where an
 * op runs changes only its speed, never its bits (the exact contract), so routing on priors for a second or
 * two is safe. Lanes the thread cannot open (browser slots, lanes a test added) are measured on the
 * caller's thread as before. WEFT_CALIBRATE_IN_BACKGROUND=0 measures every lane on the caller's thread.
 * It opens a fabric and runs ops, so it is the scheduler's (measure.h), above the core. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "measure.h"

typedef enum bg_state { BG_WAITING, BG_DONE, BG_FAILED, BG_MISSING } bg_state;

typedef struct bg_lane {
  char name[128];
  int fabric_index; /* the lane in the caller's fabric */
  bg_state state;
  weft_cost_state cost[WEFT_COST_CLASS_COUNT][WEFT_CONTRACT_COUNT];
} bg_lane;

struct weft_calib_bg {
  pthread_t thread;
  pthread_mutex_t lock;
  atomic_int stop;         /* close (or an explicit calibration) asks the thread to end at its next point */
  atomic_uint published;   /* lanes whose state left BG_WAITING */
  unsigned adopted;        /* how many of them the caller's fabric has taken (caller's thread only) */
  atomic_int finished;     /* the thread is done */
  int joined;              /* the caller's thread has joined it */
  weft_fabric_desc desc;   /* what the thread opens, with `filter` as its lane filter */
  char filter[2048];
  char cache_path[1024]; /* the cache when it started: the environment may change meanwhile */
  size_t n;
  bg_lane *lanes;
};

static void silent(void *ctx, const char *line) {
  (void)ctx, (void)line;
}

int weft_cost_background_allowed(void) {
  const char *e = getenv("WEFT_CALIBRATE_IN_BACKGROUND");
  return !(e && strcmp(e, "0") == 0);
}

static void *bg_main(void *p) {
  weft_calib_bg *bg = p;
  weft_fabric *g = NULL;
  if (weft_fabric_open(&bg->desc, &g) != WEFT_OK) g = NULL;
  if (g) g->calib_stop = &bg->stop;
  if (g) memcpy(g->cache_path, bg->cache_path, sizeof g->cache_path);
  for (size_t i = 0; i < bg->n && !atomic_load(&bg->stop); i++) {
    bg_lane *l = &bg->lanes[i];
    size_t idx = 0;
    bg_state state = BG_MISSING;
    if (g && weft_fabric_lane_find(g, l->name, &idx) == WEFT_OK && !g->lanes[idx].failed) {
      weft_status st = weft_cost_calibrate_lane(g, (int)idx, g->nlanes > 1 ? 1.5 / (double)g->nlanes : 1.0);
      if (atomic_load(&bg->stop)) break; /* cut short: a lane half measured is not handed over */
      state = st == WEFT_OK ? BG_DONE : BG_FAILED;
      if (state == BG_DONE) weft_cost_cache_save(g); /* what is done survives a process that ends early */
    }
    pthread_mutex_lock(&bg->lock);
    if (state == BG_DONE) memcpy(l->cost, g->lanes[idx].cost, sizeof l->cost);
    l->state = state;
    pthread_mutex_unlock(&bg->lock);
    atomic_fetch_add(&bg->published, 1);
  }
  weft_fabric_close(g);
  atomic_store(&bg->finished, 1);
  return NULL;
}

weft_status weft_cost_background_start(weft_fabric *f, const int *lanes, size_t n) {
  weft_calib_bg *bg = calloc(1, sizeof *bg);
  bg_lane *bl = bg ? calloc(n, sizeof *bl) : NULL;
  if (!bl) {
    free(bg);
    return WEFT_ERR_OUT_OF_MEMORY;
  }
  bg->lanes = bl;
  bg->n = n;
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = f->lanes[lanes[i]].desc.name;
    snprintf(bl[i].name, sizeof bl[i].name, "%s", name);
    bl[i].fabric_index = lanes[i];
    int w = snprintf(bg->filter + used, sizeof bg->filter - used, "%s%s", i ? "," : "", name);
    if (w < 0 || (size_t)w >= sizeof bg->filter - used) {
      free(bl), free(bg);
      return WEFT_ERR_OUT_OF_MEMORY; /* an absurd list of lanes: measured on the caller's thread instead */
    }
    used += (size_t)w;
  }
  if (weft_cost_cache_path(bg->cache_path, sizeof bg->cache_path) != WEFT_OK) {
    free(bl), free(bg);
    return WEFT_ERR_IO; /* nowhere to keep the results: measured on the caller's thread, as before */
  }
  bg->desc = f->desc;
  bg->desc.lanes = bg->filter;
  bg->desc.calibration = WEFT_CALIBRATION_OFF; /* measured here, explicitly, lane by lane */
  bg->desc.on_note = silent;
  bg->desc.note_ctx = NULL;
  bg->desc.browser = NULL;
  pthread_mutex_init(&bg->lock, NULL);
  if (pthread_create(&bg->thread, NULL, bg_main, bg) != 0) {
    pthread_mutex_destroy(&bg->lock);
    free(bl), free(bg);
    return WEFT_ERR_INTERNAL;
  }
  for (size_t i = 0; i < n; i++) f->lanes[lanes[i]].calib_pending = 1;
  f->calib_bg = bg;
  return WEFT_OK;
}

/* Takes the lanes published since last time; joins the thread once it is done. */
void weft_cost_background_adopt(weft_fabric *f) {
  weft_calib_bg *bg = f->calib_bg;
  unsigned pub = atomic_load(&bg->published);
  int finished = atomic_load(&bg->finished);
  if (pub == bg->adopted && !finished) return;
  int changed = 0;
  pthread_mutex_lock(&bg->lock);
  for (size_t i = 0; i < bg->n; i++) {
    bg_lane *l = &bg->lanes[i];
    weft_lane_slot *s = &f->lanes[l->fabric_index];
    if (!s->calib_pending || (l->state == BG_WAITING && !finished)) continue;
    s->calib_pending = 0;
    if (l->state == BG_WAITING) continue; /* stopped before its turn: priors, measured again when asked */
    if (l->state == BG_DONE) {
      memcpy(s->cost, l->cost, sizeof s->cost);
      s->calib_tried = 1;
      weft_note(f, 0, "lane %s measured in the background", s->desc.name);
    } else if (l->state == BG_FAILED) {
      s->calib_tried = 1; /* keeps its priors, as a failed measurement on the caller's thread does */
    } else {
      s->calib_refused = 1; /* the thread could not open it: measured on the caller's thread instead */
      f->models_ready = 0;
    }
    changed = 1;
  }
  bg->adopted = pub;
  pthread_mutex_unlock(&bg->lock);
  if (changed) weft_route_forget(f);
  if (finished) {
    if (!bg->joined) pthread_join(bg->thread, NULL);
    pthread_mutex_destroy(&bg->lock);
    free(bg->lanes);
    free(bg);
    f->calib_bg = NULL;
  }
}

void weft_cost_background_finish(weft_fabric *f, int cancel) {
  weft_calib_bg *bg = f->calib_bg;
  if (!bg) return;
  if (cancel) atomic_store(&bg->stop, 1);
  pthread_join(bg->thread, NULL);
  bg->joined = 1;
  atomic_store(&bg->finished, 1); /* adopt takes what is there and frees it */
  weft_cost_background_adopt(f);
}

size_t weft_cost_background_pending(const weft_fabric *f) {
  size_t n = 0;
  for (size_t i = 0; i < f->nlanes; i++) n += f->lanes[i].calib_pending != 0;
  return n;
}
