/* Kubernetes DRA device metadata (KEP-5304), read by dra.c: what a DRA driver published
 * for each device a pod's claim was given, as files the kubelet mounts into the
 * container. A device gpupart can name (a UUID or PCI bus id attribute) becomes an
 * orchestrator share (config.h), carrying the claim it came from so that a later
 * generation of the same file can be read again at run time. */
#ifndef GPUPART_CORE_DRA_H
#define GPUPART_CORE_DRA_H

#include <stdint.h>

#include "hostmem.h"
#include "options.h"

#define GPUPART__DRA_API "metadata.resource.k8s.io/v1beta1" /* the version read; others are skipped */
#define GPUPART__DRA_FILE_MAX (256u * 1024u)                /* the largest metadata file read */
#define GPUPART__DRA_NAME_MAX 256                           /* a Kubernetes name (253 bytes) and its NUL */
#define GPUPART__MAX_DRA 8                                  /* devices taken from metadata files, at most */
#define GPUPART__DRA_WARNINGS 4                             /* files a scan says it could not read, at most */

/* One device of one request of one claim, as a metadata file describes it. */
typedef struct gpupart__dra_device {
  char path[GPUPART__PATH_MAX];          /* the file it was read from */
  char key[GPUPART__DRA_NAME_MAX];       /* its UUID or PCI bus id attribute, as written */
  int by_uuid;                           /* key is a UUID (else a PCI bus id) */
  char claim[GPUPART__DRA_NAME_MAX];     /* metadata.name: the ResourceClaim */
  char namespace[GPUPART__DRA_NAME_MAX]; /* metadata.namespace */
  char pod_claim[GPUPART__DRA_NAME_MAX]; /* podClaimName: the pod's name for a template's claim; "" */
  char request[GPUPART__DRA_NAME_MAX];   /* the request's name */
  uint64_t generation;                   /* metadata.generation: 1, then one more per update */
  int has_memory;                        /* a gpupart.io/memory attribute was given */
  uint64_t memory, guarantee;            /* gpupart.io/memory and gpupart.io/guarantee, in bytes */
} gpupart__dra_device;

/* Reads the metadata file at path (a stream of DeviceMetadata objects, newest API
 * version first) into out[0..cap): the devices of the object of version GPUPART__DRA_API
 * that name a UUID or a PCI bus id. A file that does not parse is read again (a driver
 * may be rewriting it in place) a few times. Returns the number of devices, or -1 with
 * why filled (not a regular file, too large, not JSON, no object of that version, a field
 * of the wrong type); a device whose memory attribute is wrong is a warning in why with
 * the others returned. Its buffers come from m. */
int gpupart__dra_read(const gpupart__hostmem *m, const char *path, gpupart__dra_device *out, uint32_t cap, char *why,
                      size_t n);

/* What a scan of the metadata folder found: the devices, and the files it ignored. */
typedef struct gpupart__dra_scan {
  gpupart__dra_device devices[GPUPART__MAX_DRA];
  uint32_t ndevices;
  char warnings[GPUPART__DRA_WARNINGS][512];
  uint32_t nwarnings;
} gpupart__dra_scan;

/* Reads every metadata file under root (resourceclaims/<claim>/<request>/<driver>-
 * metadata.json and resourceclaimtemplates/<podClaimName>/<request>/<driver>-
 * metadata.json; a symbolic link is passed over with a warning) into out, the first
 * GPUPART__MAX_DRA devices, looking at a bounded number of directory entries. */
void gpupart__dra_scan_root(const gpupart__hostmem *m, const char *root, gpupart__dra_scan *out);

/* Whether device d (its key) is the device of that UUID (16 bytes, NULL or all zero when
 * it has none) or PCI bus id ("" when unknown). */
int gpupart__dra_names(const gpupart__dra_device *d, const uint8_t *uuid, const char *pci);

#endif
