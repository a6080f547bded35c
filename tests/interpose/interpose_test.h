/* Helpers of the interposer suites: they run unmodified programs as child processes
 * (through sh -c) and read back what they printed. */
#ifndef GPUPART_INTERPOSE_TEST_H
#define GPUPART_INTERPOSE_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The path the build put in variable name (a built program or layer). */
const char *ip_test_path(const char *name);
/* Variables every child under a layer needs first ("" unless a sanitizer build's layer
 * needs its runtime preloaded into the unsanitized program). */
const char *ip_test_child_env(void);
/* Runs the command (printf-style) to its end; its stdout goes into out, NUL-terminated. */
void ip_test_run(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* How many times needle occurs in text. */
int ip_test_count(const char *text, const char *needle);
/* The number after the first occurrence of name in text (clinfo --raw, vulkaninfo); 0 if none. */
uint64_t ip_test_field(const char *text, const char *name);

/* A program left running, with a pipe to its stdin and its output in a file. */
typedef struct ip_test_child {
  pid_t pid;
  int to_stdin;
  char out_path[512];
  char text[4096]; /* its output so far, read by ip_test_wait_for */
} ip_test_child;
void ip_test_start(ip_test_child *c, const char *dir, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Waits until the child has printed what (1) or has ended (0, its output read). */
int ip_test_wait_or_end(ip_test_child *c, const char *what);
/* Waits until the child has printed what (or has ended, then the test fails). */
void ip_test_wait_for(ip_test_child *c, const char *what);
/* Sends a line to its stdin and waits for it to end. */
void ip_test_finish(ip_test_child *c);
/* Removes a folder of test files (one level). */
void ip_test_cleanup_dir(const char *dir);
/* The pid the child printed after "holding" (vk_fill, cl_fill and gp_hold do). */
long ip_test_pid(const ip_test_child *c);
/* The number of shared ledger files (gpupart-*.ledger) in dir. */
int ip_test_ledger_files(const char *dir);
/* What `gpupart top --json --ledger-dir dir` (or `gpupart metrics --ledger-dir dir`, with
 * metrics set) printed, or a skip where the tools are not built. */
void ip_test_observe(char *out, size_t n, const char *dir, int metrics);
/* The output of a child under the layer holds the line "allocated <MiB> code <code>": the
 * MiB, or -1 when it has none with that code. */
int ip_test_allocated(const char *text, int code);

/* A run of several processes on one shared ledger: its folder (a temporary one), the
 * two children's output folders, and the shared configuration (GPUPART_SHARED=1,
 * GPUPART_LEDGER_DIR and what the test adds), without any layer. */
typedef struct ip_test_shared {
  char dir[64], out_a[64], out_b[64];
  char env[8192];
} ip_test_shared;
void ip_test_shared_begin(ip_test_shared *s, const char *config);
void ip_test_shared_end(ip_test_shared *s);
/* gp_hold, the gpupart application, on backend with prefix before it (variables), holding
 * up to mib MiB of partition "app" in s's ledger (its output in out_a); a skip where the
 * backend cannot open the device. */
void ip_test_app_start(ip_test_child *app, ip_test_shared *s, const char *prefix, const char *backend, int mib);
/* Whether `gpupart top --json` printed a live member of that pid and command name. */
int ip_test_has_member(const char *json, long pid, const char *command);
/* Starts `env <prefix> <the shared ledger's variables> <program>` (a program under a layer
 * or the preload that prints "holding <pid>" while it holds memory) and expects it, while
 * it holds, as a member named command in gpupart top --json and gpupart metrics. */
void ip_test_expect_member(ip_test_shared *s, const char *prefix, const char *program, const char *command);

#endif
