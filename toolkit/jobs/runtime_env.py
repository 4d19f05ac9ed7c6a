"""A job's runtime environment: rtk's, with what the user gives merged in as Ray's CLI does.

``rtk launch --runtime-env-json JSON --env KEY=VALUE --working-dir DIR`` reads like
Ray's CLI and merges the same way (pure, nothing submitted here):

- the JSON's keys (``pip``, ``py_modules``...) win over rtk's defaults, except
  ``excludes``: the JSON's come first, then rtk's (its output and state
  directories, when inside the working directory rtk chose);
- its ``working_dir`` wins over rtk's default (``.``), and an explicit
  ``--working-dir`` wins over both, as in ``ray job submit``;
- environment variables: rtk's, then the JSON's ``env_vars``, then each ``--env``,
  the later winning; except ``PROTECTED_ENV``, which the cluster needs as rtk set
  them: asking for one of them is an error, not silently ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from toolkit.errors import RtkError
from toolkit.json_types import JsonObject, JsonValue

# Variables a job must not change, and why: Ray's token auth (a job's ray.init()
# must reach its own cluster), and the marker rtk down finds the job's processes by.
PROTECTED_ENV: Mapping[str, str] = {
    "RAY_AUTH_MODE": "the cluster's token authentication",
    "RAY_AUTH_TOKEN": "the cluster's token authentication",
    "RAY_AUTH_TOKEN_PATH": "the cluster's token authentication",
    "RAY_USE_TLS": "the cluster's TLS (ray.tls)",
    "RAY_TLS_SERVER_CERT": "the cluster's TLS (ray.tls)",
    "RAY_TLS_SERVER_KEY": "the cluster's TLS (ray.tls)",
    "RAY_TLS_CA_CERT": "the cluster's TLS (ray.tls)",
    "RTK_CLUSTER_DIR": "the marker rtk down finds the job's processes by",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RuntimeEnvError(RtkError):
    """A runtime environment option is malformed; the message is one line, naming it."""


def parse_runtime_env_json(text: str | None) -> JsonObject:
    """``--runtime-env-json``'s value as a JSON object (``{}`` when not given).

    Raises:
        RuntimeEnvError: Not JSON, not an object, ``working_dir`` is not a path, or
            ``env_vars`` is not an object of strings named as variables.
    """
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RuntimeEnvError(
            f"--runtime-env-json: not JSON ({e.msg} at character {e.pos}); give an object "
            'like \'{"env_vars": {"KEY": "value"}, "pip": ["requests"]}\''
        ) from e
    except RecursionError as e:  # json's reader gives up on thousands of nested brackets
        raise RuntimeEnvError("--runtime-env-json: nested too deeply to read") from e
    if not isinstance(data, dict):
        raise RuntimeEnvError(
            f"--runtime-env-json: give a JSON object, not {type(data).__name__} {text!r}"
        )
    if not isinstance(data.get("working_dir", ""), str):
        raise RuntimeEnvError(
            "--runtime-env-json: working_dir must be a directory's path (a string), got "
            f"{data['working_dir']!r}"
        )
    env_vars = data.get("env_vars", {})
    if not isinstance(env_vars, dict):
        raise RuntimeEnvError(
            f"--runtime-env-json: env_vars must be an object of strings, got {env_vars!r}"
        )
    for key, value in env_vars.items():
        if not _ENV_NAME.fullmatch(key):
            # Ray would only fail when the job starts: os.environ refuses such a name.
            raise RuntimeEnvError(
                f"--runtime-env-json: env_vars {key!r} is not a variable name (letters, digits, _)"
            )
        if not isinstance(value, str):
            raise RuntimeEnvError(
                f"--runtime-env-json: env_vars.{key} must be a string, got {value!r}"
            )
    return data


def parse_env_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` options as a dict; a key given twice keeps its last value.

    Raises:
        RuntimeEnvError: One has no ``=``, or its name is not a variable name.
    """
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise RuntimeEnvError(f"--env {pair!r}: give KEY=VALUE, e.g. --env LOG_LEVEL=debug")
        if not _ENV_NAME.fullmatch(key):
            raise RuntimeEnvError(
                f"--env {pair!r}: {key!r} is not a variable name (letters, digits, _)"
            )
        env[key] = value
    return env


def merge_runtime_env(
    rtk_env: Mapping[str, JsonValue],
    user_env: Mapping[str, JsonValue],
    env_vars: Mapping[str, str],
    working_dir: str | None = None,
) -> JsonObject:
    """The runtime env rtk built, with the user's merged in (the module's rules).

    Args:
        rtk_env: What rtk builds for the job (``JobRequest.runtime_env``).
        user_env: ``--runtime-env-json``'s object.
        env_vars: ``--env``'s variables.
        working_dir: ``--working-dir`` when given explicitly (None: rtk's default,
            which the JSON's ``working_dir`` replaces).

    Raises:
        RuntimeEnvError: The user sets a ``PROTECTED_ENV`` variable.
    """
    user_vars: JsonObject = {**_object(user_env.get("env_vars")), **env_vars}
    for key in user_vars:
        if key in PROTECTED_ENV:
            raise RuntimeEnvError(
                f"{key}: rtk sets it for {PROTECTED_ENV[key]}; a job cannot change it"
            )
    merged: JsonObject = {**rtk_env, **{k: v for k, v in user_env.items() if k != "env_vars"}}
    if working_dir is not None:
        merged["working_dir"] = str(Path(working_dir).resolve())
    variables: JsonObject = {**_object(rtk_env.get("env_vars")), **user_vars}
    merged.pop("env_vars", None)
    if variables:
        merged["env_vars"] = variables
    excludes = _merged_excludes(rtk_env, user_env, merged.get("working_dir"))
    if excludes is None:
        merged.pop("excludes", None)
    else:
        merged["excludes"] = excludes  # in rtk's place when it had one (dry runs list them)
    return merged


def _merged_excludes(
    rtk_env: Mapping[str, JsonValue], user_env: Mapping[str, JsonValue], working_dir: JsonValue
) -> JsonValue:
    """The user's ``excludes``, then rtk's (``working_dir_env``), or None when neither.

    rtk's patterns are anchored at the working directory rtk chose: one the JSON
    names instead gets none of them (they could hide a folder of its own).
    """
    user = user_env.get("excludes")
    if user is not None and not isinstance(user, list):
        return user  # not a list: Ray says what is wrong with it
    ours = rtk_env.get("excludes")
    if _same_dir(working_dir, rtk_env.get("working_dir")):
        user = user or []
        rtk_patterns = ours if isinstance(ours, list) else []
        return [*user, *(x for x in rtk_patterns if x not in user)] or None
    return user


def _object(value: JsonValue | None) -> JsonObject:
    """``value`` when it is an object (``env_vars``), else an empty one."""
    return value if isinstance(value, dict) else {}


def _same_dir(given: object, ours: object) -> bool:
    if not isinstance(given, str) or not isinstance(ours, str) or "://" in given:
        return given == ours
    return _absolute(given) == Path(ours)


def working_dir_env(
    working_dir: str, run_dir: str | None = None, state_dir: str | None = None
) -> JsonObject:
    """``working_dir`` (resolved), and ``excludes`` keeping rtk's own files out of its package.

    Ray zips and uploads the whole working directory with every job, up to its
    gRPC limit (512 MiB). With the output directory inside it (``rtk sbatch``'s
    default ``rtk-runs/`` in the submit directory), every job would ship every
    earlier run's telemetry, fail once that passes the limit, and zip files that
    jobs beside it are still writing. So the output directory (the run
    directory's parent), or the run directory where that is the working directory
    itself, is excluded when it lies inside; so is rtk's state directory
    (``state_dir``: tokens and the TLS CA's key), which has no business in a job.
    Pure: nothing is read.
    """
    base = _absolute(working_dir)
    excludes = []
    if run_dir:
        run = _absolute(run_dir)
        excludes += [p for p in (run.parent, run) if _inside(p, base)][:1]
    if state_dir and _inside(_absolute(state_dir), base):
        excludes.append(_absolute(state_dir))
    env: JsonObject = {"working_dir": str(base)}
    if excludes:
        # Patterns anchored at the working directory: those directories, not namesakes.
        env["excludes"] = ["/" + p.relative_to(base).as_posix() for p in excludes]
    return env


def _absolute(path: str) -> Path:
    return Path(path).expanduser().resolve()


def _inside(path: Path, base: Path) -> bool:
    return path != base and path.is_relative_to(base)
