# Sourced by the launch tests (launch_test, hang_test, netns_hang_test, the memory and elastic tests): the checks, bounded
# waits and leftover-process sweeps they share. The caller sets LAUNCH (ds-launch) and fails=0.
# The agents' in-memory copy directories go under the test's own directory, so that an agent a
# test kills with SIGKILL leaves none in /dev/shm.
export DS_COPY_ROOT=${TEST_TMPDIR:-/tmp}/copies
mkdir -p "$DS_COPY_ROOT"
pass() { echo "ok: $1"; }
fail() { echo "FAIL: $1"; fails=$((fails + 1)); }
wait_for() {  # wait_for SECONDS CMD...: polls every 0.1 s
  local end=$((SECONDS + $1)); shift
  while ((SECONDS < end)); do "$@" && return 0; sleep 0.1; done
  return 1
}
running_ranks() { "$LAUNCH" status 2>/dev/null | grep -cE "^[0-9]+ +127\.0\.0\.[12] +[0-9]+ +RUNNING"; }
rank_pid() { "$LAUNCH" status 2>/dev/null | awk -v r="$1" '$1 == r && $2 ~ /^127/ {print $3}'; }
leftovers() { pgrep -f "$1/job.yaml" | grep -v "^$$\$" || true; }
all_running() { [[ $(running_ranks) == 4 ]]; }
none_left() { [[ -z $(leftovers "$1") ]]; }
exit_of() {  # exit_of DIR SECONDS: waits for ds-launch (a child of this shell); sets rc
  local pid; pid=$(cat "$1/pid")
  local end=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; wait "$pid" 2>/dev/null; rc=timeout; return; fi
  wait "$pid"; rc=$?
}
no_leftovers() {  # no_leftovers DIR NAME [SECONDS]: stopped processes are woken and killed
  if wait_for "${3:-5}" none_left "$1"; then pass "$2: no process left"
  else fail "$2: left running: $(leftovers "$1" | tr '\n' ' ')"; pkill -9 -CONT -f "$1/job.yaml"; pkill -9 -f "$1/job.yaml"; fi
}
# curve_after REF_CSV CSV FROM: the rows of CSV after step FROM (the last of each step) beside
# REF_CSV's: prints "ROWS UNMATCHED NEAR FAR", NEAR the largest |loss difference| over the 20
# steps after FROM, FAR over all of them.
curve_after() {
  awk -F, -v from="${3:-0}" 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
    FNR > 1 && $1 > from { got[$1] = $2 }
    END { for (s in got) { n++; if (!(s in ref)) bad++; d = got[s] - ref[s]; if (d < 0) d = -d
            if (s + 0 <= from + 20 && d > near) near = d; if (d > far) far = d }
          printf "%d %d %.2e %.2e", n, bad + 0, near, far }' "$1" "$2"
}
# last_step DIR: the step of DIR/metrics.csv's last row (0 before the first); past DIR STEP: it
# reached STEP.
last_step() { tail -1 "$1/metrics.csv" 2>/dev/null | cut -d, -f1 | grep -E '^[0-9]+$' || echo 0; }
past() { (($(last_step "$1") >= $2)); }
