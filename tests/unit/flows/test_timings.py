"""rtk train's phases, stamped from its own steps and the job's log as it streams."""

from __future__ import annotations

from toolkit.flows.timings import TrainClock


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_phases_come_from_the_steps_and_the_first_lines_of_the_log() -> None:
    now = FakeClock()
    clock = TrainClock(now)
    now.now_s += 1.0
    with clock.phase("preflight"):
        now.now_s += 2.0
    with clock.phase("job"):
        now.now_s += 1.5
        clock.see("some line Ray prints first")
        now.now_s += 0.5
        clock.see("rtk train: 3 worker(s) x {'CPU': 1.0}, strategy ddp")
        now.now_s += 4.0
        clock.see("rtk train: another driver line")  # only the first counts
        clock.see("(RayTrainWorker pid=123, ip=10.0.0.1) step 21/30 loss 2.2 733 tok/s")
        now.now_s += 6.0
        clock.see("(RayTrainWorker pid=123, ip=10.0.0.1) step 30/30 loss 1.1 733 tok/s")
    with clock.phase("report"):
        now.now_s += 1.0
    timings = clock.timings()
    spans = {label: span for label, span in timings.rows()}
    assert spans["preflight"] is not None and spans["preflight"].duration_s == 2.0
    assert spans["job start"] is not None
    assert (spans["job start"].start_s, spans["job start"].end_s) == (3.0, 5.0)
    assert spans["to first step"] is not None
    assert (spans["to first step"].start_s, spans["to first step"].end_s) == (5.0, 9.0)
    assert spans["training"] is not None and spans["training"].end_s == 15.0
    assert spans["report"] is not None and spans["report"].duration_s == 1.0
    assert timings.total_s == 16.0
    data = timings.to_json()
    assert data["time_to_first_step_s"] == 9.0 and data["job_start"]["duration_s"] == 2.0
    lines = timings.render().splitlines()
    assert [line.split()[0] for line in lines] == [
        "phase",
        "preflight",
        "job",
        "to",
        "training",
        "report",
        "total",
    ]


def test_a_job_that_never_printed_has_only_its_start_and_no_first_step() -> None:
    now = FakeClock()
    clock = TrainClock(now)
    with clock.phase("job"):
        now.now_s += 3.0
    timings = clock.timings()
    assert timings.preflight is None and timings.report is None
    assert timings.job_start is not None and timings.job_start.duration_s == 3.0
    assert timings.first_step is None and timings.training is None
    assert timings.to_json()["time_to_first_step_s"] is None
    assert "to first step         -        -        -" in timings.render()


def test_a_bring_up_in_the_same_command_is_its_first_phase() -> None:
    """rtk train --up: the cluster comes up, then the job (its driver started meanwhile)."""
    now = FakeClock()
    clock = TrainClock(now)
    with clock.phase("up"):
        now.now_s += 8.0
    with clock.phase("job"):
        now.now_s += 0.5
        clock.see("rtk train: 3 worker(s) x {'CPU': 1.0}, strategy ddp")
    timings = clock.timings()
    assert timings.rows()[0][0] == "bring up"
    assert timings.bring_up is not None and timings.bring_up.duration_s == 8.0
    assert timings.to_json()["bring_up"]["duration_s"] == 8.0
    assert timings.render().splitlines()[1].startswith("bring up")
    # Without one, no row, and null in the JSON.
    plain = TrainClock(FakeClock()).timings()
    assert [label for label, _ in plain.rows()][0] == "preflight"
    assert plain.to_json()["bring_up"] is None
