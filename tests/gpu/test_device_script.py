"""The device scripts of issue 26 item 4 are valid shell, everywhere (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("script", ["run_on_device.sh", "build_wheels.sh"])
def test_device_script_is_valid_bash(script: str) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run([bash, "-n", str(HERE / script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = (HERE / script).read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -" in text
