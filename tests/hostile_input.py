"""Hostile input for the property tests (tests/unit/properties/): strategies and runners.

- ``hostile_text()``: text a user (or an attacker who writes a file rtk reads) could
  give: shell metacharacters, newlines, NUL, YAML 1.1 look-alikes (``1:30``, ``010``,
  ``yes``), paths that climb (``../..``), unicode, huge and empty strings.
- ``yaml_values()``: any data a YAML file holds (nested maps and lists of those).
- ``render_yaml(draw, data)``: the data written as YAML text the way people write it,
  with every scalar's style drawn (plain, so that YAML 1.1 types it; quoted), and
  anchors, aliases, merge keys (``<<``), duplicate keys and tags thrown in.
- ``mutate(draw, base)``: a valid document with a few values replaced, keys added or
  removed, so that the cases reach past the schema into what rtk does with them.
- ``run_rtk(args, root)``: rtk's real entry point (``toolkit.cli.main``) in this
  process, its HOME, state and working directory under ``root``; returns the exit
  status and output. An exception that is not ``SystemExit`` propagates: that is a
  traceback the user would have seen.

``examples(n)`` is a test's example count: ``n`` in CI's profile, 20 times more in
the long one (RTK_HYPOTHESIS_PROFILE=long, see tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import strategies as st

from toolkit.cli import main

LONG = os.environ.get("RTK_HYPOTHESIS_PROFILE") == "long"


def examples(ci: int, long: int | None = None) -> int:
    """A test's example count: ``ci`` in CI's profile, else ``long`` (20 times ``ci``)."""
    if not LONG:
        return ci
    return long if long is not None else ci * 20


PWNED = "rtk-pwned"  # what an injected command would create (in the working directory)

SHELL = [
    f"'; touch {PWNED}; '",
    f'"; touch {PWNED}; "',
    f"$(touch {PWNED})",
    f"`touch {PWNED}`",
    f"; touch {PWNED}",
    f"&& touch {PWNED}",
    f"| touch {PWNED}",
    f"\ntouch {PWNED}\n",
    f"\ntouch {PWNED}\n#",
    "${IFS}",
    "$HOME",
    "*",
    "?",
    "!",
    "\\",
    "'",
    '"',
    "#",
    "-rf",
    "--help",
    "-",
    "--",
]
PATHS = ["~", "~root", "~nosuchuser-rtk/x", "..", "../..", "../../outside", "/", "/etc/passwd"]
PATHS += [".", "./x", "a/../../b", "/tmp", "//", "x" * 300]
YAML_WORDS = ["1:30", "010", "0x1F", "0o17", "0b101", "1_000", "1e3", "1.0e3", "3.10"]
YAML_WORDS += [".inf", "-.inf", ".nan", "~", "null", "Null", "yes", "no", "on", "Off", "y"]
YAML_WORDS += ["true", "False", "2024-01-01", "2024-02-30", "2024-01-01 10:00:00", "=", "<<"]
YAML_WORDS += ["0", "-1", "4", "65536", "99999999999999999999", "1e309"]
ODD = ["", " ", "\t", "\n", "\r\n", "\x00", "\x7f", "\u202e", "\ufeff", "\u2028", "é", "日本"]
ODD += ["🙂", "{{ x }}", "{% raw %}", "</script>", "%s%n", "[", "]", "[1-3]", "n[0-65535][0-65535]"]
ODD += ["a" * 1000, "&a", "*a", "!!str", "- x", "k: v", "{a: 1}", "[a, b]", "|", ">", "---"]
NASTY = SHELL + PATHS + YAML_WORDS + ODD
# Characters that mean something to a shell, to YAML or to a path, and a few letters.
_ALPHABET = list("ab01-_.:/[],~$'\"`;&|\n\t #*!%@{}<>\\ =é\x00")


def hostile_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Text from the hostile lists, from shell and YAML characters, or any unicode."""
    return st.one_of(
        st.sampled_from(NASTY),
        st.text(alphabet=st.sampled_from(_ALPHABET), max_size=max_size),
        st.lists(st.sampled_from(NASTY), min_size=2, max_size=3).map("".join),
        st.text(max_size=max_size),
    )


def yaml_scalars() -> st.SearchStrategy[Any]:
    """Any scalar a YAML file holds."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(),
        st.dates(),
        hostile_text(),
    )


def yaml_values() -> st.SearchStrategy[Any]:
    """Scalars, and lists and mappings of them, nested."""
    keys = st.one_of(hostile_text(12), st.integers(-5, 5), st.booleans(), st.none())
    return st.recursive(
        yaml_scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=12,
    )


# ---- YAML text ------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z0-9_./@+-][A-Za-z0-9_./@+ -]*")
_TAGS = ["!!str ", "!!int ", "!!float ", "!!bool ", "!!binary ", "!!null ", "!foo ", "!!set "]
_TAGS += ["!!python/object:os.system ", "!!timestamp "]


@dataclass
class _Anchors:
    names: list[str]
    mappings: list[str]


def render_yaml(draw: st.DrawFn, data: Any) -> str:
    """``data`` as YAML text, each scalar's style and the anchors/aliases/merges drawn."""
    anchors = _Anchors([], [])
    if isinstance(data, dict) and data and draw(st.booleans()):
        # Block style at the top, as people write files; flow below.
        lines = [f"{_scalar(draw, k)}: {_node(draw, v, anchors)}" for k, v in data.items()]
        return "\n".join(lines) + "\n"
    return _node(draw, data, anchors) + "\n"


def _node(draw: st.DrawFn, value: Any, anchors: _Anchors) -> str:
    if anchors.names and draw(st.integers(0, 30)) == 0:
        return "*" + draw(st.sampled_from(anchors.names))  # an alias instead of the value
    anchor = ""
    if isinstance(value, dict | list) and draw(st.integers(0, 6)) == 0:
        anchor = f"a{len(anchors.names)}"
    if isinstance(value, dict):
        items = [f"{_scalar(draw, k)}: {_node(draw, v, anchors)}" for k, v in value.items()]
        if anchors.mappings and draw(st.integers(0, 6)) == 0:
            merged = draw(st.lists(st.sampled_from(anchors.mappings), min_size=1, max_size=2))
            source = (
                f"*{merged[0]}" if len(merged) == 1 else f"[{', '.join('*' + m for m in merged)}]"
            )
            items.insert(draw(st.integers(0, len(items))), f"<<: {source}")
        if items and draw(st.integers(0, 10)) == 0:
            items.append(items[draw(st.integers(0, len(items) - 1))])  # a key given twice
        text = "{" + ", ".join(items) + "}"
    elif isinstance(value, list):
        text = "[" + ", ".join(_node(draw, v, anchors) for v in value) + "]"
    else:
        text = _scalar(draw, value)
    if draw(st.integers(0, 40)) == 0:
        text = draw(st.sampled_from(_TAGS)) + text
    if anchor:
        anchors.names.append(anchor)
        if isinstance(value, dict):
            anchors.mappings.append(anchor)
        return f"&{anchor} {text}"
    return text


def _scalar(draw: st.DrawFn, value: Any) -> str:
    if value is None:
        return draw(st.sampled_from(["~", "null", "''"]))
    if isinstance(value, bool):
        return draw(st.sampled_from(["true", "True"] if value else ["false", "FALSE"]))
    if isinstance(value, int | float):
        return (
            repr(value)
            if not isinstance(value, float)
            else draw(st.sampled_from([repr(value), json.dumps(value)]))
        )
    if isinstance(value, datetime.date):
        return value.isoformat()
    text = str(value)
    styles = ["single", "double"]
    if _PLAIN.fullmatch(text) or text in YAML_WORDS:
        styles.append("plain")
        styles.append("plain")
    style = draw(st.sampled_from(styles))
    if style == "plain":
        return text
    if style == "single":
        return "'" + text.replace("'", "''") + "'"
    return json.dumps(text, ensure_ascii=False)


# ---- mutations of a valid document ---------------------------------------------------


def paths_of(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in ``data`` (mappings and lists), the root first."""
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths_of(value, (*prefix, index))
    return found


def mutate(
    draw: st.DrawFn,
    base: Any,
    values: st.SearchStrategy[Any] | None = None,
    leaves_only: bool = False,
) -> Any:
    """``base`` (deep-copied) with one to three values replaced, keys added or removed.

    With ``leaves_only``, only scalar values are replaced (nothing added or removed):
    the document keeps its shape, so that more cases pass the schema.
    """
    data = json.loads(json.dumps(base))
    values = values if values is not None else st.one_of(hostile_text(), yaml_values())
    for _ in range(draw(st.integers(1, 3))):
        paths = paths_of(data)
        if leaves_only:
            paths = [p for p in paths if not isinstance(_at(data, p), dict | list)]
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = _at(data, path[:-1])
        actions = ["replace"] if leaves_only else ["replace", "replace", "replace", "add", "remove"]
        action = draw(st.sampled_from(actions))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(hostile_text(12))] = draw(values)
        else:
            parent.append(draw(values))
    return data


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


# ---- rtk's CLI in this process --------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How one rtk command ended."""

    code: int
    stdout: str
    stderr: str

    def check_clean_failure(self, codes: tuple[int, ...]) -> None:
        """Assert that a failure (exit not 0) is rtk's message or click's usage error."""
        if self.code == 0:
            return
        assert self.code in codes, (self.code, self.stderr)
        lines = self.stderr.splitlines()
        assert lines, f"exit {self.code} without a message"
        if lines[0].startswith("rtk: "):
            assert all(line.startswith("rtk: ") for line in lines), self.stderr
        else:
            assert "Error: " in self.stderr and self.code == 2, self.stderr  # click's usage
        assert "Traceback" not in self.stderr


def run_rtk(args: list[str], root: Path, stdin: str | None = None) -> Outcome:
    """Run ``rtk ARGS`` in this process, with HOME, state and cwd under ``root``.

    Raises:
        Exception: Whatever rtk raised that is not ``SystemExit``: a traceback.
    """
    home = root / "home"
    work = root / "work"
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "RTK_STATE_DIR": str(root / "state"),
        "XDG_STATE_HOME": str(root / "xdg-state"),
        "XDG_CACHE_HOME": str(root / "xdg-cache"),
        # One font cache for every run (matplotlib builds it in seconds): not root's.
        "MPLCONFIGDIR": _mpl_dir(),
        "RTK_INVENTORY": None,
        "RAY_ADDRESS": None,
        "COLUMNS": "100",
    }
    runner = CliRunner()
    code = 0
    with runner.isolation(input=stdin, env=env) as (out, err, _), contextlib.chdir(work):
        try:
            main(args=args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Outcome(
        code, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
    )


@functools.cache
def _mpl_dir() -> str:
    return tempfile.mkdtemp(prefix="rtk-props-mpl-")


def files_under(root: Path) -> set[Path]:
    """Every file and directory below ``root``."""
    return set(root.rglob("*"))


@contextlib.contextmanager
def no_writes_outside(root: Path, allowed: list[Path]) -> Iterator[None]:
    """Assert that, inside ``root``, only ``allowed`` (and below) gained files.

    The tests place every path rtk is given under ``root`` (HOME, state, cwd), and
    hostile values that climb (``../..``) from there still land in it.
    """
    before = files_under(root)
    yield
    new = files_under(root) - before
    stray = [p for p in new if not any(p == a or a in p.parents for a in allowed)]
    assert not stray, f"files written where they should not be: {sorted(map(str, stray))}"
    assert not any(p.name == PWNED for p in files_under(root)), "an injected command ran"
