/* The ledger folder and the files in it (shm_folder.h). A group folder is known by its
 * mode alone (set-group-ID and group-writable, as `install -d -m 2770 -g GROUP DIR`
 * makes it), so that no configuration has to agree with the folder. Membership is asked
 * of this process's own credentials only: another uid's groups cannot be asked without a
 * user database (which containers running arbitrary uids do not have, and which a device
 * open must not wait on), so a file of another member is judged by what the kernel
 * enforces: only the group's members (and root, and the folder's owner) can make a file
 * in a folder others cannot write, and the set-group-ID bit gives it the folder's group. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "shm_folder.h"

int gpupart__shm_folder(const char *dir, shm_folder *f) {
  struct stat st;
  *f = (shm_folder){0};
  /* a folder that cannot be looked at fails where its file is opened, as it always did */
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || !(st.st_mode & S_ISGID) || !(st.st_mode & S_IWGRP))
    return GPUPART_OK;
  f->group = 1;
  f->gid = st.st_gid;
  if (st.st_mode & S_IWOTH)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger folder %s is a group folder (set-group-ID, group-writable) that anyone may write "
                         "(mode %04o): anyone could replace its ledgers; make it 2770 (install -d -m 2770 -g GROUP "
                         "%s): refused",
                         dir, (unsigned)(st.st_mode & 07777), dir);
  if (geteuid() != 0 && !group_member(st.st_gid))
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger folder %s is the group folder of gid %u (mode %04o): this process (uid %u) is not "
                         "in that group, so it may not use its ledgers: refused; add the user to the group, or set "
                         "GPUPART_LEDGER_DIR to another folder",
                         dir, (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
  return GPUPART_OK;
}

void gpupart__ledger_shm_path(const char *dir, const shm_folder *f, const gpupart__identity *id, char *out, size_t n) {
  char key[GPUPART__IDENTITY_MAX];
  size_t i = 0;
  for (; id->key[i] && i + 1 < sizeof key; i++) {
    char c = id->key[i];
    int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    key[i] = plain ? c : '_';
  }
  key[i] = '\0';
  if (f->group) snprintf(out, n, "%s/gpupart-%s.ledger", dir, key);
  else snprintf(out, n, "%s/gpupart-%u-%s.ledger", dir, (unsigned)geteuid(), key);
}

/* A device key starts with a letter (identity.h), a uid with a digit: a user's ledger
 * left in a folder that became a group's is none of the group's. */
int gpupart__shm_is_ledger_name(const shm_folder *f, const char *name) {
  char prefix[32];
  int n = f->group ? snprintf(prefix, sizeof prefix, "gpupart-")
                   : snprintf(prefix, sizeof prefix, "gpupart-%u-", (unsigned)geteuid());
  size_t len = strlen(name);
  if (strncmp(name, prefix, (size_t)n) != 0 || len <= (size_t)n + 7 || strcmp(name + len - 7, ".ledger") != 0) return 0;
  return !f->group || name[n] < '0' || name[n] > '9';
}

static int check_user_file(const char *path, const struct stat *st) {
  if (st->st_uid != geteuid())
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s belongs to uid %u, not to this user (%u): refused", path,
                         (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & 077)
    return gpupart__fail(GPUPART_ECONFIG, "ledger %s has mode %03o; a ledger must be 0600: refused", path,
                         (unsigned)(st->st_mode & 0777));
  return GPUPART_OK;
}

static int check_group_file(const char *path, const shm_folder *f, const struct stat *st) {
  if (st->st_gid != f->gid)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger %s is of gid %u, not of its group folder's gid %u: a member's ledger takes the "
                         "folder's group, so this one was put there otherwise: refused",
                         path, (unsigned)st->st_gid, (unsigned)f->gid);
  if (st->st_mode & 07)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger %s has mode %03o: users outside the group may use it; a ledger of a group folder "
                         "must be 0660: refused",
                         path, (unsigned)(st->st_mode & 0777));
  if ((st->st_mode & 060) != 060)
    return gpupart__fail(GPUPART_ECONFIG,
                         "ledger %s has mode %03o: the group cannot read and write it; a ledger of a group folder "
                         "must be 0660: refused",
                         path, (unsigned)(st->st_mode & 0777));
  return GPUPART_OK;
}

int gpupart__shm_check_owner(int fd, const char *path, const shm_folder *f, struct stat *st) {
  if (fstat(fd, st) != 0) return gpupart__fail(GPUPART_ECONFIG, "ledger %s: %s", path, strerror(errno));
  if (!S_ISREG(st->st_mode)) return gpupart__fail(GPUPART_ECONFIG, "ledger %s is not a regular file", path);
  return f->group ? check_group_file(path, f, st) : check_user_file(path, st);
}

/* Gives nameless file fd its name. */
static int name_file(int fd, const char *path) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

/* A new empty file of mode 0660 at path, linked in whole: made nameless in path's folder
 * (O_TMPFILE), its mode set whatever the umask, then given its name (EEXIST when another
 * member was first). Where the file system cannot make nameless files, it is made at its
 * name and its mode set at once after (a member opening it in between is refused, once). */
static int make_group_file(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0660);
  int nameless = fd >= 0;
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR))
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0660);
  if (fd < 0) return -1;
  if (fchmod(fd, 0660) == 0 && (!nameless || name_file(fd, path) == 0)) return fd;
  int err = errno;
  close(fd);
  errno = err;
  return -1;
}

int gpupart__shm_open_file(const char *path, const shm_folder *f) {
  if (!f->group) return open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  for (int tries = 0; tries < 8; tries++) { /* made and removed by others between two tries: rare */
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) return fd;
    fd = make_group_file(path);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}
