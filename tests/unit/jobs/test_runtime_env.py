"""``--runtime-env-json`` and ``--env`` merged with rtk's runtime env, as ``ray job submit`` does."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from toolkit.jobs.runtime_env import (
    PROTECTED_ENV,
    RuntimeEnvError,
    merge_runtime_env,
    parse_env_pairs,
    parse_runtime_env_json,
    working_dir_env,
)

RTK = {"working_dir": "/home/me/project", "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "30"}}


def test_the_users_keys_and_variables_win_over_rtks_defaults() -> None:
    user = parse_runtime_env_json(
        '{"pip": ["emoji"], "env_vars": {"A": "json", "B": "json", '
        '"RAY_JOB_STOP_WAIT_TIME_S": "5"}}'
    )
    merged = merge_runtime_env(RTK, user, parse_env_pairs(["B=flag", "C=x=y"]))
    assert merged == {
        "working_dir": "/home/me/project",
        "pip": ["emoji"],
        "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "5", "A": "json", "B": "flag", "C": "x=y"},
    }
    assert RTK["env_vars"] == {"RAY_JOB_STOP_WAIT_TIME_S": "30"}  # not changed in place


def test_working_dir_json_beats_the_default_and_the_flag_beats_both(tmp_path: Path) -> None:
    user = parse_runtime_env_json('{"working_dir": "s3://bucket/code.zip"}')
    assert merge_runtime_env(RTK, user, {})["working_dir"] == "s3://bucket/code.zip"
    given = merge_runtime_env(RTK, user, {}, working_dir=str(tmp_path))
    assert given["working_dir"] == str(tmp_path.resolve())


def test_no_variables_means_no_env_vars_key() -> None:
    assert merge_runtime_env({"working_dir": "/w"}, {}, {}) == {"working_dir": "/w"}


@pytest.mark.parametrize("name", sorted(PROTECTED_ENV))
def test_rtks_auth_and_marker_variables_cannot_be_changed(name: str) -> None:
    for user, flags in (({"env_vars": {name: "x"}}, {}), ({}, {name: "x"})):
        with pytest.raises(RuntimeEnvError, match=rf"^{name}: rtk sets it for "):
            merge_runtime_env(RTK, user, flags)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{bad", "--runtime-env-json: not JSON"),
        ('["pip"]', "--runtime-env-json: give a JSON object, not list"),
        ('{"env_vars": ["A=1"]}', "env_vars must be an object of strings"),
        ('{"env_vars": {"N": 1}}', "env_vars.N must be a string, got 1"),
        # Found by the property tests: a RecursionError, and names Ray fails on only later.
        ("[" * 100_000, "--runtime-env-json: nested too deeply to read"),
        ('{"working_dir": {}}', "working_dir must be a directory's path (a string), got {}"),
        ('{"env_vars": {"A=B": "x"}}', "env_vars 'A=B' is not a variable name"),
        ('{"env_vars": {"A\\nB": "x"}}', "env_vars 'A\\nB' is not a variable name"),
    ],
)
def test_bad_json_is_one_line_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(RuntimeEnvError) as bad:
        parse_runtime_env_json(text)
    assert message in str(bad.value)
    assert "\n" not in str(bad.value)


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("NOEQUALS", "--env 'NOEQUALS': give KEY=VALUE"),
        ("=value", "'' is not a variable name"),
        ("1X=2", "'1X' is not a variable name"),
    ],
)
def test_bad_env_pairs_name_what_was_given(pair: str, message: str) -> None:
    with pytest.raises(RuntimeEnvError, match="^--env ") as bad:
        parse_env_pairs([pair])
    assert message in str(bad.value)


def test_an_empty_value_is_a_value() -> None:
    assert parse_env_pairs(["EMPTY=", "A=1", "A=2"]) == {"EMPTY": "", "A": "2"}


def test_runs_inside_the_working_dir_stay_out_of_the_package_ray_uploads(tmp_path: Path) -> None:
    """Ray zips the working dir with every job: earlier runs' telemetry must not go along."""
    from ray._private.runtime_env.packaging import create_package

    project = tmp_path / "project"
    for name in ("train.py", "rtk-runs/old/telemetry/node1.jsonl", "lib/rtk-runs/keep.py"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("x")
    env = working_dir_env(str(project), str(project / "rtk-runs" / "new"))
    assert env == {"working_dir": str(project.resolve()), "excludes": ["/rtk-runs"]}
    package = tmp_path / "package.zip"
    create_package(env["working_dir"], package, include_gitignore=True, excludes=env["excludes"])
    shipped = {n.rstrip("/") for n in zipfile.ZipFile(package).namelist()}
    assert {"train.py", "lib/rtk-runs/keep.py"} <= shipped  # a namesake deeper down stays
    assert not any(n.startswith("rtk-runs") for n in shipped), shipped


def test_only_an_output_dir_inside_the_working_dir_is_excluded(tmp_path: Path) -> None:
    # --output-dir . puts each run in the working dir itself: that run alone stays out.
    assert working_dir_env(str(tmp_path), str(tmp_path / "run1"))["excludes"] == ["/run1"]
    elsewhere = working_dir_env(str(tmp_path / "code"), str(tmp_path / "runs" / "run1"))
    assert "excludes" not in elsewhere
    assert "excludes" not in working_dir_env(str(tmp_path), None)
    assert "excludes" not in working_dir_env(str(tmp_path), str(tmp_path))
    # rtk's state (tokens, the CA's key) kept in the project stays out as well.
    both = working_dir_env(str(tmp_path), str(tmp_path / "o" / "r"), str(tmp_path / ".rtk"))
    assert both["excludes"] == ["/o", "/.rtk"]
    assert "excludes" not in working_dir_env(str(tmp_path / "code"), None, str(tmp_path))


def test_the_users_excludes_come_first_and_rtks_stay_only_where_they_were_anchored(
    tmp_path: Path,
) -> None:
    ours = working_dir_env(str(tmp_path), str(tmp_path / "rtk-runs" / "r1"), str(tmp_path / "s"))
    user = parse_runtime_env_json('{"excludes": ["*.ckpt", "/s"]}')
    merged = merge_runtime_env(ours, user, {})
    assert merged["excludes"] == ["*.ckpt", "/s", "/rtk-runs"]
    assert "excludes" not in merge_runtime_env({"working_dir": str(tmp_path)}, {}, {})
    # The JSON's own working_dir: rtk's patterns meant another folder, and are dropped.
    other = merge_runtime_env(ours, parse_runtime_env_json('{"working_dir": "/srv/code"}'), {})
    assert "excludes" not in other
    both = '{"working_dir": "/srv/code", "excludes": ["data/"]}'
    assert merge_runtime_env(ours, parse_runtime_env_json(both), {})["excludes"] == ["data/"]
    # The same folder spelled another way keeps them.
    same = parse_runtime_env_json(json.dumps({"working_dir": f"{tmp_path}/."}))
    assert merge_runtime_env(ours, same, {})["excludes"] == ["/rtk-runs", "/s"]
