#!/usr/bin/env bash
# start_local_slurm.sh - start a REAL Slurm cluster on this one machine.
#
# What you get: Slurm's controller (slurmctld) plus two node daemons
# (slurmd -N node1, slurmd -N node2) that share this host, each listening on
# its own port. To Slurm, node1 and node2 are two machines, so a job with
# --nodes=2 really gets one task on each "node" and a multi-node torchrun
# really rendezvous across them. Used by the tests and for demos when no real
# cluster is around.
#
# Usage (as root, e.g. on a fresh Debian 12 after
#        `apt-get install -y slurm-wlm munge`):
#     cluster_scripts/start_local_slurm.sh      # start, or say it is already up
#     cluster_scripts/stop_local_slurm.sh       # stop it again
#
# It is idempotent: running it while the cluster is up only says so.
# No systemd needed: the daemons are started directly.
#
# Settings (environment, all optional):
#   TUTORIAL_SLURM_CPUS     CPUs declared per node            (default 2; strict:
#                           this machine's CPUs)
#   TUTORIAL_SLURM_TIMEOUT  seconds to wait for the nodes     (default 60)
#   TUTORIAL_SLURMD_TIMEOUT seconds without an answer from a node's slurmd
#                           before the controller marks it DOWN (SlurmdTimeout,
#                           default 60; tests/test_cluster_faults.py's lost node)
#   TUTORIAL_SLURM_FORCE=1  overwrite an /etc/slurm/slurm.conf that this script
#                           did not write (the old one is kept as a .bak file)
#   TUTORIAL_SLURM_STRICT=1 a cluster as strict as a real site (what CI runs):
#                           - no default partition: a job must name 'compute',
#                             else sbatch refuses it;
#                           - each node has this machine's CPU count, jobs do not
#                             share CPUs, and every task is pinned to the CPUs it
#                             was given (task/affinity);
#                           - the node daemons run in their own mount namespace
#                             in which this checkout's .venv is hidden (an empty
#                             folder), the same virtualenv being reachable at
#                             /opt/tutorial-site/venv only. A job whose site
#                             setup does not name that Python fails, as it would
#                             on a cluster without the notebook's file system;
#                             notebooks/params/ci-site.yaml holds the site block
#                             that works.
#   TUTORIAL_SLURM_INSTANCE=NAME  a second cluster beside the first: its own
#                           /etc/slurm-NAME, state, logs, pid files and ports
#                           (6827, 17011, 17012); point Slurm commands at it with
#                           SLURM_CONF=/etc/slurm-NAME/slurm.conf.
#
# Files: config in /etc/slurm/, state in /var/spool/slurmctld and
# /var/spool/slurmd/<node>, logs in /var/log/slurm/, pid files in /run/slurm/,
# finished-job records in /var/log/slurm/jobcomp.log (with an instance: each
# of these with -NAME appended).
set -euo pipefail

INSTANCE=${TUTORIAL_SLURM_INSTANCE:-}
SUFFIX=${INSTANCE:+-$INSTANCE}
STRICT=${TUTORIAL_SLURM_STRICT:-0}
CONF_DIR=/etc/slurm$SUFFIX
CONF=$CONF_DIR/slurm.conf
CGROUP_CONF=$CONF_DIR/cgroup.conf
LOG_DIR=/var/log/slurm$SUFFIX
RUN_DIR=/run/slurm$SUFFIX
CTLD_STATE=/var/spool/slurmctld$SUFFIX
SLURMD_SPOOL=/var/spool/slurmd$SUFFIX
MARKER="# Written by tutorial cluster_scripts/start_local_slurm.sh"
NODES=(node1 node2)
if [[ -n $INSTANCE ]]; then
    CTLD_PORT=6827 NODE_PORTS=(17011 17012)
else
    CTLD_PORT=6817 NODE_PORTS=(17001 17002)
fi
export SLURM_CONF=$CONF
SITE_VENV=/opt/tutorial-site/venv
if [[ $STRICT == 1 ]]; then
    CPUS=${TUTORIAL_SLURM_CPUS:-$(nproc)}
    PARTITION=compute
    TASK_PLUGIN=task/affinity
    PROCESS_NOTE="# Strict, like a real site: processes are tracked through the process tree
# (no cgroups here) and every task is pinned to the CPUs Slurm gave it."
    SCHED_NOTE="# Scheduling: jobs do not share CPUs (OverSubscribe=NO); a job waits for free ones."
else
    CPUS=${TUTORIAL_SLURM_CPUS:-2}
    PARTITION=debug
    TASK_PLUGIN=task/none
    PROCESS_NOTE="# No cgroups: processes are tracked through the process tree, tasks are not
# pinned to cores (both emulated nodes share the same cores)."
    SCHED_NOTE="# Scheduling: share CPUs between jobs (OverSubscribe=FORCE on the partition) so
# several small CPU jobs fit on the emulated nodes at once."
fi
TIMEOUT=${TUTORIAL_SLURM_TIMEOUT:-60}
SLURMD_TIMEOUT=${TUTORIAL_SLURMD_TIMEOUT:-60}
[[ $SLURMD_TIMEOUT =~ ^[0-9]+$ ]] || { echo "TUTORIAL_SLURMD_TIMEOUT must be a number of seconds" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

say() { echo "[start_local_slurm] $*"; }
die() { echo "[start_local_slurm] ERROR: $*" >&2; exit 1; }

# pid_alive FILE: true if FILE holds the pid of a running process
pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

[[ $(id -u) -eq 0 ]] || die "run me as root (the daemons need it)."
# One start at a time (e.g. several test processes calling this at once).
# The daemons are started with 9>&- so they do not inherit (and keep) the lock.
exec 9>/run/tutorial-local-slurm$SUFFIX.lock
flock 9
for bin in munged slurmctld slurmd sinfo scontrol unshare; do
    command -v "$bin" >/dev/null \
        || die "'$bin' not found; install with: apt-get install -y slurm-wlm munge"
done

# ---------------------------------------------------------------------------
# 1. The configuration we want (written to a temp file, compared below).
# ---------------------------------------------------------------------------
HOST=$(hostname -s)
NEW_CONF=$(mktemp)
trap 'rm -f "$NEW_CONF"' EXIT
{
cat <<EOF
$MARKER
# A one-machine test cluster: two emulated nodes (node1, node2) on host $HOST.
# Regenerated by the script; edit the script rather than this file.
ClusterName=tutorial$SUFFIX
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again cred_expire+1 seconds after it stopped
# (Slurm's default is 120 s; shorter here so requeue demos are quick).
AuthInfo=cred_expire=30
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true

# Where the daemons keep state, logs and pid files (%n = node name, so each
# emulated node gets its own).
StateSaveLocation=$CTLD_STATE
SlurmdSpoolDir=$SLURMD_SPOOL/%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

$PROCESS_NOTE
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
JobAcctGatherType=jobacct_gather/none

$SCHED_NOTE
SchedulerType=sched/backfill
# Look at pending jobs every few seconds, not every minute (small cluster).
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
EOF
if [[ $STRICT != 1 ]]; then
    echo "# Trust the CPU count below even if the hardware has fewer cores."
    echo "SlurmdParameters=config_overrides"
fi
cat <<EOF

# Job life cycle.
JobRequeue=1
KillWait=5
# Keep finished jobs visible to 'scontrol show job' / 'squeue --states=all'
# for a day (there is no accounting database, so sacct is not available).
MinJobAge=86400
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
InactiveLimit=0
Waittime=0

# No accounting database (slurmdbd); one line per finished job goes to a text
# file instead.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log

# The two emulated nodes: same host, one slurmd each on its own port.
EOF
for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeHostname=$HOST NodeAddr=127.0.0.1 Port=${NODE_PORTS[$i]} CPUs=$CPUS State=UNKNOWN"
done
if [[ $STRICT == 1 ]]; then
    # No Default=YES: sbatch refuses a job that names no partition.
    echo "PartitionName=compute Nodes=$(IFS=,; echo "${NODES[*]}") Default=NO MaxTime=INFINITE DefaultTime=01:00:00 OverSubscribe=NO State=UP"
else
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE DefaultTime=01:00:00 OverSubscribe=FORCE:4 State=UP"
fi
} >"$NEW_CONF"

conf_current() { [[ -f $CONF ]] && cmp -s "$NEW_CONF" "$CONF"; }

all_daemons_alive() {
    pid_alive "$RUN_DIR/slurmctld.pid" || return 1
    local n
    for n in "${NODES[@]}"; do pid_alive "$RUN_DIR/slurmd-$n.pid" || return 1; done
}

# nodes_ready: every emulated node answers and is usable (idle/mixed/allocated)
nodes_ready() {
    local states
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    local n
    for n in "${NODES[@]}"; do
        grep -Eq "^$n (idle|mix|alloc|comp)\$" <<<"$states" || return 1
    done
}

usage_text() {
    cat <<EOF

Local Slurm cluster 'tutorial$SUFFIX' is up: nodes ${NODES[*]} (partition '$PARTITION').
  sinfo                                   # nodes and their state
  head -n 40 cluster_scripts/train.sbatch   # how to submit training
  sbatch --nodes=2 cluster_scripts/train.sbatch [--key value ...]
  squeue                                  # queued and running jobs
  scontrol show job -o <jobid>            # state/exit code, also after it ends
  scancel <jobid>                         # cancel a job
  $HERE/stop_local_slurm.sh   # stop the cluster
Logs: $LOG_DIR/slurmctld.log, $LOG_DIR/slurmd-node1.log, $LOG_DIR/slurmd-node2.log,
      finished jobs: $LOG_DIR/jobcomp.log
EOF
}

# ---------------------------------------------------------------------------
# 2. Already up with this configuration? Then there is nothing to do.
# ---------------------------------------------------------------------------
if conf_current && all_daemons_alive && nodes_ready; then
    say "already up."
    sinfo
    usage_text
    exit 0
fi

# ---------------------------------------------------------------------------
# 3. Node names must resolve (torchrun connects to the head node by name).
# ---------------------------------------------------------------------------
missing_hosts=()
for n in "${NODES[@]}"; do
    getent hosts "$n" >/dev/null || missing_hosts+=("$n")
done
if ((${#missing_hosts[@]})); then
    say "adding '127.0.0.1 ${missing_hosts[*]}' to /etc/hosts"
    echo "127.0.0.1 ${missing_hosts[*]}  # tutorial local slurm" >>/etc/hosts
fi

# ---------------------------------------------------------------------------
# 4. munge: the authentication service every Slurm daemon and command uses.
# ---------------------------------------------------------------------------
MUNGE_USER=munge
id "$MUNGE_USER" >/dev/null 2>&1 || MUNGE_USER=root
install -d -m 0755 -o "$MUNGE_USER" /run/munge
install -d -m 0700 -o "$MUNGE_USER" /var/lib/munge /var/log/munge /etc/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating munge key /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile=/etc/munge/munge.key
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
    fi
fi
chown "$MUNGE_USER:" /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munge is already running"
else
    say "starting munged"
    if [[ $MUNGE_USER == root ]]; then
        munged --force 9>&-
    else
        runuser -u "$MUNGE_USER" -- munged 9>&-
    fi
    install -d -m 0755 "$RUN_DIR"
    touch "$RUN_DIR/tutorial-started-munge"   # so the stop script stops it too
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.2
    done
    munge -n | unmunge >/dev/null || die "munged does not work; see /var/log/munge/munged.log"
fi

# ---------------------------------------------------------------------------
# 5. Install the configuration. A config that changed while daemons run means
#    a restart; a config this script did not write is left alone.
# ---------------------------------------------------------------------------
install -d -m 0755 "$CONF_DIR" "$LOG_DIR" "$RUN_DIR" "$CTLD_STATE" "$SLURMD_SPOOL"
for n in "${NODES[@]}"; do install -d -m 0755 "$SLURMD_SPOOL/$n"; done
if ! conf_current; then
    if [[ -f $CONF ]] && ! grep -qF "$MARKER" "$CONF"; then
        if [[ ${TUTORIAL_SLURM_FORCE:-0} != 1 ]]; then
            die "$CONF exists and was not written by this script (a real cluster?). " \
                "Re-run with TUTORIAL_SLURM_FORCE=1 to replace it (a backup is kept)."
        fi
        cp -p "$CONF" "$CONF.bak-$(date +%Y%m%d%H%M%S)"
    fi
    if pid_alive "$RUN_DIR/slurmctld.pid" || compgen -G "$RUN_DIR/slurmd-*.pid" >/dev/null; then
        say "configuration changed: restarting the daemons"
        "$HERE/stop_local_slurm.sh" --keep-munge 9>&-
    fi
    say "writing $CONF"
    install -m 0644 "$NEW_CONF" "$CONF"
fi
# cgroup.conf is read by the daemons even though no cgroup plugin is in use.
cat >"$CGROUP_CONF" <<EOF
$MARKER
CgroupPlugin=autodetect
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF

# ---------------------------------------------------------------------------
# 6. Start whatever is not running: the controller first, then the nodes.
#    (Each daemon forks into the background and writes its pid file.)
# ---------------------------------------------------------------------------
if pid_alive "$RUN_DIR/slurmctld.pid"; then
    say "slurmctld already running"
else
    say "starting slurmctld"
    slurmctld 9>&-
fi
for _ in $(seq 50); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
# start_slurmd NODE: the node daemon; on the strict cluster in a mount namespace
# where this checkout's virtualenv is hidden and reachable only at $SITE_VENV.
start_slurmd() {
    if [[ $STRICT != 1 ]]; then
        slurmd -N "$1" 9>&-
        return
    fi
    local venv
    venv=$(realpath "$HERE/../.venv" 2>/dev/null || true)
    [[ -d $venv ]] || die "strict cluster: no virtualenv at $HERE/../.venv to hide (run make setup first)"
    install -d -m 0755 "$SITE_VENV"
    unshare -m --propagation private bash -c '
        set -e
        mount --bind "$1" "$2"                                     # the venv where the site names it
        mount -t tmpfs -o size=1m,mode=0755 tutorial-hidden "$1"   # ...and not where the notebook has it
        exec slurmd -N "$3"' _ "$venv" "$SITE_VENV" "$1" 9>&-
}
for n in "${NODES[@]}"; do
    if pid_alive "$RUN_DIR/slurmd-$n.pid"; then
        say "slurmd for $n already running"
    else
        say "starting slurmd for $n"
        start_slurmd "$n"
    fi
done

# ---------------------------------------------------------------------------
# 7. Wait (bounded) until sinfo shows both nodes usable.
# ---------------------------------------------------------------------------
say "waiting up to ${TIMEOUT}s for ${NODES[*]} to become idle"
deadline=$((SECONDS + TIMEOUT))
resumed=0
until nodes_ready; do
    if ((SECONDS >= deadline)); then
        sinfo -N -l >&2 || true
        die "nodes did not become idle within ${TIMEOUT}s. Look at
    $LOG_DIR/slurmctld.log
    $LOG_DIR/slurmd-node1.log  $LOG_DIR/slurmd-node2.log
    /var/log/munge/munged.log"
    fi
    # A node left DOWN/DRAINED by an earlier run (e.g. 'unexpectedly rebooted')
    # is put back into service once its slurmd is running.
    if ((resumed == 0 && SECONDS + TIMEOUT - deadline >= 5)); then
        for n in "${NODES[@]}"; do
            if sinfo -h -N -n "$n" -o '%t' 2>/dev/null | grep -Eq '^(down|drain|drng|inval)'; then
                scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
            fi
        done
        resumed=1
    fi
    sleep 1
done
say "cluster is up."
sinfo
usage_text
