"""run_spec.py: a sweep's run from its axes: its id, directory, node count and GPU settings."""

from __future__ import annotations

import pytest

from toolkit.errors import RtkError
from toolkit.json_types import JsonValue
from toolkit.profile.run_spec import GpuRequest, RunSpec, clocks_mhz, config_id


def test_config_id_keeps_the_file_order_and_shows_lists() -> None:
    assert config_id({"nodes": 2, "batch_size": 8}) == "nodes=2,batch_size=8"
    assert config_id({"gpu_clocks_mhz": [1200, 1400]}) == "gpu_clocks_mhz=1200-1400"
    assert config_id({}) == "default"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1400, (1400, 1400)), ([1200, 1400], (1200, 1400)), (None, None), (1400.0, (1400, 1400))],
)
def test_clocks_mhz(value: object, expected: tuple[int, int] | None) -> None:
    assert clocks_mhz(value) == expected


@pytest.mark.parametrize("value", ["1400", [1200], [1200, "1400"], True, {"min": 1}])
def test_clocks_mhz_refuses_what_is_no_clock(value: object) -> None:
    with pytest.raises(RtkError, match="clocks are MHz"):
        clocks_mhz(value)


def test_a_run_reads_its_cluster_axes_and_keeps_the_axes_as_given() -> None:
    axes: dict[str, JsonValue] = {
        "batch_size": 8,
        "nodes": 2,
        "power_limit_w": 300,
        "gpu_clocks_mhz": 1400,
    }
    run = RunSpec.of(dict(axes), 3)
    assert run.axes == axes
    assert (run.config_id, run.run_id, run.repeat) == (
        "batch_size=8,nodes=2,power_limit_w=300,gpu_clocks_mhz=1400",
        "batch_size=8,nodes=2,power_limit_w=300,gpu_clocks_mhz=1400#3",
        3,
    )
    assert run.nodes == 2
    assert run.gpu == GpuRequest(power_limit_w=300, gpu_clocks_mhz=(1400, 1400))
    plain = RunSpec.of({"batch_size": 8}, 1)
    assert plain.nodes is None and plain.gpu == GpuRequest()


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"nodes": "2"}, "axis nodes: got '2'"),
        ({"nodes": 1.5}, "axis nodes: got 1.5"),
        ({"power_limit_w": "300"}, "axis power_limit_w: got '300'"),
        ({"mem_clocks_mhz": [1, 2, 3]}, "clocks are MHz"),
    ],
)
def test_a_run_refuses_cluster_axes_it_cannot_apply(
    axes: dict[str, JsonValue], message: str
) -> None:
    with pytest.raises(RtkError, match=message):
        RunSpec.of(axes, 1)


def test_the_gpu_axes_are_shown_as_written() -> None:
    assert RunSpec.of({"batch_size": 8}, 1).gpu_axes == ""
    run = RunSpec.of({"mem_clocks_mhz": [5000, 5000], "power_limit_w": 560.0, "b": 1}, 1)
    assert run.gpu_axes == "power_limit_w=560.0, mem_clocks_mhz=[5000, 5000]"
    assert run.gpu == GpuRequest(power_limit_w=560.0, mem_clocks_mhz=(5000, 5000))
    assert RunSpec.of({"gpu_clocks_mhz": 1400}, 1).gpu_axes == "gpu_clocks_mhz=1400"


def test_a_long_id_makes_a_short_distinct_directory() -> None:
    one = RunSpec.of({"prompt": "x" * 300}, 1)
    other = RunSpec.of({"prompt": "x" * 300 + "y"}, 1)
    assert len(one.dir_name) <= 255 and one.dir_name != other.dir_name
    assert one.dir_name.endswith("_r1")
