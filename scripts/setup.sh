#!/usr/bin/env bash
# Set up a virtual environment with torch first (pinned, so that pip never resolves a bare `torch` to a
# multi-GB build), then the package with its dev extra.
# TORCH_SPEC overrides the torch requirement (e.g. TORCH_SPEC="torch==2.11.0" on a GPU machine);
# TORCH_INDEX_URL picks the wheel index for torch (e.g. https://download.pytorch.org/whl/cpu for a CPU-only build
# where the default index serves CUDA builds; unset: pip's configured index);
# VENV chooses the environment directory (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC"
"$VENV/bin/python" -m pip install -q -e ".[dev]"
echo "ready: $VENV (torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
