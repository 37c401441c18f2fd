/* weft.c - the `weft` command-line tool: the command table, top-level help and version, and dispatch to
 * the subcommands (cli_<name>.c). A new subcommand is one line in `commands` plus its run and help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#ifdef WEFT_HAVE_MPI
#include "net/mpi.h"
#endif

static const weft_cli_command commands[] = {
    {"devices", "list the lanes found on this machine, the contracts they honour, and why others are absent",
     weft_cli_devices, weft_cli_devices_help},
    {"bench", "time matmuls on every lane and routed; crossovers; check that exact lanes agree bit for bit",
     weft_cli_bench, weft_cli_bench_help},
    {"calibrate", "measure every lane's fixed cost and throughput now, and cache them for the router",
     weft_cli_calibrate, weft_cli_calibrate_help},
    {"route", "where would an op of this shape run, and why (--explain: every lane's predicted cost)",
     weft_cli_route, weft_cli_route_help},
    {"mlp", "train a small MLP on the handwritten digits with every op on the fabric; where the ops ran",
     weft_cli_mlp, weft_cli_mlp_help},
    {"gpt", "train GPT-2 on text or from its weights, generate with a KV cache, every op on the fabric",
     weft_cli_gpt, weft_cli_gpt_help},
    {"worker", "serve this machine's lanes to other machines' fabrics over TCP (remote lanes)", weft_cli_worker,
     weft_cli_worker_help},
    {"serve", "let browser tabs join as lanes (their GPUs through WebGPU) and serve the web pages", weft_cli_serve,
     weft_cli_serve_help},
};
static const size_t command_count = sizeof commands / sizeof commands[0];

static const weft_cli_command *find_command(const char *name) {
  for (size_t i = 0; i < command_count; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

/* "unknown command", with the command it most likely meant. */
static int unknown_command(const char *name) {
  const char *names[32];
  size_t n = 0;
  for (size_t i = 0; i < command_count && n < 31; i++) names[n++] = commands[i].name;
  names[n++] = "help";
  const char *guess = weft_cli_suggest(name, names, n);
  if (guess) return weft_cli_usage_error(NULL, "unknown command '%s'; did you mean '%s'?", name, guess);
  return weft_cli_usage_error(NULL, "unknown command '%s'", name);
}

static void main_help(FILE *out) {
  fprintf(out,
          "weft %s - a heterogeneous compute fabric: it measures every lane of this machine (CPU, GPUs)\n"
          "and runs each op on the one that finishes it first.\n"
          "\n"
          "Usage: weft <command> [options]\n"
          "       weft help [<command>]\n"
          "       weft --version\n"
          "\n"
          "Commands:\n",
          weft_version());
  for (size_t i = 0; i < command_count; i++) fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "  %-9s %s\n", "help", "show this help, or a command's");
  fprintf(out, "\nRun 'weft <command> --help' for a command's options.\n"
               "Exit status: 0 success, 1 the command ran and failed, 2 usage error.\n"
               "\n"
               "Under mpirun (mpirun -np N weft <command> ...), rank 0 runs the command and every other rank serves\n"
               "its lanes to it as mpi:<rank>/<lane> (WEFT_MPI_LANES=cpu,... picks them) until it ends; with\n"
               "`weft mlp --mpi` and `weft gpt train --mpi` every rank trains on its share of each batch instead\n"
               "(the same weights as one process under the exact contract). MPI has no authentication: reach\n"
               "machines you do not manage with `weft worker`.\n");
}

static int print_version(void) {
  printf("weft %s\n", weft_version());
  /* A CLI linked against a different shared library than it was built with is worth saying out loud. */
  if (strcmp(weft_version(), WEFT_VERSION_STRING) != 0) printf("(built against weft.h %s)\n", WEFT_VERSION_STRING);
  return WEFT_CLI_OK;
}

static int help_command(int argc, char **argv) {
  if (argc < 2) {
    main_help(stdout);
    return WEFT_CLI_OK;
  }
  if (argc > 2) return weft_cli_usage_error(NULL, "help takes at most one command name, got %d", argc - 1);
  const weft_cli_command *c = find_command(argv[1]);
  if (!c) {
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
      main_help(stdout);
      return WEFT_CLI_OK;
    }
    return unknown_command(argv[1]);
  }
  c->help(stdout);
  return WEFT_CLI_OK;
}

/* Data-parallel training asks for it (--mpi): every rank runs the command. */
static int wants_data_parallel(const weft_cli_command *c, int argc, char **argv) {
  int trains = strcmp(c->name, "mlp") == 0 || (strcmp(c->name, "gpt") == 0 && argc > 2 && strcmp(argv[2], "train") == 0);
  for (int i = 2; trains && i < argc; i++)
    if (strcmp(argv[i], "--mpi") == 0) return 1;
  return 0;
}

/* Started by mpirun: MPI comes up, and either rank 0 runs the command while the others serve their lanes to
 * it, or (data-parallel training) every rank runs it, rank 0 alone printing. A rank that fails in a
 * data-parallel job ends the job (MPI_Abort): the others would otherwise wait for it until their timeout. */
static int run_under_mpi(const weft_cli_command *c, int argc, char **argv) {
  const int dp = wants_data_parallel(c, argc, argv);
  if (!weft_mpi_built()) {
    if (!dp)
      fprintf(stderr, "weft: started by an MPI launcher, but this weft was built without MPI: every rank runs "
                      "'%s' on its own\n", c->name);
    return c->run(argc - 1, argv + 1); /* --mpi then says what is missing */
  }
  if (weft_mpi_init(dp ? WEFT_MPI_DATA_PARALLEL : WEFT_MPI_LANES, &argc, &argv) != WEFT_OK) {
    fprintf(stderr, "weft: %s\n", weft_mpi_last_error());
    return WEFT_CLI_FAILED;
  }
  const int rank = weft_mpi_rank();
  int rc;
#ifdef WEFT_HAVE_MPI
  if (!dp && rank != 0) {
    char err[512] = "";
    if (weft_net_mpi_serve(getenv("WEFT_MPI_LANES"), err, sizeof err) != WEFT_OK) {
      fprintf(stderr, "weft: rank %d cannot serve its lanes: %s\n", rank, err);
      weft_mpi_abort(WEFT_CLI_FAILED);
      return WEFT_CLI_FAILED;
    }
    weft_mpi_finalize();
    return WEFT_CLI_OK;
  }
#endif
  /* Rank 0 speaks for the job; the others' words would only repeat it. Their errors still show. */
  if (dp && rank != 0 && !freopen("/dev/null", "w", stdout)) fclose(stdout);
  rc = c->run(argc - 1, argv + 1);
  if (dp && rc == WEFT_CLI_FAILED) {
    fprintf(stderr, "weft: rank %d failed; ending the MPI job\n", rank);
    fflush(stderr);
    /* Rank 0 speaks for the job: the others give it a moment to report what it saw (it waits on the same
     * ranks) before the job is ended. */
    if (rank != 0) {
      struct timespec ts = {2, 0};
      nanosleep(&ts, NULL);
    }
    weft_mpi_abort(rc);
  }
  if (weft_mpi_finalize() != WEFT_OK) {
    /* a serving rank that stopped answering, or one that did not take the stop: MPI_Finalize would wait for
     * it, and the launcher with it, so rank 0 ends the job */
    fprintf(stderr, "weft: %s; ending the MPI job\n", weft_mpi_last_error());
    fflush(stderr);
    if (rc == WEFT_CLI_OK) rc = WEFT_CLI_FAILED;
    weft_mpi_abort(rc);
  }
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    main_help(stderr);
    return WEFT_CLI_USAGE;
  }
  const char *cmd = argv[1];
  /* `weft --help CMD` is `weft help CMD`; anything more is a usage error, as for `help` */
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) return help_command(argc - 1, argv + 1);
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    if (argc > 2) return weft_cli_usage_error(NULL, "%s takes no arguments, got '%s'", cmd, argv[2]);
    return print_version();
  }
  if (strcmp(cmd, "help") == 0) return help_command(argc - 1, argv + 1);
  if (cmd[0] == '-') return weft_cli_usage_error(NULL, "unknown option '%s' (options go after the command)", cmd);
  const weft_cli_command *c = find_command(cmd);
  if (!c) return unknown_command(cmd);
  if (weft_mpi_launched()) return run_under_mpi(c, argc, argv);
  return c->run(argc - 1, argv + 1);
}
