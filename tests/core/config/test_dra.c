/* Kubernetes DRA device metadata (core/config/dra.c, KEP-5304) as the configuration reads
 * it: the v1beta1 object of each file's stream, its devices named by UUID or PCI bus id,
 * gpupart.io/memory and gpupart.io/guarantee, the claim's names; and every hostile file
 * (too large, cut short, not JSON, wrong types, nested too deep, a link, a fifo) a
 * warning, never a crash. Each test writes its own tree under /tmp. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config.h"
#include "config_env.h"

static char root[64];

static void make_root(void) {
  snprintf(root, sizeof root, "/tmp/gpupart-dra-XXXXXX");
  cr_assert_not_null(mkdtemp(root));
}

static void remove_root(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(dra, .init = make_root, .fini = remove_root);

/* Creates root/sub/claim/request/ and returns its path in dir. */
static const char *request_dir(const char *sub, const char *claim, const char *request, char *dir, size_t n) {
  snprintf(dir, n, "%s/%s", root, sub);
  mkdir(dir, 0755);
  snprintf(dir + strlen(dir), n - strlen(dir), "/%s", claim);
  mkdir(dir, 0755);
  snprintf(dir + strlen(dir), n - strlen(dir), "/%s", request);
  mkdir(dir, 0755);
  return dir;
}

/* Writes text as claim's request's driver file (resourceclaims), its path in path. */
static const char *write_meta(const char *claim, const char *text, char *path, size_t n) {
  char dir[512];
  snprintf(path, n, "%s/gpu.example.com-metadata.json", request_dir("resourceclaims", claim, "gpu", dir, sizeof dir));
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
  fclose(f);
  return path;
}

#define OBJ(api, gen, attrs)                                                                                    \
  "{\"apiVersion\": \"" api "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": \"gpu-claim\", "        \
  "\"namespace\": \"team-a\", \"uid\": \"u-1\", \"generation\": " gen "}, \"requests\": [{\"name\": \"gpu\", "  \
  "\"devices\": [{\"driver\": \"gpu.example.com\", \"pool\": \"node-1\", \"name\": \"gpu-0\", \"attributes\": " \
  "{" attrs "}}]}]}\n"
#define V1B1 "metadata.resource.k8s.io/v1beta1"
#define UUID_ATTR "\"uuid\": {\"string\": \"GPU-7ce23cd8-5c91-34a1-9a1b-d0c6b1cd1ec8\"}"
#define PCI_ATTR "\"resource.kubernetes.io/pciBusID\": {\"string\": \"0000:3b:00.0\"}"
#define MEM_ATTR(v) "\"gpupart.io/memory\": " v

static const uint8_t uuid_a[16] = {0x7c, 0xe2, 0x3c, 0xd8, 0x5c, 0x91, 0x34, 0xa1,
                                   0x9a, 0x1b, 0xd0, 0xc6, 0xb1, 0xcd, 0x1e, 0xc8};

static gpupart__config *scan(void) {
  gpupart__config *c = calloc(1, sizeof *c);
  cr_assert_not_null(c);
  gpupart__share_dra(c, gpupart__hostmem_default(), root, NULL, NULL);
  return c;
}

static int warned(const gpupart__config *c, const char *text) {
  for (uint32_t i = 0; i < c->nshare_warnings; i++)
    if (strstr(c->share_warnings[i], text)) return 1;
  return 0;
}

static const char *all_warnings(const gpupart__config *c) {
  static char out[4096];
  out[0] = 0;
  for (uint32_t i = 0; i < c->nshare_warnings; i++) {
    strncat(out, c->share_warnings[i], sizeof out - strlen(out) - 2);
    strcat(out, "\n");
  }
  return out;
}

Test(dra, a_device_named_by_uuid_gets_its_memory_attribute) {
  char path[512];
  write_meta("gpu-claim",
             OBJ(V1B1, "1",
                 UUID_ATTR ", " MEM_ATTR("{\"int\": 4294967296}") ", \"gpupart.io/guarantee\": {\"string\": \"1Gi\"}"),
             path, sizeof path);
  gpupart__config *c = scan();
  cr_assert_eq(c->ndra, 1, "%s", all_warnings(c));
  const gpupart__share *s = gpupart__config_share_for(c, 5, "", uuid_a, 16 * GiB);
  cr_assert_not_null(s);
  cr_expect_eq(s->kind, GPUPART__SHARE_DRA);
  cr_expect_eq(s->bytes, 4 * GiB);
  cr_expect_str_eq(s->source, "DRA claim team-a/gpu-claim request gpu");
  const gpupart__dra_device *d = &c->dra[s->dra - 1];
  cr_expect_eq(d->guarantee, 1 * GiB);
  cr_expect_eq(d->generation, 1);
  cr_expect_str_eq(d->path, path);
  cr_expect_null(gpupart__config_share_for(c, 5, "", NULL, 16 * GiB), "a device without that UUID");
  free(c);
}

Test(dra, a_device_named_by_pci_bus_id_and_a_kubernetes_quantity) {
  char path[512];
  write_meta("gpu-claim", OBJ(V1B1, "3", PCI_ATTR ", " MEM_ATTR("{\"string\": \"3Gi\"}")), path, sizeof path);
  gpupart__config *c = scan();
  const gpupart__share *s = gpupart__config_share_for(c, 0, "0000:3B:00.0", NULL, 16 * GiB);
  cr_assert_not_null(s, "%s", all_warnings(c));
  cr_expect_eq(s->bytes, 3 * GiB);
  cr_expect_eq(c->dra[0].generation, 3);
  cr_expect_null(gpupart__config_share_for(c, 0, "0000:af:00.0", NULL, 16 * GiB));
  free(c);
}

Test(dra, the_v1beta1_object_of_a_stream_is_read_the_others_skipped) {
  char path[512];
  write_meta("gpu-claim",
             OBJ("metadata.resource.k8s.io/v1", "9", UUID_ATTR ", " MEM_ATTR("{\"int\": 1}"))
                 OBJ(V1B1, "2", UUID_ATTR ", " MEM_ATTR("{\"int\": 2147483648}"))
                     OBJ("metadata.resource.k8s.io/v1alpha1", "2", UUID_ATTR ", " MEM_ATTR("{\"int\": 1}")),
             path, sizeof path);
  gpupart__config *c = scan();
  cr_assert_eq(c->ndra, 1, "%s", all_warnings(c));
  cr_expect_eq(c->shares[0].bytes, 2 * GiB);
  cr_expect_eq(c->dra[0].generation, 2);
  free(c);
}

Test(dra, a_claim_of_a_template_keeps_the_pod_s_claim_name) {
  char dir[512], path[600];
  request_dir("resourceclaimtemplates", "vcpus", "gpu", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/gpu.example.com-metadata.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("{\"apiVersion\": \"" V1B1 "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": \"pod-gpu-x1\", "
        "\"namespace\": \"ml\", \"generation\": 1}, \"podClaimName\": \"gpu\", \"requests\": [{\"name\": \"gpu\", "
        "\"devices\": [{\"driver\": \"d\", \"pool\": \"p\", \"name\": \"n\", \"attributes\": {" UUID_ATTR "}}]}]}",
        f);
  fclose(f);
  gpupart__config *c = scan();
  cr_assert_eq(c->ndra, 1, "%s", all_warnings(c));
  cr_expect_str_eq(c->dra[0].pod_claim, "gpu");
  cr_expect_str_eq(c->dra[0].claim, "pod-gpu-x1");
  cr_expect_eq(c->dra[0].has_memory, 0);
  cr_expect_eq(c->shares[0].bytes, 0, "no memory attribute: the GPUPART_* variables apply");
  cr_expect_null(gpupart__config_share_for(c, 0, "", uuid_a, 16 * GiB));
  free(c);
}

Test(dra, no_folder_is_no_share_and_no_warning) {
  gpupart__config *c = scan();
  cr_expect_eq(c->ndra, 0);
  cr_expect_eq(c->nshare_warnings, 0);
  free(c);
}

Test(dra, an_empty_file_is_metadata_not_written_yet) {
  char path[512];
  write_meta("gpu-claim", "", path, sizeof path);
  gpupart__config *c = scan();
  cr_expect_eq(c->ndra, 0);
  cr_expect_eq(c->nshare_warnings, 0, "%s", all_warnings(c));
  free(c);
}

/* ---- hostile files ----------------------------------------------------------------- */

static void expect_ignored(const char *text, const char *warning) {
  char path[512];
  write_meta("gpu-claim", text, path, sizeof path);
  gpupart__config *c = scan();
  cr_expect_eq(c->ndra, 0, "%s was read", text);
  cr_expect(warned(c, warning), "no '%s' in: %s", warning, all_warnings(c));
  free(c);
}

Test(dra, hostile_files_are_warnings) {
  expect_ignored("{\"apiVersion\": \"" V1B1 "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": \"x\", ",
                 "not JSON");
  expect_ignored("not json at all", "not JSON");
  expect_ignored(OBJ("metadata.resource.k8s.io/v1alpha1", "1", UUID_ATTR), "no DeviceMetadata object of version");
  expect_ignored("[1, 2, 3]", "no DeviceMetadata object");
  expect_ignored(OBJ(V1B1, "\"1\"", UUID_ATTR), "metadata.generation");
  expect_ignored(OBJ(V1B1, "0", UUID_ATTR), "metadata.generation");
  expect_ignored(OBJ(V1B1, "-1", UUID_ATTR), "metadata.generation");
  expect_ignored("{\"apiVersion\": \"" V1B1 "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": \"x\", "
                 "\"generation\": 1}, \"requests\": {}}",
                 "requests is not a list");
  expect_ignored("{\"apiVersion\": \"" V1B1 "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": 7, "
                 "\"generation\": 1}}",
                 "metadata.name");
}

Test(dra, wrong_attribute_types_leave_the_device_without_an_amount) {
  char path[512];
  write_meta("gpu-claim", OBJ(V1B1, "1", UUID_ATTR ", " MEM_ATTR("{\"bool\": true}")), path, sizeof path);
  gpupart__config *c = scan();
  cr_assert_eq(c->ndra, 1, "%s", all_warnings(c));
  cr_expect_eq(c->dra[0].has_memory, 0);
  cr_expect(warned(c, "not a number of bytes"), "%s", all_warnings(c));
  free(c);
  write_meta("gpu-claim", OBJ(V1B1, "1", "\"uuid\": {\"int\": 5}, " MEM_ATTR("{\"int\": 5}")), path, sizeof path);
  c = scan();
  cr_expect_eq(c->ndra, 0, "a UUID that is not a string names no device");
  free(c);
}

Test(dra, nesting_too_deep_is_a_warning) {
  size_t n = 100000;
  char *t = malloc(2 * n + 1);
  cr_assert_not_null(t);
  memset(t, '[', n);
  memset(t + n, ']', n);
  t[2 * n] = 0;
  expect_ignored(t, "nested too deep");
  free(t);
}

Test(dra, a_file_larger_than_the_bound_is_a_warning) {
  size_t n = GPUPART__DRA_FILE_MAX + 10;
  char *t = malloc(n + 1);
  cr_assert_not_null(t);
  memset(t, ' ', n);
  t[n] = 0;
  expect_ignored(t, "larger than");
  free(t);
}

Test(dra, a_symbolic_link_is_passed_over) {
  char dir[512], path[600], target[600];
  write_meta("real", OBJ(V1B1, "1", UUID_ATTR ", " MEM_ATTR("{\"int\": 1073741824}")), target, sizeof target);
  request_dir("resourceclaims", "linked", "gpu", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/gpu.example.com-metadata.json", dir);
  cr_assert_eq(symlink(target, path), 0);
  snprintf(path, sizeof path, "%s/resourceclaims/dirlink", root);
  snprintf(dir, sizeof dir, "%s/resourceclaims/real", root);
  cr_assert_eq(symlink(dir, path), 0);
  gpupart__config *c = scan();
  cr_expect_eq(c->ndra, 1, "only the real file: %s", all_warnings(c));
  cr_expect(warned(c, "a symbolic link"), "%s", all_warnings(c));
  free(c);
}

Test(dra, a_fifo_is_never_opened_as_a_file) {
  char dir[512], path[600];
  request_dir("resourceclaims", "gpu-claim", "gpu", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/gpu.example.com-metadata.json", dir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  gpupart__dra_device d[2];
  char why[256];
  cr_expect_eq(gpupart__dra_read(gpupart__hostmem_default(), path, d, 2, why, sizeof why), -1);
  cr_expect(strstr(why, "not a regular file"), "%s", why);
}

Test(dra, a_nul_byte_is_a_warning) {
  char path[512];
  write_meta("gpu-claim", "{}", path, sizeof path);
  FILE *f = fopen(path, "ab");
  cr_assert_not_null(f);
  fputc(0, f);
  fclose(f);
  gpupart__config *c = scan();
  cr_expect(warned(c, "NUL"), "%s", all_warnings(c));
  free(c);
}

Test(dra, no_more_devices_than_the_bound) {
  char dev[4096] = "";
  for (int i = 0; i < GPUPART__MAX_DRA + 3; i++)
    snprintf(dev + strlen(dev), sizeof dev - strlen(dev),
             "%s{\"driver\": \"d\", \"pool\": \"p\", \"name\": \"g%d\", \"attributes\": {\"uuid\": {\"string\": "
             "\"GPU-%08x-0000-0000-0000-000000000000\"}}}",
             i ? ", " : "", i, i);
  char text[8192], path[512];
  snprintf(text, sizeof text,
           "{\"apiVersion\": \"" V1B1 "\", \"kind\": \"DeviceMetadata\", \"metadata\": {\"name\": \"x\", "
           "\"generation\": 1}, \"requests\": [{\"name\": \"r\", \"devices\": [%s]}]}",
           dev);
  write_meta("gpu-claim", text, path, sizeof path);
  gpupart__config *c = scan();
  cr_expect_eq(c->ndra, GPUPART__MAX_DRA);
  free(c);
}

Test(dra, a_uuid_is_kept_whatever_the_other_identity_attributes_say) {
  char path[512];
  write_meta("gpu-claim",
             OBJ(V1B1, "1",
                 UUID_ATTR
                 ", \"resource.kubernetes.io/pciBusID\": {\"string\": \"0000:af:00.0\"}, \"other.io/pciBusID\": "
                 "{\"int\": 3}, \"x.io/uuid\": {\"string\": \"\"}, " MEM_ATTR("{\"int\": 1073741824}")),
             path, sizeof path);
  gpupart__config *c = scan();
  cr_assert_eq(c->ndra, 1, "%s", all_warnings(c));
  cr_expect_eq(c->dra[0].by_uuid, 1);
  cr_expect_not_null(gpupart__config_share_for(c, 0, "", uuid_a, 16 * GiB));
  cr_expect_null(gpupart__config_share_for(c, 0, "0000:af:00.0", NULL, 16 * GiB));
  free(c);
}
