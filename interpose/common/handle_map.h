/* The layers' map from a driver handle or pointer to its accounting, for the calls that
 * name only the handle (cuMemFree, clSVMFree, vkFreeMemory). Each record is tagged with
 * what it holds: a charge on the process's partition (account.h: the driver allocated
 * the memory), or, in the CUDA preload's arena mode, an allocation the arena served
 * (cu_arena.h). Thread-safe. */
#ifndef GPUPART_INTERPOSE_HANDLE_MAP_H
#define GPUPART_INTERPOSE_HANDLE_MAP_H

#include "gpupart.h"

typedef enum gpupart__ip_kind {
  GPUPART__IP_NONE,   /* no record */
  GPUPART__IP_CHARGE, /* .charge: the driver's memory, charged (gpupart__ip_unaccount gives it back) */
  GPUPART__IP_SERVED  /* .served: memory an arena served (the CUDA preload's arena mode) */
} gpupart__ip_kind;

typedef struct gpupart__ip_record {
  gpupart__ip_kind kind;
  union {
    gpupart_charge *charge;
    gpupart_allocation *served;
  } u;
} gpupart__ip_record;

/* The record of charge c (none for NULL), and of served allocation a. */
static inline gpupart__ip_record gpupart__ip_charged(gpupart_charge *c) {
  return c ? (gpupart__ip_record){GPUPART__IP_CHARGE, {.charge = c}} : (gpupart__ip_record){GPUPART__IP_NONE, {0}};
}
static inline gpupart__ip_record gpupart__ip_served(gpupart_allocation *a) {
  return a ? (gpupart__ip_record){GPUPART__IP_SERVED, {.served = a}} : (gpupart__ip_record){GPUPART__IP_NONE, {0}};
}
/* The charge a record holds, or NULL (none, or a served allocation). */
static inline gpupart_charge *gpupart__ip_charge_of(gpupart__ip_record r) {
  return r.kind == GPUPART__IP_CHARGE ? r.u.charge : NULL;
}

/* Records ptr -> r (not NONE): 0, or -1 out of host memory (then nothing is recorded). */
int gpupart__ip_map_put(const void *ptr, gpupart__ip_record r);
/* Records ptr -> r, replacing a record ptr already has (one the driver has freed without
 * this library seeing it, e.g. with its context, since a driver never hands out a live
 * pointer twice): 0 with that record in *stale (NONE: none), or -1 out of host memory
 * (then nothing changed). For handles unique in the process (CUDA's unified addresses),
 * not for handles unique per device only. */
int gpupart__ip_map_set(const void *ptr, gpupart__ip_record r, gpupart__ip_record *stale);
/* Removes ptr and returns its record; NONE for a pointer never recorded. */
gpupart__ip_record gpupart__ip_map_take(const void *ptr);
/* The charge recorded for ptr, removed (the layers that record only charges); NULL where
 * there is none. */
static inline gpupart_charge *gpupart__ip_map_take_charge(const void *ptr) {
  return gpupart__ip_charge_of(gpupart__ip_map_take(ptr));
}

/* In a forked child: forgets every record (the parent's pointers), freeing nothing. */
void gpupart__ip_map_forget(void);

#endif
