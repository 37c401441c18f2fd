/* cli_devices.c - `weft devices`: every lane the fabric opened (name, kind, device, driver, contracts,
 * details; for a plugin lane what its admission verified and what the plugin only claimed), every lane looked
 * for and absent, with the reason, and the NPUs /sys/class/accel lists; as text or JSON. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "weft_plugin.h"

void weft_cli_devices_help(FILE *out) {
  fprintf(out,
          "Usage: weft devices [--json] [--lanes LIST] [--cpu-threads N]\n"
          "\n"
          "Lists every lane of the fabric on this machine: its kind, the device and driver behind it, the\n"
          "precision contracts it honours, and lane-specific details. Then lists every lane that was looked for\n"
          "and is absent, with the reason (no driver, built without it, left out by --lanes, a plugin refused at\n"
          "admission), and the NPUs the kernel lists (/sys/class/accel) with how they could be reached. For a\n"
          "plugin lane it says what admission verified (the self-test's bits; for an NPU, that the device's own\n"
          "busy counter advanced), which ops it refused and why (a plugin lane offers only the ops that passed),\n"
          "and what the plugin only claimed.\n"
          "\n"
          "Options:\n"
          "  --json             print the same as JSON\n"
          "  --lanes LIST       open only these lane kinds or names, comma-separated (cpu,vulkan:0)\n"
          "  --cpu-threads N    threads the CPU lane may use (default: one per CPU this process may run on)\n"
          "  -h, --help         show this help\n");
}

/* The contracts in `mask` as "exact, fp32". */
static void contracts_text(weft_contract_mask mask, char *buf, size_t len) {
  buf[0] = '\0';
  for (int c = 0; c < WEFT_CONTRACT_COUNT; c++) {
    if (!(mask & WEFT_CONTRACT_BIT(c))) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", weft_contract_str((weft_contract)c));
  }
  if (!buf[0]) snprintf(buf, len, "none");
}

/* The fabric's lane of kind "npu" whose admission verified that accel device `dev` ran its self-test (its
 * npu_busy_time_us advanced), or NULL. */
static const char *npu_lane(weft_fabric *f, const char *dev) {
  char want[64];
  snprintf(want, sizeof want, "%s's npu_busy_time_us advanced", dev);
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK || strcmp(li.kind, "npu") != 0) continue;
    const char *note = weft_plugin_admission(li.name);
    if (note && strstr(note, want)) return li.name;
  }
  return NULL;
}

/* The first absent entry that says an NPU was claimed and not verified, or NULL. */
static const char *npu_unverified(weft_fabric *f) {
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) == WEFT_OK && strstr(reason, "npu claimed, not verified"))
      return name;
  }
  return NULL;
}

#define NPU_MAX 16

static void print_npus(weft_fabric *f) {
  weft_npu_info npu[NPU_MAX];
  size_t n = 0;
  if (weft_npu_probe(npu, NPU_MAX, &n) != WEFT_OK || n == 0) {
    printf("\nNPU: none found (no device in /sys/class/accel)\n");
    return;
  }
  const char *claimed = npu_unverified(f);
  for (size_t i = 0; i < n && i < NPU_MAX; i++) {
    const char *lane = npu_lane(f, npu[i].device);
    if (lane)
      printf("\nNPU: %s (%s) present, served by plugin lane %s (verified: its npu_busy_time_us advanced during the "
             "lane's self-test)\n",
             npu[i].device, npu[i].driver, lane);
    else if (claimed)
      printf("\nNPU: %s (%s) present; %s claimed an NPU lane, not verified (see absent)\n", npu[i].device,
             *npu[i].driver ? npu[i].driver : "no driver", claimed);
    else printf("\nNPU: %s (%s) present, no plugin loaded\n", npu[i].device, *npu[i].driver ? npu[i].driver : "no driver");
    printf("  reach      %s\n", npu[i].reach);
  }
}

/* The ops a lane offers: "every op", "the version-1 set (matmul .. softmax_xent)", or their names. */
static void ops_text(uint64_t ops, char *buf, size_t len) {
  if (ops == WEFT_OPS_ALL) {
    snprintf(buf, len, "every op (%d)", WEFT_OP_COUNT);
    return;
  }
  size_t used = 0;
  buf[0] = '\0';
  if ((ops & WEFT_OPS_V1) == WEFT_OPS_V1) {
    used = (size_t)snprintf(buf, len, "matmul .. softmax_xent (the version-1 set)");
    ops &= ~WEFT_OPS_V1;
  }
  for (int k = 0; k < WEFT_OP_COUNT && used < len; k++)
    if (ops & WEFT_OP_BIT(k))
      used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", weft_op_kind_str((weft_op_kind)k));
  if (!buf[0]) snprintf(buf, len, "none");
}

static void print_text(weft_fabric *f) {
  size_t nl = weft_fabric_lane_count(f), na = weft_fabric_absent_count(f);
  printf("weft %s: %zu lane%s\n", weft_version(), nl, nl == 1 ? "" : "s");
  for (size_t i = 0; i < nl; i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK) continue;
    char contracts[128];
    contracts_text(li.contracts, contracts, sizeof contracts);
    printf("\n%s%s\n", li.name,
           !li.failed ? "" : li.revivable ? "  (down: routed again when it comes back)" : "  (FAILED: out of the fabric)");
    printf("  kind       %s\n", li.kind);
    printf("  device     %s\n", *li.device ? li.device : "-");
    printf("  driver     %s\n", *li.driver ? li.driver : "-");
    printf("  contracts  %s\n", contracts);
    char ops[1024];
    ops_text(li.ops, ops, sizeof ops);
    printf("  ops        %s\n", ops);
    printf("  details    %s\n", *li.details ? li.details : "-");
    const char *admission = weft_plugin_admission(li.name);
    if (admission) printf("  admission  %s\n", admission);
  }
  if (na) printf("\nabsent (%zu)\n", na);
  for (size_t i = 0; i < na; i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) != WEFT_OK) continue;
    printf("  %-10s %s\n", name, reason);
  }
  print_npus(f);
}

static cJSON *build_json(weft_fabric *f) {
  cJSON *root = cJSON_CreateObject();
  if (!cJSON_AddStringToObject(root, "weft_version", weft_version())) goto oom;
  cJSON *lanes = cJSON_AddArrayToObject(root, "lanes");
  if (!lanes) goto oom;
  for (size_t i = 0; i < weft_fabric_lane_count(f); i++) {
    weft_lane_info li;
    if (weft_fabric_lane_info(f, i, &li) != WEFT_OK) continue;
    cJSON *l = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(lanes, l)) {
      cJSON_Delete(l);
      goto oom;
    }
    if (!cJSON_AddNumberToObject(l, "index", (double)i) ||
        !cJSON_AddStringToObject(l, "name", weft_cli_str(li.name)) ||
        !cJSON_AddStringToObject(l, "kind", weft_cli_str(li.kind)) ||
        !cJSON_AddStringToObject(l, "device", weft_cli_str(li.device)) ||
        !cJSON_AddStringToObject(l, "driver", weft_cli_str(li.driver)))
      goto oom;
    cJSON *contracts = cJSON_AddArrayToObject(l, "contracts");
    if (!contracts || !cJSON_AddStringToObject(l, "details", weft_cli_str(li.details)) ||
        !cJSON_AddBoolToObject(l, "failed", li.failed))
      goto oom;
    cJSON *ops = cJSON_AddArrayToObject(l, "ops");
    if (!ops) goto oom;
    for (int k = 0; k < WEFT_OP_COUNT; k++)
      if ((li.ops & WEFT_OP_BIT(k)) && !cJSON_AddItemToArray(ops, cJSON_CreateString(weft_op_kind_str((weft_op_kind)k))))
        goto oom;
    const char *admission = weft_plugin_admission(li.name);
    if (!(admission ? cJSON_AddStringToObject(l, "admission", admission) : cJSON_AddNullToObject(l, "admission")))
      goto oom;
    for (int c = 0; c < WEFT_CONTRACT_COUNT; c++)
      if ((li.contracts & WEFT_CONTRACT_BIT(c)) &&
          !cJSON_AddItemToArray(contracts, cJSON_CreateString(weft_contract_str((weft_contract)c))))
        goto oom;
  }
  cJSON *absent = cJSON_AddArrayToObject(root, "absent");
  if (!absent) goto oom;
  for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
    const char *name, *reason;
    if (weft_fabric_absent_info(f, i, &name, &reason) != WEFT_OK) continue;
    cJSON *a = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(absent, a)) {
      cJSON_Delete(a);
      goto oom;
    }
    if (!cJSON_AddStringToObject(a, "name", weft_cli_str(name)) ||
        !cJSON_AddStringToObject(a, "reason", weft_cli_str(reason)))
      goto oom;
  }
  cJSON *npus = cJSON_AddArrayToObject(root, "npus");
  weft_npu_info npu[NPU_MAX];
  size_t nnpu = 0;
  if (!npus) goto oom;
  if (weft_npu_probe(npu, NPU_MAX, &nnpu) != WEFT_OK) nnpu = 0;
  for (size_t i = 0; i < nnpu && i < NPU_MAX; i++) {
    const char *lane = npu_lane(f, npu[i].device);
    cJSON *e = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(npus, e)) {
      cJSON_Delete(e);
      goto oom;
    }
    if (!cJSON_AddStringToObject(e, "device", npu[i].device) || !cJSON_AddStringToObject(e, "driver", npu[i].driver) ||
        !cJSON_AddStringToObject(e, "reach", npu[i].reach) ||
        !(lane ? cJSON_AddStringToObject(e, "served_by", lane) : cJSON_AddNullToObject(e, "served_by")))
      goto oom;
  }
  return root;
oom:
  cJSON_Delete(root);
  return NULL;
}

int weft_cli_devices(int argc, char **argv) {
  static const struct option longopts[] = {
      {"json", no_argument, NULL, 'j'},
      {"lanes", required_argument, NULL, 'l'},
      {"cpu-threads", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int json = 0;
  const char *lanes = NULL;
  long threads = 0;
  optind = 0; /* glibc: 0 restarts getopt from scratch */
  opterr = 0;
  int c;
  if (weft_cli_check_long_options("devices", argc, argv, longopts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 'l':
      if (weft_cli_parse_lanes("devices", "--lanes", optarg, &lanes)) return WEFT_CLI_USAGE;
      break;
    case 't':
      if (weft_cli_parse_long("devices", "--cpu-threads", optarg, 1, 4096, &threads)) return WEFT_CLI_USAGE;
      break;
    case 'h': weft_cli_devices_help(stdout); return WEFT_CLI_OK;
    default: return weft_cli_option_error("devices", c, argv);
    }
  }
  if (optind < argc) return weft_cli_usage_error("devices", "takes no arguments, got '%s'", argv[optind]);

  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = lanes;
  desc.cpu_threads = (int)threads;
  desc.calibration = WEFT_CALIBRATION_OFF; /* listing lanes measures nothing and writes nothing */
  weft_fabric *f = weft_cli_open("devices", &desc);
  if (!f) return WEFT_CLI_FAILED;
  int rc = WEFT_CLI_OK;
  if (json) rc = weft_cli_print_json(build_json(f));
  else print_text(f);
  weft_fabric_close(f);
  return rc;
}
