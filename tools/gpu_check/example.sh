# tools/gpu_check/example.sh: the README's example (configs/examples/addition.yaml, the tiny
# GPT learning 3-digit addition) on the GPU, sourced by tools/gpu-check.sh (uses its run_step,
# row, fail_row, BIN, RESULTS, WORK, GPU_NAME, RUN_TESTS, FAILED, SKIPPED).
#
# One CPU run in bf16 is the reference; the GPU runs ZeRO stages 0, 1, 2 and 3 and stage 1 with
# offload_optimizer on the host, bf16, on the same data and seed, for EXAMPLE_STEPS (default
# 100) steps (example_rows): the descent from 2.83 to the plateau near 1.60. Two checks per
# GPU run:
#   - against the CPU: the mean loss of every window of 10 steps within EXAMPLE_TOL (default
#     0.02, 2% relative); the worst single step is printed, not judged (the CPU alone at 2
#     and at 8 threads differs by 1.15% at step 50). Later steps are not compared: on the
#     plateau at lr 3e-3 the run is chaotic, and the last bits of the weights decide whether
#     and when a spike comes (on an H200 one of 14.8% at step 170 came and went within 30
#     steps, and a change of the layernorm's summation order moved it there).
#   - against the GPU's stage 0: the same loss at every step to 1e-6 (ZeRO's layouts and the
#     offloaded optimizer compute the same numbers).
# Then the whole example (3000 steps) at stage 1 on the GPU and its held-out exact match
# (example_full_rows, ds-worker --eval). Whether this tiny task is solved depends on the seed
# (with the former 1500 steps and beta2 0.98, 3 of seeds 1-5 reached 99.95-100% on an H200 and
# 2 stayed below 3%: tools/gpu_check/gpt2_diagnose.sh's section 3), so that row reports and
# does not judge.

EXAMPLE_STEPS=${EXAMPLE_STEPS:-100}
EXAMPLE_TOL=${EXAMPLE_TOL:-0.02}

# example_job DIR DEVICE ZERO_YAML: the example's config with its paths under DIR.
example_job() {
  sed -e "s#runs/addition/data#$WORK/example/data#; s#runs/addition/ckpt#$1/ckpt#" \
      -e "s#runs/addition/metrics.csv#$1/metrics.csv#; s#log_interval: 50#log_interval: 25#" \
      configs/examples/addition.yaml >"$1/job.yaml"
  printf 'bf16: {enabled: true}\nzero_optimization: %s\ndevice: {type: %s}\n' "$3" "$2" >>"$1/job.yaml"
}

# example_compare REF.csv GOT.csv: "worst_window_rel window_end worst_step_rel step steps": the
# worst relative difference of 10-step mean losses and of single steps, over the steps both have.
example_compare() {
  awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $2; next }
           FNR > 1 && ($1 in ref) {
             n++; d = $2 - ref[$1]; if (d < 0) d = -d; r = d / ref[$1];
             if (r > worst) { worst = r; at = $1 }
             sg += $2; sr += ref[$1];
             if (n % 10 == 0) { w = (sg - sr) / sr; if (w < 0) w = -w;
                                if (w > wworst) { wworst = w; wat = $1 } sg = 0; sr = 0 } }
           END { printf "%.5f %d %.5f %d %d\n", wworst, wat, worst, at, n }' "$1" "$2"
}

pct() { awk -v w="$1" 'BEGIN { printf "%.3f%%", 100 * w }'; }

example_rows() {
  local name="example on the GPU"
  ((RUN_TESTS)) || { row "$name" "not run" "--no-tests"; return; }
  if [[ -z "${BIN[ds-worker]:-}" || -z "${BIN[ds-data]:-}" ]]; then
    row "$name" "not run" "needs ds-worker and ds-data (Bazel or the bundle)"; return
  fi
  if [[ $GPU_NAME == none ]]; then row "$name" "SKIPPED" "no GPU"; SKIPPED=1; return; fi
  local e=$WORK/example rc
  mkdir -p "$e/cpu"
  run_step example_data 60 "${BIN[ds-data]}" addition --digits 3 --train_examples 50000 \
    --val_examples 2000 --seed 1 --output_dir "$e/data" || { rc=$?; fail_row "$name" "logs/example_data.log"; return; }
  example_job "$e/cpu" cpu "{stage: 1}"
  run_step example_cpu 120 "${BIN[ds-worker]}" --config "$e/cpu/job.yaml" --steps "$EXAMPLE_STEPS" --threads 8 ||
    { rc=$?; fail_row "$name: CPU reference" "logs/example_cpu.log"; return; }
  local tag zero
  for tag in stage0 stage1 stage2 stage3 offload; do
    case $tag in
      stage3) zero="{stage: 3, stage3_param_persistence_threshold: 1000}" ;;
      offload) zero="{stage: 1, offload_optimizer: {device: cpu}}" ;;
      *) zero="{stage: ${tag#stage}}" ;;
    esac
    mkdir -p "$e/$tag"
    example_job "$e/$tag" cuda "$zero"
    if ! run_step "example_$tag" 120 "${BIN[ds-worker]}" --config "$e/$tag/job.yaml" --steps "$EXAMPLE_STEPS"; then
      rc=$?; fail_row "example $tag, bf16" "logs/example_$tag.log: $(grep -m1 -i -E 'error|fail' "$RESULTS/logs/example_$tag.log" | cut -c1-90)"
      continue
    fi
    local wworst wat worst at n same ms
    read -r wworst wat worst at n < <(example_compare "$e/cpu/metrics.csv" "$e/$tag/metrics.csv")
    read -r _ _ same _ _ < <(example_compare "$e/stage0/metrics.csv" "$e/$tag/metrics.csv")
    ms=$(tail -n +12 "$e/$tag/metrics.csv" | cut -d, -f10 | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    if [[ -n $n ]] && ((n >= EXAMPLE_STEPS)) && awk -v w="$wworst" -v t="$EXAMPLE_TOL" -v s="$same" \
         'BEGIN { exit !(w <= t && s <= 1e-6) }'; then
      row "example $tag, bf16" "PASS" "CPU curve: 10-step means within $(pct "$wworst") (step $wat), single steps $(pct "$worst") (step $at); stage 0's to $(pct "$same"); ${ms} ms/step"
    else
      row "example $tag, bf16" "FAIL" "$n of $EXAMPLE_STEPS steps; CPU: 10-step means $(pct "$wworst") (step $wat, tolerance $EXAMPLE_TOL), single steps $(pct "$worst"); stage 0: $(pct "$same")"
      FAILED=1
    fi
  done
}

# The whole example at stage 1 on the GPU, then its held-out exact match (after the
# benchmarks: the least needed row when the budget runs short).
example_full_rows() {
  local e=$WORK/example rc
  [[ -f "$e/cpu/job.yaml" && $GPU_NAME != none ]] || return 0
  mkdir -p "$e/full"
  example_job "$e/full" cuda "{stage: 1}"
  if run_step example_full 180 "${BIN[ds-worker]}" --config "$e/full/job.yaml" &&
     run_step example_eval 60 "${BIN[ds-worker]}" --config "$e/full/job.yaml" --eval; then
    row "example, 3000 steps on GPU" "ok" "$(grep -m1 -i 'exact' "$RESULTS/logs/example_eval.log" | sed 's/^.*\] //' | cut -c1-100); final loss $(tail -1 "$e/full/metrics.csv" | cut -d, -f2)"
  else
    rc=$?; fail_row "example, 3000 steps on GPU" "logs/example_full.log, logs/example_eval.log"
  fi
}
