/* Where published counters go when they must go nowhere (ledger.h): the sink of a
 * publisher with no entry yet, and the count of forks that tells a publisher it now runs
 * in a child, whose parent goes on publishing its own figures in the share both map. */
#include <pthread.h>

#include "ledger.h"

gpupart__ledger_counters gpupart__unpublished;
unsigned gpupart__forks;

static void forked(void) { gpupart__forks++; }
static void watch(void) { pthread_atfork(NULL, NULL, forked); }

void gpupart__ledger_watch_forks(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, watch);
}
