/* libgpupart_cl_layer.so: an OpenCL ICD-loader layer (the cl_loader_layers interface:
 * clGetLayerInfo, clInitLayer; loaded through OPENCL_LAYERS by ocl-icd 2.3 and the
 * Khronos loader) that puts an unmodified OpenCL program under a gpupart partition.
 * Every buffer, image and SVM allocation is accounted, at creation, against the mirror
 * partition of its context's first device (interpose/common/account.h), and one the
 * partition refuses fails with CL_MEM_OBJECT_ALLOCATION_FAILURE before the driver is
 * called (PoCL allocates lazily, so a refusal at first use would be too late). Memory
 * objects are unaccounted when the driver destroys them (a destructor callback, so the
 * last clReleaseMemObject, after every sub-buffer and image that holds them); sub-buffers
 * and images over a buffer take no new memory and are not accounted. clGetDeviceInfo
 * reports the partition's limit as CL_DEVICE_GLOBAL_MEM_SIZE and caps
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE by it. The mirror carries the device's cl_khr_device_uuid
 * UUID (else its PCI bus id), so it shares the GPU's ledger with gpupart applications on
 * it. Every other call goes straight to the next layer. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_ext.h> /* cl_khr_device_uuid, cl_khr_pci_bus_info, cl_amd_device_attribute_query */
#include <CL/cl_layer.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "account.h"
#include "handle_map.h"

#define EXPORT __attribute__((visibility("default")))
#define KNOWN_DEVICES 64 /* root devices whose partitions are remembered here (more are found again) */

static cl_icd_dispatch next;     /* the loader's (or the next layer's) entry points */
static cl_icd_dispatch dispatch; /* ours: next's, with the calls below replaced */

/* ---- which mirror partition a device or context is accounted on ----------------- */

/* What a list query (clGetPlatformIDs, clGetDeviceIDs) returns, as long as it is: a
 * malloc'd array of *n entries, or NULL. */
static void *listed(cl_int (*query)(void *arg, cl_uint cap, void *out, cl_uint *n), void *arg, size_t size,
                    cl_uint *n) {
  void *list = NULL;
  *n = 0;
  if (query(arg, 0, NULL, n) || !*n || !(list = calloc(*n, size))) return NULL;
  if (!query(arg, *n, list, n)) return list;
  free(list);
  return NULL;
}

static cl_int platforms_query(void *arg, cl_uint cap, void *out, cl_uint *n) {
  (void)arg;
  return next.clGetPlatformIDs(cap, out, n);
}

static cl_int devices_query(void *arg, cl_uint cap, void *out, cl_uint *n) {
  return next.clGetDeviceIDs(arg, CL_DEVICE_TYPE_ALL, cap, out, n);
}

/* The position of item in list (n entries of size bytes), or n. */
static cl_uint position(const void *list, cl_uint n, const void *item, size_t size) {
  cl_uint i = 0;
  while (i < n && memcmp((const char *)list + (size_t)i * size, item, size)) i++;
  return i;
}

/* A key the same in every process: platform position * 64 + device position, as long as
 * the device is among the first 64 of its platform; past that (never seen yet) 2^24 +
 * platform * 2^16 + device, so that no two devices share a key and so a mirror. */
static uint32_t device_key(cl_device_id dev) {
  cl_platform_id plat = NULL;
  cl_uint np = 0, nd = 0;
  if (next.clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL)) return 0;
  cl_platform_id *plats = listed(platforms_query, NULL, sizeof *plats, &np);
  cl_device_id *devs = listed(devices_query, plat, sizeof *devs, &nd);
  uint32_t pi = position(plats, plats ? np : 0, &plat, sizeof plat);
  uint32_t di = position(devs, devs ? nd : 0, &dev, sizeof dev);
  free(plats);
  free(devs);
  return di < 64 ? pi * 64 + di : (1u << 24) + (pi << 16) + di;
}

/* A sub-device is accounted on its root device. */
static cl_device_id root_device(cl_device_id dev) {
  cl_device_id parent = NULL;
  while (!next.clGetDeviceInfo(dev, CL_DEVICE_PARENT_DEVICE, sizeof parent, &parent, NULL) && parent) dev = parent;
  return dev;
}

static int has_extension(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

/* The device's CL_DEVICE_EXTENSIONS (malloc'd), or NULL. */
static char *extensions(cl_device_id dev) {
  size_t n = 0;
  if (next.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) || !n) return NULL;
  char *list = calloc(1, n + 1);
  if (list && next.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, list, NULL)) free(list), list = NULL;
  return list;
}

/* The bus id from cl_khr_pci_bus_info, else AMD's topology query, else "". */
static void device_bus(cl_device_id dev, const char *ext, char pci[32]) {
  cl_device_pci_bus_info_khr khr;
  cl_device_topology_amd amd;
  pci[0] = '\0';
  if (has_extension(ext, "cl_khr_pci_bus_info") &&
      !next.clGetDeviceInfo(dev, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof khr, &khr, NULL))
    snprintf(pci, 32, "%04x:%02x:%02x.%x", khr.pci_domain & 0xffffu, khr.pci_bus & 0xffu, khr.pci_device & 0xffu,
             khr.pci_function & 0xfu);
  else if (has_extension(ext, "cl_amd_device_attribute_query") &&
           !next.clGetDeviceInfo(dev, CL_DEVICE_TOPOLOGY_AMD, sizeof amd, &amd, NULL) &&
           amd.raw.type == CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD)
    snprintf(pci, 32, "0000:%02x:%02x.%x", (unsigned)(unsigned char)amd.pcie.bus,
             (unsigned)(unsigned char)amd.pcie.device, (unsigned)(unsigned char)amd.pcie.function);
}

/* What the opencl backend names the GPU by (backends/opencl/device.c, read the same
 * way): cl_khr_device_uuid's UUID, and the PCI bus id; zero and "" where it has none
 * (PoCL has neither: its mirror stays "sim:KEY:TOTAL"). */
static void device_names(cl_device_id dev, uint8_t uuid[CL_UUID_SIZE_KHR], char pci[32]) {
  char *ext = extensions(dev);
  memset(uuid, 0, CL_UUID_SIZE_KHR);
  if (has_extension(ext, "cl_khr_device_uuid") &&
      next.clGetDeviceInfo(dev, CL_DEVICE_UUID_KHR, CL_UUID_SIZE_KHR, uuid, NULL))
    memset(uuid, 0, CL_UUID_SIZE_KHR);
  device_bus(dev, ext, pci);
  free(ext);
}

/* The mirror partition of a root device, looked up once: its total is
 * CL_DEVICE_GLOBAL_MEM_SIZE, as the opencl backend's. */
static gpupart_partition *root_partition(cl_device_id dev) {
  cl_ulong total = 0;
  uint8_t uuid[CL_UUID_SIZE_KHR];
  char pci[32], name[256] = "";
  if (next.clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof total, &total, NULL) || !total) return NULL;
  device_names(dev, uuid, pci);
  if (next.clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL)) name[0] = '\0';
  gpupart__ip_device d = {.key = device_key(dev), .total = total, .uuid = uuid, .pci_bus_id = pci, .name = name};
  return gpupart__ip_partition_of(&d);
}

/* Root devices live as long as the process, so the partitions of the first KNOWN_DEVICES
 * are remembered here; those of later ones are found again (account.c caches them). */
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  cl_device_id dev;
  gpupart_partition *partition;
} known[KNOWN_DEVICES];
static unsigned nknown;

static gpupart_partition *device_partition(cl_device_id dev) {
  dev = root_device(dev);
  pthread_mutex_lock(&known_lock);
  unsigned i = 0;
  while (i < nknown && known[i].dev != dev) i++;
  gpupart_partition *p = i < nknown ? known[i].partition : NULL;
  pthread_mutex_unlock(&known_lock);
  if (i < nknown) return p;
  if (!(p = root_partition(dev))) return NULL;
  pthread_mutex_lock(&known_lock);
  if (nknown < KNOWN_DEVICES) {
    known[nknown].dev = dev;
    known[nknown++].partition = p;
  }
  pthread_mutex_unlock(&known_lock);
  return p;
}

/* The partition of the context's first device. The whole list is read, as long as it is
 * (a size smaller than the list's is CL_INVALID_VALUE, which left a context of several
 * devices unaccounted, and one of more than 64): on the stack up to 16 devices, which
 * keeps malloc off the allocation path of every usual context. */
static gpupart_partition *context_partition(cl_context context) {
  cl_device_id some[16], *devs = some, first = NULL;
  size_t size = 0;
  if (!context || next.clGetContextInfo(context, CL_CONTEXT_DEVICES, 0, NULL, &size) || size < sizeof first ||
      (size > sizeof some && !(devs = malloc(size))))
    return NULL;
  if (!next.clGetContextInfo(context, CL_CONTEXT_DEVICES, size, devs, NULL)) first = devs[0];
  if (devs != some) free(devs);
  return first ? device_partition(first) : NULL;
}

/* ---- accounting memory objects ---------------------------------------------------- */

static void CL_CALLBACK unaccount_mem(cl_mem mem, void *allocation) {
  (void)mem;
  gpupart__ip_unaccount(allocation);
}

static cl_mem refuse(cl_int *errcode_ret) {
  if (errcode_ret) *errcode_ret = CL_MEM_OBJECT_ALLOCATION_FAILURE;
  return NULL;
}

/* The driver's object, now tied to a; or NULL (and a given back) when it made none. */
static cl_mem attach(cl_mem mem, gpupart_charge *a) {
  if (!mem || !a) return gpupart__ip_unaccount(a), mem;
  if (next.clSetMemObjectDestructorCallback(mem, unaccount_mem, a)) gpupart__ip_unaccount(a);
  return mem;
}

/* OK with *a (NULL when unaccounted: no partition, or size 0 left to the driver), or
 * nonzero when the partition refuses size bytes. */
static int account(cl_context context, size_t size, gpupart_charge **a) {
  *a = NULL;
  gpupart_partition *p = size ? context_partition(context) : NULL;
  return p && gpupart__ip_account(p, size, a) != 0;
}

static cl_mem CL_API_CALL create_buffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr,
                                        cl_int *errcode_ret) {
  gpupart_charge *a;
  if (account(context, size, &a)) return refuse(errcode_ret);
  return attach(next.clCreateBuffer(context, flags, size, host_ptr, errcode_ret), a);
}

static cl_mem CL_API_CALL create_buffer_props(cl_context context, const cl_mem_properties *props, cl_mem_flags flags,
                                              size_t size, void *host_ptr, cl_int *errcode_ret) {
  gpupart_charge *a;
  if (account(context, size, &a)) return refuse(errcode_ret);
  return attach(next.clCreateBufferWithProperties(context, props, flags, size, host_ptr, errcode_ret), a);
}

/* An image's size is the driver's to compute (row pitch, padding): it is read back from
 * the new object (no memory is touched yet) and the object released if refused. */
static cl_mem account_image(cl_context context, cl_mem image, cl_int *errcode_ret) {
  size_t size = 0;
  gpupart_charge *a;
  if (!image || next.clGetMemObjectInfo(image, CL_MEM_SIZE, sizeof size, &size, NULL)) return image;
  if (account(context, size, &a)) return next.clReleaseMemObject(image), refuse(errcode_ret);
  return attach(image, a);
}

/* An image over a buffer (1D image buffers, 2D images from buffers) uses its memory. */
static int over_buffer(const cl_image_desc *desc) { return desc && desc->buffer; }

static cl_mem CL_API_CALL create_image(cl_context context, cl_mem_flags flags, const cl_image_format *format,
                                       const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret) {
  cl_mem image = next.clCreateImage(context, flags, format, desc, host_ptr, errcode_ret);
  return over_buffer(desc) ? image : account_image(context, image, errcode_ret);
}

static cl_mem CL_API_CALL create_image_props(cl_context context, const cl_mem_properties *props, cl_mem_flags flags,
                                             const cl_image_format *format, const cl_image_desc *desc, void *host_ptr,
                                             cl_int *errcode_ret) {
  cl_mem image = next.clCreateImageWithProperties(context, props, flags, format, desc, host_ptr, errcode_ret);
  return over_buffer(desc) ? image : account_image(context, image, errcode_ret);
}

static cl_mem CL_API_CALL create_image2d(cl_context context, cl_mem_flags flags, const cl_image_format *format,
                                         size_t w, size_t h, size_t pitch, void *host_ptr, cl_int *errcode_ret) {
  cl_mem image = next.clCreateImage2D(context, flags, format, w, h, pitch, host_ptr, errcode_ret);
  return account_image(context, image, errcode_ret);
}

static cl_mem CL_API_CALL create_image3d(cl_context context, cl_mem_flags flags, const cl_image_format *format,
                                         size_t w, size_t h, size_t d, size_t row_pitch, size_t slice_pitch,
                                         void *host_ptr, cl_int *errcode_ret) {
  cl_mem image = next.clCreateImage3D(context, flags, format, w, h, d, row_pitch, slice_pitch, host_ptr, errcode_ret);
  return account_image(context, image, errcode_ret);
}

/* ---- shared virtual memory: no object to hang a callback on, so a pointer map ----- */

static void *CL_API_CALL svm_alloc(cl_context context, cl_svm_mem_flags flags, size_t size, cl_uint alignment) {
  gpupart_charge *a;
  if (account(context, size, &a)) return NULL;
  void *ptr = next.clSVMAlloc(context, flags, size, alignment);
  if (!ptr || !a) return gpupart__ip_unaccount(a), ptr;
  if (gpupart__ip_map_put(ptr, gpupart__ip_charged(a))) gpupart__ip_unaccount(a);
  return ptr;
}

/* The record is taken before the driver frees the pointer: once freed, another thread's
 * clSVMAlloc may get the same pointer and record it, and that record is not this one. */
static void CL_API_CALL svm_free(cl_context context, void *ptr) {
  gpupart_charge *a = ptr ? gpupart__ip_map_take_charge(ptr) : NULL;
  next.clSVMFree(context, ptr);
  gpupart__ip_unaccount(a);
}

#define SVM_FREE_BATCH 64

/* Puts back the records taken for ptrs (the enqueue failed), or gives them back. */
static void svm_settle(cl_int rc, cl_uint n, void *ptrs[], gpupart_charge **taken) {
  for (cl_uint i = 0; i < n; i++)
    if (taken[i] && (!rc || gpupart__ip_map_put(ptrs[i], gpupart__ip_charged(taken[i]))))
      gpupart__ip_unaccount(taken[i]);
}

/* Unaccounted when enqueued: the bytes may stay in use until the command runs. The records
 * are taken first, as in svm_free (the command may run before the call returns); a batch
 * larger than SVM_FREE_BATCH has the rest taken after the call. */
static cl_int CL_API_CALL enqueue_svm_free(cl_command_queue queue, cl_uint n, void *ptrs[],
                                           void(CL_CALLBACK *pfn)(cl_command_queue, cl_uint, void *[], void *),
                                           void *user, cl_uint nwait, const cl_event *wait, cl_event *event) {
  gpupart_charge *taken[SVM_FREE_BATCH] = {0};
  cl_uint first = ptrs ? (n < SVM_FREE_BATCH ? n : SVM_FREE_BATCH) : 0;
  for (cl_uint i = 0; i < first; i++) taken[i] = ptrs[i] ? gpupart__ip_map_take_charge(ptrs[i]) : NULL;
  cl_int rc = next.clEnqueueSVMFree(queue, n, ptrs, pfn, user, nwait, wait, event);
  svm_settle(rc, first, ptrs, taken);
  for (cl_uint i = first; !rc && ptrs && i < n; i++) gpupart__ip_unaccount(gpupart__ip_map_take_charge(ptrs[i]));
  return rc;
}

/* ---- what the program is told ------------------------------------------------------ */

static void cap(void *value, size_t size, cl_ulong bound) {
  cl_ulong v;
  if (!value || size < sizeof v || !bound) return;
  memcpy(&v, value, sizeof v);
  if (v > bound) memcpy(value, &bound, sizeof bound);
}

static cl_int CL_API_CALL get_device_info(cl_device_id dev, cl_device_info name, size_t size, void *value,
                                          size_t *size_ret) {
  cl_int rc = next.clGetDeviceInfo(dev, name, size, value, size_ret);
  if (rc || !value || (name != CL_DEVICE_GLOBAL_MEM_SIZE && name != CL_DEVICE_MAX_MEM_ALLOC_SIZE)) return rc;
  gpupart_partition *p = device_partition(dev);
  if (p) cap(value, size, gpupart__ip_limit(p));
  return rc;
}

/* ---- the layer interface ------------------------------------------------------------ */

static void install(void) {
  dispatch = next;
  dispatch.clGetDeviceInfo = get_device_info;
  dispatch.clCreateBuffer = create_buffer;
  dispatch.clCreateBufferWithProperties = next.clCreateBufferWithProperties ? create_buffer_props : NULL;
  dispatch.clCreateImage = next.clCreateImage ? create_image : NULL;
  dispatch.clCreateImageWithProperties = next.clCreateImageWithProperties ? create_image_props : NULL;
  dispatch.clCreateImage2D = next.clCreateImage2D ? create_image2d : NULL;
  dispatch.clCreateImage3D = next.clCreateImage3D ? create_image3d : NULL;
  dispatch.clSVMAlloc = next.clSVMAlloc ? svm_alloc : NULL;
  dispatch.clSVMFree = next.clSVMFree ? svm_free : NULL;
  dispatch.clEnqueueSVMFree = next.clEnqueueSVMFree ? enqueue_svm_free : NULL;
}

/* Answers the loader's CL_LAYER_API_VERSION (100) and CL_LAYER_NAME queries. */
EXPORT CL_API_ENTRY cl_int CL_API_CALL clGetLayerInfo(cl_layer_info name, size_t size, void *value, size_t *size_ret) {
  static const char layer_name[] = "gpupart partition accounting";
  cl_layer_api_version version = CL_LAYER_API_VERSION_100;
  const void *src = &version;
  size_t n = sizeof version;
  if (name == CL_LAYER_NAME) src = layer_name, n = sizeof layer_name;
  else if (name != CL_LAYER_API_VERSION) return CL_INVALID_VALUE;
  if (value && size < n) return CL_INVALID_VALUE;
  if (value) memcpy(value, src, n);
  if (size_ret) *size_ret = n;
  return CL_SUCCESS;
}

/* Takes the next entry points (num_entries of them; a loader that knows fewer than this
 * header leaves the rest NULL) and hands back ours. */
EXPORT CL_API_ENTRY cl_int CL_API_CALL clInitLayer(cl_uint num_entries, const cl_icd_dispatch *target,
                                                   cl_uint *num_entries_ret, const cl_icd_dispatch **dispatch_ret) {
  const cl_uint ours = sizeof(cl_icd_dispatch) / sizeof(void *);
  if (!target || !num_entries_ret || !dispatch_ret) return CL_INVALID_VALUE;
  memset(&next, 0, sizeof next);
  memcpy(&next, target, (num_entries < ours ? num_entries : ours) * sizeof(void *));
  install();
  *num_entries_ret = num_entries < ours ? num_entries : ours;
  *dispatch_ret = &dispatch;
  return CL_SUCCESS;
}
