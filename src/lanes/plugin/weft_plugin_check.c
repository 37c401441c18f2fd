/* weft_plugin_check.c - weft-plugin-check, the helper executable that runs a plugin's admission self-test.
 * The library spawns it (posix_spawn; never fork in a process that already runs threads) with the plugin
 * as an inherited file descriptor of a sealed private copy, and reads the verdict from a pipe:
 *
 *   weft-plugin-check PLUGIN_FD OUT_FD NAME [LANES [CPU_THREADS]]
 *
 * PLUGIN_FD is loaded through /proc/self/fd (the very bytes the caller hashed and will load), NAME is what
 * messages call it, LANES and CPU_THREADS are the fabric's options the plugin's probe sees. The verdict's
 * lines are those of weft_plugin_selftest (selftest.h). A plugin that crashes or hangs takes only this
 * process down. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "selftest.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr,
            "usage: weft-plugin-check PLUGIN_FD OUT_FD NAME [LANES [CPU_THREADS]]\n"
            "(run by the weft library to admit a plugin; not meant to be run by hand)\n");
    return 2;
  }
  char *end;
  long pfd = strtol(argv[1], &end, 10);
  if (*end || pfd < 0 || pfd > 1 << 20) return 2;
  long ofd = strtol(argv[2], &end, 10);
  if (*end || ofd < 0 || ofd > 1 << 20) return 2;
  char load[64];
  snprintf(load, sizeof load, "/proc/self/fd/%ld", pfd);
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.calibration = WEFT_CALIBRATION_OFF;
  desc.lanes = argc > 4 && argv[4][0] ? argv[4] : NULL;
  desc.cpu_threads = argc > 5 ? atoi(argv[5]) : 0;
  int rc = weft_plugin_selftest(load, argv[3], &desc, (int)ofd);
  /* The verdict is written; the plugin's lanes and runtime are not torn down (a plugin's teardown is not
   * what admission tests, and a leak checker at exit would turn its leaks into a refusal). */
  fflush(stdout);
  fflush(stderr);
  _exit(rc);
}
