/* Giving driver memory back beyond one partition: the backend's own caches (its optional
 * trim), and, with a shared ledger, the requests processes make of each other when a
 * budget refuses them (the OOM sequence asks; every other process's next call honours
 * it by releasing its partitions' empty blocks). */
#include "trim.h"

#include "arena.h"
#include "internal.h"

int gpupart__device_trim_locked(gpupart_device *dev) {
  int (*trim)(void *) = GPUPART__BACKEND_OP(dev->ops, trim);
  return trim ? trim(dev->bdev) : GPUPART_OK; /* none: the backend keeps no driver-side caches */
}

/* Shared ledger: when another process asked for a trim (its OOM sequence) since this
 * handle last looked, every partition of the handle releases its empty blocks. One atomic
 * load when nobody asked. Device slow lock held. */
void gpupart__device_honour_trim_locked(gpupart_device *dev) {
  gpupart__ledger *l = dev->ledger;
  if (!l->ops->trim_asked || !l->ops->trim_asked(l, &dev->trim_seen)) return;
  uint64_t released = 0;
  for (uint32_t i = 0; i < dev->nparts; i++) released += gpupart__arena_release_empty(dev->parts[i]);
  if (released) gpupart__device_trim_locked(dev);
}

/* Shared ledger: asks the other processes of the device to trim at their next call. */
void gpupart__device_ask_trim(gpupart_device *dev) {
  if (dev->ledger->ops->ask_trim) dev->ledger->ops->ask_trim(dev->ledger);
}
