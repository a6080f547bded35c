#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/gpupart-prolog.sh, with PrologFlags=Alloc so
# it runs when the job starts): makes the job's operator's ledger before any of its steps
# runs (docs/deploy.md, "The operator's ledger"). The job's ledger folder
# (LEDGER_BASE/gpupart-job-JOBID, the folder gpupart-share.sbatch uses) is made for the job's
# user, and `gpupart ledger create` runs as that user with the site's operator file
# (OPERATOR_INI, default /etc/gpupart/operator.ini): the budget and the
# partitions with their floors that the job's steps then get, whatever the steps' own
# configuration says, each floor held from the job's start. gpupart-epilog.sh ends it.
#
# The job's folder is its user's, so this ledger serves the steps of one job (one user).
# Jobs of different users on one GPU meet in one ledger when the site sets LEDGER_GROUP
# (a group every such user is in): the prolog then makes the node's group folder
# (GROUP_LEDGER_DIR, default LEDGER_BASE/gpupart-group-GROUP: root's, of that group, mode
# 2770) and, as root, the operator's ledger in it if it has none yet (the group's ledger,
# 0660, not any user's); the job's programs join it with GPUPART_SHARED=1 and
# GPUPART_LEDGER_DIR at that folder (docs/deploy.md, "Jobs of several users"). The ledger
# stays between jobs (gpupart-epilog.sh leaves it); `gpupart ledger remove` ends it. A job
# whose user is not in the group gets its own job folder as above.
#
# Slurm runs the prolog as root with SLURM_JOB_ID and SLURM_JOB_USER set; run as the job's
# user itself (as the tests do), it makes the ledger without changing user. A failure
# exits nonzero, which makes Slurm hold the job rather than run it without its floors.
set -euo pipefail
: "${GPUPART:=gpupart}" "${LEDGER_BASE:=/dev/shm}"
: "${OPERATOR_INI:=/etc/gpupart/operator.ini}"
job=${SLURM_JOB_ID:?not run by Slurm: SLURM_JOB_ID is unset}
user=${SLURM_JOB_USER:?not run by Slurm: SLURM_JOB_USER is unset}
dir=$LEDGER_BASE/gpupart-job-$job
[ -r "$OPERATOR_INI" ] || { echo "gpupart-prolog: $OPERATOR_INI cannot be read" >&2; exit 1; }

# The node's group folder (made again at each job, so that a mode changed since is put
# back), and its ledger, made by the first job that finds none (the folder locked, so
# that two jobs starting together make one).
if [ -n "${LEDGER_GROUP:-}" ] && [[ " $(id -nG "$user") " == *" $LEDGER_GROUP "* ]]; then
  dir=${GROUP_LEDGER_DIR:-$LEDGER_BASE/gpupart-group-$LEDGER_GROUP}
  install -d -o root -g "$LEDGER_GROUP" -m 2770 "$dir"
  exec 9<"$dir"
  flock 9
  compgen -G "$dir/gpupart-*.ledger" >/dev/null && exit 0
  GPUPART_CONFIG="$OPERATOR_INI" "$GPUPART" ledger create --ledger-dir "$dir"
  exit
fi
[ -z "${LEDGER_GROUP:-}" ] || echo "gpupart-prolog: job $job's user $user is not in group $LEDGER_GROUP: the job gets a ledger folder of its own" >&2

as_user=()
if [ "$(id -un)" != "$user" ]; then
  install -d -o "$user" -g "$(id -gn "$user")" -m 0700 "$dir"
  as_user=(runuser -u "$user" --)
else
  install -d -m 0700 "$dir"
fi
"${as_user[@]}" env GPUPART_CONFIG="$OPERATOR_INI" "$GPUPART" ledger create --ledger-dir "$dir"
