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
grep -v '\r' "$DEST/trainer-speed.log" | tail -n 30
echo "exit code $code"
exit $code
