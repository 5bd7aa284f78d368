#!/usr/bin/env bash
# The swapper's I/O engine (bin/ds-io-bench) against fio on the same directory, file size,
# block size and queue depth, O_DIRECT, interleaved over ROUNDS rounds: fio with its io_uring
# and its libaio engines, writes ended by an fsync on both sides. Prints each system's median
# GB/s (1e9 bytes/s) per direction and queue depth and our ratio to fio's best (target >= 0.95).
#
#   tools/bench/io_vs_fio.sh [DIR]       (SIZE=1G ROUNDS=3 BLOCK=1M by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -x bin/ds-io-bench ]] || tools/build.sh
command -v fio > /dev/null || { echo "io_vs_fio: fio is not installed (apt-get install fio)" >&2; exit 2; }
DIR=${1:-$(mktemp -d -p "$PWD" io_vs_fio.XXXXXX)}
mkdir -p "$DIR"; trap 'rm -rf "$DIR"/fio.dat "$DIR"/ds_io_bench.*' EXIT
SIZE=${SIZE:-1G}; ROUNDS=${ROUNDS:-3}; BLOCK=${BLOCK:-1M}
block_bytes=$(numfmt --from=iec "$BLOCK")
echo "== $DIR ($(df -T "$DIR" | awk 'NR==2 {print $2}')), $SIZE, block $BLOCK, O_DIRECT, $ROUNDS rounds"

fio_gbps() {  # engine rw depth
  fio --name=t --filename="$DIR/fio.dat" --size="$SIZE" --bs="$BLOCK" --direct=1 --rw="$2" \
    --ioengine="$1" --iodepth="$3" --end_fsync=1 --output-format=json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$2']['bw_bytes']/1e9)"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

for qd in 8 32; do
  declare -A got=()
  for ((r = 1; r <= ROUNDS; r++)); do
    out=$(bin/ds-io-bench --path "$DIR" --size "$SIZE" --block_size "$block_bytes" --queue_depth "$qd" --loops 1)
    got[ds_write]+=" $(awk '$1 == "write" {print $2}' <<< "$out")"
    got[ds_read]+=" $(awk '$1 == "read" {print $2}' <<< "$out")"
    for engine in io_uring libaio; do
      got[${engine}_write]+=" $(fio_gbps $engine write $qd)"
      got[${engine}_read]+=" $(fio_gbps $engine read $qd)"
    done
  done
  for rw in write read; do
    ds=$(median <<< "${got[ds_$rw]}"); fu=$(median <<< "${got[io_uring_$rw]}"); fa=$(median <<< "${got[libaio_$rw]}")
    best=$(printf '%s\n%s\n' "$fu" "$fa" | sort -g | tail -1)
    printf 'qd %3d %-5s  ds-io-bench %6.3f  fio io_uring %6.3f  fio libaio %6.3f GB/s  ratio to fio best %.2f  [ds:%s]\n' \
      "$qd" "$rw" "$ds" "$fu" "$fa" "$(awk -v a="$ds" -v b="$best" 'BEGIN {print a / b}')" "${got[ds_$rw]}"
  done
  unset got
done
