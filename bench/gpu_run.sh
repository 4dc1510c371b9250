#!/usr/bin/env bash
# The GPU benchmark (bench/trainer_speed.py) in one call on a GPU machine without network (an H200 image with
# python3 3.12, torch >= 2.11, transformers and Lightning; see ../shared/gpu/README.md).
#
# Here, once, from the repository root (fills .gpu-carry/, about 56 MB, ignored by git):
#     bash ../shared/gpu/prepare-carry.sh
# Then one device call from the repository root, carrying .gpu-carry (the tool's carry: [".gpu-carry"]):
#     bash bench/gpu_run.sh                 # timeout_s 590: the benchmark stops itself after BENCH_TIMEOUT_S
#     bash bench/gpu_run.sh --cuda-graphs --length-buckets 32,64,96,128 --cases bert-base-32   # a variant
# First bench/gpu_sync_check.py (5 training steps under torch.cuda.set_sync_debug_mode("error"), at most 120 s),
# then bench/trainer_speed.py (extra arguments go to it). Writes env.txt, sync-check.log, trainer-speed.json and
# trainer-speed.log (its last 2 MB) under $OUT (else bench-gpu-out/) and prints the table last.
#
# Last, the token-level reference comparisons (bench/token_references.py: CoNLL-2003, WNUT-17, SQuAD carve; the
# toolkit beside a Hugging Face Trainer), each under its own timeout so that one failing or running long does not
# stop the others, within the call's budget (TOTAL_BUDGET_S, 580 s from the start of this script): after the
# speed benchmark (about 540 s) they are skipped, so run them in a call of their own:
#     SPEED=0 bash bench/gpu_run.sh         # only the token references; TOKEN_REFS="squad" for one of them
# They need the data in the carry and the Trainer's accelerate (not in prepare-carry.sh; about 9 MB more, so the
# carry is near the 64 MiB limit; untried):
#     EXTRA_WHEELS="accelerate psutil" bash ../shared/gpu/prepare-carry.sh
#     cp -r ../shared/data/{conll2003,wnut17,squad} .gpu-carry/data/
# Each writes token-refs-<task>.log and token-refs-<task>.json under $OUT.
set -uo pipefail

DEST=${OUT:-bench-gpu-out}
CARRY=${CARRY:-.gpu-carry}
mkdir -p "$DEST"
if [[ ! -d $CARRY/wheels || ! -d $CARRY/data || ! -d $CARRY/minilm ]]; then
    echo "no $CARRY/{wheels,data,minilm}: run bash ../shared/gpu/prepare-carry.sh here first (see the top of $0)" >&2
    exit 2
fi
PP=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$PP" "$CARRY"/wheels/*.whl || exit 2
export PYTHONPATH=$PP:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 \
    TOKENIZERS_PARALLELISM=false MTDNN_CACHE_DIR=$(mktemp -d)
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 -c 'import sys, torch, transformers, pytorch_lightning as pl; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "lightning", pl.__version__)'
} 2>&1 | tee "$DEST/env.txt"

code=0
if [[ ${SPEED:-1} != 0 ]]; then
    # No synchronising CUDA call inside training_step (sync debug mode "error"), then the benchmark.
    timeout 120 python3 bench/gpu_sync_check.py --data-dir "$CARRY/data" --tokenizer "$CARRY/minilm" \
        > "$DEST/sync-check.log" 2>&1
    echo "sync check: exit $? ($(grep -E '^(OK|FAILED)' "$DEST/sync-check.log" | tail -n 1))" | tee -a "$DEST/env.txt"

    timeout "${BENCH_TIMEOUT_S:-420}" python3 bench/trainer_speed.py --device cuda --data-dir "$CARRY/data" \
        --tokenizer "$CARRY/minilm" --minilm "$CARRY/minilm" --budget-s "${BENCH_BUDGET_S:-330}" \
        --json "$DEST/trainer-speed.json" "$@" > "$DEST/trainer-speed.full.log" 2>&1
    code=$?
    tail -c 2000000 "$DEST/trainer-speed.full.log" > "$DEST/trainer-speed.log"
    rm -f "$DEST/trainer-speed.full.log"
    grep -v $'\r' "$DEST/trainer-speed.log" | tail -n 30
    echo "exit code $code"
fi

# The token-level references, last, each guarded (see the top): one task per run, its own timeout.
for task in ${TOKEN_REFS-conll2003 wnut17 squad}; do
    left=$(( ${TOTAL_BUDGET_S:-580} - SECONDS ))
    if [[ ! -d $CARRY/data/$task ]]; then
        echo "token references $task: skipped (no $CARRY/data/$task; see the top of $0)"
        continue
    fi
    if (( left < 90 )); then
        echo "token references $task: skipped ($left s of the call's budget left; run SPEED=0 bash $0)"
        continue
    fi
    timeout "$left" python3 bench/token_references.py --task "$task" --data-dir "$CARRY/data" \
        --encoder "$CARRY/minilm" --accelerator "${TOKEN_ACCELERATOR:-gpu}" --output-dir "$DEST/token-refs/$task" \
        --json "$DEST/token-refs-$task.json" > "$DEST/token-refs-$task.full.log" 2>&1
    status=$?
    tail -c 1000000 "$DEST/token-refs-$task.full.log" > "$DEST/token-refs-$task.log"
    rm -f "$DEST/token-refs-$task.full.log"
    rm -rf "$DEST/token-refs"  # run directories (checkpoints, exports): too big to bring back
    grep -v $'\r' "$DEST/token-refs-$task.log" | grep -E '^\||^F1 difference|^error' | tail -n 6
    echo "token references $task: exit $status"
    (( code == 0 )) && code=$status
done
exit $code
