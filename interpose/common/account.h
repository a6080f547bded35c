/* Accounting for the interposers (interpose/): the layers never write device memory
 * themselves and add no policy; they charge each driver allocation they intercept, to
 * the byte, on an account-only partition (gpupart_partition_charge: a ledger reservation
 * with no arena behind it) of a *mirror* device: a simulated gpupart device (the sim
 * backend, on which nothing is ever allocated) as large as the real one and, where the
 * driver tells the real device's UUID (or PCI bus id), carrying it: the mirror is then
 * that GPU to gpupart, its identity and budget, and its ledger (GPUPART_SHARED=1: the
 * shared ledger file) the one a gpupart application opening the GPU through a real
 * backend uses. The partition's limit, the device budget, the configuration (GPUPART_*
 * variables and the file) and the shared ledger are then gpupart's own, through the
 * public API only, as in any application. docs/unmodified.md says why a mirror and which
 * ledger it joins. */
#ifndef GPUPART_INTERPOSE_ACCOUNT_H
#define GPUPART_INTERPOSE_ACCOUNT_H

#include <stdint.h>

#include "gpupart.h"

/* A real device as a layer finds it (gpupart__ip_partition_of). */
typedef struct gpupart__ip_device {
  uint32_t key;           /* a number the layer derives from the device's position, the same in every process */
  uint64_t total;         /* its total as the real backend reports it, so that whichever process
                             comes first fixes the same budget */
  const uint8_t *uuid;    /* 16 bytes; NULL or all zero: none */
  const char *pci_bus_id; /* "dddd:bb:dd.f"; NULL or "": none */
  const char *name;       /* the driver's name of the device (the mirror reports it, traces
                             record it); NULL or "": none */
} gpupart__ip_device;

/* The mirror partition of real device d: opened on first use, then cached (as many as
 * the process meets); a second key with the same UUID or bus id is the same GPU and gets
 * the same partition. Without either the mirror is named "sim:KEY:TOTAL", a ledger of
 * the layers' own. The partition is GPUPART_PARTITION, else the program's name, and
 * joins the partition of that name in the shared ledger (its limit shared by every
 * member); only where the name cannot be joined it is "NAME.PID" (said on stderr).
 * Where gpupart refused the configuration, the device or the partition (said once on
 * stderr), the answer fails closed: a partition for which gpupart__ip_closed is true,
 * whose every allocation is refused, unless the operator chose failing open
 * (GPUPART_FAIL_OPEN=1): then NULL, and the layer passes calls through unaccounted. */
gpupart_partition *gpupart__ip_partition_of(const gpupart__ip_device *d);
/* The same without a bus id or a name. */
gpupart_partition *gpupart__ip_partition_for(uint32_t key, uint64_t total, const uint8_t uuid[16]);
/* The same with neither a UUID: a mirror named "sim:KEY:TOTAL". */
gpupart_partition *gpupart__ip_partition(uint32_t key, uint64_t total);
/* Whether p is the answer of a refusal that fails closed (never a real partition: the
 * functions below take it, gpupart's API does not). */
int gpupart__ip_closed(const gpupart_partition *p);
/* The partition's limit in bytes (what the layer reports as the device's size); 0 where
 * it has none to report (closed: the driver's size stands). */
uint64_t gpupart__ip_limit(gpupart_partition *p);
/* The bytes the partition's live charges hold (what this process uses). */
uint64_t gpupart__ip_in_use(gpupart_partition *p);
/* The bytes this process could still charge on the partition now
 * (gpupart_partition_chargeable): what the ledger grants, that is its limit less what
 * every member of the partition holds, within the device budget less what every process
 * holds and less the other partitions' unused guarantees, to the byte. */
uint64_t gpupart__ip_available(gpupart_partition *p);
/* Charges size bytes: 0 with *out set (NULL when gpupart cannot account the size: more
 * than the limit where no limit holds the partition below the device, so that the driver
 * answers as it would without the layer, or a ledger that cannot be used just now), or -1
 * when the partition, the budget or the process's ceiling refuses it (ELIMIT), or p is
 * closed. */
int gpupart__ip_account(gpupart_partition *p, uint64_t size, gpupart_charge **out);
/* Gives back what gpupart__ip_account took; NULL is a no-op. */
void gpupart__ip_unaccount(gpupart_charge *c);

/* Option name (its INI key) for device index of backend, as the program's configuration
 * (GPUPART_* variables and GPUPART_CONFIG's file, read by the layers' context) resolves it
 * for that device (gpupart_context_option), into out: 0, or -1 where the configuration
 * was refused or the option is none. For what the layers open in a context of their own. */
int gpupart__ip_option(gpupart_backend backend, uint32_t index, const char *name, char *out, size_t n);

/* In a forked child (a pthread_atfork handler, single-threaded): forgets the parent's
 * context and mirrors without closing them (closing would take the parent's share from a
 * shared ledger); the child's next gpupart__ip_partition opens its own. */
void gpupart__ip_forget(void);

#endif
