#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/gpupart-epilog.sh): ends the job's operator's
# ledger that gpupart-prolog.sh made, once the job's steps are gone (--force: a step that
# Slurm could not stop keeps running on a ledger of its own), and removes the job's ledger
# folder. Nothing to end is no error: the batch script may have removed the folder.
# The node's group folder's ledger (LEDGER_GROUP) is left: it serves every job of the
# group, and other jobs may hold bytes in it or start while this one ends.
set -uo pipefail
: "${GPUPART:=gpupart}" "${LEDGER_BASE:=/dev/shm}"
job=${SLURM_JOB_ID:?not run by Slurm: SLURM_JOB_ID is unset}
user=${SLURM_JOB_USER:?not run by Slurm: SLURM_JOB_USER is unset}
dir=$LEDGER_BASE/gpupart-job-$job
[ -d "$dir" ] || exit 0
as_user=()
[ "$(id -un)" = "$user" ] || as_user=(runuser -u "$user" --)
"${as_user[@]}" env GPUPART_CONFIG="${OPERATOR_INI:-/etc/gpupart/operator.ini}" \
  "$GPUPART" ledger remove --force --ledger-dir "$dir" >/dev/null 2>&1 || true
rm -rf "$dir"
