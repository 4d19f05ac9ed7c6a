"""Run a Python file from inside another module exactly as ``python SCRIPT ARGS`` would.

What ``python SCRIPT ARGS`` gives a script, and so what ``run_script`` gives it:

- ``sys.argv`` is ``[SCRIPT, *ARGS]``, SCRIPT as given;
- it runs as ``__main__`` (``sys.modules["__main__"]`` is its module while it runs, so
  pickling its classes and ``multiprocessing`` work), ``__file__`` is its absolute path;
- ``sys.path[0]`` is its folder (symbolic links resolved), not the working directory
  (with ``python -P``, neither);
- its exit status: ``sys.exit(n)`` passes through; an uncaught exception is printed
  by ``sys.excepthook`` with the script's frames only (none of this module's or
  runpy's) and the status is 1; KeyboardInterrupt is raised on, as Python would;
- a file that is not there is one line on stderr and status 2.

``exit_without_finalizing`` ends the process after such a run as Python's exit would,
but without the interpreter's finalization, where torch's gloo ranks can crash.

``python -m toolkit.markers.script_runner SCRIPT [ARGS] | -m MODULE [ARGS]`` does both:
``rtk torchrun`` starts every rank so (``--auto-steps``: through
``toolkit.markers.auto_steps``, which adds its hooks first).

A folder or zip archive with a ``__main__.py``, or a ``.pyc`` file, runs as runpy
runs it (a folder or archive first on ``sys.path``; ``sys.argv[0]`` is then its
absolute path).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import importlib.machinery
import importlib.util
import io
import os
import pkgutil
import runpy
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

USAGE = "usage: python -m toolkit.markers.script_runner SCRIPT [ARGS...] | -m MODULE [ARGS...]"


@dataclass(frozen=True)
class Target:
    """What to run: a script (located) or a module, with its arguments."""

    name: str
    args: tuple[str, ...]
    module: bool = False


def parse(argv: Sequence[str], usage: str = USAGE) -> Target:
    """``SCRIPT [ARGS]`` or ``-m MODULE [ARGS]``; a script must exist.

    Raises:
        SystemExit: Status 2, after ``usage`` (no target, or -h) or Python's message for
            a missing script.
    """
    args = list(argv)
    module = bool(args) and args[0] == "-m"
    if module:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    if not module:
        locate(args[0])
    return Target(args[0], tuple(args[1:]), module)


def run_then_exit(target: Target) -> NoReturn:
    """Run ``target`` as Python would, then end the process with its status.

    A target that imported ``torch.distributed`` ends without the interpreter's
    finalization (``exit_without_finalizing``); any other as Python ends.

    Raises:
        SystemExit: The status, when the process ends the usual way.
        KeyboardInterrupt: The target was interrupted.
    """
    try:
        if target.module:
            run_module(target.name, target.args)
        else:
            run_script(target.name, target.args)
        status = 0
    except SystemExit as end:
        status = exit_status(end.code)
    if "torch.distributed" in sys.modules:
        exit_without_finalizing(status)
    raise SystemExit(status)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """``python -m toolkit.markers.script_runner SCRIPT [ARGS] | -m MODULE [ARGS]``."""
    run_then_exit(parse(sys.argv[1:] if argv is None else argv))


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
    # sys.path[0] is the working directory `python -m` put there, unless -P (safe_path)
    # kept it out, as it would keep the script's folder out.
    ours = not sys.flags.safe_path
    try:
        if pkgutil.get_importer(path) is None and not path.endswith(".pyc"):
            if ours:
                sys.path[0] = os.path.dirname(os.path.realpath(path))
            _run_source(path)
        else:  # a folder, an archive or compiled code: runpy puts a folder first itself
            if ours:
                del sys.path[0]
            runpy.run_path(path, run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as error:
        frames = script_frames(error.__traceback__, path)
        # Python prints the exception's own __traceback__ when it has a cause or context.
        sys.excepthook(type(error), error.with_traceback(frames), frames)
        raise SystemExit(1) from None


def _run_source(path: str) -> None:
    """Execute a source file as the ``__main__`` module, which it stays (as under Python).

    Not ``runpy.run_path``: that sets ``sys.argv[0]`` to the absolute path while the
    script runs and puts the previous ``__main__`` back afterwards (for atexit
    handlers that look it up).
    """
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __spec__=None,
        __package__=None,
        __builtins__=builtins,
        __annotations__={},
    )
    with io.open_code(path) as source:
        # dont_inherit: this module's ``from __future__`` imports are not the script's.
        code = compile(source.read(), path, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def script_frames(traceback: TracebackType | None, path: str) -> TracebackType | None:
    """``traceback`` from the script's first frame on (None: the error came before it ran)."""
    while traceback is not None and traceback.tb_frame.f_code.co_filename != path:
        traceback = traceback.tb_next
    return traceback


def run_module(module: str, args: Sequence[str]) -> None:
    """Run ``module`` as ``python -m MODULE ARGS`` would: as ``__main__``, found on sys.path.

    Raises:
        SystemExit: The module's own exit; status 1 when it cannot be found.
    """
    sys.argv = [module, *args]
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # python -m looks in the working directory first
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that is not there
        found = False
    if not found:
        print(f"{sys.executable}: No module named {module}", file=sys.stderr)
        raise SystemExit(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def exit_status(code: object) -> int:
    """The process status ``SystemExit(code)`` gives, printing a message code as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_without_finalizing(status: int) -> NoReturn:
    """End the process as Python's exit would, less the interpreter's finalization.

    What Python's exit does first is done here too: non-daemon threads are waited
    for, atexit handlers run (the markers' close among them); and what finalization
    would do for a file the script left open, flushing it (``flush_open_files``). Then
    ``os._exit``. Why: torch 2.13 ranks on gloo abort in finalization ("terminate
    called without an active exception", SIGABRT or SIGSEGV) after the script has
    ended, even after ``destroy_process_group``: 3 of 12 runs of a 3-rank DDP script
    under plain torchrun here, 0 of 20 with this ending (pytorch/pytorch#179291 on
    the cause). torchrun takes such a rank for a failure and fails the whole job.
    """
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    flush_open_files()
    os._exit(status)


def flush_open_files() -> None:
    """Flush every file object Python still holds open, stdio last.

    Finalization would, as it frees them: a script that writes to a file it never
    closes loses nothing.
    """
    for obj in gc.get_objects():
        # By its type: isinstance would ask the object itself (``__class__``), and some
        # answer with a warning (torch.distributed.reduce_op's deprecation).
        if issubclass(type(obj), io.IOBase) and obj not in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # closed, detached, a reader gone
                if not obj.closed:
                    obj.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


if __name__ == "__main__":
    main()
