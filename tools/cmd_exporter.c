/* gpupart exporter: serves the shared ledgers over HTTP: /metrics (Prometheus text, as
 * gpupart metrics prints it, or OpenMetrics 1.0.0 when the scraper's Accept header prefers
 * it), / (the status page, page.h) and /top.json (gpupart top --json). One thread, one
 * poll loop, and bounds on everything a client controls: MAX_CONNS connections at once
 * (a new one gets a slot: the connection that can least be a scrape in progress is closed
 * to make room, but never one still sending its head that was accepted less than
 * EVICT_GRACE ago: new ones wait in the listen queue meanwhile), HEAD_SECONDS to send the whole request head (else 408
 * and closed, so idle and slowly sent requests cannot hold the slots), a request head of at most MAX_REQUEST bytes
 * (else 431), CONN_SECONDS for a whole exchange (else closed), one request per connection. Only GET and HEAD are served
 * (else 405); a malformed request line is 400, an unknown path 404. A reading is shared by the requests of
 * CACHE_SECONDS, so a flood of requests cannot keep the ledgers' locks busy. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli.h"
#include "metrics.h"
#include "page.h"

#define MAX_CONNS 32
#define MAX_REQUEST 8192
#define HEAD_SECONDS 3.0
#define CONN_SECONDS 10.0
#define EVICT_GRACE 1.0
#define CACHE_SECONDS 0.5
#define DEFAULT_LISTEN "127.0.0.1:9464"

static const char help[] = "usage: gpupart exporter [--listen ADDR:PORT] [--ledger-dir DIR]\n"
                           "\n"
                           "Serves every shared device of this user over HTTP until interrupted:\n"
                           "  /metrics    Prometheus text, as gpupart metrics prints it (OpenMetrics 1.0.0\n"
                           "              when the request's Accept header prefers application/openmetrics-text)\n"
                           "  /           a status page: each device's partitions as bars (reloads itself)\n"
                           "  /top.json   the snapshot gpupart top --json prints\n"
                           "\n"
                           "  --listen ADDR:PORT  the address to bind (default " DEFAULT_LISTEN "; a bare\n"
                           "                      PORT binds 127.0.0.1; 0.0.0.0:PORT or [::]:PORT serve every\n"
                           "                      interface; port 0 picks a free one). The address is printed.\n"
                           "  --ledger-dir DIR    the ledger folder (default: the one programs use:\n"
                           "                      GPUPART_LEDGER_DIR, else the configuration's ledger_dir,\n"
                           "                      else /dev/shm)\n"
                           "\n"
                           "Requests are bounded: 32 connections (a new one takes the slot of the oldest one\n"
                           "still sending its request), 3 s to send the request head, 8 KiB of request head,\n"
                           "10 s per exchange, GET and HEAD only. Bind it to loopback or to the one address\n"
                           "Prometheus scrapes (docs/deploy.md).\n"
                           "\n"
                           "exit status: 0 interrupted (SIGINT, SIGTERM), 1 cannot listen, 2 bad usage\n";

typedef struct conn {
  int fd;                   /* -1 = free */
  double accepted;          /* when accept() returned it */
  double deadline;          /* HEAD_SECONDS after accepted until the head is in, then the exchange's */
  char in[MAX_REQUEST + 1]; /* NUL-terminated */
  size_t in_len;
  char *out; /* the response, once the request is read */
  size_t out_len, out_off;
  int draining; /* response sent and our side shut: reading until the client closes */
} conn;

typedef struct server {
  int listen_fd;
  const char *dir;
  observation cached;
  int have_cached;
  conn c[MAX_CONNS];
} server;

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

static double now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

/* ---- listening ---- */

/* "HOST:PORT", "[V6]:PORT" or "PORT" into host and port. 0, or -1 when malformed. */
static int split_listen(const char *a, char *host, size_t hn, char *port, size_t pn) {
  const char *colon = strrchr(a, ':'), *p = colon ? colon + 1 : a;
  if (!*p || strlen(p) >= pn || strspn(p, "0123456789") != strlen(p)) return -1;
  snprintf(port, pn, "%s", p);
  if (!colon) return snprintf(host, hn, "127.0.0.1"), 0;
  size_t len = (size_t)(colon - a);
  if (len >= 2 && a[0] == '[' && a[len - 1] == ']') a++, len -= 2;
  if (!len || len >= hn) return -1;
  memcpy(host, a, len), host[len] = '\0';
  return 0;
}

static int bind_one(const struct addrinfo *ai) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/* Prints the address bound, with the port the kernel chose for port 0. */
static void say_listening(int fd) {
  struct sockaddr_storage ss;
  socklen_t n = sizeof ss;
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getsockname(fd, (struct sockaddr *)&ss, &n) ||
      getnameinfo((struct sockaddr *)&ss, n, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV))
    return;
  int v6 = ss.ss_family == AF_INET6;
  printf("gpupart exporter: listening on http://%s%s%s:%s/\n", v6 ? "[" : "", host, v6 ? "]" : "", port);
  fflush(stdout);
}

static int open_listener(const char *listen_at, int *fd) {
  char host[256], port[16];
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV},
                  *ai = NULL;
  if (split_listen(listen_at, host, sizeof host, port, sizeof port) || atol(port) > 65535)
    return cli_usage_error("exporter", "--listen '%s': want ADDR:PORT, [ADDR]:PORT or PORT", listen_at);
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc)
    return cli_usage_error("exporter", "--listen '%s': '%s' is not a numeric address (%s)", listen_at, host,
                           gai_strerror(rc));
  *fd = bind_one(ai);
  int err = errno;
  freeaddrinfo(ai);
  if (*fd >= 0) return say_listening(*fd), EXIT_OK;
  fprintf(stderr, "gpupart exporter: cannot listen on %s: %s%s\n", listen_at, strerror(err),
          err == EADDRINUSE ? " (another program has this port: choose another with --listen ADDR:PORT)" : "");
  return EXIT_CHECKED;
}

/* ---- answering ---- */

/* The response of status with body (HEAD: its headers only) into c->out. */
static void respond(conn *c, int status, const char *type, const char *body, size_t len, int head_only) {
  static const struct {
    int code;
    const char *text;
  } reasons[] = {{200, "OK"},
                 {400, "Bad Request"},
                 {404, "Not Found"},
                 {405, "Method Not Allowed"},
                 {408, "Request Timeout"},
                 {431, "Request Header Fields Too Large"},
                 {500, "Internal Server Error"},
                 {503, "Service Unavailable"}};
  const char *reason = "Error";
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
    if (reasons[i].code == status) reason = reasons[i].text;
  FILE *f = open_memstream(&c->out, &c->out_len);
  if (!f) return;
  fprintf(f,
          "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
          "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
          "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\r\n%s\r\n",
          status, reason, type, len, status == 405 ? "Allow: GET, HEAD\r\n" : "");
  if (!head_only) fwrite(body, 1, len, f);
  fclose(f);
  c->out_off = 0;
}

static void respond_text(conn *c, int status, const char *text) {
  respond(c, status, "text/plain; charset=utf-8", text, strlen(text), 0);
}

/* The observation of the last CACHE_SECONDS, or a new one; NULL when the folder fails. */
static const observation *reading(server *s) {
  if (s->have_cached && now() - s->cached.time < CACHE_SECONDS && now() >= s->cached.time) return &s->cached;
  if (s->have_cached) observe_free(&s->cached), s->have_cached = 0;
  if (observe(s->dir, &s->cached)) return NULL;
  s->have_cached = 1;
  return &s->cached;
}

/* ---- content negotiation for /metrics ---- */

/* The q of one media range's parameters (";q=0.5"), 1 when absent, -1 when malformed. */
static double range_q(const char *params) {
  for (const char *p = params; (p = strchr(p, ';')); p++) {
    p += strspn(p, "; \t");
    if ((p[0] != 'q' && p[0] != 'Q') || p[1] != '=') continue;
    char *end;
    double q = strtod(p + 2, &end);
    return end == p + 2 || q < 0 || q > 1 ? -1 : q;
  }
  return 1;
}

/* Whether params hold no "version=" or exactly "version=want". */
static int range_version_is(const char *params, const char *want) {
  for (const char *p = params; (p = strchr(p, ';')); p++) {
    p += strspn(p, "; \t");
    if (strncasecmp(p, "version=", 8)) continue;
    size_t n = strcspn(p + 8, "; \t");
    return n == strlen(want) && strncmp(p + 8, want, n) == 0;
  }
  return 1;
}

/* One media range of an Accept value ("type/subtype;param=v;q=0.5", NUL-terminated):
 * the best q seen for each form raised where it names that form. */
static void accept_range(const char *range, double *om, double *text) {
  range += strspn(range, " \t");
  size_t n = strcspn(range, "; \t");
  const char *params = range + n;
  double q = range_q(params), *best = NULL;
  if (n == 28 && strncasecmp(range, "application/openmetrics-text", n) == 0 && range_version_is(params, "1.0.0"))
    best = om;
  else if (n == 10 && strncasecmp(range, "text/plain", n) == 0 && range_version_is(params, "0.0.4")) best = text;
  else if ((n == 6 && strncasecmp(range, "text/*", n) == 0) || (n == 3 && strncmp(range, "*/*", n) == 0)) best = text;
  if (best && q > *best) *best = q;
}

/* Every Accept header of a request head: OpenMetrics when its best q is positive and not
 * below Prometheus text's (RFC 9110's preference order), else Prometheus text, which
 * is also the answer to a request without Accept. */
static int wants_openmetrics(const char *head) {
  double om = 0, text = 0;
  for (const char *line = strchr(head, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
    if (strncasecmp(line + 1, "accept:", 7)) continue;
    const char *v = line + 8, *end = v + strcspn(v, "\r\n");
    while (v < end) {
      size_t k = strcspn(v, ",\r\n");
      char range[256];
      if (k < sizeof range) {
        memcpy(range, v, k);
        range[k] = '\0';
        accept_range(range, &om, &text);
      }
      v += k + (v[k] == ',');
    }
  }
  return om > 0 && om >= text;
}

/* The body of path (its kind in *type) for request head, or NULL for no such path. */
static char *render(server *s, const char *head, const char *path, const char **type, size_t *len, int *failed) {
  void (*draw)(FILE *, const observation *) = NULL;
  if (strcmp(path, "/metrics") == 0 && wants_openmetrics(head)) {
    draw = metrics_openmetrics;
    *type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
  } else if (strcmp(path, "/metrics") == 0) {
    draw = metrics_text;
    *type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (strcmp(path, "/") == 0) {
    draw = page_html;
    *type = "text/html; charset=utf-8";
  } else if (strcmp(path, "/top.json") == 0) {
    draw = observe_json;
    *type = "application/json";
  }
  if (!draw) return NULL;
  const observation *o = reading(s);
  char *body = NULL;
  FILE *f = o ? open_memstream(&body, len) : NULL;
  if (!f) return *failed = 1, NULL;
  draw(f, o);
  fclose(f);
  return body;
}

/* "METHOD SP /TARGET SP HTTP/1.x" of line (len bytes): 0 with method and path (the
 * target's path, the query dropped), or -1. */
static int request_line(const char *line, size_t len, char *method, size_t mn, char *path, size_t pn) {
  size_t m = 0;
  while (m < len && m + 1 < mn && line[m] >= 'A' && line[m] <= 'Z') method[m] = line[m], m++;
  method[m] = '\0';
  if (!m || m >= len || line[m] != ' ' || line[m + 1] != '/') return -1;
  const char *t = line + m + 1, *end = line + len;
  size_t tn = 0;
  while (t + tn < end && t[tn] > ' ' && t[tn] < 0x7f) tn++;
  if (t + tn + 9 != end || strncmp(t + tn, " HTTP/1.", 8) || (t[tn + 8] != '0' && t[tn + 8] != '1')) return -1;
  size_t pl = strcspn(t, "? ");
  if (pl > tn) pl = tn;
  if (pl >= pn) return -1;
  memcpy(path, t, pl), path[pl] = '\0';
  return 0;
}

/* An error response's status for c's request, or 0 when it names something served. */
static int refusal(const conn *c, char *path, size_t pn, int *head) {
  char method[16];
  size_t line = strcspn(c->in, "\r\n");
  if (memchr(c->in, '\0', c->in_len) || request_line(c->in, line, method, sizeof method, path, pn)) return 400;
  *head = strcmp(method, "HEAD") == 0;
  return *head || strcmp(method, "GET") == 0 ? 0 : 405;
}

/* The whole request head is in c->in: its response. */
static void answer(server *s, conn *c) {
  char path[1024];
  int head = 0, failed = 0, status = refusal(c, path, sizeof path, &head);
  const char *type = NULL;
  size_t len = 0;
  char *body = status ? NULL : render(s, c->in, path, &type, &len, &failed);
  if (status == 400) respond_text(c, 400, "malformed request\n");
  else if (status == 405) respond_text(c, 405, "only GET and HEAD are served\n");
  else if (failed) respond_text(c, 500, "cannot read the ledger folder\n");
  else if (!body) respond_text(c, 404, "not found: try / or /metrics\n");
  else respond(c, 200, type, body, len, head);
  free(body);
}

/* ---- the loop ---- */

static void drop(conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->out);
  c->fd = -1;
  c->out = NULL;
  c->in_len = c->out_len = c->out_off = 0;
  c->draining = 0;
}

/* Whether c->in holds a whole request head. */
static int head_complete(const conn *c) { return strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n"); }

/* After the response: what the client still sends is read and dropped until it closes,
 * since closing with unread bytes would reset the connection and lose the response. */
static void drain(conn *c) {
  char sink[4096];
  ssize_t n = recv(c->fd, sink, sizeof sink, 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) drop(c);
}

static void on_readable(server *s, conn *c) {
  if (c->draining) {
    drain(c);
    return;
  }
  ssize_t n = recv(c->fd, c->in + c->in_len, MAX_REQUEST - c->in_len, 0);
  if (n <= 0) {
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) drop(c);
    return;
  }
  c->in_len += (size_t)n;
  c->in[c->in_len] = '\0';
  if (head_complete(c) || memchr(c->in, '\0', c->in_len)) answer(s, c);
  else if (c->in_len == MAX_REQUEST) respond_text(c, 431, "request head too large\n");
  if (c->out) c->deadline = c->accepted + CONN_SECONDS; /* the head is in: the exchange's deadline */
}

static void on_writable(conn *c) {
  ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
  if (n > 0) c->out_off += (size_t)n;
  if (n < 0 && errno != EAGAIN && errno != EINTR) drop(c);
  else if (c->out_off == c->out_len) {
    shutdown(c->fd, SHUT_WR);
    c->draining = 1;
    if (c->deadline > now() + 1) c->deadline = now() + 1;
  }
}

/* Closes c: with a 408 (best effort, never blocking) when its request head is not in. */
static void close_early(conn *c) {
  if (!c->out && !c->draining) {
    respond_text(c, 408, "request not received in time\n");
    if (c->out && send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
  }
  drop(c);
}

/* What closing c would cost, least first: its response is all sent (0); it is still
 * sending its request head (1), which is what idle and slow clients do; its response is
 * being written (2). */
static int eviction_rank(const conn *c) { return c->draining ? 0 : c->out ? 2 : 1; }

/* Whether c may be closed to make room at time t: not while it may be a client that has
 * just connected and is about to send its request (accepted less than EVICT_GRACE ago). */
static int evictable(const conn *c, double t) { return eviction_rank(c) != 1 || t - c->accepted >= EVICT_GRACE; }

/* A free slot; when there is none, the evictable connection whose closing costs least (the
 * oldest of those) is closed to make one, so that idle or slow clients can never keep a
 * new scrape out for long; NULL when every slot holds a connection that is not evictable. */
static conn *free_slot(server *s) {
  conn *victim = NULL;
  double t = now();
  for (int i = 0; i < MAX_CONNS; i++) {
    conn *c = &s->c[i];
    if (c->fd < 0) return c;
    if (!evictable(c, t)) continue;
    int r = victim ? eviction_rank(c) - eviction_rank(victim) : -1;
    if (r < 0 || (r == 0 && c->accepted < victim->accepted)) victim = c;
  }
  if (victim) close_early(victim);
  return victim;
}

/* Whether a connection waiting in the listen queue could get a slot now. */
static int has_room(const server *s) {
  double t = now();
  for (int i = 0; i < MAX_CONNS; i++)
    if (s->c[i].fd < 0 || evictable(&s->c[i], t)) return 1;
  return 0;
}

/* Takes the waiting connections (at most MAX_CONNS per turn, so a flood of them cannot
 * starve the others) and reads each at once: a scraper's request is often there already. */
static void accept_all(server *s) {
  for (int k = 0; k < MAX_CONNS && has_room(s); k++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    conn *c = free_slot(s);
    c->fd = fd;
    c->accepted = now();
    c->deadline = c->accepted + HEAD_SECONDS;
    c->in_len = 0;
    c->in[0] = '\0';
    on_readable(s, c);
    if (c->fd >= 0 && c->out && !c->draining) on_writable(c);
  }
}

/* c is past its deadline: a head still sending is read once more (it may have come in
 * while the loop served others) and answered when whole; else c is closed, with a 408 when
 * its head is not in. */
static void expire_one(server *s, conn *c) {
  if (!c->out && !c->draining) {
    on_readable(s, c);
    if (c->fd >= 0 && c->out) {
      on_writable(c);
      return;
    }
  }
  if (c->fd >= 0) close_early(c);
}

/* Connections past their deadline: 408 to those still sending their request. */
static void expire(server *s) {
  double t = now();
  for (int i = 0; i < MAX_CONNS; i++)
    if (s->c[i].fd >= 0 && t >= s->c[i].deadline) expire_one(s, &s->c[i]);
}

static void serve_once(server *s) {
  struct pollfd p[MAX_CONNS + 1];
  int idx[MAX_CONNS + 1], n = 1;
  p[0] = (struct pollfd){.fd = s->listen_fd, .events = has_room(s) ? POLLIN : 0};
  for (int i = 0; i < MAX_CONNS; i++)
    if (s->c[i].fd >= 0)
      idx[n] = i,
      p[n++] = (struct pollfd){.fd = s->c[i].fd, .events = s->c[i].out && !s->c[i].draining ? POLLOUT : POLLIN};
  if (poll(p, (nfds_t)n, 250) > 0) {
    for (int k = 1; k < n; k++) {
      conn *c = &s->c[idx[k]];
      if (p[k].revents & (POLLERR | POLLNVAL)) drop(c);
      else if (p[k].revents & POLLOUT) on_writable(c);
      else if (p[k].revents & (POLLIN | POLLHUP)) on_readable(s, c);
      if (c->fd >= 0 && c->out && !c->draining && p[k].events == POLLIN) on_writable(c); /* just answered */
    }
    if (p[0].revents & POLLIN) accept_all(s);
  }
  expire(s);
}

static int parse_args(int argc, char **argv, const char **listen_at, const char **dir) {
  for (int i = 1; i < argc; i++) {
    const char *v;
    int r;
    if ((r = cli_option(argc, argv, &i, "--listen", 1, &v)) > 0) *listen_at = v;
    else if (!r && (r = cli_option(argc, argv, &i, "--ledger-dir", 1, &v)) > 0) *dir = v;
    if (r < 0) return EXIT_USAGE;
    if (!r) return cli_usage_error("exporter", "unknown argument '%s'", argv[i]);
  }
  return EXIT_OK;
}

int cmd_exporter(int argc, char **argv) {
  const char *listen_at = DEFAULT_LISTEN, *dir = NULL;
  if (cli_wants_help(argc, argv)) return fputs(help, stdout), EXIT_OK;
  int rc = parse_args(argc, argv, &listen_at, &dir);
  if (rc) return rc;
  static server s;
  s.dir = observe_ledger_dir(dir);
  for (int i = 0; i < MAX_CONNS; i++) s.c[i].fd = -1;
  if ((rc = open_listener(listen_at, &s.listen_fd))) return rc;
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL), sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  while (!stop) serve_once(&s);
  for (int i = 0; i < MAX_CONNS; i++) drop(&s.c[i]);
  if (s.have_cached) observe_free(&s.cached);
  close(s.listen_fd);
  return EXIT_OK;
}
