#!/usr/bin/env bash
# stop_local_slurm.sh - stop the one-machine Slurm cluster that
# start_local_slurm.sh started.
#
# Usage (as root):
#     cluster_scripts/stop_local_slurm.sh [--cancel-jobs] [--keep-munge] [--purge]
#
#   --cancel-jobs  cancel all jobs first. Without it, running jobs keep running
#                  (their slurmstepd processes outlive slurmd) and Slurm picks
#                  them up again at the next start.
#   --keep-munge   leave munged running even if start_local_slurm.sh started it.
#                  (A munged that was already running before is never stopped.)
#   --purge        also delete the controller state and logs, so the next start
#                  is a fresh cluster (job ids start at 1 again).
#
# Idempotent: stopping a stopped cluster just says so.
set -euo pipefail

# TUTORIAL_SLURM_INSTANCE=NAME: stop the second cluster of that name instead (see start_local_slurm.sh).
INSTANCE=${TUTORIAL_SLURM_INSTANCE:-}
SUFFIX=${INSTANCE:+-$INSTANCE}
RUN_DIR=/run/slurm$SUFFIX
export SLURM_CONF=/etc/slurm$SUFFIX/slurm.conf
NODES=(node1 node2)
CANCEL=0 KEEP_MUNGE=0 PURGE=0
for arg in "$@"; do
    case $arg in
        --cancel-jobs) CANCEL=1 ;;
        --keep-munge) KEEP_MUNGE=1 ;;
        --purge) PURGE=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "unknown option: $arg (try --help)" >&2; exit 2 ;;
    esac
done

say() { echo "[stop_local_slurm] $*"; }
[[ $(id -u) -eq 0 ]] || { echo "[stop_local_slurm] ERROR: run me as root" >&2; exit 1; }

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_daemon NAME PIDFILE: SIGTERM, wait up to 15 s, then SIGKILL.
stop_daemon() {
    local name=$1 pidfile=$2 pid
    if ! pid_alive "$pidfile"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        say "$name did not stop in 15 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

if ((CANCEL)) && pid_alive "$RUN_DIR/slurmctld.pid"; then
    say "cancelling all jobs"
    mapfile -t jobs < <(squeue -h -o %i 2>/dev/null || true)
    ((${#jobs[@]} == 0)) || scancel --full "${jobs[@]}" || true
    sleep 2
fi

stopped_any=0
for n in "${NODES[@]}"; do
    pid_alive "$RUN_DIR/slurmd-$n.pid" && stopped_any=1
    stop_daemon "slurmd $n" "$RUN_DIR/slurmd-$n.pid"
done
pid_alive "$RUN_DIR/slurmctld.pid" && stopped_any=1
stop_daemon slurmctld "$RUN_DIR/slurmctld.pid"

# munged is stopped only if start_local_slurm.sh started it (it leaves a marker).
if [[ -z $INSTANCE && -f $RUN_DIR/tutorial-started-munge ]] && ((KEEP_MUNGE == 0)); then
    if pid_alive /run/munge/munged.pid; then stopped_any=1; fi
    stop_daemon munged /run/munge/munged.pid
    rm -f "$RUN_DIR/tutorial-started-munge"
fi

if ((PURGE)); then
    say "purging controller state, node spools and logs"
    rm -rf "/var/spool/slurmctld$SUFFIX" "/var/spool/slurmd$SUFFIX" "/var/log/slurm$SUFFIX"
fi

if ((stopped_any)); then say "stopped."; else say "already stopped."; fi
