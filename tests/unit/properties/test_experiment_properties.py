"""rtk profile's experiment file, hostile: a sweep whose runs stay inside it, or its problems.

Every experiment text loads or raises ``ExperimentError`` (problems one line each);
a valid one's runs each get one directory name inside the sweep directory, a
command workload's axes reach it as valid variable names, and ``rtk profile
--dry-run`` on it exits 0, or 2/3 with rtk's one-line messages, writing nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml
from hostile_input import (
    examples,
    hostile_text,
    mutate,
    no_writes_outside,
    render_yaml,
    run_rtk,
    yaml_values,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

from toolkit.errors import ExperimentError, RtkError
from toolkit.flows.sweep_plan import workload_of
from toolkit.profile.experiment import Experiment, load_experiment

TRAIN: dict[str, Any] = {
    "name": "sweep-1",
    "inventory": "inv.yaml",
    "workload": {"train": {"model_size": "tiny", "max_steps": 5, "barrier_every": 2}},
    "axes": {"batch_size": [4, 8], "nodes": [1], "power_limit_w": [300]},
    "repeats": 2,
}
COMMAND: dict[str, Any] = {
    "name": "cmd",
    "inventory": "inv.yaml",
    "workload": {"command": ["python", "bench.py"], "working_dir": "."},
    "axes": {"size": [1, "big"], "mode": ["a"]},
}
INVENTORY = "cluster: hx\ntransport: local\nnodes:\n  - {host: localhost, address: 127.0.0.1}\n"
RUN_DIR = re.compile(r"[A-Za-z0-9._=,-]+_r[0-9]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@st.composite
def experiments(draw: st.DrawFn) -> str:
    base = draw(st.sampled_from([TRAIN, COMMAND]))
    values = st.one_of(hostile_text(), yaml_values())
    if draw(st.booleans()):
        return render_yaml(draw, mutate(draw, base, values))
    # Axes' names and values are what a sweep turns into paths and variables.
    data = mutate(draw, base, values, leaves_only=True)
    axes = draw(st.dictionaries(hostile_text(12), st.lists(yaml_values(), max_size=3), max_size=2))
    data["axes"] = {**data.get("axes", {}), **axes} if isinstance(data.get("axes"), dict) else axes
    return yaml.safe_dump(data, allow_unicode=True)


def load(path: Path) -> Experiment | None:
    try:
        return load_experiment(path)
    except ExperimentError as e:
        assert e.problems
        for problem in e.problems:
            assert "\n" not in str(problem), str(problem)
        return None


@settings(max_examples=examples(100))
@given(experiments())
def test_a_valid_experiments_runs_stay_in_its_sweep_directory(text: str) -> None:
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "work"
        work.mkdir()
        (work / "inv.yaml").write_text(INVENTORY)
        (work / "sweep.yaml").write_text(text, encoding="utf-8")
        experiment = load(work / "sweep.yaml")
        event("valid" if experiment is not None else "refused")
        if experiment is not None:
            check_runs(experiment)
        with no_writes_outside(root, allowed=[root / "home"]):
            outcome = run_rtk(["profile", "sweep.yaml", "--dry-run"], root)
        outcome.check_clean_failure((1, 2, 3))


def check_runs(experiment: Experiment) -> None:
    sweep = experiment.sweep_dir
    for run in experiment.runs():
        name = run.dir_name
        assert RUN_DIR.fullmatch(name) and len(name) <= 255, name
        assert (sweep / "runs" / name).resolve().parent == (sweep / "runs").resolve()
        if experiment.spec.workload.command is not None:
            try:
                workload = workload_of(experiment, run, str(sweep / "runs" / name))
            except RtkError:
                continue
            assert all(ENV_NAME.fullmatch(k) for k in workload.env), workload.env
