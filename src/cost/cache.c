/* cache.c - the calibration cache: one JSON file (cJSON) under $XDG_CACHE_HOME/weft/, entries keyed by the
 * lane's identity (name, device, driver, details - which include the thread count) and weft's version. A
 * missing, corrupt or foreign file means measuring again, with a note; never a failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cost.h"

#define CACHE_FORMAT 3 /* 2: lines carry their measured points; 3: and transfers of registered memory */
/* Entries kept at most. Lanes come and go (a worker on a fresh ephemeral port is a new lane name each
 * run): past this many, the entries saved longest ago leave first, so the file cannot grow forever. */
#define CACHE_MAX_ENTRIES 64

weft_status weft_cost_cache_path(char *out, size_t len) {
  if (!out || len == 0) return WEFT_ERR_INVALID_ARGUMENT;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (xdg && *xdg) n = snprintf(out, len, "%s/weft/calibration.json", xdg);
  else if (home && *home) n = snprintf(out, len, "%s/.cache/weft/calibration.json", home);
  else {
    out[0] = '\0';
    return WEFT_ERR_IO;
  }
  if (n > 0 && (size_t)n < len) return WEFT_OK;
  out[0] = '\0'; /* a cut path is no path: the caller gets none */
  return WEFT_ERR_IO;
}

static void lane_key(const weft_lane_slot *s, char *out, size_t len) {
  snprintf(out, len, "%s|%s|%s|%s", s->desc.name, s->desc.device ? s->desc.device : "",
           s->desc.driver ? s->desc.driver : "", s->desc.details ? s->desc.details : "");
}

static int is_transfer(int cls) { return cls == WEFT_COST_UPLOAD || cls == WEFT_COST_DOWNLOAD; }

static void line_name(int cls, int contract, char *out, size_t len) {
  if (cls == WEFT_COST_MATMUL) snprintf(out, len, "matmul.%s", weft_contract_str((weft_contract)contract));
  else if (is_transfer(cls) && contract == WEFT_XFER_PINNED)
    snprintf(out, len, "%s.registered", weft_cost_class_str((weft_cost_class)cls));
  else snprintf(out, len, "%s", weft_cost_class_str((weft_cost_class)cls));
}

/* Lines a class keeps: one per contract for matmul, staged and registered for transfers, else one. */
static int lines_of(int cls) {
  return cls == WEFT_COST_MATMUL ? WEFT_CONTRACT_COUNT : is_transfer(cls) ? 2 : 1;
}

static char *read_file(const char *path, size_t *out_len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = (cap + 4096) * 2;
      if (cap > (16u << 20)) break; /* a cache this large is not ours */
      char *g = realloc(buf, cap);
      if (!g) break;
      buf = g;
    }
    size_t got = fread(buf + len, 1, 4096, fp);
    len += got;
    if (got == 0) break;
  }
  fclose(fp);
  if (buf) buf[len] = '\0';
  *out_len = len;
  return buf;
}

/* Parses the cache; NULL (with a note) if it is absent, corrupt or from another version. */
static cJSON *load_doc(weft_fabric *f, const char *path, int notes) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (!text) {
    if (notes) weft_note(f, 0, "no calibration cache at %s", path);
    return NULL;
  }
  cJSON *doc = cJSON_ParseWithLength(text, len);
  free(text);
  const cJSON *fmt = doc ? cJSON_GetObjectItemCaseSensitive(doc, "format") : NULL;
  const cJSON *ver = doc ? cJSON_GetObjectItemCaseSensitive(doc, "weft_version") : NULL;
  const cJSON *lanes = doc ? cJSON_GetObjectItemCaseSensitive(doc, "lanes") : NULL;
  if (doc && cJSON_IsNumber(fmt) && fmt->valuedouble != CACHE_FORMAT) {
    if (notes)
      weft_note(f, 1, "weft: the calibration cache %s is in another format (%g; this weft writes %d); measuring again",
                path, fmt->valuedouble, CACHE_FORMAT);
    cJSON_Delete(doc);
    return NULL;
  }
  if (!doc || !cJSON_IsNumber(fmt) || !cJSON_IsString(ver) || !cJSON_IsArray(lanes)) {
    if (notes) weft_note(f, 1, "weft: the calibration cache %s is unreadable or corrupt; measuring again", path);
    cJSON_Delete(doc);
    return NULL;
  }
  if (strcmp(ver->valuestring, WEFT_VERSION_STRING) != 0) {
    if (notes) weft_note(f, 1, "weft: the calibration cache %s was written by weft %s (this is %s); measuring again", path,
              ver->valuestring, WEFT_VERSION_STRING);
    cJSON_Delete(doc);
    return NULL;
  }
  return doc;
}

void weft_cost_cache_load(weft_fabric *f) {
  char path[1024];
  if (weft_cost_cache_path(path, sizeof path) != WEFT_OK) return;
  cJSON *doc = load_doc(f, path, 1);
  if (!doc) return;
  const cJSON *lanes = cJSON_GetObjectItemCaseSensitive(doc, "lanes"), *entry;
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    char key[1024];
    lane_key(s, key, sizeof key);
    cJSON_ArrayForEach(entry, lanes) {
      const cJSON *k = cJSON_GetObjectItemCaseSensitive(entry, "key");
      const cJSON *lines = cJSON_GetObjectItemCaseSensitive(entry, "lines");
      if (!cJSON_IsString(k) || strcmp(k->valuestring, key) != 0 || !cJSON_IsObject(lines)) continue;
      for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++)
        for (int c = 0; c < lines_of(cls); c++) {
          char name[64];
          line_name(cls, c, name, sizeof name);
          const cJSON *l = cJSON_GetObjectItemCaseSensitive(lines, name);
          const cJSON *a = l ? cJSON_GetObjectItemCaseSensitive(l, "alpha") : NULL;
          const cJSON *b = l ? cJSON_GetObjectItemCaseSensitive(l, "beta") : NULL;
          const cJSON *p = l ? cJSON_GetObjectItemCaseSensitive(l, "points") : NULL;
          if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || !(a->valuedouble >= 0) || !(b->valuedouble >= 0) ||
              a->valuedouble > 10.0)
            continue; /* a missing or nonsensical line stays a prior and is measured */
          weft_cost_state *st = &s->cost[cls][c];
          memset(st, 0, sizeof *st);
          st->line.alpha = a->valuedouble;
          st->line.beta = b->valuedouble;
          st->line.refine = 1.0;
          st->line.source = WEFT_COST_CACHED;
          st->line.points = cJSON_IsNumber(p) ? p->valueint : 0;
          /* the measured points, if present and sane (ascending work, non-decreasing positive times) */
          const cJSON *w = cJSON_GetObjectItemCaseSensitive(l, "w"), *t = cJSON_GetObjectItemCaseSensitive(l, "t");
          int n = cJSON_IsArray(w) && cJSON_IsArray(t) ? cJSON_GetArraySize(w) : 0;
          if (n > WEFT_COST_POINTS || n != cJSON_GetArraySize(t)) n = 0;
          for (int q = 0; q < n; q++) {
            const cJSON *wq = cJSON_GetArrayItem(w, q), *tq = cJSON_GetArrayItem(t, q);
            if (!cJSON_IsNumber(wq) || !cJSON_IsNumber(tq) || !(wq->valuedouble > 0) || !(tq->valuedouble > 0) ||
                (q && (wq->valuedouble <= st->pw[q - 1] || tq->valuedouble < st->pt[q - 1]))) {
              n = 0;
              break;
            }
            st->pw[q] = wq->valuedouble, st->pt[q] = tq->valuedouble;
          }
          st->npts = n;
        }
      break;
    }
  }
  cJSON_Delete(doc);
  weft_route_forget(f);
}

static int mkdir_parents(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int r = mkdir(path, 0755);
    *p = '/';
    if (r != 0 && errno != EEXIST) return -1;
  }
  return 0;
}

static weft_status cache_merge_write(weft_fabric *f, const char *path, char *tmp, size_t tmplen);

/* Several fabrics (in one process or many) may save at once. Each save holds an exclusive lock on
 * "<cache>.lock" (flock) while it reads the file again, merges its own lanes into what is there now and
 * renames a temporary file of its own (mkstemp, in the cache's directory) over it: no writer's entries are
 * lost to another's, and a reader sees either the old file or the new one, never a partial write. */
weft_status weft_cost_cache_save(weft_fabric *f) {
  char path[1024], tmp[1100], lockpath[1100];
  if (f->cache_path[0]) snprintf(path, sizeof path, "%s", f->cache_path);
  else if (weft_cost_cache_path(path, sizeof path) != WEFT_OK) return WEFT_ERR_IO;
  snprintf(lockpath, sizeof lockpath, "%s.lock", path);
  int lockfd = -1;
  if (mkdir_parents(path) == 0) lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lockfd < 0 || flock(lockfd, LOCK_EX) != 0) {
    weft_note(f, 1, "weft: could not lock the calibration cache %s (%s); it will be measured again next time",
              lockpath, strerror(errno));
    if (lockfd >= 0) close(lockfd);
    return WEFT_ERR_IO;
  }
  weft_status st = cache_merge_write(f, path, tmp, sizeof tmp);
  flock(lockfd, LOCK_UN);
  close(lockfd);
  return st;
}

/* Under the lock: reads the cache as it is now, replaces this fabric's lanes in it and writes it back. */
static weft_status cache_merge_write(weft_fabric *f, const char *path, char *tmp, size_t tmplen) {
  cJSON *doc = load_doc(f, path, 0); /* whatever is wrong with it was said when it was read */
  if (!doc) {
    doc = cJSON_CreateObject();
    if (!doc) return WEFT_ERR_OUT_OF_MEMORY;
    cJSON_AddNumberToObject(doc, "format", CACHE_FORMAT);
    cJSON_AddStringToObject(doc, "weft_version", WEFT_VERSION_STRING);
    cJSON_AddItemToObject(doc, "lanes", cJSON_CreateArray());
  }
  cJSON *lanes = cJSON_GetObjectItemCaseSensitive(doc, "lanes");
  for (size_t i = 0; i < f->nlanes; i++) {
    weft_lane_slot *s = &f->lanes[i];
    char key[1024];
    lane_key(s, key, sizeof key);
    cJSON *lines = cJSON_CreateObject();
    int any = 0;
    for (int cls = 0; cls < WEFT_COST_CLASS_COUNT; cls++)
      for (int c = 0; c < lines_of(cls); c++) {
        const weft_cost_line *l = &s->cost[cls][c].line;
        if (l->source != WEFT_COST_MEASURED && l->source != WEFT_COST_CACHED) continue;
        char name[64];
        line_name(cls, c, name, sizeof name);
        cJSON *o = cJSON_AddObjectToObject(lines, name);
        cJSON_AddNumberToObject(o, "alpha", l->alpha);
        cJSON_AddNumberToObject(o, "beta", l->beta);
        cJSON_AddNumberToObject(o, "points", l->points);
        const weft_cost_state *st = &s->cost[cls][c];
        if (st->npts >= 2) {
          cJSON_AddItemToObject(o, "w", cJSON_CreateDoubleArray(st->pw, st->npts));
          cJSON_AddItemToObject(o, "t", cJSON_CreateDoubleArray(st->pt, st->npts));
        }
        any = 1;
      }
    if (!any) {
      cJSON_Delete(lines);
      continue;
    }
    /* replace this lane's entry */
    for (int k = cJSON_GetArraySize(lanes) - 1; k >= 0; k--) {
      const cJSON *e = cJSON_GetArrayItem(lanes, k);
      const cJSON *ek = cJSON_GetObjectItemCaseSensitive(e, "key");
      if (cJSON_IsString(ek) && strcmp(ek->valuestring, key) == 0) cJSON_DeleteItemFromArray(lanes, k);
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "key", key);
    cJSON_AddStringToObject(e, "lane", s->desc.name);
    cJSON_AddNumberToObject(e, "saved", (double)time(NULL));
    cJSON_AddItemToObject(e, "lines", lines);
    cJSON_AddItemToArray(lanes, e);
  }
  /* over the cap: the entries saved longest ago go (those of this save are the newest) */
  while (cJSON_GetArraySize(lanes) > CACHE_MAX_ENTRIES) {
    int oldest = 0;
    double t_old = 0;
    for (int k = 0; k < cJSON_GetArraySize(lanes); k++) {
      const cJSON *sv = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(lanes, k), "saved");
      double t = cJSON_IsNumber(sv) ? sv->valuedouble : 0;
      if (k == 0 || t < t_old) oldest = k, t_old = t;
    }
    cJSON_DeleteItemFromArray(lanes, oldest);
  }
  char *text = cJSON_Print(doc);
  cJSON_Delete(doc);
  if (!text) return WEFT_ERR_OUT_OF_MEMORY;
  weft_status st = WEFT_OK;
  snprintf(tmp, tmplen, "%s.XXXXXX", path);
  int fd = mkstemp(tmp); /* a name of this writer's own */
  int ok = fd >= 0 && fchmod(fd, 0644) == 0;
  if (fd >= 0) {
    size_t len = strlen(text), done = 0;
    while (ok && done < len) {
      ssize_t w = write(fd, text + done, len - done);
      if (w < 0 && errno == EINTR) continue;
      ok = w > 0;
      if (ok) done += (size_t)w;
    }
    ok = (close(fd) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
  }
  if (!ok) {
    /* an unwritable cache costs a re-measurement next time, nothing more */
    weft_note(f, 1, "weft: could not write the calibration cache %s (%s); it will be measured again next time", path,
              strerror(errno));
    st = WEFT_ERR_IO;
  }
  free(text);
  return st;
}
