/* Trace recording (trace.h): the .ops lines of a context's allocations, buffered and
 * written to a file opened at context creation. Format (bench/traces/README.md):
 *   # gpupart-trace 1 pid <pid> version <library version>
 *   # device <backend>:<index> <device name>      before the first line of each device
 *   a <id> <size> <partition>                     ids count from 1 in each file
 *   f <id>
 * Partition and device names are written with every byte outside [A-Za-z0-9_.:+/-] as
 * %XX, so a line always splits on spaces. Lines are buffered (TRACE_BUF bytes) and
 * written when the buffer fills, when the context is destroyed, and at exit or unload
 * (a destructor flushes every trace still open). Contexts of one process that name the
 * same file share one trace: one header, one id sequence. A process forked from the one that
 * opened the file writes nothing to it, so its lines never interleave with the
 * parent's; GPUPART_TRACE with %p gives each process its own file, and another process
 * that names a file being recorded (flock) records to FILE.<pid>. A context created after
 * the last one on a file was destroyed goes on with that file (closed_traces).
 * Recording never stops or kills the application: the file is written without blocking
 * (O_NONBLOCK: a FIFO or terminal whose reader does not keep up takes what it can, the
 * rest waits in the buffer, and a line that finds the buffer full is dropped), never with
 * SIGPIPE (a FIFO whose reader has gone: what is buffered is dropped), and lines are
 * never cut; dropped lines are counted, said once on stderr and, at the last close,
 * in a "# dropped <n> lines" line. */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "internal.h"

#define TRACE_BUF 65536
#define NAME_MAX_BYTES 255 /* of a name written to a line; longer names are cut */
#define LINE_MAX_BYTES (64 + 3 * NAME_MAX_BYTES)

struct gpupart__trace {
  pthread_mutex_t lock; /* guards everything below */
  gpupart__hostmem mem;
  int fd, failed;
  unsigned refs; /* contexts using it (guarded by open_lock) */
  pid_t pid;     /* the process that opened fd: the only one that writes */
  uint64_t next_id;
  uint64_t dropped;               /* lines the file could not take (said once on stderr) */
  const gpupart_device *last_dev; /* the device of the last line */
  size_t n;
  gpupart__trace *next;          /* the list of open traces that exit_flush walks */
  char asked[GPUPART__PATH_MAX]; /* the expanded name contexts give (find_open) */
  char path[GPUPART__PATH_MAX];  /* the file: asked, or asked.<pid> (open_file) */
  char buf[TRACE_BUF];
};

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static gpupart__trace *open_traces;

/* What the last close of a trace left, so that a later context of the process naming the
 * file goes on with it (ids continue, no second header) instead of truncating it; only
 * while the file is still as that trace left it (same inode and size). */
typedef struct closed_trace {
  char path[GPUPART__PATH_MAX];
  pid_t pid; /* 0: a free entry */
  dev_t dev;
  ino_t ino;
  off_t size;
  uint64_t next_id;
} closed_trace;

#define CLOSED_MAX 4
static closed_trace closed_traces[CLOSED_MAX]; /* guarded by open_lock */
static unsigned closed_next;

/* ---- file ---- */

/* write(2) that never raises SIGPIPE in the process: SIGPIPE is blocked on this thread
 * around the write, and the one a write to a FIFO whose reader has gone raised (EPIPE) is
 * taken back with sigtimedwait before the mask is restored. One already pending before
 * (the application's, blocked by it) is left pending. */
static ssize_t write_quiet(int fd, const void *buf, size_t n) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ssize_t w = write(fd, buf, n);
  int err = errno;
  const struct timespec now = {0, 0};
  if (w < 0 && err == EPIPE && !was_pending)
    while (sigtimedwait(&pipe_only, NULL, &now) < 0 && errno == EINTR) continue;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = err;
  return w;
}

static uint64_t lines_in(const char *s, size_t n) {
  uint64_t lines = 0;
  for (const char *end = s + n; (s = memchr(s, '\n', (size_t)(end - s))); s++) lines++;
  return lines;
}

/* Lock held: n lines are lost (counted; said on stderr the first time). */
static void drop(gpupart__trace *t, uint64_t n) {
  if (!n) return;
  if (!t->dropped)
    fprintf(stderr,
            "gpupart: trace %s: its reader is not keeping up or has gone; lines it cannot take are "
            "dropped and counted (the trace ends with their number)\n",
            t->path);
  t->dropped += n;
}

/* Lock held. Writes what the buffer holds, never waiting: the bytes a FIFO or terminal
 * cannot take now stay at the buffer's front for the next flush (so a line is never cut
 * in the stream), and where its reader has gone (EPIPE) they are dropped, a partly
 * written line with them, so that a new reader starts at a line. Any other failure stops
 * the recording, said once on stderr. */
static void flush_locked(gpupart__trace *t) {
  size_t at = 0;
  while (!t->failed && at < t->n && getpid() == t->pid) {
    ssize_t w = write_quiet(t->fd, t->buf + at, t->n - at);
    if (w > 0) at += (size_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    else if (w < 0 && errno == EPIPE) {
      drop(t, lines_in(t->buf + at, t->n - at));
      at = t->n;
    } else {
      t->failed = 1;
      fprintf(stderr, "gpupart: trace %s: write failed (%s); recording stopped\n", t->path,
              w < 0 ? strerror(errno) : "no progress");
    }
  }
  if (t->failed || getpid() != t->pid) at = t->n;
  memmove(t->buf, t->buf + at, t->n - at);
  t->n -= at;
}

/* path with %p as the pid and %% as '%'; -1 when it does not fit. */
static int expand_path(const char *path, char *out, size_t cap) {
  size_t n = 0;
  char pid[24];
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  for (const char *s = path; *s; s++) {
    const char *piece = s[0] == '%' && s[1] == 'p' ? pid : s[0] == '%' && s[1] == '%' ? "%" : NULL;
    size_t len = piece ? strlen(piece) : 1;
    if (n + len >= cap) return -1;
    memcpy(out + n, piece ? piece : s, len);
    n += len;
    s += piece ? 1 : 0;
  }
  out[n] = '\0';
  return 0;
}

/* Before the trace is shared: the header goes out at once, so an unwritable file fails
 * at context creation (what a FIFO cannot take at once waits in the buffer). */
static int write_header(gpupart__trace *t) {
  char line[128];
  int n = snprintf(line, sizeof line, "# gpupart-trace 1 pid %ld version %s\n", (long)t->pid, gpupart_version_string());
  ssize_t w = write_quiet(t->fd, line, (size_t)n);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) w = 0;
  if (w < 0) return -1;
  memcpy(t->buf, line + w, (size_t)(n - w));
  t->n = (size_t)(n - w);
  return 0;
}

/* open_lock held: the trace this process already writes to path, or NULL. */
static gpupart__trace *find_open(const char *path) {
  for (gpupart__trace *t = open_traces; t; t = t->next)
    if (t->pid == getpid() && strcmp(t->asked, path) == 0) return t;
  return NULL;
}

/* open_lock held: the entry an earlier trace of this process left for the file st is, or NULL. */
static closed_trace *find_closed(const char *path, const struct stat *st) {
  for (unsigned i = 0; i < CLOSED_MAX; i++) {
    closed_trace *c = &closed_traces[i];
    if (c->pid == getpid() && !strcmp(c->path, path) && c->dev == st->st_dev && c->ino == st->st_ino &&
        c->size == st->st_size)
      return c;
  }
  return NULL;
}

/* open_lock held, at the last close of t (flushed): what a later open of its file goes on from. */
static void remember_closed(const gpupart__trace *t) {
  struct stat st;
  if (t->failed || t->pid != getpid() || fstat(t->fd, &st) || !S_ISREG(st.st_mode)) return;
  closed_trace *c = &closed_traces[closed_next++ % CLOSED_MAX];
  *c = (closed_trace){.pid = t->pid, .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .next_id = t->next_id};
  memcpy(c->path, t->path, sizeof c->path);
}

/* open_lock held. Opens path for writing; a regular file is locked (flock, held while fd
 * is open) and only then truncated, so that another process recording to it keeps its
 * file: that is EWOULDBLOCK here, the file untouched; a FIFO nobody reads is ENXIO. A file
 * an earlier trace of this process left as it was is not truncated: *next_id is then the
 * id to go on with (else it stays 0). -1 with errno on failure. */
static int open_locked(const char *path, uint64_t *next_id) {
  /* O_NONBLOCK: a FIFO with no reader is ENXIO at once, not a wait in open(); kept, so
   * that no write waits for a reader either (a regular file never does) */
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) return fd; /* a FIFO, a terminal: as given */
  int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
  closed_trace *c = locked ? find_closed(path, &st) : NULL;
  if (c && lseek(fd, 0, SEEK_END) >= 0) {
    *next_id = c->next_id;
    c->pid = 0;
    return fd;
  }
  if (locked && !c && ftruncate(fd, 0) == 0) return fd;
  int err = errno;
  close(fd);
  errno = err;
  return -1;
}

/* open_lock held: creates the file (FILE.<pid> when another process records to FILE, said
 * on stderr) and writes the header; errno on failure. */
static int open_file(gpupart__trace *t) {
  memcpy(t->asked, t->path, sizeof t->asked);
  uint64_t next_id = 0;
  errno = 0;
  t->fd = open_locked(t->path, &next_id);
  if (t->fd < 0 && errno == EWOULDBLOCK && strlen(t->path) + 24 < sizeof t->path) {
    snprintf(t->path + strlen(t->path), 24, ".%ld", (long)getpid());
    errno = 0;
    t->fd = open_locked(t->path, &next_id);
    if (t->fd >= 0)
      fprintf(stderr,
              "gpupart: trace %s is being recorded by another process (or under another name of it); "
              "this one records to %s\n",
              t->asked, t->path);
  }
  t->pid = getpid();
  t->next_id = next_id ? next_id : 1;
  t->refs = 1;
  if (t->fd >= 0 && (next_id || write_header(t) == 0)) return 0;
  int err = errno ? errno : EIO;
  if (t->fd >= 0) close(t->fd);
  return err;
}

/* A second context of the process naming the same file shares its trace (one header, one
 * id sequence), so their lines never clobber each other. */
int gpupart__trace_open(const gpupart__hostmem *m, const char *path, const char *src, gpupart__trace **out) {
  *out = NULL;
  gpupart__trace *t = gpupart__host_calloc(m, 1, sizeof *t);
  if (!t) return gpupart__fail(GPUPART_ENOMEM, "context_create: out of host memory for the trace buffer");
  if (expand_path(path, t->path, sizeof t->path)) {
    gpupart__host_free(m, t);
    return gpupart__fail(GPUPART_ECONFIG, "%s: trace file '%s': too long once %%p is expanded", src,
                         GPUPART__ECHO(path));
  }
  t->mem = *m;
  pthread_mutex_lock(&open_lock);
  gpupart__trace *same = find_open(t->path);
  int err = same ? 0 : open_file(t);
  if (same) same->refs++;
  else if (!err) {
    pthread_mutex_init(&t->lock, NULL);
    t->next = open_traces;
    open_traces = t;
  }
  pthread_mutex_unlock(&open_lock);
  if (same || err) gpupart__host_free(m, t);
  if (err)
    return gpupart__fail(GPUPART_ECONFIG, "%s: cannot write the trace file '%s': %s", src, GPUPART__ECHO(path),
                         strerror(err));
  *out = same ? same : t;
  return GPUPART_OK;
}

/* Lock held, at the last close: how many lines the file could not take, as its last
 * line (itself tried once: a reader that still does not keep up misses it too). */
static void dropped_line(gpupart__trace *t) {
  flush_locked(t);
  if (!t->dropped || t->n + 64 > sizeof t->buf) return;
  t->n += (size_t)snprintf(t->buf + t->n, 64, "# dropped %llu lines\n", (unsigned long long)t->dropped);
}

/* Each context's destroy flushes; the last one closes the file, leaving where a later
 * context of the process goes on (remember_closed). All under open_lock, so that a
 * context opening the file meanwhile finds it either open or closed and remembered. */
void gpupart__trace_close(gpupart__trace *t) {
  if (!t) return;
  pthread_mutex_lock(&open_lock);
  int last = --t->refs == 0;
  for (gpupart__trace **at = &open_traces; last && *at; at = &(*at)->next)
    if (*at == t) {
      *at = t->next;
      break;
    }
  pthread_mutex_lock(&t->lock);
  if (last) dropped_line(t);
  flush_locked(t);
  pthread_mutex_unlock(&t->lock);
  if (last) {
    remember_closed(t);
    close(t->fd);
  }
  pthread_mutex_unlock(&open_lock);
  if (!last) return;
  pthread_mutex_destroy(&t->lock);
  gpupart__host_free(&t->mem, t);
}

/* At exit (or when the library is unloaded): what the traces still buffer. A trace whose
 * lock another thread holds at that moment keeps its last lines. */
__attribute__((destructor)) static void exit_flush(void) {
  pthread_mutex_lock(&open_lock);
  for (gpupart__trace *t = open_traces; t; t = t->next)
    if (pthread_mutex_trylock(&t->lock) == 0) {
      flush_locked(t);
      pthread_mutex_unlock(&t->lock);
    }
  pthread_mutex_unlock(&open_lock);
}

/* ---- lines ---- */

static size_t put_u64(char *out, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while (v /= 10);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

static size_t put_name(char *out, const char *name) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (size_t i = 0; name[i] && i < NAME_MAX_BYTES; i++) {
    unsigned char c = (unsigned char)name[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("_.:+/-", c))
      out[n++] = (char)c;
    else {
      out[n++] = '%';
      out[n++] = hex[c >> 4];
      out[n++] = hex[c & 15];
    }
  }
  return n;
}

/* The id an allocation keeps when its line was dropped: its free is dropped too, so that
 * every free the file holds names an allocation it holds. */
#define DROPPED_ID UINT64_MAX

/* Lock held: room for one more line, or NULL (the line is dropped, counted) where the
 * file cannot take what the buffer holds now. */
static char *line_room(gpupart__trace *t) {
  if (t->n + LINE_MAX_BYTES > sizeof t->buf) flush_locked(t);
  if (t->n + LINE_MAX_BYTES <= sizeof t->buf) return t->buf + t->n;
  drop(t, 1);
  return NULL;
}

/* Lock held: the "# device" line when the device changes (tried again at the next line
 * where it was dropped). */
static void device_line(gpupart__trace *t, const gpupart_device *dev) {
  char *s = line_room(t);
  if (!s) return;
  size_t n = (size_t)snprintf(s, 64, "# device %s:%u ", gpupart_backend_name(dev->info.backend), dev->info.index);
  n += put_name(s + n, dev->info.name);
  s[n++] = '\n';
  t->n += n;
  t->last_dev = dev;
}

void gpupart__trace_alloc(gpupart__trace *t, const gpupart_partition *p, uint64_t *aux, uint64_t size) {
  pthread_mutex_lock(&t->lock);
  if (p->dev != t->last_dev) device_line(t, p->dev);
  uint64_t id = t->next_id++;
  char *s = line_room(t);
  *aux = s ? id : DROPPED_ID;
  size_t n = 0;
  if (s) {
    s[n++] = 'a';
    s[n++] = ' ';
    n += put_u64(s + n, id);
    s[n++] = ' ';
    n += put_u64(s + n, size);
    s[n++] = ' ';
    n += put_name(s + n, p->name);
    s[n++] = '\n';
  }
  t->n += n;
  pthread_mutex_unlock(&t->lock);
}

void gpupart__trace_free(gpupart__trace *t, uint64_t id) {
  if (!id) return; /* allocated before the trace existed: never the case today */
  pthread_mutex_lock(&t->lock);
  char *s = id == DROPPED_ID ? NULL : line_room(t);
  size_t n = 0;
  if (id == DROPPED_ID) drop(t, 1);
  if (s) {
    s[n++] = 'f';
    s[n++] = ' ';
    n += put_u64(s + n, id);
    s[n++] = '\n';
  }
  t->n += n;
  pthread_mutex_unlock(&t->lock);
}
