"""The agent package and the one script built from it for the nodes (no lab needed).

The nodes run the bundle (:func:`gpuplan.executors.ssh.agent_bundle.agent_source`) with their
own ``python3`` and nothing of gpuplan installed; the engine host imports the package. These
tests hold the two to the same program: the bundle is valid, stdlib-only, deterministic and
defines everything the package exports, and as a program it answers requests exactly as the
imported package does. The bundler's refusals are checked on small made-up packages.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuplan.executors.ssh import agent
from gpuplan.executors.ssh.agent_bundle import BundleError, agent_source
from gpuplan.executors.ssh.remote import SIDECAR_DIGEST, SIDECAR_SOURCE

POLL_BOUND_S = 120.0
"""Generous bound for a state to be reached on a busy machine (not a timing assertion)."""
OPTIONAL = {"pynvml"}
"""Imported only if the node has it, inside ``try: ... except ImportError``."""
EXECUTOR_REQUESTS = ("status", "launch", "control", "read", "kill", "ping", "inventory")
"""The agent requests the executor sends (``SidecarNodes.call``) and the local tooling uses."""


@pytest.fixture(scope="module")
def bundle_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bundle") / "sidecar.py"
    path.write_text(SIDECAR_SOURCE, encoding="utf-8")
    return path


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("shipped_sidecar", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _guarded_by_import_error(tree: ast.Module, node: ast.AST) -> bool:
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Try) and any(node is n for b in parent.body for n in ast.walk(b)):
            caught = [h.type for h in parent.handlers]
            return any(isinstance(t, ast.Name) and t.id == "ImportError" for t in caught)
    return False


def test_bundle_is_the_shipped_text_and_deterministic() -> None:
    first, second = agent_source(), agent_source()
    assert first == second == SIDECAR_SOURCE
    assert hashlib.sha256(first.encode()).hexdigest()[:12] == SIDECAR_DIGEST
    assert first.count('if __name__ == "__main__":') == 1
    assert first.rstrip().endswith('if __name__ == "__main__":\n    sys.exit(main())')
    compile(first, "<bundle>", "exec")
    ast.parse(first, feature_version=(3, 9))  # the nodes' oldest Python (docs/ssh.md, "Nodes")


def test_bundle_imports_only_the_standard_library() -> None:
    tree = ast.parse(SIDECAR_SOURCE)
    seen: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"line {node.lineno}: a relative import is left"
            roots = [(node.module or "").partition(".")[0]]
        elif isinstance(node, ast.Import):
            roots = [alias.name.partition(".")[0] for alias in node.names]
        else:
            continue
        for root in roots:
            seen.add(root)
            if root in OPTIONAL:
                assert _guarded_by_import_error(tree, node), f"line {node.lineno}: {root}"
            else:
                assert root == "__future__" or root in sys.stdlib_module_names, root
    assert "gpuplan" not in seen
    assert {"json", "subprocess", "signal", "pynvml"} <= seen  # the walk did see the imports


def test_bundle_defines_every_name_the_package_exports(bundle_file: Path) -> None:
    top = set()
    for node in ast.parse(SIDECAR_SOURCE).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            top.add(node.name)
        elif isinstance(node, ast.Assign):
            top |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    assert set(agent.__all__) <= top
    shipped = _load(bundle_file)
    for name in agent.__all__:
        ours = getattr(agent, name)
        theirs = getattr(shipped, name)
        assert type(ours).__name__ == type(theirs).__name__, name
        if isinstance(ours, int | float | str):
            assert ours == theirs, name
    # Every request the executor sends is one the shipped dispatch knows (an unknown one
    # raises ValueError before doing anything; these may fail later, on their arguments).
    for cmd in EXECUTOR_REQUESTS:
        try:
            shipped.dispatch({"cmd": cmd, "args": {}}, None)
        except ValueError as exc:
            assert "unknown command" not in str(exc), cmd
        except (KeyError, TypeError):
            pass
    with pytest.raises(ValueError, match="unknown command"):
        shipped.dispatch({"cmd": "nonsense", "args": {}}, None)


def _job_tree(root: Path) -> Path:
    """A run root with one finished job (its sidecar long gone) and one stray folder."""
    job = root / "job-a.r0"
    job.mkdir(parents=True)
    (root / "not-a-job").mkdir()
    progress = root / "job-a.progress"
    progress.write_text(json.dumps({"done": 7.5, "pid": 1}))
    (job / "spec.json").write_text(json.dumps({"job_id": "job-a", "node": "n1", "lease_s": 0}))
    (job / "control.json").write_text(
        json.dumps(
            {"seq": 3, "action": "stop", "gen": 2, "rank": 0, "gpus": [1], "files": {}}
            | {"files": {"progress": str(progress), "done": str(root / "job-a.done")}}
        )
    )
    (job / "state.json").write_text(
        json.dumps({"phase": "stopped", "seq": 3, "sidecar_pid": 2**22 + 1, "child_pid": None})
    )
    return job


def _without_time(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "time"}


def test_shipped_program_answers_like_the_package(bundle_file: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _job_tree(root)
    lease = tmp_path / "lease"

    def program(*args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, str(bundle_file), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return json.loads(out.stdout)

    status = program("status", str(root), "--lease", str(lease))
    assert lease.exists(), "--lease renews the lease"
    expected = agent.cmd_status(root)
    assert _without_time(status) == _without_time(expected)
    assert [j["spec"]["job_id"] for j in status["jobs"]] == ["job-a"]
    assert status["jobs"][0]["sidecar_alive"] is False
    assert status["jobs"][0]["files"] == {"progress": {"done": 7.5, "pid": 1}, "done": False}
    pattern = str(root / "*" / "spec.json")
    assert program("read", pattern, "--glob") == agent.cmd_read([pattern], True)

    # The agent: JSON lines on stdin/stdout, as the executor's channel speaks it.
    requests = [
        {"id": 1, "cmd": "status", "args": {"root": str(root)}},
        {"id": 2, "cmd": "read", "args": {"paths": [pattern], "glob": True}},
        {"id": 3, "cmd": "nonsense", "args": {}},
    ]
    # Stdin stays open until every reply is in: EOF ends the agent (requests still in flight
    # are dropped, as for a closed SSH channel).
    proc = subprocess.Popen(
        [sys.executable, str(bundle_file), "agent", "--lease", str(lease)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        replies = {}
        for _ in requests:
            reply = json.loads(lines.get(timeout=POLL_BOUND_S))
            replies[reply["id"]] = reply
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=POLL_BOUND_S) == 0, "EOF ends the agent"
    assert _without_time(replies[1]["result"]) == _without_time(agent.dispatch(requests[0], None))
    assert replies[2]["result"] == agent.dispatch(requests[1], None)
    assert replies[3] == {"id": 3, "ok": False, "error": "ValueError: unknown command 'nonsense'"}


def _wait_for(what: str, check: Any) -> Any:
    deadline = time.monotonic() + POLL_BOUND_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {POLL_BOUND_S} s: {what}")


@pytest.mark.parametrize("how", ["package", "bundle"])
def test_launch_starts_a_daemon_either_way(how: str, bundle_file: Path, tmp_path: Path) -> None:
    """``launch`` from the imported package starts the daemon with ``-m`` (its ``__file__`` is
    one module, not a program); from the shipped script, the script itself. Either way the
    daemon runs the job to completion and records it."""
    sidecar = agent if how == "package" else _load(bundle_file)
    jobdir = tmp_path / "job"
    marker = tmp_path / "ran"
    bundle = {
        "spec": {"job_id": "j", "node": "local", "lease_s": 0},
        "control": {
            "seq": 1,
            "action": "run",
            "gen": 1,
            "rank": 0,
            "gpus": [0],
            "argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"],
        },
    }
    res = sidecar.cmd_launch(jobdir, bundle, 60.0)
    assert res["ok"], res
    state = _wait_for(
        "the job completes and its sidecar ends",
        lambda: (
            (s := agent.read_json(jobdir / "state.json")) is not None
            and s.get("phase") == "completed"
            and not agent.pid_alive(s["sidecar_pid"], s["sidecar_start"])
            and s
        ),
    )
    assert state["exit_code"] == 0 and state["launches"] == 1
    assert marker.exists()
    events = [json.loads(line) for line in (jobdir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "exit"]
    assert (jobdir / "sidecar.log").read_text() == "", "the daemon started cleanly"


# --------------------------------------------------------------------------- the bundler's refusals

INIT = '"""A made-up agent package."""\n'
GOOD_A = '"""a"""\n\nimport os\n\n\ndef helper() -> int:\n    return os.getpid()\n'
GOOD_B = (
    '"""b"""\n\nimport sys\n\nfrom .a import helper\n\n\n'
    "def main() -> int:\n    return helper() * 0\n"
)


def _package(tmp_path: Path, **modules: str) -> Path:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text(INIT)
    for name, text in modules.items():
        (package / f"{name}.py").write_text(text)
    return package


def test_bundler_joins_a_good_package(tmp_path: Path) -> None:
    source = agent_source(_package(tmp_path, a=GOOD_A, b=GOOD_B), ("a", "b"))
    script = tmp_path / "script.py"
    script.write_text(source)
    assert source.startswith(INIT)
    assert "from .a" not in source and source.count("import os") == 1
    done = subprocess.run([sys.executable, str(script)], check=False, timeout=60)
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("modules", "order", "message"),
    [
        ({"a": GOOD_A.replace("import os", "import numpy")}, ("a",), "'numpy' is not in the"),
        ({"a": GOOD_A, "b": GOOD_B}, ("b", "a"), "'helper' is not defined by an earlier"),
        (
            {
                "a": GOOD_A,
                "b": GOOD_B.replace("from .a import helper", "from .a import helper as h"),
            },
            ("a", "b"),
            "or is renamed",
        ),
        (
            {"a": GOOD_A, "b": GOOD_B + "\n\ndef helper() -> int:\n    return 1\n"},
            ("a", "b"),
            "already",
        ),
        ({"a": GOOD_A + "\nimport json\n"}, ("a",), "import after code"),
        ({"a": GOOD_A.replace('"""a"""\n', "")}, ("a",), "no module docstring"),
        ({"a": GOOD_A}, ("a",), "needs main()"),
    ],
)
def test_bundler_refuses_what_would_break_the_script(
    tmp_path: Path, modules: dict[str, str], order: tuple[str, ...], message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        agent_source(_package(tmp_path, **modules), order)


def test_package_daemon_ignores_the_working_directory(tmp_path: Path) -> None:
    """The package-mode daemon runs ``python -P -m``: a ``gpuplan`` folder in the current
    directory (which others might write) never supplies its code."""
    hostile = tmp_path / "cwd" / "gpuplan"
    hostile.mkdir(parents=True)
    (hostile / "__init__.py").write_text("raise SystemExit('hostile gpuplan imported')\n")
    argv = agent.commands._serve_argv(tmp_path / "job")
    assert argv[:4] == [sys.executable, "-P", "-m", "gpuplan.executors.ssh.agent"]
    probe = subprocess.run(
        [*argv[:3], "gpuplan.executors.ssh.agent", "read", os.devnull],
        cwd=hostile.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"files": {os.devnull: None}}
