/* cuda_vector_add: one NVIDIA GPU split into two partitions, a CUDA kernel adding vectors
 * allocated from both, every result checked.
 *
 *   cuda_vector_add [DEVICE_INDEX]
 *
 * It opens the device with a 256 MiB budget (so it behaves the same on any GPU), creates
 * partitions "inputs" (75%) and "outputs" (25%), allocates a and b from the first and c
 * from the second, runs c = a + b with the CUDA runtime (which uses the device's primary
 * context, the same one gpupart retained, as PyTorch and TensorFlow do), copies c back
 * and checks it, and shows that "outputs" cannot grow past its share. Built with nvcc
 * where it is found; it needs an NVIDIA driver to run. Exit status 0 only if every check
 * passed; 77 where there is no driver or device (the test suites' "skipped"). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpupart_cuda.h"

#define MiB ((uint64_t)1 << 20)
#define N (1 << 20)

__global__ void vector_add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static int fail_gp(const char *what, gpupart_result rc) {
  fprintf(stderr, "cuda_vector_add: %s: %s: %s\n", what, gpupart_result_name(rc), gpupart_last_error());
  return 1;
}

static int fail_cuda(const char *what, cudaError_t e) {
  fprintf(stderr, "cuda_vector_add: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

static int make_partition(gpupart_device *dev, const char *name, double fraction, gpupart_partition **out) {
  gpupart_partition_desc d = {};
  d.name = name;
  d.fraction = fraction;
  gpupart_result rc = gpupart_partition_create(dev, &d, out);
  return rc ? fail_gp("partition_create", rc) : 0;
}

/* c = a + b on the GPU, c copied back and checked. */
static int run(gpupart_allocation *const *v) {
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 2.0f * (float)i, c[i] = -1.0f;
  float *d[3];
  for (int k = 0; k < 3; k++) d[k] = (float *)(uintptr_t)gpupart_cuda_ptr(v[k]);
  cudaError_t e = cudaMemcpy(d[0], a, sizeof a, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(d[1], b, sizeof b, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return fail_cuda("copy to the device", e);
  vector_add<<<(N + 255) / 256, 256>>>(d[0], d[1], d[2], N);
  if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess)
    return fail_cuda("kernel", e);
  if ((e = cudaMemcpy(c, d[2], sizeof c, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail_cuda("copy back", e);
  for (int i = 0; i < N; i++)
    if (c[i] != 3.0f * (float)i) return fprintf(stderr, "cuda_vector_add: c[%d] = %g, not %g\n", i, c[i], 3.0 * i), 1;
  printf("c = a + b: %d elements checked\n", N);
  return 0;
}

/* "outputs" has 64 MiB: asking for more is ELIMIT, with no driver call. */
static int check_limit(gpupart_partition *outputs) {
  gpupart_allocation *big = NULL;
  gpupart_result rc = gpupart_alloc(outputs, 128 * MiB, 0, &big);
  if (rc != GPUPART_ELIMIT) return fprintf(stderr, "cuda_vector_add: 128 MiB in outputs gave %s\n", gpupart_result_name(rc)), 1;
  printf("outputs refuses 128 MiB: %s\n", gpupart_last_error());
  return 0;
}

static int with_device(gpupart_device *dev) {
  gpupart_partition *inputs, *outputs;
  if (make_partition(dev, "inputs", 0.75, &inputs) || make_partition(dev, "outputs", 0.25, &outputs)) return 1;
  gpupart_allocation *v[3] = {NULL, NULL, NULL};
  gpupart_result rc = GPUPART_OK;
  for (int k = 0; k < 3 && rc == GPUPART_OK; k++) rc = gpupart_alloc(k < 2 ? inputs : outputs, N * sizeof(float), 0, &v[k]);
  int failed = rc ? fail_gp("alloc", rc) : run(v) || check_limit(outputs);
  for (int k = 0; k < 3; k++) gpupart_free(v[k]);
  return failed;
}

int main(int argc, char **argv) {
  gpupart_context *ctx = NULL;
  gpupart_result rc = gpupart_context_create(NULL, &ctx);
  if (rc) return fail_gp("context_create", rc);
  gpupart_device_desc d = {};
  d.backend = GPUPART_BACKEND_CUDA;
  d.index = argc > 1 ? (uint32_t)atoi(argv[1]) : 0;
  d.memory_limit = 256 * MiB;
  gpupart_device *dev = NULL;
  rc = gpupart_device_open(ctx, &d, &dev);
  if (rc == GPUPART_ENOBACKEND || rc == GPUPART_ENODEV) {
    printf("cuda_vector_add: skipped: %s\n", gpupart_last_error());
    gpupart_context_destroy(ctx);
    return 77;
  }
  if (rc) return fail_gp("device_open", rc);
  gpupart_device_info info;
  gpupart_device_get_info(dev, &info);
  printf("%s: budget %llu MiB, context %p\n", info.name, (unsigned long long)(gpupart_device_budget(dev) / MiB),
         (void *)gpupart_cuda_context(dev));
  int failed = with_device(dev);
  if ((rc = gpupart_device_close(dev))) failed = fail_gp("device_close", rc);
  gpupart_context_destroy(ctx);
  if (!failed) printf("cuda_vector_add: all checks passed\n");
  return failed;
}
