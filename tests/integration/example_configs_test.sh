#!/usr/bin/env bash
# Every shipped example job (configs/examples/*.yaml) still parses and plans: `ds-launch plan`
# at world 1 and 8 exits 0 and prints the plan. GPU examples must keep the model states and
# the optimizer on the device (device.type cuda, no offload).
set -uo pipefail

R=${TEST_SRCDIR:-.}/ds_runtime
LAUNCH=$R/launcher/launch/ds-launch
fails=0
n=0
for cfg in "$R"/configs/examples/*.yaml; do
  n=$((n + 1))
  name=${cfg##*/}
  for world in 1 8; do
    if ! out=$(cd "$R" && "$LAUNCH" plan "configs/examples/$name" --world "$world" 2>&1); then
      echo "FAIL: $name at world $world: $out"; fails=$((fails + 1)); continue
    fi
    if ! grep -q "^plan [0-9a-f]*: " <<<"$out"; then
      echo "FAIL: $name at world $world: no plan line"; fails=$((fails + 1)); continue
    fi
    if grep -q "type: cuda" "$cfg" && ! grep -q "optimizer on the device" <<<"$out"; then
      echo "FAIL: $name: a GPU example whose optimizer is not on the device"; fails=$((fails + 1)); continue
    fi
    echo "ok: $name plans at world $world"
  done
done
[[ $n -ge 2 ]] || { echo "FAIL: found $n example configs"; fails=$((fails + 1)); }
echo "example_configs_test: $fails failure(s)"
[[ $fails -eq 0 ]]
