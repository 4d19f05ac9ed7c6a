"""The GPU-limit interface's put-back record: one type and one wording for both paths."""

from __future__ import annotations

from toolkit.gpu.limits import GpuRestore, restored_lines


def test_a_put_back_is_done_failed_left_or_nothing_and_says_so_in_lines() -> None:
    done = GpuRestore("n1", done=restored_lines("n1", {"GPU-a": ("power_limit", "gpu_clocks")}))
    assert done.lines == ("n1: put back the power limit, gpu clocks of GPU GPU-a",)
    assert not done.nothing_to_do and done.failed is None
    assert GpuRestore("n1").nothing_to_do and GpuRestore("n1").lines == ()
    left = GpuRestore("n1", left="n1: left f as it is: rtk profile wrote it")
    failed = GpuRestore("n1", failed="n1: NVML failed")
    assert not left.nothing_to_do and left.lines == (left.left,)
    assert failed.lines == ("n1: NVML failed",)
    # A GPU with nothing put back is no line.
    assert restored_lines("n1", {"GPU-a": (), "GPU-b": ("power_limit",)}) == (
        "n1: put back the power limit of GPU GPU-b",
    )
