#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test. The last line is
#   tests: N passed, M failed[, K skipped]
# counted from Bazel's per-target results, plus one each for the layering checks, their
# tests (tools/layering) and the formatting check (clang-format). Targets tagged "gpu" run
# only where a CUDA device answers; elsewhere they exit 77 and are counted as skipped. K counts
# every case that did not run here: those targets, each "SKIPPED CASE: ..." line a passing test
# printed (tests/testing/skipped.h: an ISA the CPU lacks, one GPU where two are needed), and
# each "SKIPPED TARGET: ..." stand-in for a test the missing CUDA toolkit could not build; the
# list of them, by name, comes before the summary line.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
export DS_TOOLS_VENV=${DS_TOOLS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/tools-venv}
peers=${XDG_CACHE_HOME:-$HOME/.cache}/ds-runtime/peer-venv/bin/python
if [[ -z ${DS_PEER_PYTHON:-} && -x $peers ]]; then export DS_PEER_PYTHON=$peers; fi
if ! tools/build.sh; then
  echo "tests: 0 passed, 1 failed (build failed)"
  exit 1
fi

log=$(mktemp)
bazel test --test_tag_filters=-gpu --test_summary=short //... 2>&1 | tee "$log"
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")
skipped=0
skipped_names=()

# What a passing test did not run (tests/testing/skipped.h): each "SKIPPED CASE: ..." line is one
# skipped case; a "SKIPPED TARGET: ..." line (tools/bazel/cuda_test.bzl) makes the whole target
# skipped rather than passed. count_skips FILE IS_PASSED
count_skips() {
  local line
  while IFS= read -r line; do
    skipped=$((skipped + 1)); skipped_names+=("${line#SKIPPED }")
    if [[ $line == "SKIPPED TARGET:"* && $2 == 1 ]]; then passed=$((passed - 1)); fi
  done < <(grep -aE '^SKIPPED (CASE|TARGET): ' "$1" | sort -u)
}
for target in $(grep -oE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" | cut -d' ' -f1); do
  testlog=bazel-testlogs/${target#//}
  testlog=${testlog/://}/test.log
  [[ -f $testlog ]] && count_skips "$testlog" 1
done

# GPU-tagged tests: run each binary; 77 = no device (skipped).
for target in $(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null); do
  bin=bazel-bin/${target#//}
  bin=${bin/://}
  set +e
  timeout 600 "$bin" > "$log.gpu" 2>&1
  rc=$?
  set -e +o errexit
  if [[ $rc -eq 0 ]]; then
    passed=$((passed + 1)); echo "$target PASSED (gpu)"
    count_skips "$log.gpu" 1
  elif [[ $rc -eq 77 ]]; then
    skipped=$((skipped + 1)); echo "$target $(grep -m1 SKIPPED "$log.gpu")"
    skipped_names+=("TARGET: $target ($(grep -m1 -o 'SKIPPED: .*' "$log.gpu" | cut -c10-))")
  else
    failed=$((failed + 1)); echo "$target FAILED (gpu, exit $rc)"; tail -20 "$log.gpu"
  fi
done

# Layering check (tools/layering): the include check over the tree, then its own tests; and the
# config check (every stored config key is read outside runtime/config, or marked warned).
for script in check_layers check_layers_test check_config_fields; do
  if python3 "tools/layering/$script.py" > "$log.layering" 2>&1; then
    passed=$((passed + 1)); echo "//tools/layering:$script PASSED"
  else
    failed=$((failed + 1)); echo "//tools/layering:$script FAILED"; tail -20 "$log.layering"
  fi
done
for script in check_links check_docs; do
  if "tools/layering/$script.sh" > "$log.layering" 2>&1; then
    passed=$((passed + 1)); echo "//tools/layering:$script PASSED"
  else
    failed=$((failed + 1)); echo "//tools/layering:$script FAILED"; tail -20 "$log.layering"
  fi
done
# The tree stays formatted with .clang-format.
if git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | grep -v '^tools/bazel/' |
    xargs clang-format --dry-run -Werror > "$log.layering" 2>&1; then
  passed=$((passed + 1)); echo "//tools:clang_format PASSED"
else
  failed=$((failed + 1)); echo "//tools:clang_format FAILED (run clang-format -i on these)"
  grep -o '^[^:]*:[0-9]*' "$log.layering" | sort -u | head -20
fi
rm -f "$log" "$log.gpu" "$log.layering"

if [[ ${#skipped_names[@]} -gt 0 ]]; then
  echo "skipped here:"
  printf '  %s\n' "${skipped_names[@]}"
fi

if [[ $skipped -gt 0 ]]; then
  echo "tests: $passed passed, $failed failed, $skipped skipped"
else
  echo "tests: $passed passed, $failed failed"
fi
[[ $failed -eq 0 ]]
