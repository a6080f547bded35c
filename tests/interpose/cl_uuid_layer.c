/* cl_uuid_layer: a test double of a driver with cl_khr_device_uuid, as an OpenCL layer
 * (PoCL has no UUID): under it, every device lists cl_khr_device_uuid in
 * CL_DEVICE_EXTENSIONS and answers CL_DEVICE_UUID_KHR with the 16 bytes of
 * $CL_UUID_LAYER_UUID (32 hex digits). With CL_UUID_LAYER_CONTEXT_DEVICES=N it also plays
 * a context of N devices: CL_CONTEXT_DEVICES lists the context's first device N times.
 * Listed before the gpupart layer in OPENCL_LAYERS
 * (ocl-icd puts the first one nearest the driver, the last nearest the program), and
 * alone under a gpupart application on the opencl backend, so that both see one GPU. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl_ext.h>
#include <CL/cl_layer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define EXTRA " cl_khr_device_uuid"

static cl_icd_dispatch next, dispatch;

static int uuid_of(unsigned char out[CL_UUID_SIZE_KHR]) {
  const char *hex = getenv("CL_UUID_LAYER_UUID");
  for (int i = 0; hex && i < CL_UUID_SIZE_KHR; i++)
    if (sscanf(hex + 2 * i, "%2hhx", &out[i]) != 1) return -1;
  return hex && strlen(hex) == 2 * CL_UUID_SIZE_KHR ? 0 : -1;
}

static cl_int answer(const void *src, size_t n, size_t size, void *value, size_t *size_ret) {
  if (value && size < n) return CL_INVALID_VALUE;
  if (value) memcpy(value, src, n);
  if (size_ret) *size_ret = n;
  return CL_SUCCESS;
}

/* The driver's extension list with cl_khr_device_uuid appended. */
static cl_int extensions(cl_device_id dev, size_t size, void *value, size_t *size_ret) {
  size_t n = 0;
  cl_int rc = next.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n);
  char *list = rc ? NULL : calloc(1, n + sizeof EXTRA);
  if (!list) return rc ? rc : CL_OUT_OF_HOST_MEMORY;
  rc = next.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, list, NULL);
  if (!rc) strcat(list, EXTRA), rc = answer(list, strlen(list) + 1, size, value, size_ret);
  free(list);
  return rc;
}

static cl_int CL_API_CALL get_device_info(cl_device_id dev, cl_device_info name, size_t size, void *value,
                                          size_t *size_ret) {
  unsigned char uuid[CL_UUID_SIZE_KHR];
  if (name == CL_DEVICE_EXTENSIONS) return extensions(dev, size, value, size_ret);
  if (name == CL_DEVICE_UUID_KHR && !uuid_of(uuid)) return answer(uuid, sizeof uuid, size, value, size_ret);
  return next.clGetDeviceInfo(dev, name, size, value, size_ret);
}

static cl_int CL_API_CALL get_context_info(cl_context context, cl_context_info name, size_t size, void *value,
                                           size_t *size_ret) {
  const char *many = getenv("CL_UUID_LAYER_CONTEXT_DEVICES");
  cl_device_id first = NULL;
  size_t n = many ? strtoul(many, NULL, 10) : 0, real = 0;
  if (name != CL_CONTEXT_DEVICES || !n || next.clGetContextInfo(context, name, 0, NULL, &real) || !real)
    return next.clGetContextInfo(context, name, size, value, size_ret);
  cl_device_id *list = calloc(real > n * sizeof first ? real : n * sizeof first, 1);
  cl_int rc = list ? next.clGetContextInfo(context, name, real, list, NULL) : CL_OUT_OF_HOST_MEMORY;
  if (!rc) first = list[0];
  for (size_t i = 0; !rc && i < n; i++) list[i] = first;
  if (!rc) rc = answer(list, n * sizeof first, size, value, size_ret);
  free(list);
  return rc;
}

EXPORT CL_API_ENTRY cl_int CL_API_CALL clGetLayerInfo(cl_layer_info name, size_t size, void *value, size_t *size_ret) {
  static const char layer_name[] = "gpupart test double: cl_khr_device_uuid";
  cl_layer_api_version version = CL_LAYER_API_VERSION_100;
  if (name == CL_LAYER_NAME) return answer(layer_name, sizeof layer_name, size, value, size_ret);
  if (name == CL_LAYER_API_VERSION) return answer(&version, sizeof version, size, value, size_ret);
  return CL_INVALID_VALUE;
}

EXPORT CL_API_ENTRY cl_int CL_API_CALL clInitLayer(cl_uint num_entries, const cl_icd_dispatch *target,
                                                   cl_uint *num_entries_ret, const cl_icd_dispatch **dispatch_ret) {
  const cl_uint ours = sizeof(cl_icd_dispatch) / sizeof(void *);
  if (!target || !num_entries_ret || !dispatch_ret) return CL_INVALID_VALUE;
  memcpy(&next, target, (num_entries < ours ? num_entries : ours) * sizeof(void *));
  dispatch = next;
  dispatch.clGetDeviceInfo = get_device_info;
  dispatch.clGetContextInfo = get_context_info;
  *num_entries_ret = num_entries < ours ? num_entries : ours;
  *dispatch_ret = &dispatch;
  return CL_SUCCESS;
}
