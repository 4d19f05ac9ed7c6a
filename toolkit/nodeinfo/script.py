"""One way to run rtk's node scripts: ``python - ARGS`` with the script's text on stdin.

A node script is a stdlib-only file of ``toolkit/node/`` that rtk never imports: its
text is fed to the node's own Python, which needs no rtk installed. It prints one JSON
object as its last line. ``NodeScript`` builds the command line, sends the text, reads
the answer and turns every kind of failure into one error that names the node.

What is sent is assembled (``assemble``): the scripts share ``toolkit/node/common.py``
(their ``main``, the RDMA ports' files...), which each imports with one plain line,
``from toolkit.node.common import NAME, ...``. The text sent is ``common.py``'s text,
then the script's without that line (and without its ``from __future__`` line, which
must come first and does, in ``common.py``): one module, every name defined once, as
if the script had been written with the shared pieces in it.
"""

from __future__ import annotations

import ast
import json
import threading
from dataclasses import dataclass
from functools import cache
from importlib import resources

from toolkit.errors import ClusterError, RtkError
from toolkit.inventory import Node
from toolkit.json_types import JsonObject
from toolkit.shell import join, with_env_file
from toolkit.transport.base import CommandResult, Transport

# What the shell exits with when it cannot find the program (the node's Python).
NOT_FOUND_EXIT = 127
SCRIPTS_PACKAGE = "toolkit.node"
COMMON = "common"  # the module of SCRIPTS_PACKAGE the scripts share


@cache
def script_source(package: str, file: str) -> str:
    """The text of ``file`` in ``package`` (read once)."""
    return resources.files(package).joinpath(file).read_text(encoding="utf-8")


# ast.parse is not thread-safe in CPython 3.11 before 3.11.5 (gh-106905: "AST
# constructor recursion depth mismatch"), and the first sends of a fan-out ask for a
# script's text from many threads at once: it is assembled once, under this lock.
_ASSEMBLING = threading.Lock()


def sent_source(package: str, file: str) -> str:
    """The text ``file`` is sent as: ``common.py``'s, then the script's (``assemble``)."""
    with _ASSEMBLING:
        return _assembled(package, file)


@cache
def _assembled(package: str, file: str) -> str:
    common = script_source(SCRIPTS_PACKAGE, f"{COMMON}.py")
    return assemble(script_source(package, file), common)


def assemble(script: str, common: str) -> str:
    """One module's text: ``common``, then ``script`` without its import of ``common``.

    Only ``from toolkit.node.common import NAME, ...`` lines at the script's top level
    are taken out (and its ``from __future__`` lines: ``common``'s comes first).

    Raises:
        ValueError: The script imports ``common`` in another way, or a name it does not
            define, or defines a name that ``common`` defines too.
    """
    module = f"{SCRIPTS_PACKAGE}.{COMMON}"
    tree = ast.parse(script)
    defined = _defined(ast.parse(common))
    taken: list[ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in (module, "__future__"):
            wrong = [a.name for a in node.names if a.asname or a.name not in defined]
            if node.module == module and wrong:
                raise ValueError(f"{module} defines no {', '.join(wrong)} (or it is renamed)")
            taken.append(node)
    for found in ast.walk(tree):
        if found not in taken and _imports(found, module):
            line = getattr(found, "lineno", 0)
            raise ValueError(f"line {line}: take {module}'s names with 'from {module} import'")
    twice = sorted(defined & _defined(tree))
    if twice:
        raise ValueError(f"the script defines {', '.join(twice)}, which {module} defines")
    drop = {n for node in taken for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    lines = script.split("\n")  # as ast numbers them (splitlines also splits at \f...)
    kept = "\n".join(line for number, line in enumerate(lines, 1) if number not in drop)
    return f"{common.rstrip()}\n\n\n# -- the script {'-' * 74}\n\n{kept}"


def _imports(node: ast.AST, module: str) -> bool:
    """Whether ``node`` is an import of ``module`` (in any of its forms)."""
    package, _, name = module.rpartition(".")
    if isinstance(node, ast.Import):
        return any(a.name == module or a.name.startswith(f"{module}.") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        from_package = node.module == package and any(a.name == name for a in node.names)
        return node.level > 0 or node.module == module or from_package
    return False


def _defined(tree: ast.Module) -> set[str]:
    """The names a module's top level defines: functions, classes, assigned names."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@dataclass(frozen=True)
class NodeScript:
    """A script rtk runs on nodes, and how to read its answer.

    Attributes:
        package: The package that holds the file (``toolkit.node``, the only one).
        file: The file's name (``agent.py``).
        error: What a failure raises; its message starts with the node's name.
        ok_key: A field of the answer that must be true on success (``ok`` for
            ``gpu_control.py``); either way an answer with an ``error`` field fails.
    """

    package: str
    file: str
    error: type[RtkError] = ClusterError
    ok_key: str | None = None

    def source(self) -> str:
        """The text fed to the node's Python on stdin (``assemble``)."""
        return sent_source(self.package, self.file)

    def command(self, node: Node, *args: str, env_file: str | None = None) -> str:
        """The command line that runs the script on ``node`` with ``args``.

        Args:
            node: Where it runs (its ``python``).
            *args: The script's arguments, quoted here.
            env_file: An env file to load first (Ray's variables for ``status``).
        """
        line = join([node.python, "-", *args])
        return with_env_file(env_file, line) if env_file else line

    def call(self, transport: Transport, node: Node, command: str, timeout_s: float) -> JsonObject:
        """Run ``command`` (from ``self.command``) on ``node``; the script's JSON answer.

        The answer is JSON as the script printed it, not yet read: its caller reads it
        once into a record (``ProbeFacts.from_json``, ``answer_fields``).

        Raises:
            RtkError: ``self.error``: the script did not run, gave no answer, or
                reported an error.
            toolkit.errors.TransportError: The node could not be reached.
        """
        result = transport.run(node, command, stdin=self.source(), timeout_s=timeout_s)
        return self.answer(node, result)

    def answer(self, node: Node, result: CommandResult) -> JsonObject:
        """The JSON object on the last line of ``result``'s stdout, if it says success.

        Raises:
            RtkError: ``self.error``, naming the node and why.
        """
        answer: JsonObject = {}
        lines = result.stdout.strip().splitlines()
        if lines:
            try:
                parsed = json.loads(lines[-1])
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                answer = parsed
        fine = self.ok_key is None or bool(answer.get(self.ok_key))
        if result.ok and answer and "error" not in answer and fine:
            return answer
        reason = answer.get("error") or result.tail() or f"exit status {result.exit_code}"
        if result.exit_code == NOT_FOUND_EXIT:
            reason = f"{node.python} not found on the node; set python or venv in the inventory"
        raise self.error(f"{node.name}: {reason}")


AGENT = NodeScript("toolkit.node", "agent.py")
"""The node agent: probe, stop, status, smoke, pack (see ``agent.py``)."""

FACTS = NodeScript("toolkit.node", "facts.py")
"""Preflight's facts of one node (see ``facts.py``)."""
