/* qdpctl — the command-line client of qdpd, built on libqdp's public API only.
 *
 * One process per command: parse the options (usage errors exit 2 before any connection), make a
 * client, run one or a few calls, print a table or JSON, and map the outcome onto an exit code
 * (the class of a failure, whoever found it: qdpctl --help has the table). Single-threaded.
 * This file takes the options before the command and dispatches; each command family has its
 * own file (qdpctl.h lists them).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qdpctl.h"

volatile sig_atomic_t interrupted;
/* The command runs its calls to their end, or stops between them, on Ctrl-C; 0: it exits at
 * once. */
static volatile sig_atomic_t stops_itself;
/* --json is on: the interruption is reported as JSON too. */
static volatile sig_atomic_t json_errors;

/* Ctrl-C: a command that leaves nothing behind exits here, at once (qdpd drops the call of a
 * client that is gone and commits nothing for it); the others see `interrupted`. Only
 * async-signal-safe calls. */
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
  if (stops_itself) {
    return;
  }
  static const char msg[] = "qdpctl: interrupted\n";
  static const char js[] =
      "{\n  \"schema\": 1,\n  \"error\": {\n    \"code\": \"INTERRUPTED\",\n"
      "    \"message\": \"interrupted\",\n    \"exit\": 130\n  }\n}\n";
  ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
  if (json_errors) {
    n = write(STDOUT_FILENO, js, sizeof js - 1);
  }
  (void)n;
  _exit(EXIT_INTERRUPTED);
}

static const char main_help[] =
    "Usage: qdpctl [OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "qdpctl talks to qdpd, the qdp node daemon that encodes classical data into quantum state\n"
    "vectors on its devices and keeps them resident.\n"
    "\n"
    "Commands:\n"
    "  status                 daemon version, backend, budgets and devices\n"
    "  health                 SERVING or not\n"
    "  encode                 encode an input into a state; prints its REF and layout\n"
    "  plan                   the same request as a dry run: shards and per-device arithmetic\n"
    "  describe REF [--views] a state's layout (and zero-copy views of its shards)\n"
    "  ls                     the states qdpd holds\n"
    "  fetch REF -o OUT.npy   stream a state (or a range) into a local .npy file\n"
    "  export REF PATH        have qdpd write the state as .npy on its node\n"
    "  rm REF [REF...]        release states\n"
    "  gather REF --device D  copy a state onto one device as a new state\n"
    "  kernel REF [REF] -o K.npy  the kernel matrix |<a_i|b_j>|^2 of resident states (or of\n"
    "                         inputs' states: --encoding E --qubits N INPUT, none kept)\n"
    "  measure REF --qubits L  probabilities (--pauli P: expectations; --shots N: draws)\n"
    "  view-close REF LEASE   close a zero-copy view lease\n"
    "  region add|rm          register a shared-memory region once for many encodes\n"
    "  top                    a live view from qdpd's metrics: jobs/s, latency, memory\n"
    "\n"
    "A REF is HANDLE:TOKEN, as encode prints it; the token is the capability to use the state.\n"
    "Inputs (encode, plan, kernel): --values (inline), --input FILE (local .npy, CSV or raw:\n"
    "inline when small, streamed otherwise), --server-file PATH (on the node), --shm NAME (shared\n"
    "memory).\n"
    "'qdpctl COMMAND --help' describes each command.\n"
    "\n"
    "Examples:\n"
    "  qdpctl status\n"
    "  ref=$(qdpctl --json encode --encoding amplitude --qubits 2 --values 1,2,3,4 |\n"
    "        python3 -c 'import json,sys; print(json.load(sys.stdin)[\"ref\"])')\n"
    "  qdpctl fetch \"$ref\" -o psi.npy && qdpctl rm \"$ref\"\n"
    "\n"
    "Environment: QDP_TARGET, QDP_SOCKET, QDP_TOKEN, XDG_RUNTIME_DIR.\n"
    "\n";

/* stops_itself: the command ends itself on Ctrl-C, as a sudden exit would leave something behind
 * (a partial file beside a fetch's or an export's target, a kept region whose REF nobody saw, the
 * list of what rm released); rm stops between states, top between frames. */
static const struct {
  const char *name;
  int (*run)(struct global *g, int argc, char **argv);
  int stops_itself;
} commands[] = {
    {"status", cmd_status, 0}, {"health", cmd_health, 0},     {"encode", cmd_encode, 0},
    {"plan", cmd_plan, 0},     {"describe", cmd_describe, 0}, {"ls", cmd_ls, 0},
    {"fetch", cmd_fetch, 1},   {"export", cmd_export, 1},     {"rm", cmd_rm, 1},
    {"region", cmd_region, 1}, {"gather", cmd_gather, 0},     {"view-close", cmd_view_close, 0},
    {"top", cmd_top, 1},       {"kernel", cmd_kernel, 0},     {"measure", cmd_measure, 0},
};

int main(int argc, char **argv) {
  struct global g = {.timeout_ms = -1, .progress = -1};
  static const struct option opts[] = {
      COMMON_LONG_OPTS,
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      usage_json(1);
      json_errors = 1;
    }
  }
  int opt;
  /* '+': stop at the subcommand, whose own parser takes the rest. */
  while ((opt = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
    int r = common_opt(&g, opt, optarg);
    if (r < 0) {
      return usage_error(NULL, "bad value '%s'", optarg);
    }
    if (r > 0) {
      continue;
    }
    if (opt == OPT_HELP || opt == 'h') {
      print_help(main_help, "");
      return EXIT_OK;
    }
    if (opt == 'V') {
      printf("qdpctl (libqdp %s)\n", qdp_version_string());
      return EXIT_OK;
    }
    return usage_error(NULL, "unknown option");
  }
  if (optind >= argc) {
    return usage_error(NULL,
                       "a command is required (status, health, encode, plan, describe, ls, "
                       "fetch, export, rm, gather, kernel, measure, view-close, region, top)");
  }
  const char *cmd = argv[optind];
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(cmd, commands[i].name) == 0) {
      stops_itself = commands[i].stops_itself;
    }
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGINT, &sa, NULL);

  if (strcmp(cmd, "help") == 0) {
    print_help(main_help, "");
    return EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(cmd, commands[i].name) == 0) {
      return commands[i].run(&g, argc - optind, argv + optind);
    }
  }
  struct nearest nr = NEAREST_INIT;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    nearest_word(cmd, commands[i].name, &nr);
  }
  if (nr.word) {
    return usage_error(NULL, "unknown command '%s'; did you mean '%s'?", cmd, nr.word);
  }
  return usage_error(NULL, "unknown command '%s'", cmd);
}
