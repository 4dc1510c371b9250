#!/usr/bin/env bash
# The GPU mode of bench/throughput.py on the device machine (H200): BERT-base geometry, bf16, batch 256 on the
# real length distribution of RTE, MRPC, STS-B and CoLA; model FLOP/s on real tokens against a measured bf16
# matmul. Needs only python3 with torch and transformers there (no datasets, no data, no mtdnn install).
#
# Prepare here, on the CPU, once (about 4 MB; the GPU machine has neither the data nor `datasets`):
#     .venv/bin/python bench/throughput.py --export-tokens .bench-carry/glue4-tokens.json --data-dir ../shared/data
# Run there, from the repository root (name .bench-carry in the tool's carry if git ignores it):
#     bash bench/gpu_check.sh [.bench-carry]
# Runs the compiled step (one graph, sequence length dynamic; eager if compiling fails), then the same with CUDA
# graphs (compile mode reduce-overhead, one graph recorded per padded length), within BUDGET_S seconds (default
# 480) in all. Writes env.txt and
# gpu-<variant>.json / .log under $OUT (else bench-gpu-out/) and prints a summary last.
set -uo pipefail

CARRY=${1:-.bench-carry}
PY=${PYTHON:-python3}
DEST=${OUT:-bench-gpu-out}
BUDGET=${BUDGET_S:-480}
TOKENS="$CARRY/glue4-tokens.json"
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }

if [[ ! -f $TOKENS ]]; then
    echo "no $TOKENS: make it on the CPU machine with bench/throughput.py --export-tokens (see the top of $0)" >&2
    exit 2
fi

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0)); print("transformers", transformers.__version__)'
} 2>&1 | tee "$DEST/env.txt"

variant() {  # NAME LIMIT_S FLAGS...: one run of the GPU mode, cut to the time left
    local name=$1 limit=$2
    shift 2
    (($(left) < limit)) && limit=$(left)
    if ((limit < 60)); then
        echo "skip $name: only $(left) s of the budget left"
        return 1
    fi
    echo "== $name (limit ${limit} s): $*"
    timeout "$limit" "$PY" bench/throughput.py --device cuda --tokens-file "$TOKENS" --json "$DEST/gpu-$name.json" \
        "$@" 2>&1 | tee "$DEST/gpu-$name.log"
}

variant compiled 300 --compile-mode default || variant eager 150 --compile-mode none
variant cudagraphs 240 --compile-mode reduce-overhead

echo "== summary ($(($(date +%s) - start)) s)"
for f in "$DEST"/gpu-*.json; do
    [[ -f $f ]] || continue
    "$PY" - "$f" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[1]}: compile {r['compile_mode']}, {r['tokens_per_s']:,.0f} real tokens/s, "
      f"padding {r['padding_share']:.0%}, {r['model_tflops_per_s']:.1f} model TFLOP/s, "
      f"matmul {r['matmul_tflops_per_s']:.1f} TFLOP/s, ratio {r['ratio_to_matmul']:.1%} "
      f"(target {r['target']:.0%}: {'met' if r['target_met'] else 'NOT met'}), warm-up {r['warmup_seconds']:.0f} s")
EOF
done
ls "$DEST"/gpu-*.json >/dev/null 2>&1 || { echo "no GPU result: see $DEST/gpu-*.log"; exit 1; }
