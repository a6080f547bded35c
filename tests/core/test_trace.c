/* Trace recording (GPUPART_TRACE, `trace =`): a known sequence of allocations and frees
 * comes out as exactly the expected .ops lines (ids unique although handles are reused,
 * partition names escaped); the file is mode 0600 and close-on-exec, %p is the pid, an
 * unwritable file is ECONFIG at context creation, lines still buffered at exit are
 * written, a forked child does not write its parent's; threads produce a consistent
 * trace; and the benchmark's parser (bench/trace.c, linked in) loads what was recorded,
 * partition names included, as gpupart-bench --trace replays it (run as a process when
 * the benchmark is built: GPUPART_TEST_BENCH). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "common.h"
#include "internal.h"

static char dir[64], path[128];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/gpupart-trace-XXXXXX");
  cr_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/t.ops", dir);
  unsetenv("GPUPART_TRACE");
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(trace, .init = setup, .fini = teardown);

/* A context recording to file (config_text, so the environment does not matter). */
static gpupart_result traced_context(const char *file, gpupart_context **ctx) {
  char text[512];
  snprintf(text, sizeof text, "[gpupart]\ntrace = %s\n", file);
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV, .config_text = text};
  return gpupart_context_create(&d, ctx);
}

static gpupart_device *sim_device(gpupart_context *ctx) {
  gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
  return test_sim_device(ctx, &sim, NULL);
}

static char *read_all(const char *file) {
  FILE *f = fopen(file, "r");
  cr_assert(f, "cannot read %s", file);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* The text after the header lines ("# ..."). */
static const char *body(const char *text) {
  while (*text == '#') text = strchr(text, '\n') + 1;
  return text;
}

static gpupart_allocation *alloc_ok(gpupart_partition *p, uint64_t size) {
  gpupart_allocation *a = NULL;
  cr_assert_eq(gpupart_alloc(p, size, 0, &a), GPUPART_OK, "%s", gpupart_last_error());
  return a;
}

Test(trace, a_known_sequence_is_recorded_line_by_line) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *a = test_partition(dev, "train", 64 * MiB, 0);
  gpupart_partition *b = test_partition(dev, "odd name%", 64 * MiB, 0);
  gpupart_allocation *x = alloc_ok(a, 1000), *y = alloc_ok(b, 3 * MiB);
  gpupart_free(x);
  gpupart_allocation *z = alloc_ok(a, 1000); /* most likely x's node again: a new id all the same */
  cr_expect_eq(gpupart_free(x), GPUPART_EINVAL, "a double free is refused");
  gpupart_free(y), gpupart_free(z);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  const char *text = read_all(path);
  char head[128];
  snprintf(head, sizeof head, "# gpupart-trace 1 pid %ld version %s\n# device sim:0 ", (long)getpid(),
           gpupart_version_string());
  cr_expect_eq(strncmp(text, head, strlen(head)), 0, "%s", text);
  cr_expect_str_eq(body(text), "a 1 1000 train\na 2 3145728 odd%20name%25\nf 1\na 3 1000 train\nf 2\nf 3\n");
}

Test(trace, the_file_is_private_and_closed_on_exec) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  int found = 0;
  for (int fd = 3; fd < 1024 && !found; fd++) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) continue;
    target[n] = '\0';
    if (strcmp(target, path)) continue;
    found = 1;
    cr_expect(fcntl(fd, F_GETFD) & FD_CLOEXEC, "the trace's descriptor is close-on-exec");
  }
  cr_expect(found, "no descriptor open on %s", path);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(trace, percent_p_is_the_pid_in_the_variable) {
  char pattern[160], want[160];
  snprintf(pattern, sizeof pattern, "%s/app-%%p.ops", dir);
  snprintf(want, sizeof want, "%s/app-%ld.ops", dir, (long)getpid());
  setenv("GPUPART_TRACE", pattern, 1);
  gpupart_context *ctx = NULL;
  gpupart_result rc = gpupart_context_create(NULL, &ctx);
  unsetenv("GPUPART_TRACE");
  cr_assert_eq(rc, GPUPART_OK, "%s", gpupart_last_error());
  cr_expect_eq(access(want, F_OK), 0, "%s was not made", want);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(trace, an_unwritable_file_is_econfig_naming_it) {
  char bad[160];
  snprintf(bad, sizeof bad, "%s/no/such/dir/t.ops", dir);
  gpupart_context *ctx = (gpupart_context *)1;
  cr_expect_eq(traced_context(bad, &ctx), GPUPART_ECONFIG);
  cr_expect_null(ctx);
  cr_expect(strstr(gpupart_last_error(), bad), "%s", gpupart_last_error());
  cr_expect(strstr(gpupart_last_error(), "config_text:2"), "the message names where it was set: %s",
            gpupart_last_error());
}

Test(trace, off_by_default) {
  gpupart_context *ctx = test_context();
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "p", 64 * MiB, 0);
  cr_expect_null(ctx->trace);
  cr_expect_null(p->trace, "the allocation paths see NULL");
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(trace, a_context_that_only_looks_records_nothing_and_leaves_the_file_alone) {
  char text[512];
  snprintf(text, sizeof text, "[gpupart]\ntrace = %s\n", path);
  gpupart_context_desc d = {.flags = GPUPART_CONTEXT_IGNORE_ENV | GPUPART_CONTEXT_NO_TRACE, .config_text = text};
  gpupart_context *ctx = NULL;
  cr_assert_eq(gpupart_context_create(&d, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "p", 64 * MiB, 0);
  gpupart_free(alloc_ok(p, 4096));
  cr_expect_null(ctx->trace);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  cr_expect_neq(access(path, F_OK), 0, "no file was created");
  d.config_text = "[gpupart]\ntrace = \n";
  d.flags = GPUPART_CONTEXT_NO_TRACE | 0x80u;
  cr_expect_eq(gpupart_context_create(&d, &ctx), GPUPART_EINVAL, "unknown flags beside it are still refused");
}

Test(trace, lines_still_buffered_at_exit_are_written) {
  pid_t pid = fork();
  if (pid == 0) {
    gpupart_context *ctx;
    if (traced_context(path, &ctx)) _exit(2);
    gpupart_sim_desc sim = {.total_bytes = 1 * GiB};
    gpupart_device_desc d = {.backend = GPUPART_BACKEND_SIM, .backend_desc = &sim};
    gpupart_device *dev;
    gpupart_partition *p;
    gpupart_allocation *a;
    if (gpupart_device_open(ctx, &d, &dev) || gpupart_partition_create(dev, NULL, &p) || gpupart_alloc(p, 77, 0, &a))
      _exit(3);
    exit(0); /* nothing destroyed: the library's destructor flushes */
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cr_expect_str_eq(body(read_all(path)), "a 1 77 p0\n");
}

Test(trace, a_forked_child_does_not_write_its_parents_lines) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "p", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 5);
  pid_t pid = fork();
  if (pid == 0) {
    gpupart_allocation *b;
    gpupart_alloc(p, 6, 0, &b); /* the child's copy of the context: recorded nowhere */
    exit(0);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  gpupart_free(a);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  cr_expect_str_eq(body(read_all(path)), "a 1 5 p\nf 1\n");
}

Test(trace, two_contexts_of_one_process_share_the_file_and_its_ids) {
  gpupart_context *c1, *c2;
  cr_assert_eq(traced_context(path, &c1), GPUPART_OK, "%s", gpupart_last_error());
  cr_assert_eq(traced_context(path, &c2), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *d1 = sim_device(c1), *d2 = sim_device(c2);
  gpupart_partition *p1 = test_partition(d1, "one", 64 * MiB, 0), *p2 = test_partition(d2, "two", 64 * MiB, 0);
  gpupart_allocation *x = alloc_ok(p1, 10), *y = alloc_ok(p2, 20);
  gpupart_free(x), gpupart_free(y);
  cr_assert_eq(gpupart_device_close(d1), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(c1), GPUPART_OK);
  gpupart_allocation *z = alloc_ok(p2, 30); /* after the first context is gone */
  gpupart_free(z);
  cr_assert_eq(gpupart_device_close(d2), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(c2), GPUPART_OK);
  const char *text = read_all(path);
  cr_expect_null(strstr(text + 1, "# gpupart-trace"), "one header: %s", text);
  char *lines = strdup(text), *out = calloc(1, strlen(text) + 1);
  for (char *l = strtok(lines, "\n"); l; l = strtok(NULL, "\n"))
    if (l[0] != '#') strcat(strcat(out, l), "\n");
  cr_expect_str_eq(out, "a 1 10 one\na 2 20 two\nf 1\nf 2\na 3 30 two\nf 3\n");
  free(lines), free(out);
}

/* ---- threads ---- */

static void *churn(void *arg) {
  gpupart_partition *p = arg;
  gpupart_allocation *h[32] = {0};
  for (unsigned i = 0; i < 20000; i++) {
    unsigned k = (i * 2654435761u) % 32;
    if (h[k]) gpupart_free(h[k]), h[k] = NULL;
    else gpupart_alloc(p, 256u + (i % 61) * 1024u, 0, &h[k]);
  }
  for (int k = 0; k < 32; k++) gpupart_free(h[k]);
  return NULL;
}

/* Every free names an id allocated before it and not yet freed; ids never repeat. */
static void check_trace(const char *text, size_t *allocs, size_t *frees) {
  static unsigned char state[1 << 20]; /* 0 never seen, 1 live, 2 freed */
  memset(state, 0, sizeof state);
  *allocs = *frees = 0;
  for (const char *s = body(text); *s; s = strchr(s, '\n') + 1) {
    unsigned long long id, size;
    char part[64];
    if (sscanf(s, "a %llu %llu %63s", &id, &size, part) == 3) {
      cr_assert(id < sizeof state && state[id] == 0, "id %llu reused", id);
      state[id] = 1, (*allocs)++;
    } else {
      cr_assert_eq(sscanf(s, "f %llu", &id), 1, "bad line: %.40s", s);
      cr_assert(id < sizeof state && state[id] == 1, "free of id %llu that is not live", id);
      state[id] = 2, (*frees)++;
    }
  }
}

Test(trace, threads_on_several_partitions_record_a_consistent_trace) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    p[i] = test_partition(dev, name, 128 * MiB, 0);
  }
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, churn, p[i]);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  gpupart_stats s[4];
  for (int i = 0; i < 4; i++) s[i] = test_stats(p[i]);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  size_t allocs, frees;
  check_trace(read_all(path), &allocs, &frees);
  cr_expect_eq(allocs,
               s[0].total_allocations + s[1].total_allocations + s[2].total_allocations + s[3].total_allocations);
  cr_expect_eq(frees, allocs, "everything was freed");
}

/* ---- replay ---- */

/* A recorded trace of two partitions with n allocation/free pairs each. */
static size_t record_two_partitions(int n) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *a = test_partition(dev, "weights", 256 * MiB, 0),
                    *b = test_partition(dev, "activations", 256 * MiB, 0);
  for (int i = 0; i < n; i++) {
    gpupart_allocation *x = alloc_ok(a, 4096u + (uint64_t)i), *y = alloc_ok(b, 100u + (uint64_t)i);
    gpupart_free(x), gpupart_free(y);
  }
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  return (size_t)n * 4;
}

Test(trace, the_benchmark_parser_loads_a_recorded_trace_with_its_partitions) {
  size_t ops = record_two_partitions(50);
  bench_workload w;
  cr_assert_eq(bench_trace_load(path, &w), 0);
  cr_expect_eq(w.n, ops);
  cr_expect_eq(w.ops[0].size, 4096);
  const bench_stream *weights = &w.streams[w.ops[0].part], *activations = &w.streams[w.ops[1].part];
  cr_expect_eq(weights->lane, 0, "weights: the first partition named");
  cr_expect_str_eq(w.names[weights->name], "weights");
  cr_expect_eq(w.ops[1].size, 100);
  cr_expect_eq(activations->lane, 1, "activations: the second");
  cr_expect_str_eq(w.names[activations->name], "activations");
  cr_expect_eq(w.ops[4].part, w.ops[0].part);
  cr_expect_eq(w.processes, 1);
  bench_workload_free(&w);
}

static void write_text(const char *file, const char *text) {
  FILE *f = fopen(file, "w");
  cr_assert(f);
  fputs(text, f);
  fclose(f);
}

Test(trace, the_parser_undoes_the_recorders_escapes_in_names) {
  write_text(path, "a 1 10 odd%20name%25\na 2 10 p%zz%00\nf 1\n");
  bench_workload w;
  cr_assert_eq(bench_trace_load(path, &w), 0);
  cr_expect_str_eq(w.names[w.streams[w.ops[0].part].name], "odd name%");
  cr_expect_str_eq(w.names[w.streams[w.ops[1].part].name], "p%zz%00", "malformed and NUL escapes stay as written");
  bench_workload_free(&w);
}

/* Two processes' files: operation k of a file of m comes at (k + 1/2)/m of the run, so
 * A's four at 1/8, 3/8, 5/8, 7/8 and B's two at 1/4, 3/4; slots never shared, a name
 * one name across files, each file its own process. */
Test(trace, several_processes_interleave_in_proportion_to_their_lengths) {
  char b[160];
  snprintf(b, sizeof b, "%s/b.ops", dir);
  write_text(path, "a 1 100 w\na 2 200 x\nf 1\nf 2\n");
  write_text(b, "a 1 300 w\nf 1\n");
  const char *files[] = {path, b};
  bench_workload w;
  cr_assert_eq(bench_trace_load_together(files, 2, &w), 0);
  cr_assert_eq(w.n, 6);
  cr_expect_eq(w.processes, 2);
  uint64_t sizes[] = {100, 300, 200, 0, 0, 0};
  for (int i = 0; i < 6; i++) cr_expect_eq(w.ops[i].size, sizes[i], "op %d", i);
  cr_expect_neq(w.ops[0].slot, w.ops[1].slot, "the files' first allocations have their own slots");
  cr_expect_eq(w.ops[3].slot, w.ops[0].slot, "A frees its first");
  cr_expect_eq(w.ops[4].slot, w.ops[1].slot, "then B frees its one");
  const bench_stream *a = &w.streams[w.ops[0].part], *bw = &w.streams[w.ops[1].part];
  cr_expect_eq(a->name, bw->name, "'w' is one name across the files");
  cr_expect_eq(a->process, 0);
  cr_expect_eq(bw->process, 1);
  cr_expect_str_eq(w.name, "t+b");
  bench_workload_free(&w);
}

Test(trace, the_parser_refuses_a_line_with_more_fields) {
  FILE *f = fopen(path, "w");
  fputs("# comment\n  # indented comment\n\na 1 10 p extra\n", f);
  fclose(f);
  bench_workload w;
  cr_expect_eq(bench_trace_load(path, &w), -1);
}

Test(trace, gpupart_bench_replays_a_recorded_trace) {
  const char *bench = getenv("GPUPART_TEST_BENCH");
  if (!bench || !*bench) cr_skip_test("gpupart-bench is not built (-Dbench=disabled)");
  size_t ops = record_two_partitions(200);
  char json[160], cmd[1024];
  snprintf(json, sizeof json, "%s/out.json", dir);
  snprintf(cmd, sizeof cmd,
           "'%s' --backend sim --trace '%s' --policy growth,partitions --repeat 1 --json '%s' >/dev/null", bench, path,
           json);
  int status = system(cmd);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: status %d", cmd, status);
  char want[64];
  snprintf(want, sizeof want, "\"ops\": %zu,", ops);
  const char *text = read_all(json), *first = strstr(text, want);
  cr_expect(first && strstr(first + 1, want), "two rows of %zu ops in %s", ops, text);
  cr_expect(strstr(text, "\"workload\": \"t\""), "the workload is named after the file");
  cr_expect_null(strstr(text, "\"error\": \""), "%s", text);
}

/* Another process that names the file (a child after fork, or one it execs, with the same
 * GPUPART_TRACE) neither truncates nor overwrites the recording in progress: it records to
 * FILE.<its pid>. */
Test(trace, another_process_naming_the_file_records_beside_it) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "p", 64 * MiB, 0);
  gpupart_allocation *a = alloc_ok(p, 5);
  pid_t pid = fork();
  if (pid == 0) {
    gpupart_context *own, *again;
    if (traced_context(path, &own) || traced_context(path, &again)) _exit(2); /* the second shares */
    gpupart_device *d = sim_device(own);
    gpupart_partition *c = test_partition(d, "c", 64 * MiB, 0);
    for (int i = 0; i < 3; i++) gpupart_free(alloc_ok(c, 6)); /* more lines than the parent's */
    _exit(gpupart_device_close(d) || gpupart_context_destroy(own) || gpupart_context_destroy(again) ? 3 : 0);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed: %d", status);
  gpupart_free(a);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  cr_expect_str_eq(body(read_all(path)), "a 1 5 p\nf 1\n");
  char beside[192];
  snprintf(beside, sizeof beside, "%s.%ld", path, (long)pid);
  cr_expect_str_eq(body(read_all(beside)), "a 1 6 c\nf 1\na 2 6 c\nf 2\na 3 6 c\nf 3\n");
}

/* A FIFO nobody reads: context creation fails at once (ECONFIG) instead of waiting in
 * open() for a reader that may never come. */
Test(trace, a_fifo_without_a_reader_is_econfig_not_a_hang, .timeout = 20) {
  cr_assert_eq(mkfifo(path, 0600), 0);
  gpupart_context *ctx = (gpupart_context *)1;
  cr_expect_eq(traced_context(path, &ctx), GPUPART_ECONFIG);
  cr_expect_null(ctx);
  cr_expect(strstr(gpupart_last_error(), path), "%s", gpupart_last_error());
}

/* ---- a FIFO whose reader goes away or stops reading ---------------------------------- */

/* The test's end of the FIFO: opened first (so that the trace's open finds a reader), not
 * blocking. */
static int fifo_reader(void) {
  cr_assert_eq(mkfifo(path, 0600), 0);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  return fd;
}

/* stderr to a file while a test runs, to count what the library says. */
static int stderr_to(const char *file) {
  fflush(stderr);
  int saved = dup(2), fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  return saved;
}

static void stderr_back(int saved) {
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
}

/* Appends what the reader can read now to text (n bytes so far, cap in all). */
static size_t drain(int fd, char *text, size_t n, size_t cap) {
  ssize_t r;
  while (n < cap - 1 && (r = read(fd, text + n, cap - 1 - n)) > 0) n += (size_t)r;
  text[n] = '\0';
  return n;
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
  return n;
}

/* count allocations of partition p, each freed at once: 2 * count lines. */
static void alloc_free(gpupart_partition *p, int count) {
  for (int i = 0; i < count; i++) gpupart_free(alloc_ok(p, 4096 + (uint64_t)i));
}

/* The reader goes away: the program died of SIGPIPE at the next write. Now the lines are
 * dropped, counted and said once on stderr, no SIGPIPE is left pending, and the context
 * is destroyed as usual. */
Test(trace, a_fifo_whose_reader_goes_away_is_no_sigpipe, .timeout = 60) {
  char said[160];
  int reader = fifo_reader(), saved = stderr_to(strcat(strcpy(said, dir), "/stderr"));
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "p", 64 * MiB, 0);
  alloc_free(p, 10);
  close(reader);
  alloc_free(p, 5000); /* several buffers full: each flush meets EPIPE */
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  stderr_back(saved);
  sigset_t pending;
  cr_assert_eq(sigpending(&pending), 0);
  cr_expect_eq(sigismember(&pending, SIGPIPE), 0, "no SIGPIPE left pending");
  const char *text = read_all(said);
  cr_expect_eq(count_of(text, "reader is not keeping up or has gone"), 1, "said once: %s", text);
}

/* The reader stops reading: every allocation blocked once the FIFO was full. Now none
 * waits: what the FIFO cannot take is dropped and counted, whole lines only, each free
 * dropped with its allocation, and the count closes the trace once the reader reads again. */
Test(trace, a_fifo_whose_reader_stops_reading_never_blocks, .timeout = 60) {
  static char text[1 << 21];
  char said[160];
  int reader = fifo_reader(), saved = stderr_to(strcat(strcpy(said, dir), "/stderr"));
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_partition *p = test_partition(dev, "a-longer-partition-name-for-longer-lines", 64 * MiB, 0);
  alloc_free(p, 20000); /* about 1.2 MB of lines into a FIFO of 64 KiB that nobody reads */
  size_t n = drain(reader, text, 0, sizeof text);
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
  n = drain(reader, text, n, sizeof text);
  close(reader);
  stderr_back(saved);
  cr_expect_eq(count_of(read_all(said), "reader is not keeping up"), 1, "said once");
  cr_assert(n > 0 && text[n - 1] == '\n', "whole lines only");
  const char *last = strstr(text, "\n# dropped ");
  unsigned long long dropped = 0;
  cr_assert(last && sscanf(last, "\n# dropped %llu lines\n", &dropped) == 1, "the count closes the trace");
  int allocs = count_of(text, "\na "), frees = count_of(text, "\nf ");
  cr_expect_gt(dropped, 0);
  cr_expect_eq((unsigned long long)(allocs + frees) + dropped, 2 * 20000ull, "every line written or counted");
  static unsigned char seen[20002];
  int orphans = 0;
  for (const char *at = strstr(text, "\na "); at; at = strstr(at + 1, "\na ")) {
    unsigned long id = strtoul(at + 3, NULL, 10);
    if (id < sizeof seen) seen[id] = 1;
  }
  for (const char *at = strstr(text, "\nf "); at; at = strstr(at + 1, "\nf ")) {
    unsigned long id = strtoul(at + 3, NULL, 10);
    orphans += id >= sizeof seen || !seen[id];
  }
  cr_expect_eq(orphans, 0, "every free names an allocation the trace holds (a free is dropped with its allocation)");
}

/* One context after another on the same file (created, used, destroyed, then the next):
 * the file keeps the first one's lines, and the second goes on after them with the next
 * ids, under one header. */
static void one_traced_run(uint64_t size) {
  gpupart_context *ctx;
  cr_assert_eq(traced_context(path, &ctx), GPUPART_OK, "%s", gpupart_last_error());
  gpupart_device *dev = sim_device(ctx);
  gpupart_free(alloc_ok(test_partition(dev, "p", 64 * MiB, 0), size));
  cr_assert_eq(gpupart_device_close(dev), GPUPART_OK);
  cr_assert_eq(gpupart_context_destroy(ctx), GPUPART_OK);
}

Test(trace, a_later_context_goes_on_with_the_file_of_an_earlier_one) {
  one_traced_run(11);
  one_traced_run(22);
  const char *text = read_all(path);
  cr_expect_eq(strstr(text, "# gpupart-trace") == text && !strstr(text + 1, "# gpupart-trace"), 1, "one header: %s",
               text);
  cr_expect(strstr(text, "a 1 11 p\nf 1\n# device sim:0"), "%s", text);
  cr_expect(strstr(text, "a 2 22 p\nf 2\n"), "%s", text);
}

/* ...but not with a file that was changed since (another program wrote it): then afresh. */
Test(trace, a_later_context_starts_afresh_on_a_file_changed_meanwhile) {
  one_traced_run(11);
  FILE *f = fopen(path, "a");
  cr_assert(f);
  fputs("not ours\n", f);
  fclose(f);
  one_traced_run(22);
  cr_expect_str_eq(body(read_all(path)), "a 1 22 p\nf 1\n");
}
