"""The on-disk cache of fitted Pollux models (scenarios/fit_cache.py): bit-identical results with
and without it, a hit that really skips the fit, and no trust in what others can write.

Every test points ``XDG_CACHE_HOME`` at its own temporary folder and clears the in-process
caches of :mod:`gpuplan.scenarios.pollux_jobs`, so each "cold" step really reads or fits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.api import prepare, run
from gpuplan.scenarios import fit_cache, pollux_jobs
from tests.conftest import need_traces

SCENARIO = """\
name: pollux-1
cluster: {nodes: 16, gpus_per_node: 4, gpu_type: t4}
workload: {source: pollux, path: pollux/workloads/workload-1.csv, mapping: rigid}
"""


def _clear() -> None:
    pollux_jobs.pollux_app.cache_clear()
    pollux_jobs.pollux_steps.cache_clear()
    pollux_jobs._profile.cache_clear()


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv(fit_cache.ENV_OFF, raising=False)
    _clear()
    yield home / "gpuplan"
    _clear()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A private copy of one Pollux model folder (ncf), to edit."""
    target = tmp_path / "profiles" / "ncf"
    shutil.copytree(need_traces("pollux", "profiles", "ncf"), target)
    return target


class _Fits:
    """Counts calls of the fit (patched into pollux_jobs) and passes them on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = pollux_jobs.fit_pollux_params

        def counted(samples):  # type: ignore[no-untyped-def]
            self.calls += 1
            return real(samples)

        monkeypatch.setattr(pollux_jobs, "fit_pollux_params", counted)


def _app(model: Path) -> pollux_jobs.PolluxApp:
    _clear()
    return pollux_jobs.pollux_app(model)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def _digest(result) -> str:  # type: ignore[no-untyped-def]
    data = result.model_dump(mode="json", exclude={"decision_ms", "solver_ms", "wall_s"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def test_a_pollux_workload_is_bit_identical_with_and_without_the_cache(
    cache_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_traces("pollux", "workloads", "workload-1.csv")
    path = tmp_path / "pollux1.scenario.yaml"
    path.write_text(SCENARIO)
    monkeypatch.setenv(fit_cache.ENV_OFF, "1")
    fresh = prepare(str(path))
    assert not cache_home.exists()  # off: nothing written, not even the folder
    monkeypatch.delenv(fit_cache.ENV_OFF)
    outcomes = []
    for _ in range(2):  # the first run fills the cache, the second reads it
        _clear()
        fits = _Fits(monkeypatch)
        outcomes.append((prepare(str(path)), fits.calls))
        monkeypatch.undo()
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home.parent))
    (written, fitted), (cached, refitted) = outcomes
    assert fitted == 6 and refitted == 0  # six models fitted once, then read
    assert len(_files(cache_home)) == 6
    dump = [j.model_dump(mode="json") for j in fresh.jobs]
    assert [j.model_dump(mode="json") for j in written.jobs] == dump
    assert [j.model_dump(mode="json") for j in cached.jobs] == dump
    assert _digest(run(cached, "fifo")) == _digest(run(fresh, "fifo"))


def test_cached_app_equals_the_fitted_one_exactly(cache_home: Path, model: Path) -> None:
    fitted = _app(model)
    cached = _app(model)
    assert cached == fitted
    assert repr(cached.fit.params) == repr(fitted.fit.params)  # every float, bit for bit
    assert cached.validation == fitted.validation


def test_a_hit_skips_the_fit_and_an_edited_table_misses(
    cache_home: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _app(model)
    fits = _Fits(monkeypatch)
    _app(model)
    assert fits.calls == 0
    last = (model / "placements.csv").read_text().splitlines()[-1]
    with (model / "placements.csv").open("a") as fh:  # one more measured row: new content
        fh.write(last + "\n")
    _app(model)
    assert fits.calls == 1
    assert len(_files(cache_home)) == 2


def test_a_corrupt_or_foreign_file_is_ignored_and_rewritten(
    cache_home: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _app(model)
    (entry,) = _files(cache_home)
    good = entry.read_text()
    bad_values = [
        "{not json",
        good[: len(good) // 2],  # truncated
        json.dumps({**json.loads(good), "key": "0" * 64}),  # another key's content
        good.replace('"gamma": ', '"gamma": "x", "g": '),  # a string where a float must be
    ]
    for text in bad_values:
        entry.write_text(text)
        fits = _Fits(monkeypatch)
        assert _app(model) == reference
        assert fits.calls == 1, text[:40]
        assert json.loads(entry.read_text()) == json.loads(good)  # rewritten whole
        monkeypatch.undo()
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home.parent))
    # group- or world-writable: someone else may have written it
    os.chmod(entry, 0o666)
    fits = _Fits(monkeypatch)
    assert _app(model) == reference and fits.calls == 1
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600  # replaced by our own file


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a file to another user")
def test_a_file_owned_by_another_user_is_not_read(
    cache_home: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _app(model)
    (entry,) = _files(cache_home)
    os.chown(entry, 65534, 65534)
    fits = _Fits(monkeypatch)
    _app(model)
    assert fits.calls == 1
    assert os.stat(entry).st_uid == os.getuid()  # replaced by ours


def test_an_untrusted_folder_is_neither_read_nor_written(
    cache_home: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _app(model)
    os.chmod(cache_home, 0o777)  # anyone could have planted a file there
    before = {p: p.read_text() for p in _files(cache_home)}
    fits = _Fits(monkeypatch)
    assert _app(model) == reference and fits.calls == 1
    assert {p: p.read_text() for p in _files(cache_home)} == before
    # a symlink in place of the folder: not followed
    os.chmod(cache_home, 0o700)
    elsewhere = cache_home.parent / "elsewhere"
    cache_home.rename(elsewhere)
    cache_home.symlink_to(elsewhere)
    assert _app(model) == reference and fits.calls == 2


def test_the_folder_is_created_private_and_xdg_must_be_absolute(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(fit_cache.ENV_OFF, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as XDG says
    assert fit_cache.cache_dir() == tmp_path / "home" / ".cache" / "gpuplan"
    _app(model)
    folder = fit_cache.cache_dir()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in _files(folder)] == [0o600]
    assert not list(folder.glob(".*"))  # no temporary file left behind
    _clear()
