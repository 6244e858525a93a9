"""The layout (issue 27 item 5): the labs are test support, not runtime code.

The Slurm and SSH labs start daemons and may run apt-get; an installed gpuplan never needs
them. So no module of the runtime folders imports ``tests`` (where the labs live now), and
the wheel that ``pip wheel`` builds holds no lab module and no test module. The wheel is also
checked for what it must hold (a paper's entry module, the bundled history CSV, the Slurm
hook), so a listing that came back empty could not pass.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.labs import CHECKOUT

RUNTIME = ("gpuplan", "executors", "models", "scenarios", "solver_core")
"""The folders ``pyproject.toml`` maps into the ``gpuplan`` package."""


def _imports(path: Path) -> list[str]:
    """The absolute module names ``path`` imports (relative imports are inside the package)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return names


def test_runtime_code_imports_no_test_support() -> None:
    offenders = []
    scanned = 0
    for folder in RUNTIME:
        for path in (CHECKOUT / folder).rglob("*.py"):
            scanned += 1
            offenders += [
                f"{path.relative_to(CHECKOUT)} imports {name}"
                for name in _imports(path)
                if name == "tests" or name.startswith("tests.")
            ]
            stem = path.stem
            if stem == "labroot" or stem == "lab" or stem.startswith("lab_"):
                offenders.append(f"{path.relative_to(CHECKOUT)} is a lab module in the package")
    assert scanned > 200
    assert offenders == []


def test_the_probe_sees_a_test_import() -> None:
    """The import scan finds the kind of line it forbids (it reads this very file)."""
    assert "tests.labs" in _imports(Path(__file__))


def _copy_checkout(dest: Path) -> Path:
    """The checkout's tracked tree without build outputs, so the build writes nothing here."""
    skip = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
    )
    return Path(shutil.copytree(CHECKOUT, dest, ignore=skip, symlinks=True))


@pytest.mark.slow
def test_the_wheel_holds_no_lab_and_no_test_module(tmp_path: Path) -> None:
    source = _copy_checkout(tmp_path / "src")
    out = tmp_path / "wheel"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = out.glob("gpuplan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    stems = {Path(n).stem for n in modules}
    assert {"labroot", "lab"}.isdisjoint(stems)
    assert [n for n in modules if Path(n).stem.startswith("lab_")] == []
    assert [n for n in names if n.startswith("tests/") or "/tests/" in n] == []
    packaged = {str(Path(n).parent) for n in modules}
    in_checkout = {  # the folder gpuplan/X/... is installed as gpuplan/X/..., models/... too
        str(
            Path(
                "gpuplan",
                *(() if folder == "gpuplan" else (folder,)),
                *init.parent.relative_to(CHECKOUT / folder).parts,
            )
        )
        for folder in RUNTIME
        for init in (CHECKOUT / folder).rglob("__init__.py")
    }
    assert sorted(in_checkout - packaged) == []  # a package pyproject.toml forgot to list
    for required in (
        "gpuplan/solver_core/policies/baselines/fifo.py",
        "gpuplan/solver_core/policies/aryl/aryl.py",
        "gpuplan/solver_core/helpers/ladders.py",
        "gpuplan/solver_core/policies/baselines/tiresias_yarn_gput1000.csv",
        "gpuplan/executors/slurm/job_submit.lua",
        "gpuplan/executors/ssh/agent/__init__.py",
        "gpuplan/executors/ssh/agent/files.py",
        "gpuplan/executors/ssh/agent/sidecar.py",
        "gpuplan/executors/ssh/agent/commands.py",
        "gpuplan/executors/ssh/agent/nvml_reader.py",
        "gpuplan/executors/ssh/agent/program.py",
        "gpuplan/executors/ssh/agent/__main__.py",
        "gpuplan/executors/ssh/agent_bundle.py",
    ):
        assert required in names, required
