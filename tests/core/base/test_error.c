/* Result names, messages and the thread-local last error. */
#include <pthread.h>
#include <string.h>

#include "common.h"

Test(error, every_result_has_a_name_and_a_message) {
  for (int r = 0; r >= GPUPART_ECORRUPT; r--) {
    cr_expect_neq(strcmp(gpupart_result_name((gpupart_result)r), "GPUPART_UNKNOWN"), 0, "code %d", r);
    cr_expect_neq(strcmp(gpupart_result_str((gpupart_result)r), "unknown result"), 0, "code %d", r);
  }
  cr_expect_str_eq(gpupart_result_name(GPUPART_ELIMIT), "GPUPART_ELIMIT");
  cr_expect_str_eq(gpupart_result_str(GPUPART_OK), "success");
}

Test(error, unknown_codes_are_named_unknown) {
  cr_expect_str_eq(gpupart_result_name((gpupart_result)-99), "GPUPART_UNKNOWN");
  cr_expect_str_eq(gpupart_result_name((gpupart_result)7), "GPUPART_UNKNOWN");
  cr_expect_str_eq(gpupart_result_str((gpupart_result)-99), "unknown result");
}

Test(error, last_error_is_never_null_and_describes_the_failure) {
  cr_expect_not_null(gpupart_last_error());
  cr_expect_eq(gpupart_context_create(NULL, NULL), GPUPART_EINVAL);
  cr_expect_neq(strstr(gpupart_last_error(), "out is NULL"), NULL, "%s", gpupart_last_error());
}

static void *fail_in_thread(void *arg) {
  (void)arg;
  gpupart_device *dev;
  gpupart_device_open(NULL, NULL, &dev);
  return (void *)gpupart_last_error();
}

Test(error, last_error_is_per_thread) {
  cr_expect_eq(gpupart_context_create(NULL, NULL), GPUPART_EINVAL);
  char mine[256];
  strcpy(mine, gpupart_last_error());
  pthread_t t;
  pthread_create(&t, NULL, fail_in_thread, NULL);
  pthread_join(t, NULL);
  cr_expect_str_eq(gpupart_last_error(), mine);
}

Test(error, version_matches_the_header) {
  cr_expect_eq(gpupart_version(),
               GPUPART_VERSION_MAJOR * 10000u + GPUPART_VERSION_MINOR * 100u + GPUPART_VERSION_PATCH);
  cr_expect_not_null(strchr(gpupart_version_string(), '.'));
  cr_expect_str_eq(gpupart_backend_name(GPUPART_BACKEND_VULKAN), "vulkan");
  cr_expect_str_eq(gpupart_backend_name((gpupart_backend)42), "unknown");
}
