"""Where one rank is, in words, from its process state and its Python stack.

A stack is read innermost frame first; the first frame of a kind rtk knows decides
where the rank is (a collective, backward, the data pipeline, forward, the optimizer),
else the rank is in the user's code. The place is named by a frame of the user's own
code (``train.py:88``): for a wait (a collective, backward, the data pipeline) the
innermost one outside it, where the user called it; for computing (forward, the
optimizer, the user's code) the innermost one of all. A frame is the user's when
its file is neither installed (site-packages, dist-packages), nor the Python standard
library, nor rtk's marker API (which wraps the user's calls); ``is_user_file``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.stall.records import GONE, STOPPED, ZOMBIE, Frame, RankEvidence

# The kinds of place, most telling first when the diagnosis orders its suspects.
EXITED, STOPPED_KIND, UNREADABLE = "exited", "stopped", "unreadable"
COLLECTIVE, BACKWARD, DATA, FORWARD, OPTIMIZER, USER = (
    "collective",
    "backward",
    "data",
    "forward",
    "optimizer",
    "user",
)
# Where a rank waits for the others: a rank elsewhere is whom they wait for.
WAITING = (COLLECTIVE, BACKWARD)

STOPPED_PHRASE = "stopped (SIGSTOP or a debugger)"
EXITED_PHRASE = "exited"
UNREADABLE_PHRASE = "stack unreadable"

# Collectives and waits of torch.distributed and DeepSpeed's comm, by function name.
COLLECTIVE_FUNCTIONS = frozenset(
    {
        "all_reduce",
        "allreduce",
        "all_reduce_coalesced",
        "inference_all_reduce",
        "barrier",
        "monitored_barrier",
        "all_gather",
        "allgather",
        "all_gather_into_tensor",
        "all_gather_object",
        "allgather_fn",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_fn",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "wait",
    }
)
COLLECTIVE_DIRS = ("torch/distributed/", "deepspeed/comm/")
AUTOGRAD_DIR = "torch/autograd/"
DATALOADER_FILE = "torch/utils/data/dataloader.py"
DATALOADER_FUNCTIONS = frozenset({"__next__", "_next_data", "_get_data", "_try_get_data"})
MODULE_FILE = "torch/nn/modules/module.py"
MODULE_FUNCTIONS = frozenset({"_call_impl", "_wrapped_call_impl"})
OPTIM_DIR = "torch/optim/"

# Installed packages, the standard library (lib/python3.11/ outside site-packages,
# venvs, conda and pyenv alike), frozen modules (<frozen ...>) and rtk's marker API.
_INSTALLED = ("/site-packages/", "/dist-packages/")
_STDLIB = re.compile(r"/lib(?:64)?/python\d+(?:\.\d+)?t?/")
_RTK_WRAPPERS = ("toolkit/markers/",)


def is_user_file(path: str) -> bool:
    """True when ``path`` is the user's own code, not a library's, Python's or rtk's."""
    path = path.replace("\\", "/")
    if not path or path.startswith("<"):
        return False
    if any(part in path for part in _INSTALLED):
        return False
    if _STDLIB.search(path):
        return False
    return not any(part in path for part in _RTK_WRAPPERS)


@dataclass(frozen=True)
class Location:
    """Where a rank is.

    Attributes:
        kind: One of the kinds above (``COLLECTIVE``, ``DATA``, ``STOPPED_KIND``...).
        phrase: In words, as the groups name it: ``wait in all_reduce at train.py:70``.
        frame: The user's frame that names the place (else the innermost one), if any.
    """

    kind: str
    phrase: str
    frame: Frame | None = None

    @property
    def waiting(self) -> bool:
        """True when the rank waits for others (in a collective, or DDP's backward)."""
        return self.kind in WAITING


def locate(rank: RankEvidence) -> Location:
    """Where ``rank`` is: from its process state, else its stack (O(frames))."""
    frames = rank.frames
    if rank.state in (ZOMBIE, GONE):
        return Location(EXITED, EXITED_PHRASE, user_frame(frames, 0))
    if rank.state == STOPPED:
        return Location(STOPPED_KIND, STOPPED_PHRASE, user_frame(frames, 0))
    if not frames:
        why = rank.stack_error or "no stack"
        return Location(UNREADABLE, f"{UNREADABLE_PHRASE} ({why})")
    for index, frame in enumerate(frames):
        kind = frame_kind(frame)
        if kind is None:
            continue
        # A wait is named by where the user called it; compute by the user's code in it.
        where = user_frame(frames, 0 if kind in (FORWARD, OPTIMIZER) else index)
        return Location(kind, _phrase(kind, frame) + _at(where), where)
    where = user_frame(frames, 0)
    if where is not None:
        return Location(USER, f"in {where.function}()" + _at(where), where)
    innermost = frames[0]
    return Location(USER, f"in {innermost.function} ({innermost.where})", innermost)


def frame_kind(frame: Frame) -> str | None:
    """The kind of place ``frame`` is (None: none rtk knows)."""
    path = frame.file.replace("\\", "/")
    # py-spy names methods with their class (``_MultiProcessingDataLoaderIter._next_data``,
    # ``Module._call_impl``), faulthandler without: the name's last part is the function.
    function = frame.function.rsplit(".", 1)[-1]
    if any(part in path for part in COLLECTIVE_DIRS) and (
        function.lstrip("_") in COLLECTIVE_FUNCTIONS or function.endswith("barrier")
    ):
        return COLLECTIVE
    if AUTOGRAD_DIR in path:
        return BACKWARD
    if (path.endswith(DATALOADER_FILE) and function in DATALOADER_FUNCTIONS) or (
        function == "__next__"
    ):
        return DATA
    if path.endswith(MODULE_FILE) and function in MODULE_FUNCTIONS:
        return FORWARD
    if OPTIM_DIR in path:
        return OPTIMIZER
    return None


def user_frame(frames: Sequence[Frame], start: int) -> Frame | None:
    """The innermost frame of the user's code from ``frames[start]`` outwards."""
    for frame in frames[start:]:
        if is_user_file(frame.file):
            return frame
    return None


def _phrase(kind: str, frame: Frame) -> str:
    if kind == COLLECTIVE:
        return f"wait in {frame.function}"
    if kind == BACKWARD:
        return "wait in backward (DDP all-reduce)"
    if kind == DATA:
        return "in next(dataloader)"
    if kind == FORWARD:
        return "in forward"
    return "in optimizer step"


def _at(frame: Frame | None) -> str:
    return f" at {frame.where}" if frame is not None else ""
