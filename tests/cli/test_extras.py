"""Optional extras (issue 27 item 6): a core install runs every core command, and a command or
module whose extra is missing says which one to install, in one line (exit 2 in the CLI).

A core install is imitated without building a venv: each command runs in a fresh interpreter
whose ``sitecustomize`` (first on ``PYTHONPATH``) puts a finder at the head of
``sys.meta_path`` that refuses the optional packages as if they were not installed, and that
interpreter's child processes inherit it. ``test_blocker_blocks`` proves the finder is active,
so the other tests cannot pass by importing what they should not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpuplan.models import ClusterState, JobSnapshot, JobSpec
from gpuplan.models.cluster import Cluster
from gpuplan.models.extras import EXTRAS, MissingExtra

ROOT = Path(__file__).resolve().parents[2]

OPTIONAL = (
    "asyncssh",
    "dask",
    "distributed",
    "dask_jobqueue",
    "sklearn",
    "matplotlib",
    "prometheus_client",
)
"""The import names of every optional package (and dask itself, the sweep extra's base)."""

SITECUSTOMIZE = '''\
"""Test support (tests/cli/test_extras.py): optional packages look uninstalled."""
import os
import sys

_BLOCKED = frozenset(filter(None, os.environ.get("GPUPLAN_TEST_BLOCK", "").split(",")))


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)",
                                      name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def blocked_env(tmp_path: Path):
    """``env(*names)``: an environment in which ``names`` (default: every optional package)
    cannot be imported."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)

    def env(*names: str) -> dict[str, str]:
        out = {k: v for k, v in os.environ.items() if k != "GPUPLAN_DEBUG"}
        out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        out["GPUPLAN_TEST_BLOCK"] = ",".join(names or OPTIONAL)
        return out

    return env


def _gpuplan(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _line(extra: str, what: str) -> str:
    return f"error: {what}: needs the '{extra}' extra: pip install 'gpuplan[{extra}]'"


def test_blocker_blocks(blocked_env, tmp_path: Path) -> None:
    probe = "import importlib, sys; importlib.import_module(sys.argv[1])"
    for name in OPTIONAL:
        done = subprocess.run(
            [sys.executable, "-c", probe, name],
            env=blocked_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1 and "blocked by the test" in done.stderr, name
    # the core stays importable under the blocker
    subprocess.run(
        [sys.executable, "-c", probe, "numpy"],
        env=blocked_env(),
        cwd=tmp_path,
        check=True,
        timeout=300,
    )


def test_pyproject_extras_match_the_module_map() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) - {"all", "test"} == set(EXTRAS)
    all_names = re.fullmatch(r"gpuplan\[(.*)\]", extras["all"][0])
    assert len(extras["all"]) == 1 and all_names is not None
    assert set(all_names.group(1).split(",")) == set(EXTRAS)
    import_name = {
        "asyncssh": "asyncssh",
        "dask": "distributed",
        "dask-jobqueue": "dask_jobqueue",
        "scikit-learn": "sklearn",
        "matplotlib": "matplotlib",
        "prometheus-client": "prometheus_client",
        "nvidia-ml-py": "pynvml",
    }
    for extra, requirements in extras.items():
        if extra in ("all", "test"):
            continue
        dists = [re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0] for r in requirements]
        assert sorted(import_name[d] for d in dists) == sorted(EXTRAS[extra]), extra
    core = {re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0] for r in project["dependencies"]}
    assert core == {"ortools", "pulp", "networkx", "numpy", "scipy", "pydantic", "pyyaml", "rich"}


def test_missing_extra_is_one_import_error() -> None:
    err = MissingExtra("gpuplan sweep", "sweep", "distributed")
    assert isinstance(err, ImportError) and err.name == "distributed"
    assert str(err) == "gpuplan sweep: needs the 'sweep' extra: pip install 'gpuplan[sweep]'"


def _state_file(tmp_path: Path) -> Path:
    state = ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(spec=JobSpec(id="a", submit_time=0, requested_gpus=4, duration=3600)),
            JobSnapshot(spec=JobSpec(id="b", submit_time=0, requested_gpus=2, duration=600)),
        ],
    )
    path = tmp_path / "state.json"
    path.write_text(state.model_dump_json())
    return path


def test_core_commands_run_without_any_extra(blocked_env, tmp_path: Path) -> None:
    env = blocked_env()
    runs = {
        "scenarios": ["scenarios"],
        "policies": ["policies"],
        "policy": ["policies", "tiresias-l"],
        "simulate": ["simulate", "--scenario", "philly-default", "--policy", "srtf", "--json"],
        "compare": ["compare", "--scenario", "philly-default", "--policies", "fifo,srsf"],
        "plan": ["plan", "--state", str(_state_file(tmp_path)), "--policy", "srtf"],
        "solve": [
            "solve",
            "mckp",
            "--generate",
            "--size",
            "4",
            "--solvers",
            "cp-sat,pulp-cbc,greedy",
            "--json",
        ],
        "solve-list": ["solve", "--list"],
        "controller": ["slurm-controller", "--help"],
    }
    out = {}
    for name, argv in runs.items():
        done = _gpuplan(env, tmp_path, *argv)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr[-2000:])
        out[name] = done.stdout
    assert "philly-default" in out["scenarios"] and "tiresias-l" in out["policies"]
    assert json.loads(out["simulate"])["policy"] == "srtf"
    assert "fifo" in out["compare"] and "srsf" in out["compare"]
    plan = json.loads(out["plan"])
    assert set(plan["allocations"]) == {"a", "b"}
    solved = {r["solver"]: r["status"] for r in json.loads(out["solve"])}
    assert solved["cp-sat"] == "optimal" and solved["pulp-cbc"] == "optimal"


SWEEP = "scenarios: [philly-default]\npolicies: [fifo]\nseeds: [0]\n"


@pytest.mark.parametrize(
    ("blocked", "argv", "extra", "what"),
    [
        (
            ("matplotlib",),
            ["simulate", "--scenario", "philly-default", "--policy", "fifo", "--out", "{out}"],
            "plots",
            "gpuplan simulate --out",
        ),
        (
            ("matplotlib",),
            [
                "compare",
                "--scenario",
                "philly-default",
                "--policies",
                "fifo,srtf",
                "--out",
                "{out}",
            ],
            "plots",
            "gpuplan compare --out",
        ),
        (
            ("matplotlib",),
            ["solve", "mckp", "--generate", "--size", "4", "--out", "{out}"],
            "plots",
            "gpuplan solve --out",
        ),
        (
            ("distributed",),
            ["sweep", "{sweep}", "--out", "{out}", "--workers", "2"],
            "sweep",
            "gpuplan sweep",
        ),
        (
            ("dask_jobqueue",),
            ["sweep", "{sweep}", "--out", "{out}", "--slurm", "gpuplan"],
            "sweep",
            "gpuplan sweep",
        ),
        (
            ("matplotlib",),
            ["sweep", "{sweep}", "--out", "{out}", "--workers", "1"],
            "sweep",
            "gpuplan sweep",
        ),
        (
            ("prometheus_client",),
            ["slurm-controller", "--policy", "fifo", "--http", "0", "--state-db", "{out}/ctl.db"],
            "slurm",
            "gpuplan slurm-controller --http",
        ),
        (("sklearn",), ["interference-eval"], "ml", "gpuplan interference-eval"),
        (("sklearn",), ["reproduce", "ojpp-aip"], "ml", "gpuplan reproduce ojpp-aip"),
    ],
    ids=[
        "simulate",
        "compare",
        "solve",
        "sweep-dask",
        "sweep-slurm",
        "sweep-report",
        "controller-http",
        "interference-eval",
        "reproduce-aip",
    ],
)
def test_command_names_its_missing_extra(
    blocked_env, tmp_path: Path, blocked: tuple[str, ...], argv: list[str], extra: str, what: str
) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    out = tmp_path / "out"
    argv = [a.format(out=out, sweep=sweep) for a in argv]
    done = _gpuplan(blocked_env(*blocked), tmp_path, *argv)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", _line(extra, what) + "\n")
    assert not out.exists()  # refused before any work: not even the folder was made


PROBE = """
import importlib, json, pkgutil
from gpuplan.models.extras import MissingExtra
failed, count = {}, 0
for pkg in ("gpuplan", "gpuplan.models", "gpuplan.solver_core", "gpuplan.executors",
            "gpuplan.scenarios"):
    for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        count += 1
        try:
            importlib.import_module(info.name)
        except MissingExtra as err:
            failed[info.name] = str(err)
print(json.dumps({"count": count, "failed": failed}))
"""


def test_every_module_imports_or_names_its_extra(blocked_env, tmp_path: Path) -> None:
    """Every module of the package imports in a core install, or fails with MissingExtra
    (any other ImportError fails the probe): an optional import added at the top of a core
    module shows up here."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=blocked_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["count"] > 100  # the walk found the package
    failed = seen["failed"]
    assert failed["gpuplan.plots"] == _line("plots", "gpuplan.plots")[len("error: ") :]
    # the SSH executor (asyncssh) and OJPP's predictor (scikit-learn) name theirs, wherever
    # the layout puts them
    named = {
        m.group(1)
        for text in failed.values()
        for m in [re.search(r"pip install 'gpuplan\[(\w+)\]'$", text)]
    }
    assert named == {"plots", "ssh", "ml", "slurm"}  # slurm: the controller's --http
    assert any(".ssh." in name for name in failed)
    # the CLI and everything a core command runs import without any extra
    for core in (
        "gpuplan.cli",
        "gpuplan.api",
        "gpuplan.sweep",
        "gpuplan.solve",
        "gpuplan.solver_core.registry",
        "gpuplan.executors.control.controller",
    ):
        assert core not in failed
