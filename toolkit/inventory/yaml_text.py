"""YAML 1.1's implicit typing, undone where a file's schema wants text.

PyYAML reads YAML 1.1, where a plain scalar's look decides its type: ``010`` is the
octal 8, ``1:30`` the base-60 90, ``0x1F`` 31, ``1e3``... a string, ``1.0e3`` the
float 1000.0, ``2024-01-01`` a date, ``yes``/``on`` true. A host named ``0123``, a
partition ``010``, a job name ``2024-01-01`` or an env value ``1:30`` would reach
rtk changed, or be refused as "not a string" although the user wrote text. So, per
kind of field (the schema's pydantic annotation says which):

- A text field (``str``): gets the scalar's text exactly as written (``0123``,
  ``1:30``, ``yes``). Nothing else could be meant: the field holds text only. A
  null (``~``, nothing) stays null: an optional field left unset.
- An environment value (``EnvText`` in its annotation): the text as written too,
  for numbers and dates (``OMP_NUM_THREADS: 4`` is ``"4"``, ``1:30`` is ``"1:30"``).
  ``true``/``false`` stay the booleans the field turns into ``"1"``/``"0"``: what
  NCCL_*, PYTHONUNBUFFERED and most programs read as on and off (the text "true"
  reads as 0 through C's atoi). ``yes``/``no``/``on``/``off`` are refused with how
  to quote them: the text and the switch are both plausible, and the two differ to
  the program. A null is refused with how to write an empty value.
- A number field (``int``/``float``): keeps YAML's number, except the two spellings
  nobody means in a config today, refused with the plain number to write instead:
  ``010`` (octal 8) and ``1:30`` (base 60). ``0x1F`` and ``1_000`` stay: their
  reading is the one their writer chose.
- Text with a NUL character is refused wherever it is: no path, command line or
  environment can hold one.
- Anything else (``Any``: a sweep's trainer options and axes) is left as YAML read it.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Union

from pydantic import BaseModel

from toolkit.inventory.yamlmap import KeyPath, LocatedData, path_part

_OCTAL = re.compile(r"[-+]?0[0-7_]+")
_BOOL_WORDS = ("true", "false")


@dataclass(frozen=True)
class EnvText:
    """Marks an environment value's annotation (``Annotated[str, ..., EnvText()]``)."""


def restore_written_text(located: LocatedData, model: type[BaseModel]) -> list[tuple[KeyPath, str]]:
    """Put back, in ``located.data``, the text of scalars that ``model`` wants as text.

    Args:
        located: The document as ``yamlmap.load_located`` read it (changed in place).
        model: The schema the document is validated against next.

    Returns:
        ``(key path, message)`` for each value refused (see the module's rules).
    """
    problems: list[tuple[KeyPath, str]] = []
    located.data = _walk(located.data, (), model, located, problems)
    return problems


def _walk(
    value: Any, path: KeyPath, annotation: Any, located: LocatedData, problems: list[Any]
) -> Any:
    kind = _kind(annotation)
    if kind is not None:
        return _scalar(value, path, kind, located, problems)
    if isinstance(value, dict):
        model = _model_in(annotation)
        if model is not None:
            fields = model.model_fields
            return {
                key: _walk(
                    item,
                    (*path, path_part(key)),
                    fields[key].annotation if isinstance(key, str) and key in fields else Any,
                    located,
                    problems,
                )
                for key, item in value.items()
            }
        key_type, item_type = _mapping_args(annotation)
        wants_text = _kind(key_type) is not None
        result: dict[Any, Any] = {}
        for key, item in value.items():
            child = (*path, path_part(key))
            written = located.written_keys.get(child) if wants_text else None
            result[key if written is None else written] = _walk(
                item, child, item_type, located, problems
            )
        return result
    if isinstance(value, list):
        item_type = _list_arg(annotation)
        return [
            _walk(item, (*path, index), item_type, located, problems)
            for index, item in enumerate(value)
        ]
    if path in located.written and _is_number(annotation):
        return _number(value, path, located.written[path], problems)
    return value


def _scalar(value: Any, path: KeyPath, kind: str, located: LocatedData, problems: list[Any]) -> Any:
    text = _text(value, path, kind, located, problems)
    if isinstance(text, str) and "\x00" in text:
        problems.append(
            (
                path,
                "contains a NUL character (\\0), which no path, command line or "
                "environment can hold",
            )
        )
    return text


def _text(value: Any, path: KeyPath, kind: str, located: LocatedData, problems: list[Any]) -> Any:
    name = path[-1] if path else "KEY"
    if value is None and kind == "env":
        problems.append(
            (
                path,
                "no value (YAML reads ~, null and nothing as none); write "
                f'{name}: "" for an empty value, or quote the text',
            )
        )
        return ""
    written = located.written.get(path)
    if written is None or value is None or isinstance(value, list | dict):
        return value
    if kind == "env" and isinstance(value, bool) and written.lower() not in _BOOL_WORDS:
        problems.append(
            (
                path,
                f"{written} is a YAML 1.1 boolean; write 1 or 0 (or true/false) for a "
                f'switch, or quote it for the text: {name}: "{written}"',
            )
        )
    if kind == "env" and isinstance(value, bool):
        return value if written.lower() in _BOOL_WORDS else written
    return written


def _number(value: Any, path: KeyPath, written: str, problems: list[Any]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if ":" in written:
        problems.append(
            (
                path,
                f"{written} reads as {value} in YAML 1.1 (base 60); write the number in "
                "decimal digits",
            )
        )
    elif _OCTAL.fullmatch(written):
        decimal = int(written.replace("_", ""), 10)
        problems.append(
            (
                path,
                f"{written} reads as {value} in YAML 1.1 (octal); write {decimal} if you "
                f"mean {decimal}, or {value} for {value}",
            )
        )
    return value


def _kind(annotation: Any) -> str | None:
    """``"env"``, ``"text"`` or None: how a field reads scalars (see the module)."""
    members = [m for m in _members(annotation) if m[0] is not type(None)]
    if not members or any(base is not str for base, _ in members):
        return None
    if any(isinstance(meta, EnvText) for _, metadata in members for meta in metadata):
        return "env"
    return "text"


def _is_number(annotation: Any) -> bool:
    bases = [base for base, _ in _members(annotation) if base is not type(None)]
    return bool(bases) and all(base in (int, float) for base in bases)


def _members(annotation: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """The union's members, each as (type, its ``Annotated`` metadata)."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        return [(b, (*meta, *metadata)) for b, meta in _members(base)]
    return [(annotation, ())]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for base, _ in _members(annotation):
        if isinstance(base, type) and issubclass(base, BaseModel):
            return base
    return None


def _mapping_args(annotation: Any) -> tuple[Any, Any]:
    for base, _ in _members(annotation):
        if typing.get_origin(base) is dict and len(typing.get_args(base)) == 2:
            key_type, item_type = typing.get_args(base)
            return key_type, item_type
    return Any, Any


def _list_arg(annotation: Any) -> Any:
    for base, _ in _members(annotation):
        if typing.get_origin(base) is list and typing.get_args(base):
            return typing.get_args(base)[0]
    return Any
