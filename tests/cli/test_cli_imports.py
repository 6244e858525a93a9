"""The light entry points load no solver backend and no heavy library (issues 27 and 28).

``gpuplan scenarios``, ``gpuplan policies`` and ``make_policy('fifo')`` run in a fresh
interpreter that then prints ``sorted(sys.modules)``; none of OR-Tools, scipy.optimize,
networkx, pandas or Dask may be among them. Why a subprocess: this test process has long
imported all of them. The probe itself is checked on an import that does load them, so a probe
that saw nothing could not pass. Timings are in tests/bench/cli_startup.py, not here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("ortools", "scipy.optimize", "networkx", "pandas", "dask", "distributed")

PROBE = """\
import contextlib, io, json, sys
{code}
print("MODULES=" + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
CLI = """\
from gpuplan.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main({argv!r}) == 0
"""


def _modules(code: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES="))
    return set(json.loads(line.removeprefix("MODULES=")))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("argv", [["scenarios"], ["policies"], ["policies", "fifo"]])
def test_light_commands_import_no_solver_backend(argv: list[str]) -> None:
    modules = _modules(CLI.format(argv=argv))
    assert "gpuplan.cli" in modules
    assert _heavy(modules) == []
    assert not any(m.startswith("gpuplan.solver_core.policies.aryl") for m in modules)


def test_make_policy_fifo_imports_no_solver_backend() -> None:
    modules = _modules("from gpuplan.solver_core.registry import make_policy\nmake_policy('fifo')")
    assert "gpuplan.solver_core.registry" in modules
    assert _heavy(modules) == []


def test_the_probe_sees_a_solver_backend_when_one_is_loaded() -> None:
    """Aryl's reclaim solvers do load CP-SAT and scipy.optimize: the probe must say so."""
    found = _heavy(_modules("import gpuplan.solver_core.policies.aryl.reclaim"))
    assert "ortools" in found and "scipy.optimize" in found
