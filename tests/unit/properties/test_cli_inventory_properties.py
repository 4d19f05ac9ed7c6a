"""rtk's commands that read an inventory, given hostile ones and hostile options.

Through rtk's real entry point (``toolkit.cli.main``), in this process: every case
exits 0, or 2/3 with rtk's one-line messages (click's usage error for a bad
option), never a traceback; no file appears outside the working directory's own
outputs; and the batch script ``rtk sbatch render`` prints gives back, read by bash
and by shlex, exactly the values it was given, with no command of theirs run.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml
from hostile_input import (
    PWNED,
    examples,
    hostile_text,
    mutate,
    no_writes_outside,
    render_yaml,
    run_rtk,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

INVENTORY: dict[str, Any] = {
    "cluster": "hx",
    "defaults": {"ssh": {"user": "u"}, "python": "/opt/v/bin/python"},
    "nodes": [
        {"host": "n1", "address": "10.0.0.1", "gpus": 2},
        {"host": "w[1-3]", "address": "10.0.0.[2-4]", "gpus": 2},
    ],
    "slurm": {"partition": "gpu", "time": "01:00:00", "job_name": "j", "account": "a"},
}


def argv_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Hostile text that can be a command-line argument (no NUL: argv cannot hold one)."""
    return hostile_text(max_size).map(lambda s: s.replace("\x00", ""))


@st.composite
def inventory_texts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return render_yaml(draw, mutate(draw, INVENTORY))
    return yaml.safe_dump(mutate(draw, INVENTORY, hostile_text(), leaves_only=True))


@settings(max_examples=examples(100))
@given(inventory_texts(), st.sampled_from(["check", "up", "up-summary", "down"]))
def test_inventory_commands_work_or_say_why_in_one_line(text: str, command: str) -> None:
    args = {
        "check": ["inventory", "check", "inv.yaml"],
        "up": ["up", "inv.yaml", "--dry-run", "--full"],
        "up-summary": ["up", "inv.yaml", "--dry-run"],
        "down": ["down", "inv.yaml", "--dry-run"],
    }[command]
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        (root / "work" / "inv.yaml").write_text(text, encoding="utf-8")
        with no_writes_outside(root, allowed=[root / "home", root / "work"]):
            outcome = run_rtk(args, root)
    event(f"exit {outcome.code}")
    outcome.check_clean_failure((3, 6))


SBATCH_OPTIONS = [
    "--partition",
    "--account",
    "--time",
    "--job-name",
    "--job-output",
    "--output-dir",
    "--run-id",
    "--python",
    "--sbatch-arg",
    "--exclude",
    "--nodes",
    "--gpus-per-node",
    "--grace-s",
]


@st.composite
def sbatch_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, str], list[str]]:
    """``rtk sbatch render`` arguments: options with hostile values, then a command."""
    chosen = draw(st.lists(st.sampled_from(SBATCH_OPTIONS), unique=True, max_size=5))
    given = {}
    for option in chosen:
        plain = draw(st.sampled_from(["gpu", "a.b", "01:00:00", "x-1", "4", "n1", "--qos=high"]))
        given[option] = draw(st.one_of(st.just(plain), argv_text()))
    command = draw(st.lists(argv_text(20), max_size=4))
    args = ["sbatch", "render", "inv.yaml"]
    for option, value in given.items():
        args.append(f"{option}={value}")
    if draw(st.booleans()):
        args += ["--template", "cluster", "--", *command] if command else []
    else:
        command = []
    return args, given, command


@settings(max_examples=examples(150))
@given(sbatch_lines(), st.booleans())
def test_sbatch_render_quotes_every_value_it_was_given(
    line: tuple[list[str], dict[str, str], list[str]], hostile_inventory: bool
) -> None:
    args, given, command = line
    inventory = json.loads(json.dumps(INVENTORY))
    if hostile_inventory:
        inventory["defaults"]["python"] = "/opt/v'$(touch rtk-pwned)'\n/bin/python"
        inventory["defaults"]["env"] = {"A": f"'; touch {PWNED}; '"}
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        text = yaml.safe_dump(inventory)
        (root / "work" / "inv.yaml").write_text(text, encoding="utf-8")
        with no_writes_outside(root, allowed=[root / "home", root / "work"]):
            outcome = run_rtk(args, root)
            event(f"exit {outcome.code}")
            outcome.check_clean_failure((2, 3))
            if outcome.code == 0:
                check_script(outcome.stdout, given, command, text, root / "work")


def check_script(
    script: str, given: dict[str, str], command: list[str], inventory_text: str, work: Path
) -> None:
    """The script's #SBATCH lines, variables, heredoc and command are the values given."""
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    for line in directives:
        assert re.fullmatch(r"#SBATCH --[a-z-]+(=\S+)?", line), line
    for option in ("--partition", "--account", "--time", "--job-name"):
        if option in given:
            assert f"#SBATCH {option}={given[option]}" in directives
    if "--job-output" in given:
        assert f"#SBATCH --output={given['--job-output']}" in directives
    # The prologue's variables, and the embedded inventory, as bash reads them.
    prologue = script.split("\nRTK_SUBMIT_DIR=", 1)[0]
    heredoc = re.search(r"\ncat >\"\$RTK_INVENTORY\" <<'(\w+)'\n.*?\n\1\n", script, re.DOTALL)
    assert heredoc is not None
    probe = (
        prologue
        + "\nRTK_INVENTORY=embedded.yaml"
        + heredoc.group(0)
        + '\nprintf "%s\\0" "${RTK[@]}" "$RTK_OUTPUT_DIR" "$RTK_RUN_ID"\n'
    )
    done = subprocess.run(
        ["bash", "-c", probe], cwd=work, capture_output=True, check=True, timeout=30
    )
    values = done.stdout.decode().split("\0")[:-1]
    python = given.get("--python") or values[0]
    assert values == [
        python,
        "-m",
        "toolkit",
        given.get("--output-dir") or "rtk-runs",
        given.get("--run-id", ""),
    ]
    assert (work / "embedded.yaml").read_text() == inventory_text
    assert not (work / PWNED).exists()
    if command:
        start = script.index('--run-id "$RTK_RUN_ID" -- ') + len('--run-id "$RTK_RUN_ID" -- ')
        end = script.index(" ||\n  RTK_STATUS=$?", start)
        assert shlex.split(script[start:end]) == command
