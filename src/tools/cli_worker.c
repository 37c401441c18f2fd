/* cli_worker.c - `weft worker`: serves this machine's lanes to other machines' fabrics over the wire
 * protocol (docs/PROTOCOL.md). Loopback by default; any other address needs a shared secret and runs TLS. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "net/worker.h"

void weft_cli_worker_help(FILE *out) {
  fprintf(out,
          "Usage: weft worker [--listen HOST:PORT] [--lanes LIST] [--secret-file F] [--tls] [--identity NAME]\n"
          "                   [--max-frame-mib N] [--max-resident-mib N] [--max-total-mib N] [--max-clients N]\n"
          "                   [--max-pending N] [--handshake-timeout-ms N] [--idle-timeout-s N]\n"
          "                   [--max-streams N]\n"
          "\n"
          "Serves this machine's lanes to remote fabrics (lanes remote:<host:port>/<lane> on the client).\n"
          "Tensors stay resident here between ops, so weights travel once. Runs until killed.\n"
          "\n"
          "Options:\n"
          "  --listen HOST:PORT     address to bind (default 127.0.0.1:7070; port 0 picks a free port). Any\n"
          "                         address other than loopback requires --secret-file, and runs TLS\n"
          "  --lanes LIST           the lanes to serve (as for weft devices; default: all found)\n"
          "  --secret-file F        a shared secret (>= 16 bytes). Authentication is mutual: the worker proves\n"
          "                         it knows the secret to the client, then the client to the worker\n"
          "                         (HMAC-SHA256 over both sides' fresh nonces and the worker's identity), so\n"
          "                         it never crosses the wire. Clients set WEFT_REMOTE_SECRET_FILE\n"
          "  --tls                  run every connection inside TLS 1.3 on loopback too (always on for any\n"
          "                         other address): a pre-shared key derived from the secret (HKDF-SHA256),\n"
          "                         TLS_AES_128_GCM_SHA256, no certificates; needs --secret-file. Clients on\n"
          "                         loopback set WEFT_REMOTE_TLS=1\n"
          "  --identity NAME        the name this worker proves (bound into both proofs and shown in the\n"
          "                         client's lane details; default HOSTNAME:PORT); a client pins it with\n"
          "                         WEFT_REMOTE=host:port=NAME or WEFT_REMOTE_IDENTITY=NAME\n"
          "  --max-frame-mib N      largest frame a client may send (default 64)\n"
          "  --max-resident-mib N   tensor bytes one connection may hold (default 1024)\n"
          "  --max-total-mib N      tensor and frame-buffer bytes all connections together may hold (default:\n"
          "                         half this machine's physical memory)\n"
          "  --max-clients N        connections past the handshake served at once (default 64)\n"
          "  --max-pending N        connections still in the handshake held at once, on their own cap; when\n"
          "                         full the oldest is dropped for a newcomer (default 64)\n"
          "  --handshake-timeout-ms N  time from accept to a complete hello (and TLS and auth, with a secret); a\n"
          "                         connection that takes longer is dropped (default 5000)\n"
          "  --idle-timeout-s N     an authenticated client silent this long between frames is dropped\n"
          "                         (default 3600; 0 = never)\n"
          "  --max-streams N        connections one client may stripe a large write or read over (its own\n"
          "                         included; each joins its session with a proof bound to it and counts\n"
          "                         against --max-clients); 1 to 64 (1 = none), default this machine's\n"
          "                         cores, at most 8.\n"
          "                         Clients ask with WEFT_REMOTE_STREAMS (default: their cores, at most 8)\n"
          "\n"
          "Prints 'weft worker: listening on HOST:PORT' once bound (the port actually bound).\n");
}

/* Connection events: one line each on stderr, with the time. */
static void on_log(void *ctx, const char *line) {
  (void)ctx;
  time_t now = time(NULL);
  struct tm tm;
  char ts[32] = "";
  if (localtime_r(&now, &tm)) strftime(ts, sizeof ts, "%H:%M:%S", &tm);
  fprintf(stderr, "weft worker: %s %s\n", ts, line);
}

static void on_listen(void *ctx, const char *host, int port) {
  (void)ctx;
  printf("weft worker: listening on %s:%d\n", host, port);
  fflush(stdout);
}

int weft_cli_worker(int argc, char **argv) {
  static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                       {"lanes", required_argument, NULL, 'L'},
                                       {"secret-file", required_argument, NULL, 's'},
                                       {"tls", no_argument, NULL, 't'},
                                       {"identity", required_argument, NULL, 'i'},
                                       {"max-frame-mib", required_argument, NULL, 'f'},
                                       {"max-resident-mib", required_argument, NULL, 'r'},
                                       {"max-total-mib", required_argument, NULL, 'T'},
                                       {"max-clients", required_argument, NULL, 'C'},
                                       {"max-pending", required_argument, NULL, 'P'},
                                       {"handshake-timeout-ms", required_argument, NULL, 'H'},
                                       {"idle-timeout-s", required_argument, NULL, 'I'},
                                       {"max-streams", required_argument, NULL, 'S'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  weft_net_worker_desc d = {0};
  const char *secret_file = NULL;
  long frame_mib = 64, resident_mib = 1024, total_mib = 0, clients = 64, pending = 64, handshake_ms = 5000,
       idle_s = 3600, streams = 0;
  optind = 1;
  opterr = 0;
  int c;
  if (weft_cli_check_long_options("worker", argc, argv, opts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
    case 'l': d.listen = optarg; break;
    case 'L':
      if (weft_cli_parse_lanes("worker", "--lanes", optarg, &d.lanes)) return WEFT_CLI_USAGE;
      break;
    case 's': secret_file = optarg; break;
    case 't': d.tls = 1; break;
    case 'i':
      if (!optarg[0] || strlen(optarg) > WEFT_NET_MAX_IDENTITY)
        return weft_cli_usage_error("worker", "--identity wants 1 to %u bytes", WEFT_NET_MAX_IDENTITY);
      d.identity = optarg;
      break;
    case 'f':
      if (weft_cli_parse_long("worker", "--max-frame-mib", optarg, 1, 1024, &frame_mib)) return WEFT_CLI_USAGE;
      break;
    case 'r':
      if (weft_cli_parse_long("worker", "--max-resident-mib", optarg, 1, 1 << 20, &resident_mib))
        return WEFT_CLI_USAGE;
      break;
    case 'T':
      if (weft_cli_parse_long("worker", "--max-total-mib", optarg, 1, 1L << 30, &total_mib)) return WEFT_CLI_USAGE;
      break;
    case 'C':
      if (weft_cli_parse_long("worker", "--max-clients", optarg, 1, 65536, &clients)) return WEFT_CLI_USAGE;
      break;
    case 'P':
      if (weft_cli_parse_long("worker", "--max-pending", optarg, 1, 65536, &pending)) return WEFT_CLI_USAGE;
      break;
    case 'H':
      if (weft_cli_parse_long("worker", "--handshake-timeout-ms", optarg, 1, 600000, &handshake_ms))
        return WEFT_CLI_USAGE;
      break;
    case 'I':
      if (weft_cli_parse_long("worker", "--idle-timeout-s", optarg, 0, 1L << 20, &idle_s)) return WEFT_CLI_USAGE;
      break;
    case 'S':
      if (weft_cli_parse_long("worker", "--max-streams", optarg, 1, WEFT_NET_MAX_STREAMS, &streams))
        return WEFT_CLI_USAGE;
      break;
    case 'h': weft_cli_worker_help(stdout); return WEFT_CLI_OK;
    default: return weft_cli_option_error("worker", c, argv);
    }
  }
  if (optind < argc) return weft_cli_usage_error("worker", "unexpected argument '%s'", argv[optind]);
  if (d.lanes) {
    /* --lanes as for weft devices: a word that names no lane kind or name fails, listing the lanes (the
     * worker's own open would drop it without a word while the rest of the filter opens) */
    weft_fabric_desc check = WEFT_FABRIC_DESC_INIT;
    check.lanes = d.lanes;
    check.calibration = WEFT_CALIBRATION_OFF;
    weft_fabric *f = weft_cli_open("worker", &check);
    if (!f) return WEFT_CLI_FAILED;
    weft_fabric_close(f);
  }
  static uint8_t secret[4096];
  size_t secret_len = 0;
  char err[512] = "";
  if (secret_file) {
    if (weft_net_read_secret(secret_file, secret, sizeof secret, &secret_len, err, sizeof err)) {
      fprintf(stderr, "weft worker: %s\n", err);
      return WEFT_CLI_FAILED;
    }
    d.secret = secret;
    d.secret_len = secret_len;
  }
  d.limits.max_frame = (uint32_t)((uint64_t)frame_mib << 20 > UINT32_MAX ? UINT32_MAX : (uint64_t)frame_mib << 20);
  d.limits.max_resident = (uint64_t)resident_mib << 20;
  d.max_total_resident = (uint64_t)total_mib << 20; /* 0: the default, from the machine's memory */
  d.max_clients = (int)clients;
  d.max_pending = (int)pending;
  d.max_streams = (int)streams; /* 0: the default, from this machine's cores */
  d.handshake_timeout_ms = (int)handshake_ms;
  d.idle_timeout_ms = idle_s ? (int)(idle_s * 1000 > 2000000000 ? 2000000000 : idle_s * 1000) : -1;
  d.on_listen = on_listen;
  d.on_log = on_log;
  weft_status st = weft_net_worker_run(&d, err, sizeof err);
  /* an address that cannot be read or resolved, or options that do not go together: a usage error */
  if (st == WEFT_ERR_INVALID_ARGUMENT) return weft_cli_usage_error("worker", "%s", err);
  fprintf(stderr, "weft worker: %s\n", err);
  return WEFT_CLI_FAILED;
}
