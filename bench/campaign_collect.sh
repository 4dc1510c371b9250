#!/usr/bin/env bash
# Copy each finished member of issue 30's campaign (metrics.json, config.yaml, its record member-k.json) from the
# run directory into bench/results/campaign-nli-kd/, so that no finished number is lost between sessions.
# Usage: RUNS=/work/runs bash bench/campaign_collect.sh   (prints what it copied; commit the result)
set -euo pipefail
RUNS=${RUNS:-../runs}
OUT=$(dirname "$0")/results/campaign-nli-kd
for build in teachers-nli-oof teachers-nli-insample; do
  [ -d "$RUNS/$build" ] || continue
  for task_dir in "$RUNS/$build"/*/; do
    task=$(basename "$task_dir")
    for member in "$task_dir"member-*/; do
      [ -f "$member/metrics.json" ] || continue
      k=$(basename "$member")
      dest="$OUT/$build/$task/$k"
      [ -f "$dest/metrics.json" ] && continue
      mkdir -p "$dest"
      cp "$member/metrics.json" "$member/config.yaml" "$dest/"
      [ -f "$task_dir/$k.json" ] && cp "$task_dir/$k.json" "$OUT/$build/$task/$k.record.json"
      echo "$build/$task/$k"
    done
  done
  cp "$RUNS/$build/teachers.yaml" "$OUT/$build/" 2>/dev/null || true
done
[ -f "$RUNS/campaign-pieces.tsv" ] && cp "$RUNS/campaign-pieces.tsv" "$OUT/pieces.tsv"
