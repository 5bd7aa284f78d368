# A private Slurm cluster on this host for tests (source it): munged (with its own key), slurmctld
# and two slurmd ("n1" at 127.0.0.2, "n2" at 127.0.0.3, distinct ports), all from a private
# slurm.conf under $SLAB (the system's /etc/slurm and /etc/munge are untouched), every daemon
# stopped by its pid (slurm_cluster_stop). Needs slurmctld, slurmd, slurm-client and munge (tools/setup.sh).
#
#   SLAB=$BASE/slurm CPUS=2 slurm_cluster_start || exit 1
#   sbatch ...; slurm_cluster_stop
slurm_cluster_start() {
  local H c; H=$(hostname -s); c=$SLAB
  export SLURM_CONF=$c/slurm.conf
  mkdir -p "$c/state" "$c/spool" "$c/run" "$c/log" "$c/munge"
  chmod 755 "$c"  # munged runs as munge and must reach its directory
  chown munge:munge "$c/munge"
  # A key of its own (the system's /etc/munge stays untouched).
  /usr/sbin/mungekey -c -f -k "$c/munge/munge.key" && chown munge:munge "$c/munge/munge.key" \
    || { echo "slurm_cluster: mungekey failed"; return 1; }
  su -s /bin/sh munge -c "/usr/sbin/munged --key-file=$c/munge/munge.key --socket=$c/munge/munge.socket --pid-file=$c/munge/munged.pid --log-file=$c/munge/munged.log --seed-file=$c/munge/seed" \
    || { echo "slurm_cluster: munged did not start"; return 1; }
  cat > "$SLURM_CONF" <<CONF
ClusterName=dstest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
AuthType=auth/munge
AuthInfo=socket=$c/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$c/state
SlurmdSpoolDir=$c/spool/%n
SlurmctldPidFile=$c/run/slurmctld.pid
SlurmdPidFile=$c/run/slurmd-%n.pid
SlurmctldLogFile=$c/log/slurmctld.log
SlurmdLogFile=$c/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$c/log/jobcomp.txt
MinJobAge=600
KillWait=3
MessageTimeout=10
InactiveLimit=0
MailProg=/bin/true
NodeName=n1 NodeHostname=$H NodeAddr=127.0.0.2 Port=${N1_PORT:-17101} CPUs=${CPUS:-2} Sockets=1 CoresPerSocket=${CPUS:-2} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=$H NodeAddr=127.0.0.3 Port=${N2_PORT:-17102} CPUs=${CPUS:-2} Sockets=1 CoresPerSocket=${CPUS:-2} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  /usr/sbin/slurmctld -f "$SLURM_CONF" || { echo "slurm_cluster: slurmctld did not start"; return 1; }
  /usr/sbin/slurmd -f "$SLURM_CONF" -N n1 || { echo "slurm_cluster: slurmd n1 did not start"; return 1; }
  /usr/sbin/slurmd -f "$SLURM_CONF" -N n2 || { echo "slurm_cluster: slurmd n2 did not start"; return 1; }
  local end=$((SECONDS + 30))
  until [[ $(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c idle) == 2 ]]; do
    ((SECONDS > end)) && { echo "slurm_cluster: nodes not idle after 30 s: $(sinfo -N 2>&1)"; return 1; }
    sleep 0.2
  done
}

slurm_cluster_stop() {
  local c=$SLAB pid
  for f in "$c"/run/slurmd-*.pid "$c"/run/slurmctld.pid "$c"/munge/munged.pid; do
    [[ -s $f ]] || continue
    pid=$(cat "$f"); kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  return 0
}
