/* selftest.h - the plugin admission self-test, shared by the library (plugin.c, which loads an admitted
 * plugin) and the helper executable weft-plugin-check (weft_plugin_check.c, which runs the test). */
#ifndef WEFT_PLUGIN_SELFTEST_H
#define WEFT_PLUGIN_SELFTEST_H

#include "weft_plugin.h"

/* dlopens `load` and checks its descriptor (`path` names it in messages); the handle, or NULL and the
 * reason. `full` gets the descriptor padded with empty slots (an older, smaller descriptor lacks the last). */
void *weft_plugin_open(const char *load, const char *path, weft_plugin_desc *full, char *why, size_t len);

/* Loads the plugin at `load`, probes it with `fdesc`, self-tests every lane and writes the findings to fd,
 * one line each, "tag\tname\tfield": first "weft-plugin-check\t<plugin ABI>\t<lane ABI>", then "desc\tname\t
 * kind", "refuse\t\treason" (the plugin as a whole), "ops\tlane\tHEX" (the admitted op set, WEFT_OP_BIT bits in
 * hex, just before its lane's "pass"), "pass\tlane\tsummary", "fail\tlane\treason",
 * "absent\tname\treason" (what its probe said is missing), for kind "npu" "npu\tlane\taccelN" (the device
 * it names, maybe empty) and "claim\tlane\treceipt" (its evidence slot's text), and last "end". Returns 0. */
int weft_plugin_selftest(const char *load, const char *path, const weft_fabric_desc *fdesc, int fd);

#endif
