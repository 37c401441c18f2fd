/* envnum.h - reading a whole number from an environment variable, the one way every tuning variable is read:
 * unset or empty is "use the default", anything that is not a whole number in [lo, hi] is a mistake the
 * caller tells about (never replaced by the default in silence). Base layer: no state, header only. */
#ifndef WEFT_ENVNUM_H
#define WEFT_ENVNUM_H

#include <errno.h>
#include <stdlib.h>

/* 0: NAME is unset or empty; 1: *out is its value, a whole number in [lo, hi]; -1: it is set to anything else
 * (the caller says so, quoting getenv(NAME)). */
static inline int weft_env_long(const char *name, long lo, long hi, long *out) {
  const char *e = getenv(name);
  if (!e || !e[0]) return 0;
  char *end;
  errno = 0;
  const long v = strtol(e, &end, 10);
  if (*end || end == e || errno || v < lo || v > hi) return -1;
  *out = v;
  return 1;
}

#endif
