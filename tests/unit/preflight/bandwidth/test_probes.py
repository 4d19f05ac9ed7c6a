"""The bandwidth job's probes: what a TCP send's answer from Ray becomes."""

from __future__ import annotations

from toolkit.preflight.bandwidth.measure import TcpSendResult
from toolkit.preflight.bandwidth.probes import sent


def test_a_sends_answer_is_kept_and_anything_else_is_why_it_failed() -> None:
    answer = TcpSendResult(1.0, 1 << 30, 8.59)
    assert sent(answer) is answer
    died = sent(RuntimeError("the actor died\nRayActorError: gone"))
    assert died == TcpSendResult(error="RuntimeError: RayActorError: gone")
    odd = sent({"gbit_s": 1.0})
    assert odd.gbit_s is None and odd.error is not None and "not a TCP test's answer" in odd.error
