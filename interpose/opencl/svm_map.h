/* The OpenCL layer's map from SVM pointers to their accounting: clSVMFree names only the
 * pointer, so the allocation is found here. Thread-safe. */
#ifndef GPUPART_INTERPOSE_SVM_MAP_H
#define GPUPART_INTERPOSE_SVM_MAP_H

#include "gpupart.h"

/* Records ptr -> a: 0, or -1 out of host memory (then nothing is recorded). */
int gpupart__svm_put(const void *ptr, gpupart_allocation *a);
/* Removes ptr and returns its allocation; NULL for a pointer never recorded. */
gpupart_allocation *gpupart__svm_take(const void *ptr);

#endif
