/* Device identity: one key per physical device, so that every open of one GPU in a
 * context (and, with the shared ledger, in every process of the user) meets in one ledger.
 * The key is a short printable string, usable in a file name: "uuid:<8-4-4-4-12 hex>"
 * where the backend reports a UUID, else "pci:<bus id>", else "<backend>:<index>"; a sim
 * device "sim:<index>:<total_bytes>", unless its descriptor gave it a UUID or bus id. */
#ifndef GPUPART_CORE_IDENTITY_H
#define GPUPART_CORE_IDENTITY_H

#include "gpupart.h"

#define GPUPART__IDENTITY_MAX 64 /* bytes of a key, its terminating NUL included */
#define GPUPART__UUID_STRING 37  /* "01234567-89ab-cdef-0123-456789abcdef" and its NUL */

typedef struct gpupart__identity {
  char key[GPUPART__IDENTITY_MAX];
} gpupart__identity;

/* The identity of the device info describes. Never fails: every device has at least its
 * backend and index. */
void gpupart__identity_of(const gpupart_device_info *info, gpupart__identity *out);
/* 1 when a and b name the same physical device. */
int gpupart__identity_equal(const gpupart__identity *a, const gpupart__identity *b);
/* Formats a UUID as 8-4-4-4-12 lowercase hex into out (GPUPART__UUID_STRING bytes). */
void gpupart__uuid_format(const uint8_t uuid[16], char *out);
/* 1 when every byte of the UUID is zero (the backend has none). */
int gpupart__uuid_is_zero(const uint8_t uuid[16]);
/* The UUID a sim device of that index reports when its descriptor gives none (the
 * index's low byte, 0x5a last): such a device is named by index and total_bytes. */
void gpupart__sim_uuid(uint32_t index, uint8_t out[16]);

#endif
