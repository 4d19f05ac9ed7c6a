"""Turn pydantic validation errors into one readable ``Problem`` each.

A problem names the file, the line, the key path (``nodes[2].gpus``), the value
given and what is allowed; unknown keys list the valid ones and a close match.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any, Union

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from toolkit.errors import FileProblemsError, Problem
from toolkit.inventory.yamlmap import KeyPath, LocatedData, load_located


def format_path(path: KeyPath) -> str:
    """Render ``("nodes", 2, "gpus")`` as ``nodes[2].gpus``."""
    text = ""
    for part in path:
        if part == "[key]":
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            # A key with a newline would split the one-line problem: shown escaped.
            name = part if part.isprintable() else repr(part)
            text += f".{name}" if text else name
    return text


def parse_yaml(
    text: str, source: str, error: type[FileProblemsError]
) -> tuple[LocatedData, list[Problem]]:
    """The YAML with every value's line, and one problem per key given twice.

    Raises:
        error: The text is not valid YAML (the problem names the line and why).
    """
    try:
        located = load_located(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error([Problem(source, line, "", f"not valid YAML: {reason}")]) from e
    twice = [
        Problem(
            source, second, format_path(key), f"key given twice (also on line {first}); keep one"
        )
        for key, first, second in located.duplicates
    ]
    return located, twice


def problems_from_validation(
    error: ValidationError, model: type[BaseModel], located: LocatedData, source: str
) -> list[Problem]:
    """One ``Problem`` per pydantic error, sorted by line."""
    problems = [
        Problem(
            source,
            located.line_of(tuple(e["loc"])),
            format_path(tuple(e["loc"])),
            _message(e, model),
        )
        for e in error.errors(include_url=False)
    ]
    return sorted(problems, key=lambda p: (p.line or 0, p.path))


def _message(error: ErrorDetails, model: type[BaseModel]) -> str:
    kind = error["type"]
    loc = tuple(error["loc"])
    given = error.get("input")
    if kind == "extra_forbidden":
        allowed = allowed_keys(model, loc[:-1])
        key = str(loc[-1])
        hint = difflib.get_close_matches(key, allowed, n=1)
        guess = f"did you mean '{hint[0]}'? " if hint else ""
        return f"unknown key {show_key(key)}; {guess}allowed keys: {', '.join(allowed)}"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_pattern_mismatch":
        return f"got {given!r}; {_pattern_hint(loc)}"
    text = (
        error["msg"].replace("Input should be", "expected").replace("input should be", "expected")
    )
    return f"got {_show(given)}; {text}"


def show_key(key: str) -> str:
    """``'name'``, or the key escaped (as repr shows it) when it holds a newline or the like."""
    return f"'{key}'" if key.isprintable() else repr(key)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pattern_hint(loc: KeyPath) -> str:
    last = loc[-1] if loc else ""
    if last == "cluster":
        return "expected 1-32 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
    if last == "time":
        return "expected minutes, HH:MM:SS or D-HH:MM:SS, e.g. 04:00:00"
    if last == "[key]":
        return "a variable name is letters, digits and '_', not starting with a digit"
    return "does not match the expected format"


def allowed_keys(model: type[BaseModel], path: Iterable[str | int]) -> list[str]:
    """The field names valid at ``path`` inside ``model`` (empty when not a model)."""
    annotation: Any = model
    for part in path:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    target = _model_in(annotation)
    return sorted(target.model_fields) if target is not None else []


def _step(annotation: Any, part: str | int) -> Any:
    target = _model_in(annotation)
    if target is not None and isinstance(part, str):
        field = target.model_fields.get(part)
        return field.annotation if field is not None else None
    for candidate in _union_members(annotation):
        origin = typing.get_origin(candidate)
        args = typing.get_args(candidate)
        if origin is list and isinstance(part, int) and args:
            return args[0]
        if origin is dict and len(args) == 2:
            return args[1]
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for candidate in _union_members(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _union_members(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return list(typing.get_args(annotation))
    if origin is typing.Annotated:
        return _union_members(typing.get_args(annotation)[0])
    return [annotation]
