/* What the two files of the CUDA driver test double share: cuda_double.c (contexts,
 * cuMemAlloc memory, copies, cuGetProcAddress_v2) and cuda_double_vmm.c (the virtual
 * memory management calls). One lock guards both; the functions marked so must be
 * called with it held. Hidden: these names are not part of the driver the double plays. */
#ifndef GPUPART_TESTS_CUDA_DOUBLE_INTERNAL_H
#define GPUPART_TESTS_CUDA_DOUBLE_INTERNAL_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#define CUDA_DOUBLE_HIDDEN __attribute__((visibility("hidden")))

/* One entry of cuGetProcAddress_v2's table: a variant of a base name and the CUDA
 * version that introduced it. */
typedef struct cuda_double_symbol {
  const char *name;
  int since;
  void (*fn)(void);
} cuda_double_symbol;

/* In cuda_double.c. */
CUDA_DOUBLE_HIDDEN void cuda_double__lock(void);
CUDA_DOUBLE_HIDDEN void cuda_double__unlock(void);
CUDA_DOUBLE_HIDDEN uint64_t cuda_double__env(const char *name, uint64_t dflt);
/* CUDA_SUCCESS, CUDA_ERROR_NOT_INITIALIZED or CUDA_ERROR_INVALID_DEVICE. */
CUDA_DOUBLE_HIDDEN CUresult cuda_double__check_device(CUdevice dev);
CUDA_DOUBLE_HIDDEN int cuda_double__initialized(void);
/* With the lock held: the device of the current context, or -1 when none is current. */
CUDA_DOUBLE_HIDDEN int cuda_double__current_device(void);
/* With the lock held: takes size bytes of the device's memory, or
 * CUDA_ERROR_OUT_OF_MEMORY when they are not free; gives them back. */
CUDA_DOUBLE_HIDDEN CUresult cuda_double__charge(int device, uint64_t size);
CUDA_DOUBLE_HIDDEN void cuda_double__uncharge(int device, uint64_t size);

/* In cuda_double_vmm.c. With the lock held: whether [p, p + n) lies in mapped virtual
 * memory that device may read (write: and write). */
CUDA_DOUBLE_HIDDEN int cuda_double__vmm_accessible(uintptr_t p, size_t n, int device, int write);
/* Its entries for cuGetProcAddress_v2. */
CUDA_DOUBLE_HIDDEN const cuda_double_symbol *cuda_double__vmm_symbols(size_t *count);

#endif
