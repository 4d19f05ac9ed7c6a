"""The type of a JSON document, for values that are JSON by contract.

A document rtk hands to another program as JSON (DeepSpeed's config, Ray's
``runtime_env``, the data embedded in the report page) or holds only until it is
parsed into a record is a ``JsonObject``. Unlike ``dict[str, Any]`` it is checked:
mypy refuses a value JSON cannot hold, and a reader must narrow what it takes out
(``toolkit.fields.Fields`` does that). Records passed between rtk's own modules are
frozen dataclasses, not ``JsonObject``.
"""

from __future__ import annotations

from typing import TypeAlias

JsonScalar: TypeAlias = None | bool | int | float | str
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]
