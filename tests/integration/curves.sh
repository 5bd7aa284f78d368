# Sourced by the parallel launch tests: compare two monitor.csv curves (step, loss, lr, norm, ...).
#
# same CSV_A CSV_B REL [NORM_REL]: the loss (column 2) within REL and the gradient norm (column 4)
# within NORM_REL (5e-5) agree at all 20 steps (plus the CSV's last printed digit). The norm is the more sensitive
# figure: a parallel layout sums in another order than the single rank, and 20 clipped AdamW
# steps carry that last-bit difference into the weights (up to 2e-5 by step 20 with the AVX2
# kernels, 3e-6 at step 10); gradients at the same weights are held to 1e-5 in-process
# (runtime/worker:tp_graph_test, trainer_pipe_test).
same() {
  paste -d, <(cut -d, -f2,4 "$1" | tail -n +2) <(cut -d, -f2,4 "$2" | tail -n +2) |
    awk -F, -v rel="$3" -v norm_rel="${4:-5e-5}" 'NF == 4 && $1 != "" {
        n++
        for (k = 1; k <= 2; k++) { a = $k; b = $(k + 2); d = a - b; if (d < 0) d = -d
          r = k == 1 ? rel : norm_rel
          if (d > r * (a < 0 ? -a : a) + 1e-6) bad++ } }
      END { exit !(n == 20 && bad == 0) }'
}

# same_tail CSV_A CSV_B: a resumed run's steps 11-20 (joined by step) with the loss within 1e-5.
same_tail() {
  join -t, <(tail -n +2 "$1" | cut -d, -f1,2 | sort -t, -k1,1) \
    <(tail -n +2 "$2" | cut -d, -f1,2 | sort -t, -k1,1) |
    awk -F, '$1 > 10 { n++; d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2) + 1e-6) bad++ }
      END { exit !(n == 10 && bad == 0) }'
}

# same_steps CSV_A CSV_B FIRST LAST: steps FIRST..LAST (joined by step) with the loss (column
# 2) and the validation loss (column 11, where either run evaluated) within 1e-5 relative; a
# step that evaluated in one run and not the other differs.
same_steps() {
  join -t, <(tail -n +2 "$1" | cut -d, -f1,2,11 | sort -t, -k1,1) \
    <(tail -n +2 "$2" | cut -d, -f1,2,11 | sort -t, -k1,1) |
    awk -F, -v lo="$3" -v hi="$4" '$1 >= lo && $1 <= hi { n++
        for (k = 2; k <= 3; k++) { a = $k; b = $(k + 2); if (a == "" && b == "") continue
          if (a == "" || b == "") { bad++; continue }
          d = a - b; if (d < 0) d = -d; if (d > 1e-5 * (a < 0 ? -a : a) + 1e-6) bad++ } }
      END { exit !(n == hi - lo + 1 && bad == 0) }'
}
