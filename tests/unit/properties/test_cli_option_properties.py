"""The CLI's free-text options, given hostile text: parsed exactly, or refused in one line.

``--resources-per-worker``, ``--env``, ``--runtime-env-json``, ``--ray-address``,
``--run-id``, ``--exclude`` and ``--exclude-file``: through the parsers and through
``rtk train/launch/up --dry-run`` (rtk's real entry point, in this process), each
case exits 0, or 2/3 with rtk's one-line messages or click's usage error; a job's
command reaches its entrypoint quoted, word for word.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hostile_input import examples, hostile_text, no_writes_outside, run_rtk, yaml_values
from hypothesis import event, given, settings
from hypothesis import strategies as st

from toolkit.errors import RtkError
from toolkit.flows.ray_address import parse_ray_address
from toolkit.jobs.runtime_env import RuntimeEnvError, parse_env_pairs, parse_runtime_env_json

INVENTORY = (
    "cluster: hx\n"
    "nodes:\n"
    "  - {host: n1, address: 10.0.0.1, python: /opt/v/bin/python}\n"
    "  - {host: 'w[1-3]', address: '10.0.0.[2-4]'}\n"
    "min_nodes: 1\n"
)


def argv_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Hostile text that can be a command-line argument (no NUL: argv cannot hold one)."""
    return hostile_text(max_size).map(lambda s: s.replace("\x00", ""))


def json_text() -> st.SearchStrategy[str]:
    """JSON of any shape, JSON-like text, or any text."""

    def dumped(value: Any) -> str:
        return json.dumps(value, default=str)

    return st.one_of(
        yaml_values().map(dumped),
        st.dictionaries(argv_text(12), yaml_values(), max_size=4).map(dumped),
        st.builds(
            lambda env, rest: dumped({"env_vars": env, **rest}),
            st.dictionaries(argv_text(12), st.one_of(argv_text(), yaml_values()), max_size=3),
            st.dictionaries(st.sampled_from(["pip", "working_dir", "excludes"]), yaml_values()),
        ),
        st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
        argv_text(),
    )


def one_line(error: Exception) -> None:
    assert str(error) and "\n" not in str(error), str(error)


@settings(max_examples=examples(100))
@given(json_text())
def test_runtime_env_json_is_an_object_or_one_line_why(text: str) -> None:
    try:
        env = parse_runtime_env_json(text)
    except RuntimeEnvError as e:
        one_line(e)
        return
    assert not text or env == json.loads(text)
    for key, value in env.get("env_vars", {}).items():
        assert key.isidentifier() and key.isascii() and isinstance(value, str)


@settings(max_examples=examples(100))
@given(st.lists(argv_text(), max_size=4))
def test_env_pairs_split_at_the_first_equals_sign_or_say_why(pairs: list[str]) -> None:
    try:
        env = parse_env_pairs(pairs)
    except RuntimeEnvError as e:
        one_line(e)
        return
    assert env == dict(pair.split("=", 1) for pair in pairs)


@settings(max_examples=examples(100))
@given(st.one_of(argv_text(), st.builds(lambda s, h: f"{s}://{h}", argv_text(8), argv_text(30))))
def test_a_ray_address_is_a_host_and_port_or_one_line_why(text: str) -> None:
    try:
        address = parse_ray_address(text)
    except RtkError as e:
        one_line(e)
        return
    if address.host is not None:
        assert address.host and address.port is not None and 0 <= address.port <= 65535


def in_tmp(args: list[str], files: dict[str, str] | None = None) -> Any:
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        (root / "work" / "inv.yaml").write_text(INVENTORY)
        for name, text in (files or {}).items():
            (root / "work" / name).write_text(text, encoding="utf-8")
        with no_writes_outside(root, allowed=[root / "home", root / "work"]):
            outcome = run_rtk(args, root)
    event(f"exit {outcome.code}")
    return outcome


def often(valid: list[str], hostile: st.SearchStrategy[str]) -> st.SearchStrategy[str | None]:
    """Not given, a valid value, or a hostile one: so that some cases get past every check."""
    return st.one_of(st.none(), st.sampled_from(valid), hostile)


@settings(max_examples=examples(100))
@given(
    often(['{"GPU": 1}', '{"CPU": 0.5, "nvlink": 1}'], json_text()),
    often(["r1", "a.b", "x_y-2", "é"], argv_text()),
    often(["auto", "10.0.0.1:6379", "ray://10.0.0.1:10001", "http://10.0.0.1:8265"], argv_text()),
)
def test_train_dry_run_takes_its_free_text_options_or_says_why(
    resources: str | None, run_id: str | None, address: str | None
) -> None:
    args = ["train", "inv.yaml", "--dry-run"]
    for option, value in (
        ("--resources-per-worker", resources),
        ("--run-id", run_id),
        ("--ray-address", address),
    ):
        if value is not None:
            args.append(f"{option}={value}")
    outcome = in_tmp(args)
    # 1: --ray-address names another cluster than the inventory's (rtk's message).
    outcome.check_clean_failure((1, 2))
    if outcome.code == 0 and run_id is not None:
        assert f"~/rtk-runs/{run_id}/" in outcome.stdout


PAIRS = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["A", "LOG_LEVEL", "_X1"]), argv_text()),
    argv_text(),
)
ENV_JSON = st.builds(
    lambda env: json.dumps({"env_vars": env, "pip": ["emoji"]}),
    st.dictionaries(st.sampled_from(["A", "B_2"]), argv_text(), max_size=2),
)


@settings(max_examples=examples(100))
@given(
    st.lists(PAIRS, max_size=3),
    st.one_of(st.none(), ENV_JSON, json_text()),
    st.lists(argv_text(20), min_size=1, max_size=4),
)
def test_launch_dry_run_quotes_the_command_word_for_word(
    env_pairs: list[str], runtime_env: str | None, command: list[str]
) -> None:
    args = ["launch", "inv.yaml", "--dry-run"]
    args += [f"--env={pair}" for pair in env_pairs]
    if runtime_env is not None:
        args.append(f"--runtime-env-json={runtime_env}")
    outcome = in_tmp([*args, "--", *command])
    outcome.check_clean_failure((2,))
    if outcome.code == 0:
        text = outcome.stdout
        start = text.index("  entrypoint: ") + len("  entrypoint: ")
        end = text.index("\n  working_dir: ", start)
        assert shlex.split(text[start:end]) == command


@settings(max_examples=examples(100))
@given(
    st.lists(st.one_of(st.sampled_from(["w1", "w[2-3]", "n1"]), argv_text()), max_size=3),
    st.one_of(
        st.none(),
        st.sampled_from(
            ["w1\n# a comment\nw[2-3]\n", '{"exclude": [{"node": "w2", "reasons": ["slow"]}]}']
        ),
        argv_text(200),
        st.lists(argv_text(20), max_size=4).map("\n".join),
        json_text(),
        st.lists(
            st.one_of(
                st.dictionaries(st.sampled_from(["node", "reasons", "head"]), yaml_values()),
                yaml_values(),
            ),
            max_size=3,
        ).map(lambda items: json.dumps({"exclude": items}, default=str)),
    ),
)
def test_exclusions_leave_out_nodes_or_say_why(patterns: list[str], file_text: str | None) -> None:
    args = ["up", "inv.yaml", "--dry-run", "--full"] + [f"--exclude={p}" for p in patterns]
    files = {}
    if file_text is not None:
        files["exclude.txt"] = file_text
        args.append("--exclude-file=exclude.txt")
    outcome = in_tmp(args, files)
    outcome.check_clean_failure((2,))
