"""The light entry points load no solver backend and no heavy library (issues 27 and 28).

``gpuplan scenarios``, ``gpuplan policies`` and ``make_policy('fifo')`` run in a fresh
interpreter that then prints ``sorted(sys.modules)``; none of OR-Tools, scipy.optimize,
networkx, pandas or Dask may be among them. Why a subprocess: this test process has long
imported all of them. The probe itself is checked on an import that does load them, so a probe
that saw nothing could not pass. Timings are in tests/bench/cli_startup.py, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


LISTING_MUST_NOT_LOAD = (
    *HEAVY,
    "numpy",
    "scipy",
    "pydantic",
    "pydantic_core",
    "yaml",
    "rich.progress",
    "gpuplan.scenarios.build",
    "gpuplan.solver_core",
    "gpuplan.executors.simulator",
    "gpuplan.executors.metrics",
    "gpuplan.inspect_cmds",
    "gpuplan.sweep",
    "gpuplan.solve",
)
"""What a cold ``gpuplan scenarios`` (goal 0.3 s) must not import: it reads the static index
(``scenarios/listing.py``) and prints one rich table."""


def test_scenarios_reads_the_index_and_builds_no_model() -> None:
    modules = _modules(CLI.format(argv=["scenarios"]))
    assert "gpuplan.scenarios.listing" in modules and "rich.table" in modules
    loaded = sorted(
        m for m in modules if any(m == h or m.startswith(h + ".") for h in LISTING_MUST_NOT_LOAD)
    )
    assert loaded == []


def test_simulate_loads_no_other_command() -> None:
    """A run imports the simulator and its models, not the modules of status, explain,
    sweep or solve (registered by name only, gpuplan.cli.LAZY_COMMANDS)."""
    modules = _modules(
        CLI.format(argv=["simulate", "--scenario", "h200-colocation", "--policy", "fifo"])
    )
    assert "gpuplan.executors.simulator" in {m.rsplit(".", 1)[0] for m in modules} | modules
    assert not {"gpuplan.inspect_cmds", "gpuplan.sweep", "gpuplan.solve"} & modules
    assert _heavy(modules) == []


def test_a_lazy_command_still_parses_and_runs() -> None:
    """``solve --list`` registers its own parser; ``--help`` lists every command."""
    modules = _modules(CLI.format(argv=["solve", "--list"]))
    assert "gpuplan.solve" in modules and "gpuplan.sweep" not in modules
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    for name in ("simulate", "scenarios", "sweep", "status", "explain", "solve"):
        assert name in proc.stdout


def test_make_policy_fifo_imports_no_solver_backend() -> None:
    modules = _modules("from gpuplan.solver_core.registry import make_policy\nmake_policy('fifo')")
    assert "gpuplan.solver_core.registry" in modules
    assert _heavy(modules) == []


def test_the_probe_sees_a_solver_backend_when_one_is_loaded() -> None:
    """Aryl's reclaim solvers do load CP-SAT and scipy.optimize: the probe must say so."""
    found = _heavy(_modules("import gpuplan.solver_core.policies.aryl.reclaim"))
    assert "ortools" in found and "scipy.optimize" in found


@pytest.mark.parametrize("policy", ["fifo", "srtf"])
def test_simulate_imports_no_numpy(policy: str) -> None:
    """A run's summary takes its means and percentiles from ``executors.pystats`` (numpy's
    numbers, tested bit for bit) and ``models.goodput`` imports numpy only in ``optimize``:
    a plain ``simulate`` loads no numpy (~0.1 s of the 0.5 s cold-start goal, issue 28)."""
    modules = _modules(
        CLI.format(argv=["simulate", "--scenario", "h200-colocation", "--policy", policy])
    )
    assert "gpuplan.executors.metrics" in modules and "gpuplan.models.goodput" in modules
    assert sorted(m for m in modules if m == "numpy" or m.startswith("numpy.")) == []


def test_interference_module_loads_only_for_a_scenario_with_the_block() -> None:
    """``api.simulator_interference`` imports ``scenarios.sim_interference`` (OJPP matrices,
    measured tables) only when the scenario has an interference block."""
    plain = _modules(CLI.format(argv=["simulate", "--scenario", "sidecar-wl1", "--policy", "fifo"]))
    assert "gpuplan.api" in plain and "gpuplan.scenarios.sim_interference" not in plain
    colocated = _modules(
        CLI.format(argv=["simulate", "--scenario", "h200-colocation", "--policy", "fifo"])
    )
    assert "gpuplan.scenarios.sim_interference" in colocated


def test_the_probe_sees_numpy_when_goodput_optimizes() -> None:
    """The Pollux goodput search does import numpy, on its first call: the probe says so."""
    modules = _modules(
        "from gpuplan.models.goodput import GoodputModel\n"
        "m = GoodputModel(perf=(0.1, 0.01, 0.2, 0.02, 0.1, 0.01, 1.5), init_batch=64,\n"
        "    max_batch=1024, min_local=8, max_local=256, batches=(64,), grad_sqr=((1.0,),),\n"
        "    grad_var=((2.0,),), epoch_ends=(1000.0,))\n"
        "assert 'numpy' not in sys.modules\n"
        "good, atomic, accum = m.optimize(0, [1, 2, 4], 1.0, 2.0)\n"
        "assert len(good) == 3 and float(good.max()) > 0\n"
    )
    assert "numpy" in modules


def _fake_pydantic_plugin(root: Path) -> Path:
    """A distribution on ``PYTHONPATH`` that registers a pydantic plugin whose import writes
    a marker file: pydantic's entry-point scan finds it, if it runs."""
    marker = root / "plugin-loaded"
    (root / "gpuplan_probe_plugin.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\n"
        "class Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Plugin()\n"
    )
    info = root / "gpuplan_probe_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuplan-probe-plugin\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = gpuplan_probe_plugin:plugin\n")
    return marker


def test_cli_leaves_the_users_pydantic_plugins_alone(tmp_path: Path) -> None:
    """The CLI does not switch pydantic's plugins off (``PYDANTIC_DISABLE_PLUGINS``) to save
    the ~9 ms entry-point scan: the setting would reach every process it starts, the jobs
    ``gpuplan submit`` hands to the single server included. A probe plugin is loaded."""
    marker = _fake_pydantic_plugin(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["PYTHONPATH"] = str(tmp_path)
    argv = ["simulate", "--scenario", "h200-colocation", "--policy", "fifo"]
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.exists()
