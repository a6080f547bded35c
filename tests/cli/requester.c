/* A process that asks the other processes of a shared ledger to give back memory, for the
 * tests of gpupart top, metrics and the exporter: attaches to the ledger file PATH without
 * joining it as a member (as gpupart resize does), posts one give-back request of NEED
 * MiB at PRIORITY (2: a floor's, 1: a growth's) for the longest time a request may live
 * (60 s, so that the test reads it long before it ends), prints "ready" and waits for
 * standard input to close; then withdraws it and exits 0 (1 on any failure, with the
 * message). The library's own floors and growths post the same requests, for at most
 * 2 s: too short to read them without depending on timing.
 * usage: requester PATH NEED PRIORITY */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "shm.h"

int main(int argc, char **argv) {
  if (argc != 4) return fprintf(stderr, "usage: requester PATH NEED_MIB PRIORITY\n"), 2;
  gpupart__ledger *l = NULL;
  uint64_t ticket = 0, need = strtoull(argv[2], NULL, 10) << 20;
  uint32_t priority = (uint32_t)strtoul(argv[3], NULL, 10);
  if (gpupart__ledger_shm_attach_file(gpupart__hostmem_default(), argv[1], &l) ||
      l->ops->post(l, need, priority, 60000, &ticket))
    return fprintf(stderr, "requester: %s\n", gpupart_last_error()), 1;
  printf("ready\n");
  fflush(stdout);
  while (getchar() != EOF) {}
  l->ops->withdraw(l, ticket);
  l->ops->destroy(l);
  return 0;
}
