"""Which GPUs the single server schedules and how its jobs are bound (executors/local/gpus.py),
from recorded NVML answers (tests/ssh/test_nvml.py's fake nvidia-ml-py)."""

from __future__ import annotations

import pytest

from gpuplan.executors.local.gpus import choose_gpus
from gpuplan.executors.nvml.records import parse_inventory
from gpuplan.models import InputError
from tests.ssh.test_nvml import h100, inventory_of

NO_NVML = parse_inventory({"nvml": False, "reason": "no pynvml"})


def test_whole_host_and_counts_use_the_executors_own_nvml_binding() -> None:
    inv = inventory_of(h100(0), h100(1), h100(2), h100(3))
    every = choose_gpus(None, inv)
    assert (every.count, every.gpu_type, every.devices) == (4, "h100", None)
    assert every.inventory_interval_s > 0  # health checks on
    two = choose_gpus("2", inv)
    assert (two.count, two.devices, two.bind) == (2, None, None)


def test_a_list_binds_exactly_those_gpus_by_uuid() -> None:
    inv = inventory_of(h100(0), h100(1), h100(2), h100(3))
    uuid3 = h100(3)["uuid"]
    chosen = choose_gpus("1,3", inv)
    assert chosen.count == 2 and chosen.inventory_interval_s == 0
    assert chosen.bind is not None
    assert chosen.bind("local", (1,)) == [uuid3]
    assert chosen.bind("local", (0, 1)) == [h100(1)["uuid"], uuid3]
    assert choose_gpus(uuid3, inv).devices == (uuid3,)


def test_an_unknown_model_is_bound_by_uuid_without_health_checks() -> None:
    inv = inventory_of(h100(0, name="NVIDIA Future X9"), h100(1, name="NVIDIA Future X9"))
    chosen = choose_gpus(None, inv)
    assert chosen.devices == (h100(0)["uuid"], h100(1)["uuid"])
    assert chosen.inventory_interval_s == 0


def test_without_nvml_a_count_or_list_is_needed_and_jobs_bind_by_index() -> None:
    assert choose_gpus("4", NO_NVML).devices is None
    assert choose_gpus("0,2", NO_NVML).bind("local", (1,)) == ["2"]  # type: ignore[misc]
    with pytest.raises(InputError, match="no GPUs found through NVML"):
        choose_gpus(None, NO_NVML)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", "5 GPUs asked for, NVML reports 4"),
        ("0", "at least 1 GPU"),
        ("0,7", "GPU 7: NVML reports 4 GPUs"),
        ("1,1", "listed twice"),
        ("GPU-nope", "no such GPU UUID"),
        ("0;rm", "not a GPU index or UUID"),
        (",", "no GPUs listed"),
    ],
)
def test_bad_gpu_choices_are_one_line(text: str, message: str) -> None:
    inv = inventory_of(h100(0), h100(1), h100(2), h100(3))
    with pytest.raises(InputError, match=message) as err:
        choose_gpus(text, inv)
    assert "field '--gpus'" in str(err.value) and "\n" not in str(err.value)
