"""A script run by ``python -m toolkit.markers.script_runner SCRIPT`` (as ``rtk torchrun``
starts every rank; ``auto_steps`` runs it the same way) sees and does exactly what
``python SCRIPT`` gives it: each test runs both and compares."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from marker_ranks import python_env

from toolkit.markers.script_runner import script_frames

RUNNER = ("-m", "toolkit.markers.script_runner")


def both(script: Path, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], ...]:
    """(python SCRIPT ARGS, the runner on SCRIPT ARGS), run from ``cwd``, markers off."""
    relative = str(script.relative_to(cwd)) if script.is_relative_to(cwd) else str(script)
    return tuple(
        subprocess.run(
            [sys.executable, *prefix, relative, *args],
            cwd=cwd,
            env=python_env(None),
            capture_output=True,
            text=True,
            timeout=30,
        )
        for prefix in ((), RUNNER)
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_argv_main_file_and_path_are_pythons(tmp_path: Path) -> None:
    script = write(
        tmp_path / "code" / "show.py",
        """
        import os, pickle, sys
        class Thing:
            pass
        print(sys.argv)
        print(__name__, __file__, __spec__)
        print(sys.path[0])
        print(os.getcwd() in sys.path, "" in sys.path)
        print(sys.modules["__main__"].Thing is Thing)
        print(type(pickle.loads(pickle.dumps(Thing()))).__name__)
        """,
    )
    plain, runner = both(script, "a", "--b=c", cwd=tmp_path)
    assert plain.returncode == runner.returncode == 0, runner.stderr
    assert runner.stdout == plain.stdout
    assert runner.stdout.splitlines()[:3] == [
        "['code/show.py', 'a', '--b=c']",
        f"__main__ {script} None",
        str(tmp_path / "code"),
    ]


def test_safe_path_keeps_both_folders_off_the_path(tmp_path: Path) -> None:
    write(tmp_path / "code" / "show.py", "import sys\nprint(sys.path)\n")
    shown = [
        subprocess.run(
            [sys.executable, "-P", *prefix, "code/show.py"],
            cwd=tmp_path,
            env=python_env(None),
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for prefix in ((), RUNNER)
    ]
    assert shown[0] == shown[1] and str(tmp_path) not in shown[0]


def test_a_linked_script_gets_its_real_folder_on_the_path(tmp_path: Path) -> None:
    write(tmp_path / "real" / "show.py", "import sys\nprint(sys.path[0], __file__)\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real" / "show.py")
    plain, runner = both(tmp_path / "link.py", cwd=tmp_path)
    assert runner.stdout == plain.stdout == f"{tmp_path / 'real'} {tmp_path / 'link.py'}\n"


def test_exit_status_passes_through(tmp_path: Path) -> None:
    cases = [("sys.exit(3)", 3), ("sys.exit('bad input')", 1), ("pass", 0)]
    # With torch.distributed imported the runner ends the process itself (no finalization).
    cases.append(("import torch.distributed\nsys.exit('bad input')", 1))
    for code, expected in cases:
        script = write(tmp_path / "exit.py", f"import sys\n{code}\n")
        plain, runner = both(script, cwd=tmp_path)
        assert (runner.returncode, runner.stderr) == (plain.returncode, plain.stderr)
        assert runner.returncode == expected


def test_an_uncaught_exception_prints_the_scripts_traceback_only(tmp_path: Path) -> None:
    write(tmp_path / "helper.py", "def fail():\n    raise ValueError('boom')\n")
    script = write(
        tmp_path / "crash.py",
        """
        import atexit
        from helper import fail
        GOODBYE = "atexit ran"
        atexit.register(lambda: print(GOODBYE))
        try:
            fail()
        except ValueError as e:
            raise RuntimeError("while training") from e
        """,
    )
    plain, runner = both(script, cwd=tmp_path)
    assert runner.returncode == plain.returncode == 1
    assert runner.stderr == plain.stderr
    assert "script_runner" not in runner.stderr and "runpy" not in runner.stderr
    assert "RuntimeError: while training" in runner.stderr
    assert runner.stdout == plain.stdout == "atexit ran\n"


def test_a_syntax_error_reads_as_pythons(tmp_path: Path) -> None:
    script = write(tmp_path / "broken.py", "def (\n")
    plain, runner = both(script, cwd=tmp_path)
    assert runner.returncode == plain.returncode == 1
    assert runner.stderr == plain.stderr
    assert runner.stderr.strip().endswith("SyntaxError: invalid syntax")


def test_a_missing_script_is_one_line_and_status_2(tmp_path: Path) -> None:
    plain, runner = both(tmp_path / "nope.py", cwd=tmp_path)
    assert runner.returncode == plain.returncode == 2
    assert runner.stderr == plain.stderr
    assert runner.stderr.count("\n") == 1 and "can't open file" in runner.stderr


def test_a_folder_with_main_runs_with_the_folder_on_the_path(tmp_path: Path) -> None:
    write(tmp_path / "app" / "__main__.py", "import sys\nprint(sys.path[0], __name__)\n")
    plain, runner = both(tmp_path / "app", cwd=tmp_path)
    assert runner.returncode == 0, runner.stderr
    assert runner.stdout == plain.stdout == f"{tmp_path / 'app'} __main__\n"


def test_script_frames_start_at_the_script() -> None:
    def inner() -> None:
        raise KeyError("x")

    try:
        inner()
    except KeyError as e:
        tb = e.__traceback__
    assert tb is not None
    here = tb.tb_frame.f_code.co_filename
    assert script_frames(tb, here) is tb
    assert script_frames(tb, "/elsewhere.py") is None


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "__init__.py", "")
    write(
        tmp_path / "pkg" / "train.py",
        """
        import sys
        print(__name__, sys.argv[1:])
        raise SystemExit(3)
        """,
    )
    plain, runner = (
        subprocess.run(
            [sys.executable, *prefix, "-m", "pkg.train", "--lr", "1"],
            cwd=tmp_path,
            env=python_env(None),
            capture_output=True,
            text=True,
            timeout=30,
        )
        for prefix in ((), RUNNER)
    )
    assert runner.returncode == plain.returncode == 3
    assert runner.stdout == plain.stdout == "__main__ ['--lr', '1']\n"
    missing = subprocess.run(
        [sys.executable, *RUNNER, "-m", "pkg.nothing"],
        cwd=tmp_path,
        env=python_env(None),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 1 and "No module named pkg.nothing" in missing.stderr
