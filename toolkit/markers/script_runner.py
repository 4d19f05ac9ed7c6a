"""Run a Python file from inside another module exactly as ``python SCRIPT ARGS`` would.

What ``python SCRIPT ARGS`` gives a script, and so what ``run_script`` gives it:

- ``sys.argv`` is ``[SCRIPT, *ARGS]``, SCRIPT as given;
- it runs as ``__main__`` (``sys.modules["__main__"]`` is its module while it runs, so
  pickling its classes and ``multiprocessing`` work), ``__file__`` is its absolute path;
- ``sys.path[0]`` is its folder (symbolic links resolved), not the working directory;
- its exit status: ``sys.exit(n)`` passes through; an uncaught exception is printed
  by ``sys.excepthook`` with the script's frames only (none of this module's or
  runpy's) and the status is 1; KeyboardInterrupt is raised on, as Python would;
- a file that is not there is one line on stderr and status 2.

A folder or zip archive with a ``__main__.py`` runs as runpy runs it (runpy puts it
first on ``sys.path``; ``sys.argv[0]`` is then its absolute path).
"""

from __future__ import annotations

import os
import pkgutil
import runpy
import sys
from collections.abc import Sequence
from types import TracebackType


def locate(script: str) -> str:
    """The absolute path of ``script``.

    Raises:
        SystemExit: Status 2 after Python's own message, when there is no such file.
    """
    path = os.path.abspath(script)
    if not os.path.exists(path):
        print(
            f"{sys.executable}: can't open file {path!r}: [Errno 2] No such file or directory",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return path


def run_script(script: str, args: Sequence[str]) -> None:
    """Run ``script`` as ``__main__`` with ``args``; returns when it ends without exiting.

    Raises:
        SystemExit: The script's own exit, or status 1 after its uncaught exception
            (already printed), or status 2 when there is no such file.
        KeyboardInterrupt: The script was interrupted.
    """
    path = locate(script)
    sys.argv = [script, *args]
    if pkgutil.get_importer(path) is None:  # a plain file
        sys.path[0] = os.path.dirname(os.path.realpath(path))
    else:  # a folder or an archive: runpy puts it at the front itself
        del sys.path[0]
    try:
        runpy.run_path(path, run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as error:
        sys.excepthook(type(error), error, script_frames(error.__traceback__, path))
        raise SystemExit(1) from None


def script_frames(traceback: TracebackType | None, path: str) -> TracebackType | None:
    """``traceback`` from the script's first frame on (None: the error came before it ran)."""
    while traceback is not None and traceback.tb_frame.f_code.co_filename != path:
        traceback = traceback.tb_next
    return traceback
