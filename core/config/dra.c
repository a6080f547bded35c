/* Kubernetes DRA device metadata (KEP-5304) as an orchestrator share: the files a DRA
 * driver publishes for the devices of a pod's claims, which the kubelet mounts into the
 * container under /var/run/kubernetes.io/dra-device-attributes (the dra_metadata_dir
 * option). Each file is a stream of DeviceMetadata objects, the same content once per API
 * version the driver writes, newest first; gpupart reads the metadata.resource.k8s.io/
 * v1beta1 one. A device that names a UUID or PCI bus id attribute is a share of that
 * device: its gpupart.io/memory attribute the bytes, gpupart.io/guarantee the floor.
 * None of this text is gpupart's own: a file that is too large, not a regular file, not
 * JSON, nested too deep or of the wrong shape is a warning and is ignored. */
#include "dra.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "identity.h"
#include "json.h"

#define DRA_MSG 512      /* a message of this file */
#define DRA_NODES 8192u  /* JSON values one metadata file may hold */
#define DRA_TRIES 3      /* reads of a file that does not parse (rewritten in place) */
#define DRA_ENTRIES 256u /* directory entries looked at under the root, at most */
#define DRA_RETRY_NS 2000000L

static const char *const dra_dirs[] = {"resourceclaims", "resourceclaimtemplates"};

/* ---- one file ---------------------------------------------------------------------- */

typedef struct doc {
  const char *text;
  const gpupart__json *nodes;
  char *why;
  size_t n;
} doc;

static int say(const doc *d, const char *what) {
  snprintf(d->why, d->n, "%s", what);
  return -1;
}

static const gpupart__json *get(const doc *d, const gpupart__json *obj, const char *key) {
  return gpupart__json_get(d->text, d->nodes, obj, key);
}

static int text_of(const doc *d, const gpupart__json *obj, const char *key, char *out, size_t n) {
  const gpupart__json *v = get(d, obj, key);
  return v ? gpupart__json_string(d->text, v, out, n) : -1;
}

/* An amount attribute ({"int": bytes} or {"string": "4Gi"}, "4GiB", "4g"): 0, or -1. */
static int attr_amount(const doc *d, const gpupart__json *attr, uint64_t *out) {
  char s[64], err[DRA_MSG];
  gpupart__amount a;
  if (!gpupart__json_uint(d->text, get(d, attr, "int"), out)) return *out ? 0 : -1;
  if (text_of(d, attr, "string", s, sizeof s - 1)) return -1;
  size_t len = strlen(s);
  if (len > 1 && s[len - 1] == 'i' && strchr("KMGT", s[len - 2])) strcat(s, "B"); /* a Kubernetes quantity */
  if (gpupart__parse_amount(s, GPUPART__ACCEPT_BYTES, &a, err, sizeof err) || !a.bytes) return -1;
  *out = a.bytes;
  return 0;
}

/* The part of an attribute name after its domain ("resource.kubernetes.io/pciBusID"). */
static const char *base_name(const char *key) {
  const char *slash = strrchr(key, '/');
  return slash ? slash + 1 : key;
}

/* One attribute of a device: its identity, or its amounts. -1 when an amount is wrong. */
static int attribute(const doc *d, const gpupart__json *attr, gpupart__dra_device *dev) {
  char key[GPUPART__DRA_NAME_MAX];
  if (gpupart__json_key(d->text, attr, key, sizeof key)) return 0;
  if (!strcmp(key, "gpupart.io/memory")) {
    dev->has_memory = !attr_amount(d, attr, &dev->memory);
    return dev->has_memory ? 0 : -1;
  }
  if (!strcmp(key, "gpupart.io/guarantee")) return attr_amount(d, attr, &dev->guarantee);
  char value[GPUPART__DRA_NAME_MAX];
  int uuid = !strcasecmp(base_name(key), "uuid"), pci = !strcasecmp(base_name(key), "pciBusID");
  if (!(uuid || pci) || text_of(d, attr, "string", value, sizeof value) || !*value) return 0;
  if (pci && dev->by_uuid) return 0; /* the UUID names the device better */
  snprintf(dev->key, sizeof dev->key, "%s", value);
  dev->by_uuid = uuid;
  return 0;
}

/* A device of a request: kept (1) when it names a UUID or PCI bus id. */
static int device(const doc *d, const gpupart__json *v, gpupart__dra_device *dev) {
  const gpupart__json *attrs = get(d, v, "attributes");
  if (v->type != GPUPART__JSON_OBJECT || !attrs || attrs->type != GPUPART__JSON_OBJECT) return 0;
  for (uint32_t i = attrs->child; i; i = d->nodes[i].next) {
    if (attribute(d, &d->nodes[i], dev) == 0) continue;
    snprintf(d->why, d->n, "a gpupart.io amount of claim '%s' is not a number of bytes above 0: ignored",
             GPUPART__ECHO(dev->claim));
    dev->has_memory = 0;
  }
  return dev->key[0] != 0;
}

typedef struct sink {
  gpupart__dra_device *out;
  uint32_t cap, count;
} sink;

/* The devices of each request, each a copy of claim with its own request and attributes. */
static void requests(const doc *d, const gpupart__json *reqs, const gpupart__dra_device *claim, sink *k) {
  for (uint32_t r = reqs->child; r; r = d->nodes[r].next) {
    const gpupart__json *devs = get(d, &d->nodes[r], "devices");
    gpupart__dra_device dev = *claim;
    if (text_of(d, &d->nodes[r], "name", dev.request, sizeof dev.request) || !devs || devs->type != GPUPART__JSON_ARRAY)
      continue;
    for (uint32_t i = devs->child; i && k->count < k->cap; i = d->nodes[i].next) {
      gpupart__dra_device one = dev;
      if (device(d, &d->nodes[i], &one)) k->out[k->count++] = one;
    }
  }
}

/* One DeviceMetadata object of the version read: -1 (why filled) when its shape is wrong. */
static int object(const doc *d, const gpupart__json *o, gpupart__dra_device *claim, sink *k) {
  const gpupart__json *meta = get(d, o, "metadata"), *reqs = get(d, o, "requests");
  const gpupart__json *pod = get(d, o, "podClaimName"), *ns = get(d, meta, "namespace");
  if (!meta || text_of(d, meta, "name", claim->claim, sizeof claim->claim) ||
      gpupart__json_uint(d->text, get(d, meta, "generation"), &claim->generation) || !claim->generation)
    return say(d, "no metadata.name, or no metadata.generation of 1 or more");
  if ((ns && gpupart__json_string(d->text, ns, claim->namespace, sizeof claim->namespace)) ||
      (pod && gpupart__json_string(d->text, pod, claim->pod_claim, sizeof claim->pod_claim)))
    return say(d, "metadata.namespace or podClaimName is not a name");
  if (reqs && reqs->type != GPUPART__JSON_ARRAY) return say(d, "requests is not a list");
  if (reqs) requests(d, reqs, claim, k);
  return 0;
}

/* Whether o is a DeviceMetadata object of the version read. */
static int wanted(const doc *d, const gpupart__json *o) {
  char api[64], kind[32];
  return o->type == GPUPART__JSON_OBJECT && !text_of(d, o, "apiVersion", api, sizeof api) &&
         !strcmp(api, GPUPART__DRA_API) && !text_of(d, o, "kind", kind, sizeof kind) && !strcmp(kind, "DeviceMetadata");
}

/* The devices of text (len bytes): the first object of the version read, the others
 * skipped. 0 (k filled), 1 when the text is not JSON (worth a second read), -1. */
static int parse(const char *text, size_t len, gpupart__json *nodes, gpupart__dra_device *claim, sink *k, char *why,
                 size_t n) {
  doc d = {text, nodes, why, n};
  char err[160];
  for (size_t pos = 0;;) {
    uint32_t count;
    int rc = gpupart__json_parse(text, len, &pos, nodes, DRA_NODES, &count, err, sizeof err);
    if (rc < 0) snprintf(why, n, "not JSON: %s", err);
    if (rc < 0) return 1;
    if (rc > 0) return len ? say(&d, "no DeviceMetadata object of version " GPUPART__DRA_API) : 0;
    if (wanted(&d, &nodes[0])) return object(&d, &nodes[0], claim, k);
  }
}

/* The file's bytes into buf (GPUPART__DRA_FILE_MAX + 1 bytes): its length, or -1 with
 * why. A symbolic link, a device or a fifo is never read as a file. */
static long read_file(const char *path, char *buf, char *why, size_t n) {
  struct stat st;
  long len = -1;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) snprintf(why, n, "cannot open: %s", strerror(errno));
  else if (fstat(fd, &st) || !S_ISREG(st.st_mode)) snprintf(why, n, "not a regular file");
  else len = (long)read(fd, buf, GPUPART__DRA_FILE_MAX + 1);
  if (fd >= 0) close(fd);
  if (len > (long)GPUPART__DRA_FILE_MAX) snprintf(why, n, "larger than %u bytes", GPUPART__DRA_FILE_MAX);
  else if (len > 0 && memchr(buf, 0, (size_t)len)) snprintf(why, n, "holds a NUL byte");
  else return len;
  return -1;
}

static void pause_before_retry(void) {
  struct timespec t = {0, DRA_RETRY_NS};
  nanosleep(&t, NULL);
}

static int read_parse(const char *path, char *buf, gpupart__json *nodes, sink *k, char *why, size_t n) {
  int rc = 1;
  for (int tries = 0; rc == 1 && tries < DRA_TRIES; tries++) {
    if (tries) pause_before_retry(); /* a driver rewriting the file in place */
    gpupart__dra_device claim = {0};
    snprintf(claim.path, sizeof claim.path, "%s", path);
    k->count = 0;
    long len = read_file(path, buf, why, n);
    rc = len < 0 ? -1 : parse(buf, (size_t)len, nodes, &claim, k, why, n);
  }
  return rc ? -1 : (int)k->count;
}

int gpupart__dra_read(const gpupart__hostmem *m, const char *path, gpupart__dra_device *out, uint32_t cap, char *why,
                      size_t n) {
  char *buf = gpupart__host_calloc(m, 1, GPUPART__DRA_FILE_MAX + 1);
  gpupart__json *nodes = gpupart__host_calloc(m, DRA_NODES, sizeof *nodes);
  sink k = {out, cap, 0};
  int rc = -1;
  why[0] = 0;
  if (!buf || !nodes) snprintf(why, n, "out of host memory");
  else rc = read_parse(path, buf, nodes, &k, why, n);
  gpupart__host_free(m, buf);
  gpupart__host_free(m, nodes);
  return rc;
}

/* "GPU-7ce23cd8-...", "gpu-7ce2...", "7ce23cd8-...": the UUID written whole, any case. */
static int uuid_is(const char *key, const uint8_t *uuid) {
  char text[GPUPART__UUID_STRING];
  if (!uuid || gpupart__uuid_is_zero(uuid)) return 0;
  if (!strncasecmp(key, "GPU-", 4)) key += 4;
  gpupart__uuid_format(uuid, text);
  return !strcasecmp(key, text);
}

int gpupart__dra_names(const gpupart__dra_device *d, const uint8_t *uuid, const char *pci) {
  if (d->by_uuid) return uuid_is(d->key, uuid);
  return pci && *pci && !strcasecmp(d->key, pci);
}

/* ---- the folder ---------------------------------------------------------------------- */

typedef struct walk {
  const gpupart__hostmem *m;
  gpupart__dra_scan *out;
  uint32_t entries; /* looked at so far (DRA_ENTRIES at most) */
} walk;

static void warn(walk *w, const char *path, const char *why) {
  gpupart__dra_scan *o = w->out;
  if (o->nwarnings < GPUPART__DRA_WARNINGS)
    snprintf(o->warnings[o->nwarnings++], sizeof o->warnings[0], "%s: %s", GPUPART__ECHO(path), why);
}

static void metadata_file(walk *w, const char *path) {
  gpupart__dra_scan *o = w->out;
  char why[DRA_MSG / 2];
  int count = gpupart__dra_read(w->m, path, o->devices + o->ndevices, GPUPART__MAX_DRA - o->ndevices, why, sizeof why);
  if (count < 0) strncat(why, ": ignored", sizeof why - strlen(why) - 1);
  if (count < 0 || why[0]) warn(w, path, why);
  if (count > 0) o->ndevices += (uint32_t)count;
}

/* Whether name ends in "-metadata.json" (a driver's file). */
static int is_metadata(const char *name) {
  static const char tail[] = "-metadata.json";
  size_t len = strlen(name), t = sizeof tail - 1;
  return len > t && !strcmp(name + len - t, tail);
}

/* Each entry of folder dir, depth levels above the files: a symbolic link, or anything
 * but a folder above the files and a regular file at them, is passed over. */
static void each(walk *w, const char *dir, int depth) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d)) && w->entries < DRA_ENTRIES;) {
    char path[GPUPART__PATH_MAX];
    struct stat st;
    if (e->d_name[0] == '.') continue;
    w->entries++;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path || lstat(path, &st)) continue;
    if (S_ISLNK(st.st_mode)) warn(w, path, "a symbolic link: ignored");
    else if (depth && S_ISDIR(st.st_mode)) each(w, path, depth - 1);
    else if (!depth && S_ISREG(st.st_mode) && is_metadata(e->d_name) && w->out->ndevices < GPUPART__MAX_DRA)
      metadata_file(w, path);
  }
  if (d) closedir(d);
}

void gpupart__dra_scan_root(const gpupart__hostmem *m, const char *root, gpupart__dra_scan *out) {
  walk w = {m, out, 0};
  *out = (gpupart__dra_scan){0};
  for (size_t i = 0; i < sizeof dra_dirs / sizeof dra_dirs[0]; i++) {
    char dir[GPUPART__PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/%s", root, dra_dirs[i]) < sizeof dir) each(&w, dir, 2);
  }
}
