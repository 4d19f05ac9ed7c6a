"""The experiment file of ``rtk profile``: the runs it plans, its paths, and every mistake.

A mistake gets one line: file:line: key path: what is wrong and what to give instead.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from conftest import rtk

from toolkit.errors import ExperimentError
from toolkit.profile.experiment import Experiment, load_experiment
from toolkit.profile.run_spec import GpuRequest

BASE = """\
name: tiny-sweep
inventory: inv.yaml
workload:
  train: {model_size: tiny, max_steps: 30}
"""

VALID = BASE + "axes:\n  batch_size: [4, 8]\n  nodes: [2, 1]\nrepeats: 2\n"


def _load(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Experiment:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return load_experiment(path)


def _problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> list[str]:
    monkeypatch.chdir(tmp_path)
    Path("sweep.yaml").write_text(text)
    with pytest.raises(ExperimentError) as caught:
        load_experiment("sweep.yaml")
    return [str(p) for p in caught.value.problems]


# ---- a valid file: its runs, options and paths ------------------------------------------


def test_runs_grouped_by_node_count_then_repeat(tmp_path: Path) -> None:
    runs = _load(tmp_path, VALID).runs()
    # Node count 1 first, across both repeats: one bring-up per node count.
    assert [r.run_id for r in runs] == [
        "batch_size=4,nodes=1#1",
        "batch_size=8,nodes=1#1",
        "batch_size=4,nodes=1#2",
        "batch_size=8,nodes=1#2",
        "batch_size=4,nodes=2#1",
        "batch_size=8,nodes=2#1",
        "batch_size=4,nodes=2#2",
        "batch_size=8,nodes=2#2",
    ]
    assert runs[0].axes == {"batch_size": 4, "nodes": 1}
    assert [r.nodes for r in runs] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert {r.gpu for r in runs} == {GpuRequest()}  # no GPU axis: nothing asked
    assert runs[0].config_id == "batch_size=4,nodes=1"
    assert [r.repeat for r in runs] == [1, 1, 2, 2, 1, 1, 2, 2]
    names = [r.dir_name for r in runs]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9._=,-]+", n) for n in names), names
    assert names[0] == "batch_size=4,nodes=1_r1"


def test_no_axes_is_one_configuration_repeated(tmp_path: Path) -> None:
    runs = _load(tmp_path, BASE + "repeats: 3\n").runs()
    assert [r.run_id for r in runs] == ["default#1", "default#2", "default#3"]
    assert len({r.dir_name for r in runs}) == 3


def test_run_directories_are_safe_and_distinct_for_any_value(tmp_path: Path) -> None:
    long_value = "x" * 300
    text = textwrap.dedent(f"""\
        name: any
        inventory: inv.yaml
        workload:
          command: [python, bench.py]
        axes:
          prompt: ["../../etc", "a b/c", "ü", "{long_value}", "{long_value}y"]
          mode: [fast, "slow; rm -rf /"]
    """)
    runs = _load(tmp_path, text).runs()
    names = [r.dir_name for r in runs]
    assert len(runs) == 10
    assert len(set(names)) == len(names), names
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9._=,-]+", name), name
        assert name not in (".", "..") and len(name.encode()) <= 255, name
        (tmp_path / "runs" / name).mkdir(parents=True)  # the file system agrees


def test_values_that_would_share_a_run_directory_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "name: a\ninventory: inv.yaml\nworkload:\n  command: [x]\naxes:\n  p: [a/b, a_b]\n"
    assert _problems(tmp_path, monkeypatch, text) == [
        "sweep.yaml:6: axes.p[1]: 'a_b' and 'a/b' would share a run directory (both 'a_b' "
        "there); make them differ in letters, digits or . _ = , -"
    ]


def test_train_options_axes_win_and_cluster_axes_stay_out(tmp_path: Path) -> None:
    exp = _load(tmp_path, BASE.replace("max_steps: 30}", "max_steps: 30, batch_size: 2}"))
    axes = {
        "batch_size": 8,
        "nodes": 2,
        "power_limit_w": 300,
        "gpu_clocks_mhz": [1200, 1400],
        "mem_clocks_mhz": 5000,
    }
    assert exp.train_options(axes) == {"model_size": "tiny", "max_steps": 30, "batch_size": 8}
    assert exp.spec.workload.train == {"model_size": "tiny", "max_steps": 30, "batch_size": 2}


def test_sweep_dir_defaults_to_profile_runs_name_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the file's folder counts, not the working directory
    exp = _load(tmp_path / "conf", VALID)
    here = (tmp_path / "conf").resolve()
    assert exp.sweep_dir == here / "profile-runs" / "tiny-sweep"
    assert exp.inventory_path == here / "inv.yaml"


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    text = VALID.replace("inv.yaml", "../clusters/inv.yaml") + "output_dir: out/sweep1\n"
    exp = _load(tmp_path / "conf", text)
    here = (tmp_path / "conf").resolve()
    assert exp.sweep_dir == here / "out" / "sweep1"  # no <name> added to an explicit dir
    assert exp.inventory_path.resolve() == tmp_path.resolve() / "clusters" / "inv.yaml"


def test_absolute_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    text = VALID.replace("inv.yaml", "~/inv.yaml") + "output_dir: ~/sweeps/a\n"
    exp = _load(tmp_path / "conf", text)
    assert exp.sweep_dir == tmp_path / "home" / "sweeps" / "a"
    assert exp.inventory_path == tmp_path / "home" / "inv.yaml"
    elsewhere = tmp_path / "elsewhere"
    exp = _load(tmp_path / "conf", VALID + f"output_dir: {elsewhere}\n")
    assert exp.sweep_dir == elsewhere


def test_defaults(tmp_path: Path) -> None:
    spec = _load(tmp_path, BASE).spec
    assert (spec.repeats, spec.baseline_s, spec.cooldown_max_s) == (1, 10.0, 60.0)
    assert spec.axes == {} and spec.output_dir is None


def test_command_workload_sweeps_any_axis(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        name: cmd
        inventory: inv.yaml
        workload:
          command: [python, bench.py]
        axes:
          model: [small, large]
          run_dir: [a]          # only trainer workloads reserve trainer option names
          power_limit_w: [250, 300.5]
    """)
    runs = _load(tmp_path, text).runs()
    assert len(runs) == 4
    assert runs[-1].axes == {"model": "large", "run_dir": "a", "power_limit_w": 300.5}


def test_vllm_workload_sweeps_its_sizes_and_the_cluster_axes(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        name: gen
        inventory: inv.yaml
        workload:
          vllm: {model: /models/tiny}
        axes:
          batch_size: [1, 8]
          input_len: [128]
          output_len: [64]
          nodes: [1]
          power_limit_w: [300]
          gpu_clocks_mhz: [1400, [1200, 1400]]
          mem_clocks_mhz: [[5000, 5000]]
    """)
    exp = _load(tmp_path, text)
    assert exp.spec.workload.vllm is not None
    assert exp.spec.workload.vllm.batch_size == 8  # the default, each run's axis wins
    runs = exp.runs()
    assert len(runs) == 4 and {r.nodes for r in runs} == {1}
    assert [r.gpu for r in runs[:2]] == [
        GpuRequest(300, (1400, 1400), (5000, 5000)),
        GpuRequest(300, (1200, 1400), (5000, 5000)),
    ]


# ---- mistakes ---------------------------------------------------------------------------

VLLM = "name: gen\ninventory: inv.yaml\nworkload:\n  vllm: {model: m}\n"
COMMAND = "name: cmd\ninventory: inv.yaml\nworkload:\n  command: [python, b.py]\n"
CLUSTER = "a vllm workload sweeps batch_size, input_len, output_len, nodes, power_limit_w, "

CASES = {
    "unknown top-level key": (
        BASE + "repeat: 2\n",
        [
            "sweep.yaml:5: repeat: unknown key 'repeat'; did you mean 'repeats'? allowed keys: "
            "axes, baseline_s, cooldown_max_s, inventory, name, output_dir, repeats, workload"
        ],
    ),
    "required keys missing": (
        "name: a\n",
        [
            "sweep.yaml:1: inventory: required key is missing",
            "sweep.yaml:1: workload: required key is missing",
        ],
    ),
    "workload with none of train, command, vllm": (
        "name: a\ninventory: inv.yaml\nworkload:\n  working_dir: .\n",
        ["sweep.yaml:3: workload: give exactly one of train:, command: or vllm: (got none)"],
    ),
    "workload with two of them": (
        BASE + "  command: [python, b.py]\n",
        [
            "sweep.yaml:3: workload: give exactly one of train:, command: or vllm: "
            "(got train and command)"
        ],
    ),
    "empty command": (
        "name: a\ninventory: inv.yaml\nworkload:\n  command: []\n",
        ["sweep.yaml:4: workload.command: give the command and its arguments, e.g. [python, a.py]"],
    ),
    "unknown vllm key": (
        "name: a\ninventory: inv.yaml\nworkload:\n  vllm:\n    model: m\n    batch: 4\n",
        [
            "sweep.yaml:6: workload.vllm.batch: unknown key 'batch'; did you mean 'batch_size'? "
            "allowed keys: batch_size, input_len, model, output_len, tensor_parallel_size"
        ],
    ),
    "misspelt trainer option": (
        BASE.replace("max_steps: 30", "batchsize: 8"),
        [
            "sweep.yaml:4: workload.train.batchsize: 'batchsize' is not an rtk train option; "
            "did you mean 'batch_size'?"
        ],
    ),
    "run_dir in the workload": (
        BASE.replace("max_steps: 30", "run_dir: /tmp/r"),
        [
            "sweep.yaml:4: workload.train.run_dir: 'run_dir' is set by rtk profile itself: each "
            "run gets its own directory under the sweep directory (output_dir:)"
        ],
    ),
    "telemetry in the workload": (
        BASE.replace("max_steps: 30", "telemetry: false"),
        [
            "sweep.yaml:4: workload.train.telemetry: 'telemetry' is set by rtk profile itself: "
            "every run is measured"
        ],
    ),
    "baseline_s as an axis": (
        BASE + "axes:\n  baseline_s: [5, 10]\n",
        [
            "sweep.yaml:6: axes.baseline_s: 'baseline_s' is set by rtk profile itself: give "
            "baseline_s: at the top level of the file"
        ],
    ),
    "unknown axis with a close match": (
        BASE + "axes:\n  batch_sise: [4]\n",
        [
            "sweep.yaml:6: axes.batch_sise: 'batch_sise' is neither an rtk train option nor one "
            "of nodes, power_limit_w, gpu_clocks_mhz, mem_clocks_mhz; did you mean 'batch_size'?"
        ],
    ),
    "unknown axis close to a cluster axis": (
        BASE + "axes:\n  power_limit: [300]\n",
        [
            "sweep.yaml:6: axes.power_limit: 'power_limit' is neither an rtk train option nor "
            "one of nodes, power_limit_w, gpu_clocks_mhz, mem_clocks_mhz; did you mean "
            "'power_limit_w'?"
        ],
    ),
    "axis not for a vllm workload": (
        VLLM + "axes:\n  max_steps: [10]\n",
        [f"sweep.yaml:6: axes.max_steps: {CLUSTER}gpu_clocks_mhz, mem_clocks_mhz"],
    ),
    "vllm axis value": (
        VLLM + "axes:\n  batch_size: [8, 0]\n  input_len: [many]\n",
        [
            "sweep.yaml:6: axes.batch_size[1]: got 0; expected greater than or equal to 1",
            "sweep.yaml:7: axes.input_len[0]: got 'many'; expected a valid integer",
        ],
    ),
    "empty axis": (
        BASE + "axes:\n  batch_size: []\n",
        ["sweep.yaml:6: axes.batch_size: give at least one value"],
    ),
    "axis not a list": (
        BASE + "axes:\n  batch_size: 4\n",
        ["sweep.yaml:6: axes.batch_size: got 4; expected a valid list"],
    ),
    "node counts not whole numbers >= 1": (
        BASE + "axes:\n  nodes:\n    - 1\n    - 0\n    - 1.5\n    - two\n    - true\n",
        [
            "sweep.yaml:8: axes.nodes[1]: node counts are whole numbers >= 1; got 0",
            "sweep.yaml:9: axes.nodes[2]: node counts are whole numbers >= 1; got 1.5",
            "sweep.yaml:10: axes.nodes[3]: node counts are whole numbers >= 1; got 'two'",
            "sweep.yaml:11: axes.nodes[4]: node counts are whole numbers >= 1; got True",
        ],
    ),
    "power limit not watts": (
        COMMAND + "axes:\n  power_limit_w: [300, high, 0]\n",
        [
            "sweep.yaml:6: axes.power_limit_w[1]: a power limit is watts above 0, such as 300; "
            "got 'high'",
            "sweep.yaml:6: axes.power_limit_w[2]: a power limit is watts above 0, such as 300; "
            "got 0",
        ],
    ),
    "clocks not min <= max": (
        COMMAND + "axes:\n  gpu_clocks_mhz: [[1400, 1200], [1, 2, 3]]\n",
        [
            "sweep.yaml:6: axes.gpu_clocks_mhz[0]: clocks are MHz, one value or [min, max] with "
            "min <= max, such as [1200, 1400]; got [1400, 1200]",
            "sweep.yaml:6: axes.gpu_clocks_mhz[1]: clocks are MHz, one value or [min, max] with "
            "min <= max, such as [1200, 1400]; got [1, 2, 3]",
        ],
    ),
    "axis value given twice": (
        BASE + "axes:\n  batch_size: [4, 8, 4]\n",
        ["sweep.yaml:6: axes.batch_size[2]: 4 is given twice; give each value once"],
    ),
    "axis value the trainer rejects": (
        BASE + "axes:\n  strategy: [ddp, foo]\n  batch_size: [4]\n",
        [
            "sweep.yaml:5: axes: strategy=foo,batch_size=4: --strategy 'foo': choose ddp, fsdp2, "
            "deepspeed"
        ],
    ),
    "workload option the trainer rejects": (
        BASE.replace("max_steps: 30", "max_steps: 0") + "axes:\n  nodes: [1, 2]\n",
        ["sweep.yaml:4: workload.train: --max-steps must be at least 1"],
    ),
    "trainer options of the wrong type": (
        # learning_rate as a string used to pass the check and reach the trainer.
        BASE.replace("max_steps: 30", "learning_rate: '3e-3', max_steps: '30'")
        + "axes:\n  batch_size: [4, eight, 8.0]\n",
        [
            "sweep.yaml:4: workload.train.learning_rate: got '3e-3'; expected a valid number",
            "sweep.yaml:4: workload.train.max_steps: got '30'; expected a valid integer",
            "sweep.yaml:6: axes.batch_size[1]: got 'eight'; expected a valid integer",
            "sweep.yaml:6: axes.batch_size[2]: got 8.0; expected a valid integer",
        ],
    ),
    "repeats 0": (
        BASE + "repeats: 0\n",
        ["sweep.yaml:5: repeats: got 0; expected greater than or equal to 1"],
    ),
    "negative baseline": (
        BASE + "baseline_s: -1\n",
        ["sweep.yaml:5: baseline_s: got -1; expected greater than or equal to 0"],
    ),
    "bad name": (
        BASE.replace("tiny-sweep", "my sweep"),
        [
            "sweep.yaml:1: name: got 'my sweep'; a name is 1-64 letters, digits, '.', '_' and "
            "'-', starting with a letter or digit (it names the sweep directory)"
        ],
    ),
    "key given twice": (
        BASE + "axes:\n  batch_size: [4]\n  batch_size: [8]\n",
        ["sweep.yaml:7: axes.batch_size: key given twice (also on line 6); keep one"],
    ),
    "not YAML": (
        BASE + "axes: [\n",
        ["sweep.yaml:6: not valid YAML: expected the node content, but found '<stream end>'"],
    ),
    "not a mapping": (
        "- name: a\n",
        [
            "sweep.yaml:1: got a list; expected a mapping with name:, inventory:, workload: and "
            "axes:"
        ],
    ),
    "empty file": (
        "",
        ["sweep.yaml: got an empty file; expected a mapping with name:, inventory:, workload:"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistake_gets_one_clear_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, expected = CASES[case]
    problems = _problems(tmp_path, monkeypatch, text)
    assert len(problems) == len(expected), problems
    for got, want in zip(problems, expected, strict=True):
        assert got.startswith(want), f"\n got: {got}\nwant: {want}"
        assert "\n" not in got


def test_all_problems_reported_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = textwrap.dedent("""\
        name: a
        inventory: inv.yaml
        workload:
          train: {batchsize: 4, resume: true}
        axes:
          colour: [red]
          nodes: [0]
    """)
    problems = _problems(tmp_path, monkeypatch, text)
    assert [p.split(": ")[1] for p in problems] == [
        "workload.train.batchsize",
        "workload.train.resume",
        "axes.colour",
        "axes.nodes[0]",
    ]
    assert [p.split(":")[1] for p in problems] == ["4", "4", "6", "7"]


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ExperimentError) as caught:
        load_experiment(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: cannot read it: [Errno 2] No such file or directory: '{path}'"
    ]


# ---- the command line -------------------------------------------------------------------


def test_help_shows_an_example() -> None:
    done = rtk("profile", "--help", timeout=60)
    assert done.returncode == 0, done.stderr
    for line in ("name: tiny-sweep", "inventory: inventory.yaml", "nodes: [1, 2]", "repeats: 2"):
        assert line in done.stdout
    assert "rtk profile sweep.yaml --results" in done.stdout


def test_bad_file_exits_3_with_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "axes:\n  batch_sise: [4]\n  nodes: [0]\n")
    done = rtk("profile", str(path), timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"rtk: {path}:6: axes.batch_sise: 'batch_sise' is neither an rtk train option nor one "
        "of nodes, power_limit_w, gpu_clocks_mhz, mem_clocks_mhz; did you mean 'batch_size'?",
        f"rtk: {path}:7: axes.nodes[0]: node counts are whole numbers >= 1; got 0",
    ]
    assert done.stdout == ""


def test_missing_file_exits_3(tmp_path: Path) -> None:
    done = rtk("profile", str(tmp_path / "absent.yaml"), timeout=60)
    assert done.returncode == 3
    assert done.stderr.startswith(f"rtk: {tmp_path / 'absent.yaml'}: cannot read it:")
    assert len(done.stderr.splitlines()) == 1


def test_results_before_any_run_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(VALID)
    done = rtk("profile", str(path), "--results", timeout=60)
    assert done.returncode == 1
    sweep = tmp_path.resolve() / "profile-runs" / "tiny-sweep"
    assert done.stderr.splitlines() == [f"rtk: {sweep}: no such sweep directory"]
    assert not sweep.exists()  # looking did not create it


def test_results_of_a_sweep_with_no_runs_says_so(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(VALID)
    sweep = tmp_path.resolve() / "profile-runs" / "tiny-sweep"
    sweep.mkdir(parents=True)
    done = rtk("profile", str(path), "--results", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[0] == "no runs found in the sweep"
    assert (sweep / "results.csv").read_text().count("\n") == 1  # the header alone


# ---- found by the property tests (tests/unit/properties/) ----------------------------

COMMAND = "name: c\ninventory: inv.yaml\nworkload:\n  command: [python, bench.py]\n"


def test_an_axis_value_that_is_no_json_is_refused_with_how_to_quote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # json.dumps raised TypeError on the date when the run's RTK_AXIS_* were built.
    got = _problems(tmp_path, monkeypatch, COMMAND + "axes:\n  day: [2024-01-01]\n")
    assert got == [
        "sweep.yaml:6: axes.day[0]: got datetime.date(2024, 1, 1), a date; give numbers, "
        "text, true/false or lists of them (YAML reads 2024-01-01 as a date: quote it for text)"
    ]


def test_a_command_workloads_axis_names_are_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _problems(
        tmp_path, monkeypatch, COMMAND + "axes:\n  'a b': [1]\n  size: [1]\n  SIZE: [2]\n"
    )
    assert got == [
        "sweep.yaml:6: axes.a b: the command gets each axis as RTK_AXIS_<NAME>; name it with "
        "letters, digits and '_', not starting with a digit (got 'a b')",
        "sweep.yaml:7: axes.size: RTK_AXIS_SIZE would name two axes; rename one",
        "sweep.yaml:8: axes.SIZE: RTK_AXIS_SIZE would name two axes; rename one",
    ]
