/* The folder that holds shared ledgers, and the files in it (shm_folder.c): their
 * names and the checks a file must pass before it is opened for good, for the library's
 * side and for the outside reader alike. A folder is of one user, each user's files
 * named with their uid and kept 0600 (the default, /dev/shm), or of a group: a folder
 * with the set-group-ID bit and group write permission (made by the operator, mode
 * 2770), whose ledgers carry no uid in their names and are 0660, shared by every member
 * of the folder's group (docs/design.md, "Security model"). */
#ifndef GPUPART_CORE_LEDGER_SHM_FOLDER_H
#define GPUPART_CORE_LEDGER_SHM_FOLDER_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "identity.h"

/* What a ledger folder is, as gpupart__shm_folder found it. */
typedef struct shm_folder {
  int group; /* a group folder: set-group-ID and group-writable */
  gid_t gid; /* its group (a group folder's files are of that group) */
} shm_folder;

/* Looks at folder dir into *f. ECONFIG when it cannot be looked at or is no folder, and
 * for a group folder that others may write, or whose group this process is not in (root
 * is in every group); the message names the folder and what to do. */
int gpupart__shm_folder(const char *dir, shm_folder *f);
/* The file of device id's ledger in dir (a folder f describes):
 * dir/gpupart-<uid>-<identity>.ledger, or dir/gpupart-<identity>.ledger in a group
 * folder, the identity's characters other than letters, digits, '-' and '.' written '_'. */
void gpupart__ledger_shm_path(const char *dir, const shm_folder *f, const gpupart__identity *id, char *out, size_t n);
/* Whether name is the name of a ledger of folder f: this user's in a user's folder, any
 * (no uid in it) in a group folder. */
int gpupart__shm_is_ledger_name(const shm_folder *f, const char *name);
/* ECONFIG unless fd is a regular file that folder f allows: in a user's folder, this
 * user's with no group or other permission; in a group folder, of the folder's group,
 * readable and writable by it, with no permission for others. st is filled; the message
 * names path. */
int gpupart__shm_check_owner(int fd, const char *path, const shm_folder *f, struct stat *st);
/* Opens the ledger file at path (of folder f) read-write, close-on-exec, never through a
 * symbolic link, making it empty when there is none: 0600 in a user's folder; 0660 in a
 * group folder, made under no name and linked in once its mode is set, so that no member
 * sees it with the maker's umask. A descriptor, or -1 with errno set. */
int gpupart__shm_open_file(const char *path, const shm_folder *f);

#endif
