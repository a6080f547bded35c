/* Device identity (identity.h): which physical device a backend's info describes. A
 * UUID names the GPU itself, whatever backend or index reaches it (Vulkan's deviceUUID,
 * OpenCL's cl_khr_device_uuid, CUDA's uuid), so it comes first; the PCI bus id names the
 * slot where a backend has no UUID; backend and index are the last resort, which keeps
 * two opens of one index in one backend together but cannot join two backends. */
#include <stdio.h>
#include <string.h>

#include "identity.h"

int gpupart__uuid_is_zero(const uint8_t uuid[16]) {
  for (int i = 0; i < 16; i++)
    if (uuid[i]) return 0;
  return 1;
}

void gpupart__uuid_format(const uint8_t uuid[16], char *out) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0, o = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = hex[uuid[i] >> 4];
    out[o++] = hex[uuid[i] & 15];
    out[o] = '\0';
  }
}

void gpupart__sim_uuid(uint32_t index, uint8_t out[16]) {
  memset(out, 0, 16);
  out[0] = (uint8_t)index;
  out[15] = 0x5a;
}

/* The sim backend's devices are named by index and size ("sim devices with the same
 * index and total_bytes are the same device"); its own UUID carries only the low byte of
 * the index, so the key spells both out. A sim device given a UUID or bus id (one that
 * stands for a real device) is named by them instead, as that device is. */
static int sim_key(const gpupart_device_info *info, char *out, size_t n) {
  uint8_t own[16];
  if (info->backend != GPUPART_BACKEND_SIM || info->pci_bus_id[0]) return 0;
  gpupart__sim_uuid(info->index, own);
  if (memcmp(own, info->uuid, sizeof own) && !gpupart__uuid_is_zero(info->uuid)) return 0;
  snprintf(out, n, "sim:%u:%llu", info->index, (unsigned long long)info->total_bytes);
  return 1;
}

static int uuid_key(const gpupart_device_info *info, char *out, size_t n) {
  char u[GPUPART__UUID_STRING];
  if (gpupart__uuid_is_zero(info->uuid)) return 0;
  gpupart__uuid_format(info->uuid, u);
  snprintf(out, n, "uuid:%s", u);
  return 1;
}

/* The bus id as the backend wrote it, bounded by its field (a backend that filled all
 * of it leaves no NUL). */
static int pci_key(const gpupart_device_info *info, char *out, size_t n) {
  int len = (int)strnlen(info->pci_bus_id, sizeof info->pci_bus_id);
  if (!len) return 0;
  snprintf(out, n, "pci:%.*s", len, info->pci_bus_id);
  return 1;
}

void gpupart__identity_of(const gpupart_device_info *info, gpupart__identity *out) {
  char *k = out->key;
  size_t n = sizeof out->key;
  memset(out, 0, sizeof *out);
  if (sim_key(info, k, n) || uuid_key(info, k, n) || pci_key(info, k, n)) return;
  snprintf(k, n, "%s:%u", gpupart_backend_name(info->backend), info->index);
}

int gpupart__identity_equal(const gpupart__identity *a, const gpupart__identity *b) {
  return strncmp(a->key, b->key, sizeof a->key) == 0;
}
