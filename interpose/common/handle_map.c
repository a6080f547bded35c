/* handle_map.h: a chained hash over the handle's bits, one lock (the memory objects
 * mapped here are few and large, so neither the lock nor the chains are hot). */
#include "handle_map.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define BUCKETS 1024

typedef struct entry {
  struct entry *next;
  const void *ptr;
  gpupart__ip_record record;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *buckets[BUCKETS];

static size_t bucket_of(const void *ptr) {
  uintptr_t u = (uintptr_t)ptr;
  return (size_t)((u >> 6) ^ (u >> 16)) % BUCKETS;
}

int gpupart__ip_map_put(const void *ptr, gpupart__ip_record a) {
  entry *e = malloc(sizeof *e);
  if (!e) return -1;
  size_t b = bucket_of(ptr);
  pthread_mutex_lock(&lock);
  *e = (entry){buckets[b], ptr, a};
  buckets[b] = e;
  pthread_mutex_unlock(&lock);
  return 0;
}

int gpupart__ip_map_set(const void *ptr, gpupart__ip_record a, gpupart__ip_record *stale) {
  entry *e = malloc(sizeof *e), *found = NULL;
  size_t b = bucket_of(ptr);
  int rc = 0;
  *stale = (gpupart__ip_record){GPUPART__IP_NONE, {0}};
  pthread_mutex_lock(&lock);
  for (found = buckets[b]; found && found->ptr != ptr; found = found->next) continue;
  if (found) *stale = found->record, found->record = a;
  else if (e) *e = (entry){buckets[b], ptr, a}, buckets[b] = e, e = NULL;
  else rc = -1;
  pthread_mutex_unlock(&lock);
  free(e);
  return rc;
}

gpupart__ip_record gpupart__ip_map_take(const void *ptr) {
  gpupart__ip_record a = {GPUPART__IP_NONE, {0}};
  pthread_mutex_lock(&lock);
  for (entry **link = &buckets[bucket_of(ptr)]; *link; link = &(*link)->next) {
    entry *e = *link;
    if (e->ptr != ptr) continue;
    *link = e->next;
    a = e->record;
    free(e);
    break;
  }
  pthread_mutex_unlock(&lock);
  return a;
}

void gpupart__ip_map_forget(void) {
  pthread_mutex_init(&lock, NULL);
  for (size_t b = 0; b < BUCKETS; b++) buckets[b] = NULL;
}
