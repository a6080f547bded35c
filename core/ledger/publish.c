/* Where published counters go when they must go nowhere (ledger.h): the sink of a
 * publisher with no entry yet, and in a child forked after it was set up, whose parent
 * goes on publishing its own figures in the share both map. The publishers with a place
 * are on one list, which a pthread_atfork child handler walks (the prepare handler holds
 * its lock across the fork, so the child's copy is whole) to point each at the sink. */
#include <pthread.h>

#include "ledger.h"

gpupart__ledger_counters gpupart__unpublished;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static gpupart__ledger_publisher *list; /* guarded by list_lock */

static void before_fork(void) { pthread_mutex_lock(&list_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&list_lock); }

/* The child runs alone: no publisher it inherited publishes into its parent's share. */
static void after_fork_child(void) {
  for (gpupart__ledger_publisher *p = list; p; p = p->next) p->to = &gpupart__unpublished;
  pthread_mutex_unlock(&list_lock);
}

static void watch(void) { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }

void gpupart__ledger_publisher_add(gpupart__ledger_publisher *pub, gpupart__ledger_counters *to) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, watch);
  pthread_mutex_lock(&list_lock);
  if (!pub->listed) {
    pub->prev = NULL;
    pub->next = list;
    if (list) list->prev = pub;
    list = pub;
    pub->listed = 1;
  }
  pub->to = to;
  pthread_mutex_unlock(&list_lock);
}

void gpupart__ledger_publisher_remove(gpupart__ledger_publisher *pub) {
  pthread_mutex_lock(&list_lock);
  if (pub->listed) {
    if (pub->prev) pub->prev->next = pub->next;
    else list = pub->next;
    if (pub->next) pub->next->prev = pub->prev;
    pub->listed = 0;
  }
  pub->to = &gpupart__unpublished;
  pthread_mutex_unlock(&list_lock);
}
