/* cli_serve.c - `weft serve`: a fabric whose browser lanes wait for tabs, and the web pages (the Bench page,
 * the worker page) served from the same port. Says when a tab joins (checking its first matmul against the
 * CPU lane bit for bit), which ops each tab ran on which of its lanes (its GPU or its CPU) as that changes,
 * and when it leaves, until interrupted. */
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

void weft_cli_serve_help(FILE *out) {
  fprintf(out,
          "Usage: weft serve [--port P] [--listen HOST] [--web DIR] [--secret-file F] [--slots N]\n"
          "                  [--tls-cert F --tls-key F] [--public-name NAME[:PORT],...]\n"
          "\n"
          "Opens a fabric whose lanes browser:0 .. browser:N-1 are browser tabs: open the worker page at the\n"
          "address it prints (http://HOST:P/worker/#token=..., the token is new each run) in a browser with\n"
          "WebGPU and the tab joins as a lane once it passed a bit-exact self-test, computing every op of\n"
          "weft's table with the CPU lane's bits (the exact contract): large matmuls, gelus, layernorms and\n"
          "causal softmaxes on its GPU, the rest through weft.wasm. Add &gpu_min=N to the page's address\n"
          "to set the elements of work from which the tab uses its GPU (default 262144; 0: always; a\n"
          "fallback adapter, a CPU implementation of WebGPU such as SwiftShader, only when it is set).\n"
          "The Bench page is served at http://HOST:P/bench/.\n"
          "Prints a line when a tab joins (with a check of its first matmul, and the ops it runs on its GPU\n"
          "when they are large: matmul, gelu, layernorm, the causal softmax and their backwards, each\n"
          "once it passed the self-test there; the others run through WebAssembly), is refused, or leaves,\n"
          "and every few seconds, while it changes, how many ops of each kind each tab ran on which of its\n"
          "lanes (webgpu, or cpu: JavaScript and WebAssembly); runs until Ctrl-C.\n"
          "Tabs must dial this server by a name of its own (the address bound; localhost and\n"
          "127.0.0.1 on loopback; --public-name), with the token and from a page of this server.\n"
          "\n"
          "Options:\n"
          "  --port P           port to listen on (default 8080; 0 picks a free one)\n"
          "  --listen HOST      address to bind (default 127.0.0.1). Any address other than loopback\n"
          "                     requires --secret-file; tabs then prove the secret (HMAC-SHA256 of a fresh\n"
          "                     nonce), given to the page as .../worker/#secret=... or typed into it.\n"
          "                     Browsers allow WebGPU only in secure contexts: off loopback, serve https\n"
          "  --tls-cert F, --tls-key F  serve https and wss with this certificate and key (PEM)\n"
          "  --web DIR          the web folder to serve (default: the one built next to this program,\n"
          "                     <build>/web, or the installed share/weft/web)\n"
          "  --secret-file F    a shared secret of at least 16 bytes (also WEFT_BROWSER_SECRET_FILE)\n"
          "  --slots N          browser lanes to offer, 1..64 (default 4; also WEFT_BROWSER_SLOTS)\n"
          "  --public-name N    further names tabs may dial this server by, comma-separated (a DNS name\n"
          "                     when serving off loopback; also WEFT_BROWSER_HOSTS)\n"
          "\n"
          "Lanes of the fabric other than the tabs: the CPU, to check each tab's bits against.\n");
}

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The web folder next to this program: <build>/web in a build tree, <prefix>/share/weft/web installed. */
static int default_web(char *out, size_t len) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 0;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return 0;
  *slash = 0;
  snprintf(out, len, "%s/web", exe);
  if (is_dir(out)) return 1;
  snprintf(out, len, "%s/../share/weft/web", exe);
  return is_dir(out);
}

/* A 64 x 64 x 64 exact matmul on the tab and on the CPU: the same bits, and how long the tab took. What is
 * compared is what actually ran: a tab that fails mid-check (a short read, a bad reply) leaves, the core
 * computes its result again elsewhere, and that is said rather than a verdict on the tab's bits. */
static void check_tab(weft_fabric *f, size_t tab, size_t cpu) {
  enum { N = 64 };
  static float a[N * N], b[N * N], c1[N * N], c2[N * N];
  for (int i = 0; i < N * N; i++) {
    a[i] = (float)((i * 7919) % 1009) / 1009.0f - 0.5f;
    b[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
  }
  int64_t d[2] = {N, N};
  weft_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  weft_op_desc on_tab = WEFT_OP_DESC_INIT, on_cpu = WEFT_OP_DESC_INIT;
  on_tab.lane = (int)tab;
  on_cpu.lane = (int)cpu;
  double t0 = weft_cli_now(), t1 = t0;
  weft_status st = weft_tensor_create(f, 2, d, a, &ta);
  if (!st) st = weft_tensor_create(f, 2, d, b, &tb);
  if (!st) st = weft_tensor_create(f, 2, d, NULL, &tc);
  if (!st) st = weft_op_matmul(f, &on_tab, ta, 0, tb, 0, tc);
  if (!st) st = weft_tensor_read(tc, c1, N * N);
  t1 = weft_cli_now();
  int computed_on = weft_fabric_last_lane(f);
  weft_lane_info ti, ci;
  int left = weft_fabric_lane_info(f, tab, &ti) != WEFT_OK || ti.failed;
  if (!st && (left || computed_on != (int)tab)) {
    const char *on = computed_on >= 0 && !weft_fabric_lane_info(f, (size_t)computed_on, &ci) ? ci.name : "another lane";
    printf("  check: the tab failed during its check matmul and %s; the result was computed again on %s, so this "
           "says nothing of the tab's bits\n", left ? "was dropped (it left)" : "did not run it", on);
    weft_tensor_destroy(ta);
    weft_tensor_destroy(tb);
    weft_tensor_destroy(tc);
    fflush(stdout);
    return;
  }
  if (!st) st = weft_op_matmul(f, &on_cpu, ta, 0, tb, 0, tc);
  if (!st) st = weft_tensor_read(tc, c2, N * N);
  weft_tensor_destroy(ta);
  weft_tensor_destroy(tb);
  weft_tensor_destroy(tc);
  if (st) {
    printf("  check: the tab's matmul failed: %s\n", weft_fabric_last_error(f));
  } else {
    size_t diff = 0;
    for (int i = 0; i < N * N; i++) diff += memcmp(&c1[i], &c2[i], 4) != 0;
    printf("  check: matmul 64x64x64 exact on the tab in %.1f ms (upload, shader build, run, read back): %s\n",
           (t1 - t0) * 1e3,
           diff ? "DIFFERENT bits from the CPU lane" : "bit-identical to the CPU lane");
    if (diff) printf("  %zu of %d elements differ: this tab does not honour the exact contract\n", diff, N * N);
  }
  fflush(stdout);
}

/* The counts of a tab's details ("matmul 3 on webgpu, 1 on cpu; gelu 2 on cpu") without those of relu,
 * the heartbeat this command sends each tab every second, so that only the work of the tab's users makes
 * a new line. */
static void ran_key(const char *ran, char *out, size_t cap) {
  size_t used = 0;
  out[0] = 0;
  while (*ran) {
    size_t n = strcspn(ran, ";");
    if (strncmp(ran, "relu ", 5) != 0 && used + n + 1 < cap) {
      memcpy(out + used, ran, n);
      used += n;
      out[used++] = ';';
      out[used] = 0;
    }
    ran += n;
    while (*ran == ';' || *ran == ' ') ran++;
  }
}

/* 1 when every address HOST names is on loopback (127/8, ::1), 0 when one is not, -1 when it does not
 * resolve (the browser lane then says why). */
static int host_on_loopback(const char *host) {
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, NULL, &hints, &ai) || !ai) return -1;
  int all = 1;
  for (const struct addrinfo *a = ai; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const unsigned char *b = (const unsigned char *)&((const struct sockaddr_in *)a->ai_addr)->sin_addr;
      all &= b[0] == 127;
    } else if (a->ai_family == AF_INET6) {
      const struct in6_addr *b = &((const struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
      all &= IN6_IS_ADDR_LOOPBACK(b) || (IN6_IS_ADDR_V4MAPPED(b) && b->s6_addr[12] == 127);
    } else {
      all = 0;
    }
  }
  freeaddrinfo(ai);
  return all;
}

int weft_cli_serve(int argc, char **argv) {
  static const struct option opts[] = {{"port", required_argument, NULL, 'p'},
                                       {"listen", required_argument, NULL, 'l'},
                                       {"web", required_argument, NULL, 'w'},
                                       {"secret-file", required_argument, NULL, 's'},
                                       {"slots", required_argument, NULL, 'n'},
                                       {"tls-cert", required_argument, NULL, 'c'},
                                       {"tls-key", required_argument, NULL, 'k'},
                                       {"public-name", required_argument, NULL, 'P'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  long port = 8080, slots = 0;
  const char *host = "127.0.0.1", *web = NULL, *secret_file = NULL, *cert = NULL, *key = NULL;
  optind = 1;
  opterr = 0;
  int c;
  if (weft_cli_check_long_options("serve", argc, argv, opts)) return WEFT_CLI_USAGE;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
    case 'p':
      if (weft_cli_parse_long("serve", "--port", optarg, 0, 65535, &port)) return WEFT_CLI_USAGE;
      break;
    case 'l': host = optarg; break;
    case 'w': web = optarg; break;
    case 's': secret_file = optarg; break;
    case 'c': cert = optarg; break;
    case 'k': key = optarg; break;
    case 'P': setenv("WEFT_BROWSER_HOSTS", optarg, 1); break;
    case 'n':
      if (weft_cli_parse_long("serve", "--slots", optarg, 1, 64, &slots)) return WEFT_CLI_USAGE;
      break;
    case 'h': weft_cli_serve_help(stdout); return WEFT_CLI_OK;
    default: return weft_cli_option_error("serve", c, argv);
    }
  }
  if (optind < argc) return weft_cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
  if (!cert != !key) return weft_cli_usage_error("serve", "--tls-cert and --tls-key go together");
  char webbuf[PATH_MAX + 32];
  if (web && !is_dir(web)) return weft_cli_usage_error("serve", "--web '%s' is not a folder", web);
  /* off loopback without a secret: a usage error, as `weft worker` makes it (the browser lane refuses it too) */
  const char *env_secret = getenv("WEFT_BROWSER_SECRET_FILE");
  if (!secret_file && !(env_secret && env_secret[0]) && host_on_loopback(host) == 0)
    return weft_cli_usage_error("serve", "--listen %s is off loopback: tabs there must prove a shared secret; give "
                                         "--secret-file F (at least 16 bytes)", host);
  if (!web && default_web(webbuf, sizeof webbuf)) web = webbuf;
  /* The browser provider reads these; the fabric's own option carries the address. */
  if (web) setenv("WEFT_BROWSER_WEB", web, 1);
  if (secret_file) setenv("WEFT_BROWSER_SECRET_FILE", secret_file, 1);
  if (cert) {
    setenv("WEFT_BROWSER_TLS_CERT", cert, 1);
    setenv("WEFT_BROWSER_TLS_KEY", key, 1);
  }
  if (slots) {
    char s[16];
    snprintf(s, sizeof s, "%ld", slots);
    setenv("WEFT_BROWSER_SLOTS", s, 1);
  }
  char addr[300];
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%ld" : "%s:%ld", host, port);
  weft_fabric_desc desc = WEFT_FABRIC_DESC_INIT;
  desc.lanes = "cpu,browser";
  desc.browser = addr;
  /* Tabs come and go: the router measures each as it works rather than sweeping it on arrival. */
  desc.calibration = WEFT_CALIBRATION_OFF;
  weft_fabric *f = weft_cli_open("serve", &desc);
  if (!f) return WEFT_CLI_FAILED;
  size_t n = weft_fabric_lane_count(f), cpu = 0, first = n;
  weft_fabric_lane_find(f, "cpu", &cpu);
  for (size_t i = 0; i < n && first == n; i++) {
    weft_lane_info li;
    if (!weft_fabric_lane_info(f, i, &li) && strcmp(li.kind, "browser") == 0) first = i;
  }
  if (first == n) {
    for (size_t i = 0; i < weft_fabric_absent_count(f); i++) {
      const char *name, *why;
      if (!weft_fabric_absent_info(f, i, &name, &why) && strcmp(name, "browser") == 0)
        fprintf(stderr, "weft serve: no browser lanes: %s\n", why);
    }
    weft_fabric_close(f);
    return WEFT_CLI_FAILED;
  }
  weft_lane_info li;
  weft_fabric_lane_info(f, first, &li);
  const char *url = strstr(li.details, "http");
  char base[400] = "", worker[400] = "";
  if (url) sscanf(url, "%399[^ ]", base);
  snprintf(worker, sizeof worker, "%s", base);
  char *w = strstr(base, "/worker/");
  if (w) *w = 0;
  printf("weft serve: listening on %s\n", base);
  printf("weft serve: worker page: %s\n", worker);
  printf("  open it in a browser with WebGPU to add its GPU as a lane (the token in it lets the tab in); the Bench "
         "page: %s/bench/\n", base);
  if (!web) printf("  (no web folder found next to this program: pass --web DIR to serve the pages)\n");
  fflush(stdout);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int *was_up = calloc(n, sizeof *was_up);
  /* Each tab's counts as last printed (without the heartbeats), and as last seen. */
  char (*said)[1024] = calloc(n, sizeof *said), (*seen)[1024] = calloc(n, sizeof *seen);
  double next_beat = 0, next_ran = 0;
  while (!stop_requested && was_up && said && seen) {
    weft_fabric_revive(f, NULL);
    /* A tab that left is noticed by the next op sent to it: a tiny one per second keeps the list true. */
    int beat = weft_cli_now() >= next_beat;
    if (beat) next_beat = weft_cli_now() + 1.0;
    /* Which lane of each tab computed its ops (the lane's details end with the counts): said as it changes. */
    int ran_due = weft_cli_now() >= next_ran;
    if (ran_due) next_ran = weft_cli_now() + 5.0;
    for (size_t i = first; i < n; i++) {
      if (weft_fabric_lane_info(f, i, &li) || strcmp(li.kind, "browser") != 0) continue;
      if (!li.failed && beat && was_up[i]) {
        int64_t d[1] = {1};
        weft_tensor *t = NULL;
        weft_op_desc od = WEFT_OP_DESC_INIT;
        od.lane = (int)i;
        if (!weft_tensor_create(f, 1, d, NULL, &t)) weft_op_relu(f, &od, t, t);
        weft_tensor_destroy(t);
        weft_fabric_lane_info(f, i, &li);
      }
      if (!li.failed && !was_up[i]) {
        printf("weft serve: a tab joined as %s: %s (%s)\n", li.name, li.device, li.details);
        check_tab(f, i, cpu);
        weft_fabric_lane_info(f, i, &li);
        if (li.failed) printf("weft serve: the tab of %s left\n", li.name);
      } else if (li.failed && was_up[i]) {
        if (seen[i][0]) printf("weft serve: the tab of %s left; it ran: %s\n", li.name, seen[i]);
        else printf("weft serve: the tab of %s left\n", li.name);
        said[i][0] = seen[i][0] = 0;
      }
      const char *ran = li.failed ? NULL : strstr(li.details, "; ran: ");
      if (ran) snprintf(seen[i], sizeof seen[i], "%s", ran + 7);
      char key[1024];
      if (ran && ran_due && (ran_key(seen[i], key, sizeof key), strcmp(said[i], key) != 0)) {
        snprintf(said[i], sizeof said[i], "%s", key);
        if (key[0]) printf("weft serve: %s ran: %s\n", li.name, seen[i]);
      }
      was_up[i] = !li.failed;
      fflush(stdout);
    }
    usleep(100000);
  }
  free(was_up);
  free(said);
  free(seen);
  printf("weft serve: stopping\n");
  weft_fabric_close(f);
  return WEFT_CLI_OK;
}
