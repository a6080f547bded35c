/* interpose_test.h: child processes for the interposer suites. */
#include "interpose_test.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *ip_test_path(const char *name) {
  const char *p = getenv(name);
  cr_assert(p && *p, "%s is not set (run the suite through meson test)", name);
  return p;
}

int ip_test_count(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
  return n;
}

const char *ip_test_child_env(void) {
  const char *e = getenv("GPUPART_TEST_CHILD_ENV");
  return e ? e : "";
}

void ip_test_run(char *out, size_t n, const char *fmt, ...) {
  char cmd[16384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  FILE *f = popen(cmd, "r");
  cr_assert(f, "popen %s", cmd);
  size_t got = fread(out, 1, n - 1, f);
  out[got] = '\0';
  pclose(f);
}

uint64_t ip_test_field(const char *text, const char *name) {
  const char *at = strstr(text, name);
  if (!at) return 0;
  at += strlen(name);
  while (*at && (*at < '0' || *at > '9')) at++;
  return strtoull(at, NULL, 0);
}

void ip_test_start(ip_test_child *c, const char *dir, const char *fmt, ...) {
  char cmd[16384];
  int fds[2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  snprintf(c->out_path, sizeof c->out_path, "%s/child.out", dir);
  c->text[0] = '\0';
  cr_assert(pipe(fds) == 0);
  c->pid = fork();
  cr_assert(c->pid >= 0);
  if (c->pid == 0) {
    int out = open(c->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fds[0], 0), dup2(out, 1), dup2(out, 2);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(fds[0]);
  c->to_stdin = fds[1];
}

static void read_output(ip_test_child *c) {
  FILE *f = fopen(c->out_path, "r");
  size_t got = f ? fread(c->text, 1, sizeof c->text - 1, f) : 0;
  c->text[got] = '\0';
  if (f) fclose(f);
}

int ip_test_wait_or_end(ip_test_child *c, const char *what) {
  for (;;) {
    read_output(c);
    if (strstr(c->text, what)) return 1;
    int status;
    if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
      read_output(c);
      close(c->to_stdin);
      return 0;
    }
    usleep(10000);
  }
}

void ip_test_wait_for(ip_test_child *c, const char *what) {
  if (!ip_test_wait_or_end(c, what)) cr_assert_fail("the child ended before printing %s: %s", what, c->text);
}

void ip_test_finish(ip_test_child *c) {
  int status = 0;
  cr_assert(write(c->to_stdin, "go\n", 3) == 3);
  close(c->to_stdin);
  waitpid(c->pid, &status, 0);
  read_output(c);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s", c->text);
}

void ip_test_cleanup_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1024];
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
  rmdir(dir);
}

long ip_test_pid(const ip_test_child *c) {
  const char *at = strstr(c->text, "holding ");
  cr_assert(at, "the child printed no pid: %s", c->text);
  return strtol(at + strlen("holding "), NULL, 10);
}

int ip_test_ledger_files(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "gpupart-", 8) && strstr(e->d_name, ".ledger")) n++;
  if (d) closedir(d);
  return n;
}

void ip_test_observe(char *out, size_t n, const char *dir, int metrics) {
  const char *tool = getenv("GPUPART_TEST_GPUPART");
  if (!tool || !*tool) cr_skip_test("the gpupart command is not built (-Dtools=disabled)");
  ip_test_run(out, n, "%s %s --ledger-dir %s", tool, metrics ? "metrics" : "top --json", dir);
}

int ip_test_allocated(const char *text, int code) {
  const char *at = strstr(text, "allocated ");
  int mib = -1, got = 0;
  if (!at || sscanf(at, "allocated %d code %d", &mib, &got) != 2 || got != code) return -1;
  return mib;
}

void ip_test_shared_begin(ip_test_shared *s, const char *config) {
  snprintf(s->dir, sizeof s->dir, "/tmp/gpupart-ip-ledger-XXXXXX");
  snprintf(s->out_a, sizeof s->out_a, "/tmp/gpupart-ip-a-XXXXXX");
  snprintf(s->out_b, sizeof s->out_b, "/tmp/gpupart-ip-b-XXXXXX");
  cr_assert(mkdtemp(s->dir) && mkdtemp(s->out_a) && mkdtemp(s->out_b));
  snprintf(s->env, sizeof s->env, "GPUPART_SHARED=1 GPUPART_LEDGER_DIR=%s %s", s->dir, config);
}

void ip_test_shared_end(ip_test_shared *s) {
  ip_test_cleanup_dir(s->dir), ip_test_cleanup_dir(s->out_a), ip_test_cleanup_dir(s->out_b);
}

void ip_test_app_start(ip_test_child *app, ip_test_shared *s, const char *prefix, const char *backend, int mib) {
  ip_test_start(app, s->out_a, "env %s %s %s %s app %d", prefix, s->env, ip_test_path("GPUPART_TEST_GP_HOLD"), backend,
                mib);
  if (ip_test_wait_or_end(app, "holding")) return;
  if (strstr(app->text, "device_open: GPUPART_ENOBACKEND") || strstr(app->text, "device_open: GPUPART_ENODEV"))
    cr_skip_test("the %s backend cannot open the device: %s", backend, app->text);
  cr_assert_fail("the application: %s", app->text);
}

void ip_test_expect_member(ip_test_shared *s, const char *prefix, const char *program, const char *command) {
  ip_test_child prog;
  ip_test_start(&prog, s->out_a, "env %s %s %s", prefix, s->env, program);
  ip_test_wait_for(&prog, "holding");
  long pid = ip_test_pid(&prog);
  static char top[1 << 16], metrics[1 << 18];
  ip_test_observe(top, sizeof top, s->dir, 0);
  cr_expect(ip_test_has_member(top, pid, command), "%s", top);
  ip_test_observe(metrics, sizeof metrics, s->dir, 1);
  char want[64], name[64];
  snprintf(want, sizeof want, "pid=\"%ld\"", pid);
  snprintf(name, sizeof name, "command=\"%s\"", command);
  cr_expect(strstr(metrics, want) && strstr(metrics, name), "%s", metrics);
  ip_test_finish(&prog);
}

int ip_test_has_member(const char *json, long pid, const char *command) {
  char want[128];
  snprintf(want, sizeof want, "\"pid\": %ld, \"command\": \"%s\", \"alive\": true", pid, command);
  return strstr(json, want) != NULL;
}
