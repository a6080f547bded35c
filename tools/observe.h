/* What gpupart top, metrics and exporter share: one reading of every shared ledger of
 * this user in the ledger folder (core/ledger/snapshot.c's snapshot), with each device's labels
 * (backend, index, UUID) worked out from its identity key and the devices present, and
 * the command name of each member process. */
#ifndef GPUPART_TOOLS_OBSERVE_H
#define GPUPART_TOOLS_OBSERVE_H

#include <stdint.h>
#include <stdio.h>

#include "snapshot.h"

#define OBSERVE_LOCK_TIMEOUT_MS 100 /* how long a reading waits on one ledger's lock */

/* One shared device as read. */
typedef struct observed_device {
  const gpupart__ledger_snapshot *s;
  char backend[16];     /* "" when the key does not tell and no device present matches */
  int64_t index;        /* -1 when unknown */
  char uuid[40];        /* "" when unknown */
  uint64_t total, free; /* from the driver, UINT64_MAX when unknown */
} observed_device;

typedef struct observation {
  char dir[4096];
  double time; /* seconds since the epoch when it was read */
  gpupart__ledger_snapshot *snaps;
  observed_device *dev;
  uint32_t n;
  uint32_t unread; /* ledger files of the folder past the most read at once, not read */
} observation;

/* The ledger folder: option (when not NULL), else the one a program would use
 * (GPUPART_LEDGER_DIR, else ledger_dir of the configuration file, else /dev/shm). */
const char *observe_ledger_dir(const char *option);
/* On stderr, when o left ledger files of its folder unread (observation.unread), says so. */
void observe_warn_unread(const char *command, const observation *o);
/* Reads every ledger of dir into o. The devices present are enumerated once a process
 * (for labels and driver totals) when a key needs them. 0, or the library's code with its
 * message (the folder cannot be listed). */
int observe(const char *dir, observation *o);
void observe_free(observation *o);
/* The member's command name as its process wrote it into the ledger when it joined (its
 * comm: right across PID namespaces, and still there once it died); "" where none. */
void observe_comm(const gpupart__ledger_snapshot_member *m, char *out, size_t n);
/* "ok", "busy" or "refused": a snapshot's status in words. */
const char *observe_status(const gpupart__ledger_snapshot *s);

/* The snapshot as JSON (schema in docs/cli.md). */
void observe_json(FILE *f, const observation *o);

#endif
