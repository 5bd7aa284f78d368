#!/usr/bin/env bash
# The planner links no kernels: the step planner, ds-plan and ds-launch (which plans before any
# process starts) must depend on op definitions (//kernels/ops) only, never on a backend's
# kernels (//kernels/cpu, //kernels/cuda). Fails naming the target and the kernel libraries.
set -uo pipefail
cd "$(dirname "$0")/../.."
bad=0
for target in //runtime/planner:plan_builder //runtime/planner:ds-plan //launcher/launch:ds-launch; do
  libs=$(bazel query "kind(cc_library, deps($target)) intersect (//kernels/cpu/... + //kernels/cuda/...)" 2>/dev/null)
  if [[ -n "$libs" ]]; then
    echo "check_links: $target links kernels: $(echo $libs)"; bad=1
  fi
done
[[ $bad == 0 ]] && echo "check_links: the planner and ds-launch link op definitions only"
exit $bad
