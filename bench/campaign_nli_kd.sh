#!/usr/bin/env bash
# Issue 30's pre-registered distillation campaign, every piece in order, one process of one thread; each piece
# resumes or is reused when rerun, so the same command continues the campaign in a later session.
#   git worktree add ../campaign <commit> && cd ../campaign
#   RUNS=../runs DATA=../shared/data nohup bash bench/campaign_nli_kd.sh > ../runs/campaign.log 2>&1 &
# Pieces (each logs its start, end and commit to $RUNS/campaign-pieces.tsv):
#   1. the multi-task run of task_defs/nli.yaml (the four GLUE tasks and the MNLI stand-in), seed 42;
#   2. out-of-fold teachers (teachers/nli-oof.yaml); 3. in-sample teachers (teachers/nli.yaml);
#   4. the paired comparison with students/nli-1epoch.yaml, out-of-fold teachers, seeds 1-5;
#   5. the same with the in-sample teachers, seeds 1-3, the gold-only arm of each seed shared with piece 4
#      (alpha 0: the gold-only arm does not read the teachers' soft targets into its loss).
set -euo pipefail
RUNS="$(realpath "${RUNS:-../runs}")"
DATA="$(realpath "${DATA:-../shared/data}")"
PY="${PY:-python}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
COMMIT="$(git rev-parse --short HEAD)"
MT="$RUNS/nli-mnli-rte-mrpc-stsb-cola-seed42"
OOF="$RUNS/teachers-nli-oof"
INS="$RUNS/teachers-nli"
P_OOF="$RUNS/paired-nli-1epoch-oof"
P_INS="$RUNS/paired-nli-1epoch-insample"
mkdir -p "$RUNS"
piece() {  # piece NAME COMMAND...: run it and record where, when and at which commit
  local name="$1"; shift
  local t0; t0=$(date +%s)
  echo "== $(date -u +%FT%TZ) start $name ($COMMIT, $(hostname))"
  "$@"
  local t1; t1=$(date +%s)
  printf '%s\t%s\t%s\t%s\t%ss\n' "$name" "$COMMIT" "$(hostname)" "$(date -u -d @"$t0" +%FT%TZ)" "$((t1 - t0))" \
    >> "$RUNS/campaign-pieces.tsv"
  echo "== $(date -u +%FT%TZ) end $name ($((t1 - t0)) s)"
}
if [ ! -f "$MT/metrics.json" ]; then
  resume=(); [ -f "$MT/checkpoints/last.ckpt" ] && resume=(--resume)
  piece multitask "$PY" -m mtdnn.train task_defs/nli.yaml --tasks mnli,rte,mrpc,stsb,cola --data-dir "$DATA" \
    --output-dir "$MT" --checkpoint-every-n-steps 200 "${resume[@]}"
fi
piece teachers-oof "$PY" -m mtdnn.teachers teachers/nli-oof.yaml --data-dir "$DATA" --from-run "$MT" --teachers-dir "$OOF"
piece teachers-insample "$PY" -m mtdnn.teachers teachers/nli.yaml --data-dir "$DATA" --from-run "$MT" --teachers-dir "$INS"
piece paired-oof "$PY" -m mtdnn.distill students/nli-1epoch.yaml --data-dir "$DATA" --from-run "$MT" \
  --teachers-dir "$OOF" --seeds 5 --baseline gold-only --output-dir "$P_OOF"
for s in 1 2 3; do
  mkdir -p "$P_INS/seed-$s"
  [ -e "$P_INS/seed-$s/gold-only" ] || ln -s "$P_OOF/seed-$s/gold-only" "$P_INS/seed-$s/gold-only"
done
piece paired-insample "$PY" -m mtdnn.distill students/nli-1epoch.yaml --data-dir "$DATA" --from-run "$MT" \
  --teachers-dir "$INS" --seeds 3 --baseline gold-only --output-dir "$P_INS"
echo "== campaign complete"
