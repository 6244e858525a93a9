"""One comment grammar in the hook and the controller (issue 23: no queue bypass).

The corpus ``tests/data/comments.txt`` (plus the generated huge comments below) goes through
the REAL ``job_submit.lua`` — loaded by ``tests/data/hook_harness.lua`` with a stub ``slurm``
table, under Lua 5.1 (what Debian's slurm-wlm links), 5.3 and 5.4 — and through the
controller's Python parser. Every comment must get its line's verdict from both, and the two
must agree on the message and on every parsed value. The Lua interpreters are installed with
apt-get when missing (root); where that cannot be done the tests skip, and fail under CI
(``slurm_fixtures.unavailable``).

The lab tests submit the issue's four hostile comments as an unprivileged user (refused at
submit, no job created) and make the controller meet a held job whose comment it cannot read
(kept held, marked ``refused`` with a reason its owner sees; never released to Slurm).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuplan.executors.control.controller import fail_open_check, is_managed, spec_from_slurm
from gpuplan.executors.control.journal import Journal
from gpuplan.executors.control.markers import REFUSED, marker, refused_marker
from gpuplan.executors.slurm import comments
from gpuplan.executors.slurm.cli import SlurmError, SlurmJob
from gpuplan.executors.slurm.comments import CommentError, parse_comment
from gpuplan.models import Cluster, InputError, Node
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx

DATA = Path(__file__).parents[1] / "data"
CORPUS = DATA / "comments.txt"
HARNESS = DATA / "hook_harness.lua"
HOOK = Path(comments.__file__).with_name("job_submit.lua")
LUAS = ("lua5.1", "lua5.3", "lua5.4")
SLURM_LUA_PLUGIN = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so")
HOSTILE = (
    "gpuplan:work=0x10",
    "gpuplan:duration=0x1p4",
    "gpuplan:9work=1e300",
    "gpuplan:work=5;0work=1e300",
)
"""The issue's four comments: held by the old hook, refused by the controller, released."""


def corpus() -> list[tuple[str, str]]:
    """(verdict, comment) for every corpus line, then the generated huge/limit cases."""
    cases: list[tuple[str, str]] = []
    for line in CORPUS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        verdict, _, text = line.partition("\t")
        assert verdict in ("ok", "refuse"), line
        cases.append((verdict, json.loads(text)))
    longest_ok = "gpuplan:id=" + "i" * 768 + ",model=" + "m" * 64 + ",run=" + "r" * 64
    longest_ok += ",work=1,duration=1,rate=1,min=1,max=1,ranks"
    assert len(longest_ok) <= comments.MAX_COMMENT
    cases += [
        ("ok", longest_ok),
        ("refuse", "gpuplan:model=" + "m" * (comments.MAX_COMMENT - 14 + 1)),  # 1025 chars
        ("refuse", "gpuplan:" + "work=1," * 2000),
        ("refuse", "gpuplan:work=" + "9" * 100_000),
        ("refuse", "gpuplan:" + ",".join(f"k{i}=1" for i in range(5000))),
        ("ok", "not ours " + "x" * 100_000),  # untagged: any length, never our business
        ("refuse", "gpuplan:work=1" + "\u00e9" * 600),
    ]
    return cases


def python_line(comment: str) -> str:
    """The Python parser's result in the harness's output format."""
    try:
        fields = parse_comment(comment)
    except CommentError as err:
        return f"ERR\t{err}"
    parts = ["OK"]
    for key in sorted(fields):
        value = fields[key]
        parts.append(f"{key}={value}" if isinstance(value, str) else f"{key}={value:.17g}")
    return "\t".join(parts)


def _install_lua() -> None:
    """apt-get install the missing interpreters (root only), waiting for the dpkg lock."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    missing = [name for name in LUAS if shutil.which(name) is None]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"],
        [
            "apt-get",
            "-o",
            "DPkg::Lock::Timeout=600",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            *missing,
        ],
    ):
        subprocess.run(
            argv, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=900, check=False
        )


@pytest.fixture(scope="module")
def luas() -> dict[str, str]:
    """Interpreter name -> path for 5.1, 5.3 and 5.4 (installed when missing and possible)."""
    if any(shutil.which(name) is None for name in LUAS):
        _install_lua()
    found = {name: shutil.which(name) for name in LUAS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        fx.unavailable(f"Lua interpreters missing and not installable here: {missing}")
    return {name: str(path) for name, path in found.items()}


def run_harness(lua: str, mode: str, lines: list[str], tmp_path: Path) -> list[str]:
    cases = tmp_path / f"{mode}.cases"
    cases.write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run(
        [lua, str(HARNESS), str(HOOK), mode, str(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert len(out) == len(lines), proc.stderr
    return out


def _hex(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").hex()


# ---------------------------------------------------------------------------------------- corpus


def test_corpus_covers_every_kind_of_comment() -> None:
    cases = corpus()
    assert len(cases) >= 200
    verdicts = [v for v, _ in cases]
    assert verdicts.count("ok") >= 60 and verdicts.count("refuse") >= 150
    texts = [c for _, c in cases]
    for needle in ("0x", "inf", "nan", "\u00e9", "\n", " ", ",,", "work=1,work"):
        assert any(needle in c for c in texts), needle
    assert any(len(c) > comments.MAX_COMMENT for c in texts)
    assert set(HOSTILE) <= set(texts)


def test_the_python_parser_gives_every_verdict() -> None:
    wrong = [(v, c[:80]) for v, c in corpus() if python_line(c).startswith("OK") != (v == "ok")]
    assert not wrong


@pytest.mark.parametrize("lua", LUAS)
def test_hook_and_controller_agree_on_every_comment(
    lua: str, luas: dict[str, str], tmp_path: Path
) -> None:
    """Same verdict, same message, same values, under each Lua the hook may run in."""
    cases = corpus()
    got = run_harness(luas[lua], "parse", [_hex(c) for _, c in cases], tmp_path)
    disagree = [
        (c[:80], g, python_line(c))
        for (_, c), g in zip(cases, got, strict=True)
        if g != python_line(c)
    ]
    assert not disagree, disagree[:10]
    wrong = [
        (v, c[:80], g)
        for (v, c), g in zip(cases, got, strict=True)
        if g.startswith("OK") != (v == "ok")
    ]
    assert not wrong, wrong[:10]


def generated(count: int = 3000, seed: int = 23) -> list[str]:
    """Seeded random comments built from the grammar's own tokens and near misses: where two
    hand-written parsers most likely part ways."""
    rng = random.Random(seed)
    tokens = [
        "gpuplan",
        ":",
        ",",
        ";",
        "=",
        "==",
        "work",
        "min",
        "max",
        "rate",
        "duration",
        "ranks",
        "model",
        "id",
        "run",
        "wor",
        "0",
        "1",
        "9",
        "00",
        "999999",
        "1000000",
        ".",
        "e",
        "E",
        "+",
        "-",
        "e308",
        "e-5",
        "x",
        "0x",
        "p",
        "inf",
        "nan",
        " ",
        "\t",
        "\u00e9",
        "%",
        "%2C",
        "_",
        "~",
        "a",
        "Z",
        "1e15",
        "1e16",
        "315360000",
        "1e9",
    ]
    out = []
    for _ in range(count):
        body = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 12)))
        out.append(("gpuplan:" if rng.random() < 0.85 else "gpuplan") + body)
    return out


@pytest.mark.parametrize("lua", LUAS)
def test_hook_and_controller_agree_on_generated_comments(
    lua: str, luas: dict[str, str], tmp_path: Path
) -> None:
    cases = generated()
    assert sum(python_line(c).startswith("OK") for c in cases) >= 100  # not all refusals
    got = run_harness(luas[lua], "parse", [_hex(c) for c in cases], tmp_path)
    disagree = [
        (c, g, python_line(c)) for c, g in zip(cases, got, strict=True) if g != python_line(c)
    ]
    assert not disagree, disagree[:10]


def test_parsed_values_are_typed_and_exact() -> None:
    assert parse_comment("gpuplan:min=1,max=8;work=5e4,rate=0.1,ranks,model=bert-large") == {
        "min": 1,
        "max": 8,
        "work": 50000.0,
        "rate": 0.1,
        "ranks": 1,
        "model": "bert-large",
    }
    assert parse_comment("gpuplan") == parse_comment("gpuplan:") == parse_comment("mine") == {}
    for hostile in HOSTILE:
        with pytest.raises(CommentError):
            parse_comment(hostile)


def test_lab_the_lua_slurm_links_is_one_the_corpus_runs_under(lab: SlurmLab) -> None:
    """Debian 12's slurm-wlm links liblua5.1: the corpus must run under that version. (The lab
    fixture installs Slurm's packages where they are missing.)"""
    assert SLURM_LUA_PLUGIN.exists(), f"{SLURM_LUA_PLUGIN} missing after the lab's install"
    ldd = subprocess.run(
        ["ldd", str(SLURM_LUA_PLUGIN)], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    linked = re.findall(r"liblua(5\.\d)", ldd)
    assert linked and f"lua{linked[0]}" in LUAS, ldd


# ---------------------------------------------------------------------------------------- hook


def _submission(
    comment: str = "",
    tpn: str = "",
    tpj: str = "",
    nodes: str = "",
    ntpn: str = "",
    uid: str = "1000",
) -> str:
    return "\t".join(_hex(x) for x in (comment, tpn, tpj, nodes, ntpn, uid))


SUBMISSIONS = [
    # (submission, rc, tres_per_node, tres_per_job, min_nodes, admin_comment or message part)
    (
        _submission(tpj="gres:gpu:4", nodes="2"),
        "0",
        "gres:gpu:2",
        "",
        "2",
        "gpuplan:held;gpus=4;min=4;max=4;nodes=2;gpn=2",
    ),
    (
        _submission(tpj="gres:gpu:a100:12", nodes="3"),
        "0",
        "gres:gpu:a100:4",
        "",
        "3",
        "gpuplan:held;gpus=12;min=12;max=12;nodes=3;gpn=4",
    ),
    (
        _submission(tpj="gres:gpu:16"),
        "0",
        "gres:gpu:8",
        "",
        "2",
        "gpuplan:held;gpus=16;min=16;max=16;nodes=2;gpn=8",
    ),
    (
        _submission("gpuplan:min=1,max=8", tpj="gres:gpu:3"),
        "0",
        "gres:gpu:3",
        "",
        "1",
        "gpuplan:held;gpus=3;min=1;max=8;nodes=1;gpn=3",
    ),
    (
        _submission("gpuplan:ranks,min=2,max=8", tpn="gres:gpu:2", nodes="2"),
        "0",
        "gres:gpu:2",
        "",
        "2",
        "gpuplan:held;gpus=4;min=2;max=8;nodes=2;gpn=2;ranks=1",
    ),
    (
        _submission(tpj="gres:gpu:6", nodes="4"),
        "0",
        "",
        "gres:gpu:6",
        "4",
        "gpuplan:held;gpus=6;min=6;max=6;nodes=4",
    ),
    (
        _submission("gpuplan:work=0x10", tpj="gres:gpu:4", nodes="2"),
        "-1",
        "",
        "gres:gpu:4",
        "2",
        "gpuplan: work=0x10 must be a decimal number in (0, 1e+15]",
    ),
    (
        _submission("gpuplan:9work=1e300", tpj="gres:gpu:1"),
        "-1",
        "",
        "gres:gpu:1",
        "",
        "gpuplan: key '9work' must be a letter followed by letters, digits or _",
    ),
    (
        _submission("gpuplan:max=2000", tpj="gres:gpu:1"),
        "-1",
        "",
        "gres:gpu:1",
        "",
        "gpuplan: max=2000 must be a whole number in [1, 1024]",
    ),
    (
        _submission("gpuplan:run=x", tpj="gres:gpu:1"),
        "-1",
        "",
        "gres:gpu:1",
        "",
        "reserved for gpuplan's own executor",
    ),
    (
        _submission("gpuplan:run=x", tpj="gres:gpu:1", uid="0"),
        "0",
        "gres:gpu:1",
        "",
        "1",
        "gpuplan:held;gpus=1;min=1;max=1;nodes=1;gpn=1",
    ),
    (
        _submission(tpj="gres:gpu:99999999999999999999"),
        "-1",
        "",
        "gres:gpu:99999999999999999999",
        "",
        "gpuplan: GPU request 100000000000000000000 must be in [1, 1024]",
    ),
]


@pytest.mark.parametrize("lua", LUAS)
def test_hook_submissions_use_integer_arithmetic_under_every_lua(
    lua: str, luas: dict[str, str], tmp_path: Path
) -> None:
    """``-N 2 --gpus=4`` once became ``gres:gpu:2.0`` under Lua 5.3/5.4 (float division);
    refused submissions leave the job description untouched and tell the user why."""
    got = run_harness(luas[lua], "submit", [s[0] for s in SUBMISSIONS], tmp_path)
    for (_, rc, tpn, tpj, nodes, what), line in zip(SUBMISSIONS, got, strict=True):
        fields = line.split("\t")
        assert fields[0] == rc and fields[2:5] == [tpn, tpj, nodes], (what, line)
        assert what in (fields[5] if rc == "0" else fields[1]), (what, line)
        assert ".0" not in fields[2] + fields[5], line


# ------------------------------------------------------------------------------ controller


HELD = {
    "job_id": 41,
    "job_state": "PENDING",
    "priority": 0,
    "user_id": 1000,
    "partition": "gpuplan",
    "tres_per_node": "gres:gpu:2",
    "node_count": 1,
    "admin_comment": "gpuplan:held;gpus=2;min=1;max=4;nodes=1;gpn=2",
    "comment": "gpuplan:min=1,max=4,work=60",
    "submit_time": 1_000_100,
}


@pytest.mark.parametrize("comment", HOSTILE)
def test_the_controller_refuses_what_the_grammar_refuses(comment: str) -> None:
    job = SlurmJob.from_json({**HELD, "comment": comment})
    cluster = Cluster(nodes=[Node(name="node1", gpus=4, gpu_type="a100")])
    with pytest.raises(InputError) as err:
        spec_from_slurm(job, origin=0, cluster=cluster, default_duration_s=3600)
    assert err.value.field == "comment" and "Slurm job 41" in str(err.value)
    assert is_managed(job)  # still the controller's: it must keep it held, not drop it


def test_a_refused_marker_is_unmanaged_readable_and_one_field() -> None:
    why = "Slurm job 41: field 'comment': work=0x10 must be a decimal number in (0, 1e+15];\n"
    text = refused_marker(HELD["admin_comment"], why)
    assert text.startswith("gpuplan:refused;gpus=2;min=1;max=4;nodes=1;gpn=2;why=")
    found = marker(text)
    assert found is not None and found[0] == REFUSED
    assert found[1]["why"] == (
        "Slurm job 41: field 'comment': work=0x10 must be a decimal number in (0 1e+15] ?"
    )
    assert refused_marker(text, "again").endswith(";gpn=2;why=again")  # one why=, the last
    assert not is_managed(SlurmJob.from_json({**HELD, "admin_comment": text}))


# ---------------------------------------------------------------------------------------- lab

PARTITION = "gpuplan"
LAB_WAIT_S = 120.0


@pytest.fixture(scope="module")
def lab() -> Iterator[SlurmLab]:
    yield from fx.module_lab()


@pytest.fixture(scope="module")
def gpuuser(lab: SlurmLab) -> str:
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    return fx.UNPRIVILEGED_USER


def _wait(what: str, check: Callable[[], bool], log: Path | None = None) -> None:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > LAB_WAIT_S:
            tail = log.read_text()[-4000:] if log is not None and log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.2)


def _user_jobs(lab: SlurmLab, uid: int) -> set[int]:
    return {j.job_id for j in lab.cli(timeout=30).jobs() if j.user_id == uid}


def test_lab_hook_refuses_the_hostile_comments_at_submit(lab: SlurmLab, gpuuser: str) -> None:
    uid = fx.ensure_user(gpuuser).pw_uid
    before = _user_jobs(lab, uid)
    for comment in HOSTILE:
        for where in ([f"--partition={PARTITION}"], []):  # opt-in by partition or comment
            proc = fx.as_user(
                gpuuser,
                [
                    "sbatch",
                    "--parsable",
                    *where,
                    "--gpus=1",
                    f"--comment={comment}",
                    "--output=/dev/null",
                    "--wrap=true",
                ],
                lab.env,
            )
            assert proc.returncode != 0, (comment, proc.stdout)
            assert f"gpuplan: {_python_message(comment)}" in proc.stderr, (comment, proc.stderr)
    assert _user_jobs(lab, uid) == before  # none was created, so none can run
    ok = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            "--gpus=1",
            "--comment=gpuplan:work=16,duration=16",
            "--output=/dev/null",
            "--wrap=true",
        ],
        lab.env,
    )
    # work and duration together are allowed by the grammar (work wins in the controller)
    assert ok.returncode == 0 and "held for the GPU engine" in ok.stderr, ok.stderr
    lab.cli(timeout=30).cancel(int(ok.stdout.strip().split(";")[0]))


def _python_message(comment: str) -> str:
    try:
        parse_comment(comment)
    except CommentError as err:
        return str(err)
    raise AssertionError(f"{comment} parses")


def test_lab_an_unreadable_job_stays_held_with_a_visible_reason(
    lab: SlurmLab, gpuuser: str, tmp_path: Path
) -> None:
    """A held job whose comment the controller cannot read (here: an operator rewrote it, as
    an outdated hook would have let through) is kept held and marked ``refused`` with the
    reason, which its owner reads in ``scontrol show job``; the controller keeps serving
    others; the fail-open watchdog never releases it; nothing of it ever runs."""
    cli = lab.cli(timeout=30)
    sub = fx.as_user(
        gpuuser,
        [
            "sbatch",
            "--parsable",
            f"--partition={PARTITION}",
            "--gpus=1",
            "--comment=gpuplan:work=5",
            "--output=/dev/null",
            "--wrap=true",
        ],
        lab.env,
    )
    assert sub.returncode == 0, sub.stderr
    bad = int(sub.stdout.strip().split(";")[0])
    cli.update_job(bad, Comment=HOSTILE[0])
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db, log = state / "controller.db", tmp_path / "controller.log"
    env = {**os.environ, **lab.env}
    argv = [
        sys.executable,
        "-m",
        "gpuplan",
        "slurm-controller",
        "--policy",
        "fifo",
        "--interval",
        "0.5",
        "--state-db",
        str(db),
        "--partition",
        PARTITION,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        _wait(
            "the job marked refused",
            lambda: (cli.job(bad) or SlurmJob.from_json({"job_id": bad})).admin_comment.startswith(
                "gpuplan:refused;"
            ),
            log,
        )
        good = fx.as_user(
            gpuuser,
            [
                "sbatch",
                "--parsable",
                f"--partition={PARTITION}",
                "--gpus=1",
                "--comment=gpuplan:duration=1",
                "--output=/dev/null",
                "--wrap=true",
            ],
            lab.env,
        )
        good_id = int(good.stdout.strip().split(";")[0])
        _wait(
            "another job scheduled and completed",
            lambda: (
                (cli.job(good_id) or SlurmJob.from_json({"job_id": good_id})).state == "COMPLETED"
            ),
            log,
        )
        assert proc.poll() is None, "the controller exited"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=LAB_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    job = cli.job(bad)
    assert job is not None and job.state == "PENDING" and job.held, job
    assert "why=" in job.admin_comment and "0x10" in job.admin_comment, job.admin_comment
    seen = fx.as_user(gpuuser, ["scontrol", "show", "job", str(bad)], lab.env)
    assert "AdminComment=gpuplan:refused;" in seen.stdout and "0x10" in seen.stdout, seen
    # The owner cannot release it; the watchdog (controller gone, heartbeat stale) does not.
    refused = fx.as_user(gpuuser, ["scontrol", "release", str(bad)], lab.env)
    assert refused.returncode != 0
    assert fail_open_check(cli, state / "no-heartbeat", 0.0, [PARTITION]) == []
    job = cli.job(bad)
    assert job is not None and job.state == "PENDING" and job.held, job
    with Journal(db, writer=False) as journal:
        row = journal.job(f"slurm-{bad}")
        assert row is not None and row.state == "rejected" and "0x10" in row.reason, row
        assert all(a.engine_id != f"slurm-{bad}" for a in journal.actions())
    with contextlib.suppress(SlurmError):
        cli.cancel(bad)
