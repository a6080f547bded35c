/* cl_fill: a plain OpenCL program that knows nothing of gpupart (linked to libOpenCL
 * only), which the OpenCL layer's tests run unmodified. It allocates CHUNK_MIB memory
 * objects until the driver refuses one or MAX_MIB are held, writes each (so a lazy driver
 * such as PoCL really allocates), prints what it got, releases everything and does the
 * same once more (so a release must give the bytes back).
 *   cl_fill [buffer|props|svm|svmq|image|sub] CHUNK_MIB MAX_MIB [hold]
 * props: clCreateBufferWithProperties; sub: buffers each with a sub-buffer of half of it;
 * CL_FILL_ALL_DEVICES=1: the context holds every device of the platform (up to 8; printed
 * as "context devices <n>"), the queue is on the first;
 * svmq: SVM as svm, freed by clEnqueueSVMFree (all of a round's in one call) and clFinish;
 * hold: after the first round, print "holding <pid>" and wait for a line on stdin;
 * fork: after the first round, fork; the child releases the objects (its copies) and
 * ends, then the parent allocates on ("parent after the child <MiB> code <cl_int>", all
 * it holds).
 * Output: "global <bytes>", "allocated <MiB> code <cl_int>", "again <MiB> code <cl_int>". */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_OBJECTS 4096

typedef struct run {
  const char *mode;
  cl_context ctx;
  cl_command_queue queue;
  size_t chunk;
  cl_mem mems[MAX_OBJECTS], subs[MAX_OBJECTS];
  void *svms[MAX_OBJECTS];
  int n;
} run;

static cl_int make_image(run *r, cl_mem *out) {
  cl_int err;
  cl_image_format f = {CL_RGBA, CL_UNSIGNED_INT8};
  cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 1024, .image_height = r->chunk / 4096};
  *out = clCreateImage(r->ctx, CL_MEM_READ_WRITE, &f, &d, NULL, &err);
  return err;
}

static cl_int touch(run *r, cl_mem m) {
  cl_uchar zero = 0;
  return clEnqueueFillBuffer(r->queue, m, &zero, 1, 0, r->chunk, 0, NULL, NULL);
}

/* One object more: CL_SUCCESS, or the driver's code. */
static cl_int one_more(run *r) {
  cl_int err = CL_SUCCESS;
  cl_mem m = NULL;
  if (!strcmp(r->mode, "svm") || !strcmp(r->mode, "svmq")) {
    void *p = clSVMAlloc(r->ctx, CL_MEM_READ_WRITE, r->chunk, 0);
    if (!p) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
    r->svms[r->n++] = p;
    return CL_SUCCESS;
  }
  if (!strcmp(r->mode, "image")) err = make_image(r, &m);
  else if (!strcmp(r->mode, "props"))
    m = clCreateBufferWithProperties(r->ctx, NULL, CL_MEM_READ_WRITE, r->chunk, NULL, &err);
  else m = clCreateBuffer(r->ctx, CL_MEM_READ_WRITE, r->chunk, NULL, &err);
  if (!m) return err;
  r->mems[r->n] = m;
  if (strcmp(r->mode, "image")) err = touch(r, m);
  if (!strcmp(r->mode, "sub")) {
    cl_buffer_region half = {0, r->chunk / 2};
    r->subs[r->n] = clCreateSubBuffer(m, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &half, &err);
  }
  r->n++;
  return err;
}

static cl_int fill(run *r, size_t max_mib) {
  cl_int err = CL_SUCCESS;
  while (r->n < MAX_OBJECTS && (size_t)r->n * (r->chunk >> 20) < max_mib && (err = one_more(r)) == CL_SUCCESS) {}
  clFinish(r->queue);
  return err;
}

static void release_all(run *r) {
  if (!strcmp(r->mode, "svmq") && r->n) {
    if (clEnqueueSVMFree(r->queue, (cl_uint)r->n, r->svms, NULL, NULL, 0, NULL, NULL) == CL_SUCCESS)
      memset(r->svms, 0, sizeof r->svms);
    clFinish(r->queue);
  }
  for (int i = 0; i < r->n; i++) {
    if (r->subs[i]) clReleaseMemObject(r->subs[i]);
    if (r->mems[i]) clReleaseMemObject(r->mems[i]);
    if (r->svms[i]) clSVMFree(r->ctx, r->svms[i]);
    r->subs[i] = r->mems[i] = NULL;
    r->svms[i] = NULL;
  }
  r->n = 0;
}

static int setup(run *r) {
  cl_platform_id plat;
  cl_device_id devs[8];
  cl_uint ndevs = 0;
  cl_ulong global = 0;
  cl_int err;
  if (clGetPlatformIDs(1, &plat, NULL) || clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 8, devs, &ndevs)) return -1;
  int all = getenv("CL_FILL_ALL_DEVICES") != NULL;
  if (!all || ndevs > 8) ndevs = 1;
  clGetDeviceInfo(devs[0], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
  printf("global %llu\n", (unsigned long long)global);
  if (all) printf("context devices %u\n", ndevs);
  r->ctx = clCreateContext(NULL, ndevs, devs, NULL, NULL, &err);
  if (!r->ctx) return -1;
  r->queue = clCreateCommandQueueWithProperties(r->ctx, devs[0], NULL, &err);
  return r->queue ? 0 : -1;
}

int main(int argc, char **argv) {
  static run r;
  if (argc < 4) return fprintf(stderr, "usage: cl_fill MODE CHUNK_MIB MAX_MIB [hold]\n"), 2;
  r.mode = argv[1];
  r.chunk = strtoull(argv[2], NULL, 10) << 20;
  size_t max_mib = strtoull(argv[3], NULL, 10);
  if (setup(&r)) return fprintf(stderr, "cl_fill: no OpenCL device\n"), 1;
  cl_int err = fill(&r, max_mib);
  printf("allocated %zu code %d\n", (size_t)r.n * (r.chunk >> 20), (int)err);
  fflush(stdout);
  if (argc > 4 && !strcmp(argv[4], "fork")) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) release_all(&r), _exit(0); /* the child releases its copies of the objects */
    if (pid < 0 || waitpid(pid, NULL, 0) != pid) return fprintf(stderr, "cl_fill: fork failed\n"), 1;
    err = fill(&r, 4096);
    printf("parent after the child %zu code %d\n", (size_t)r.n * (r.chunk >> 20), (int)err);
  } else if (argc > 4) {
    char line[16];
    printf("holding %ld\n", (long)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
  }
  release_all(&r);
  err = fill(&r, max_mib);
  printf("again %zu code %d\n", (size_t)r.n * (r.chunk >> 20), (int)err);
  release_all(&r);
  clReleaseCommandQueue(r.queue);
  clReleaseContext(r.ctx);
  return 0;
}
