#!/usr/bin/env bash
# Build what tests/gpu/run_on_device.sh installs offline on the GPU machine, into tests/gpu/.whl
# (ignored by tests/gpu/.gitignore; carried with the run: carry=["tests/gpu/.whl"]).
#
#   bash tests/gpu/build_wheels.sh [PYTHON]      # PYTHON: a Python with pip (default .venv/bin/python)
#
# The device image (/work/.library/device/KINDS.md) has Python 3.12, PyTorch, numpy, networkx,
# PyYAML, rich, pytest and nvidia-ml-py, but not pydantic: the check imports only gpuplan's
# models, executors/nvml and the sidecar, so gpuplan's own wheel plus pydantic's are enough
# (OR-Tools and PuLP, 40+ MiB, stay behind: nothing the check runs imports them).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${1:-.venv/bin/python}
WHL=tests/gpu/.whl
rm -rf "$WHL"
mkdir -p "$WHL"
"$PY" -m pip wheel -q --no-deps -w "$WHL" .
PLATFORMS=()
for n in 2_28 2_27 2_24 2_17; do PLATFORMS+=(--platform "manylinux_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$WHL" \
    "pydantic==2.*" "pydantic-core" "annotated-types" "typing-inspection" "typing-extensions"
ls -la "$WHL"
du -sh "$WHL"
