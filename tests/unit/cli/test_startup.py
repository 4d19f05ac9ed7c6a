"""What loading the command line pulls in: every ``rtk`` call pays for it before any work."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# Heavy libraries that only some commands need; each of them imports lazily where used.
HEAVY = ("pyarrow", "numpy", "torch", "ray", "deepspeed", "pynvml")


def test_the_cli_loads_no_heavy_library() -> None:
    probe = (
        "import json, sys; import toolkit.cli; "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == []


def loaded_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of ``prefixes`` that running ``code`` imported."""
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_a_command_loads_its_own_module_not_every_commands() -> None:
    # Loading the command line alone reaches no command, flow or transport.
    assert loaded_after("import toolkit.cli", ("toolkit.cli.cmd_", "toolkit.flows")) == []
    # rtk up --help: up's module, not those of train, sandbox, profile or report.
    code = (
        "from toolkit.cli import cli\n"
        "try:\n"
        "    cli.main(['up', '--help'], standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass"
    )
    loaded = loaded_after(code, ("toolkit.cli.cmd_", "toolkit.sandbox", "toolkit.profile"))
    assert loaded == ["toolkit.cli.cmd_cluster"]


def test_every_command_is_listed_and_loads() -> None:
    from click import Context

    from toolkit.cli import COMMANDS, cli

    ctx = Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name in (name, "shell")
