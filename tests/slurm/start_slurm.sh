#!/usr/bin/env bash
# Start (or check) a real single-node Slurm on this machine, as root, for the launcher tests
# (tests/slurm/test_slurm_launcher.py) and for trying `hydra/launcher=slurm` by hand.
#
#   sudo tests/slurm/start_slurm.sh          # install if missing, start munged/slurmctld/slurmd, wait for idle
#   sudo tests/slurm/start_slurm.sh stop     # stop the daemons this script started (by their recorded pids)
#   sudo tests/slurm/start_slurm.sh status   # sinfo + the recorded pids
#
# Idempotent: when `sinfo` already shows this node idle/mixed/allocated, it does nothing.
# Debian/Ubuntu only (apt-get); no systemd needed (daemons run under setsid, pids recorded in
# $STATE_DIR). Cgroups are not used (proctrack/linuxproc, task/none): jobs are neither
# CPU-pinned nor memory-capped by Slurm; mem_gb / cpus_per_task only drive scheduling.
# Environment: SLURM_START_TIMEOUT (seconds to wait for the node, default 60).
set -euo pipefail

STATE_DIR=/var/run/robustnlu-slurm       # pid files of the daemons we started
LOG_DIR=/var/log/slurm
CONF=/etc/slurm/slurm.conf
TIMEOUT=${SLURM_START_TIMEOUT:-60}
NODE=$(hostname -s)

log() { echo "[start_slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages, runs slurmd as root)"

node_state() {  # the node's state as sinfo shows it, empty when Slurm does not answer
    timeout 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true
}

node_ready() {
    case "$(node_state)" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac
}

start_daemon() {  # name, command...: start under setsid in the background, record its pid
    local name=$1; shift
    local pidfile=$STATE_DIR/$name.pid
    if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        log "$name already running (pid $(cat "$pidfile"))"
        return
    fi
    # 9>&-: the daemon must not inherit the lock of this script (it would hold it forever)
    setsid nohup "$@" >>"$LOG_DIR/$name.console.log" 2>&1 </dev/null 9>&- &
    echo $! >"$pidfile"
    log "started $name (pid $!): $*"
}

stop_daemons() {
    local name pidfile pid
    for name in slurmd slurmctld munged; do
        pidfile=$STATE_DIR/$name.pid
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" && log "stopped $name (pid $pid)"
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        fi
        rm -f "$pidfile"
    done
}

case "${1:-start}" in
    stop) stop_daemons; exit 0 ;;
    status) sinfo || true; grep -H . "$STATE_DIR"/*.pid 2>/dev/null || true; exit 0 ;;
    start) ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac

mkdir -p "$STATE_DIR" "$LOG_DIR"
# one start at a time (a test run and a CI run on the same machine)
exec 9>"$STATE_DIR/lock"
flock -w 120 9 || die "another start_slurm.sh holds $STATE_DIR/lock"

if [[ -f $CONF ]] && node_ready; then
    log "Slurm already up: node $NODE is $(node_state)"
    exit 0
fi

# --- 1. packages (only what is missing) -----------------------------------------------------
need=()
command -v munged >/dev/null || need+=(munge)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
if ((${#need[@]})); then
    command -v apt-get >/dev/null || die "apt-get not found: install ${need[*]} by hand"
    log "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- 2. munge: key + munged -----------------------------------------------------------------
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    if command -v mungekey >/dev/null; then mungekey --create --force; else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key
if ! (munge -n | unmunge) >/dev/null 2>&1; then
    # as the munge user (munged refuses a key it does not own); --force: ignore a stale socket
    start_daemon munged runuser -u munge -- /usr/sbin/munged --foreground --force
    for _ in $(seq 20); do (munge -n | unmunge) >/dev/null 2>&1 && break; sleep 0.5; done
    (munge -n | unmunge) >/dev/null 2>&1 || die "munged does not answer (see $LOG_DIR/munged.console.log)"
fi

# --- 3. slurm.conf for this one node ------------------------------------------------------------
# CPUs / sockets / cores / RealMemory exactly as slurmd detects them (`slurmd -C`); a RealMemory
# above the real one would make the node INVALID.
hw=$(slurmd -C | head -n1 | sed -E 's/^NodeName=[^ ]+ //')
mkdir -p /var/spool/slurmctld /var/spool/slurmd /etc/slurm
cat >"$CONF.new" <<EOF
# Written by robustnlu tests/slurm/start_slurm.sh: one node ($NODE), no accounting, no cgroups.
ClusterName=robustnlu
SlurmctldHost=$NODE(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=30
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
if ! cmp -s "$CONF.new" "$CONF"; then mv "$CONF.new" "$CONF"; log "wrote $CONF"; else rm -f "$CONF.new"; fi

# --- 4. daemons ---------------------------------------------------------------------------------
start_daemon slurmctld /usr/sbin/slurmctld -D -i
for _ in $(seq 20); do timeout 5 scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
start_daemon slurmd /usr/sbin/slurmd -D -N "$NODE"

# --- 5. wait for the node ---------------------------------------------------------------------
deadline=$((SECONDS + TIMEOUT))
while ! node_ready; do
    state=$(node_state)
    case "$state" in
        down*|drain*|fail*|invalid*) scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
    esac
    if ((SECONDS > deadline)); then
        log "node $NODE not ready after ${TIMEOUT}s (state '${state:-no answer}'); logs in $LOG_DIR"
        tail -n 20 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 2>/dev/null || true
        exit 1
    fi
    sleep 1
done
log "Slurm up: $(sinfo -h -o '%P %a %D %T %c cpus %m MB' | head -n1)"
