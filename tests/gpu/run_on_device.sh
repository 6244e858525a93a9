#!/usr/bin/env bash
# The real-GPU check of issue 26 item 4, as one prepared script (about 4-5 minutes on an H100).
#
# Here:   bash tests/gpu/build_wheels.sh          # once: tests/gpu/.whl
# Device: run(command="bash tests/gpu/run_on_device.sh", carry=["tests/gpu/.whl"], timeout_s=600)
# Local:  bash tests/gpu/run_on_device.sh --dry-run   # CPU, no NVML, needs PyTorch; no install
#
# Installs the carried wheels offline into a private folder, records nvidia-smi, and runs
# tests/gpu/test_real_gpu.py as a program from outside the checkout (so the installed gpuplan
# is imported, not the source tree). Everything lands in $OUT: gpu-results.json (what
# docs/results/gpu.md reports), nvidia-smi.txt, the jobs' train logs, run.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
DRY=()
[ "${1:-}" = "--dry-run" ] && DRY=(--dry-run)
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u +%FT%TZ) repo $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  if [ ${#DRY[@]} -eq 0 ]; then
    SITE=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" tests/gpu/.whl/*.whl || { echo "wheel install failed"; exit 3; }
    export PYTHONPATH=$SITE
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=uuid,name,memory.total --format=csv >> "$OUT/nvidia-smi.txt" 2>&1
  fi
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  cd /tmp && timeout 470 python3 "$REPO/tests/gpu/test_real_gpu.py" --out "$OUT" "${DRY[@]}"
  echo "rc=$?"
} 2>&1 | tee "$OUT/run.log"
echo "results in $OUT"
