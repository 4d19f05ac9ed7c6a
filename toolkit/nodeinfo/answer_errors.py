"""The errors of a node script's JSON answer, for ``toolkit.fields.Fields``.

The node scripts print plain JSON (they are stdlib only); the host parses each answer
once, where it is read, with ``answer_fields``. A field of the wrong type, or a
required field that is missing or null, raises one ``ClusterError`` that names the
node, the answer and the field's path, and shows the value given.
"""

from __future__ import annotations

from typing import Any, ClassVar

from toolkit.errors import ClusterError
from toolkit.fields import MISSING, Errors, FieldPath, Fields, Words


class AnswerErrors(Errors):
    """``NODE: malformed WHAT from the node: field 'PATH' should be EXPECTED, got VALUE``.

    Args:
        node: The node's name (every error starts with it).
        what: Which answer this is (``probe answer``, ``preflight facts``).
    """

    words: ClassVar[Words] = Words(obj_or_null="an object", flag_or_null="true or false")

    def __init__(self, node: str, what: str) -> None:
        self.node = node
        self.what = what

    def error(self, path: FieldPath, expected: str, value: Any) -> ClusterError:
        """The error naming the node, the answer and the field (``missing`` when absent)."""
        given = "missing" if value is MISSING else f"got {value!r:.80}"
        return ClusterError(
            f"{self.node}: malformed {self.what} from the node: "
            f"field {_dotted(path)!r} should be {expected}, {given}"
        )


def answer_fields(node: str, what: str, data: Any, path: FieldPath = ()) -> Fields:
    """``data``, a node's answer (or the part of it at ``path``), to read field by field.

    Raises:
        ClusterError: ``data`` is not an object.
    """
    return Fields(data, AnswerErrors(node, what), path)


def _dotted(path: FieldPath) -> str:
    """``gpus.devices.GPU-1.nvlink_active[0]``; the whole answer is ``(the answer)``."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}" if text else key
    return text or "(the answer)"
