"""Every repository path the docs and the code's comments name exists.

Where paths are looked for: README.md, docs/*.md, docs/gpu-runs/*.md, tests/data/*/README.md,
sbatch/README.md and benchmarks/README.md (all their text, code blocks included); the comments and
docstrings of the Python files under toolkit/, scripts/, tests/ and benchmarks/; the
comments of the shell scripts under scripts/ and .ci/, and of pyproject.toml.

What a repository path is: a token that starts with one of the repository's top
folders (``toolkit/``, ``tests/``, ``scripts/``, ``docs/``, ``sbatch/``,
``templates/``, ``benchmarks/``, ``examples/``, ``.ci/``) and is not itself the tail
of a longer path (``/opt/x/docs/y`` and ``RUN_DIR/...`` are not), or one of the top
files by name (README.md, pyproject.toml, inventory.example.yaml). It runs on while
the characters are those of a path; trailing dots, commas and a trailing ``/...`` are
prose. It counts as a path when it ends in ``/`` (then it must be a folder), its last
part has an extension (``.py``, ``.md``, ``.sbatch``), or it holds a wildcard: so
``sbatch/srun/scontrol`` (three SLURM commands) and dotted module names
(``toolkit.cluster.up``, no slash) are not paths. Placeholders are deliberate and
become wildcards: ``<package>``, ``{name}``, ``NNN`` and ``...``; a path with a
wildcard (``*``, ``?`` or a placeholder) must match at least one file or folder.
Markdown links (``[text](target)``) in the docs are checked too, relative to their
file, with the heading a ``#anchor`` names.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO

TOP_DIRS = (
    "toolkit",
    "tests",
    "scripts",
    "docs",
    "sbatch",
    "templates",
    "benchmarks",
    "examples",
    ".ci",
)
TOP_FILES = ("README.md", "pyproject.toml", "inventory.example.yaml")

# Paths that exist only in a built wheel, not in the repository (pyproject's force-include).
NOT_IN_THE_REPOSITORY = ("toolkit/_data/",)

_DIRS = "|".join(re.escape(d) for d in TOP_DIRS)
_FILES = "|".join(re.escape(f) for f in TOP_FILES)
PATH_RE = re.compile(
    rf"(?<![\w./~$<>{{}}@%:-])(?:(?:{_DIRS})/[\w.*?<>{{}}/+-]*|(?:{_FILES})(?![\w/-]))"
)
PLACEHOLDER_RE = re.compile(r"<[^<>/]*>|\{[^{}/]*\}|N{3,}|\.\.\.")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

DOCS = sorted(
    [REPO / "README.md", REPO / "sbatch" / "README.md", REPO / "benchmarks" / "README.md"]
    + list((REPO / "docs").glob("*.md"))
    + list((REPO / "docs" / "gpu-runs").glob("*.md"))
    + list((REPO / "tests" / "data").glob("*/README.md"))
)
CODE_DIRS = ("toolkit", "scripts", "tests", "benchmarks")


def paths_named(text: str) -> list[str]:
    """The repository paths ``text`` names, in order, as written."""
    found = []
    for match in PATH_RE.finditer(text):
        token = match.group(0)
        token = token.removesuffix("/...").rstrip(".,")
        last = token.rsplit("/", 1)[-1]
        if token.endswith("/") or re.search(r".\.\w+$", last) or _is_pattern(token):
            found.append(token)
    return found


def _is_pattern(token: str) -> bool:
    return bool(re.search(r"[*?]", token) or PLACEHOLDER_RE.search(token))


def exists(token: str, root: Path = REPO) -> bool:
    """Whether ``token`` (a path as :func:`paths_named` returns it) is in ``root``."""
    if token.startswith(NOT_IN_THE_REPOSITORY):
        return True
    want_dir = token.endswith("/")
    pattern = PLACEHOLDER_RE.sub("*", token).rstrip("/")
    if _is_pattern(token):
        matches = list(root.glob(pattern))
    else:
        matches = [root / pattern] if (root / pattern).exists() else []
    return any(m.is_dir() for m in matches) if want_dir else bool(matches)


def dead_paths(text: str, root: Path = REPO) -> list[str]:
    """The paths ``text`` names that ``root`` does not hold."""
    return [token for token in paths_named(text) if not exists(token, root)]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown`` (its slugs).

    Lines in fenced code blocks (a shell comment, say) are not headings.
    """
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    slugs = set()
    for heading in re.findall(r"^#+ +(.+?) *$", prose, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def dead_links(text: str, md_file: Path) -> list[str]:
    """The relative Markdown links in ``text`` whose file or heading is not there.

    A link is taken relative to ``md_file``; ``#anchor`` (alone, or after a ``.md``
    file) must be one of that file's headings.
    """
    dead = []
    for target in LINK_RE.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (md_file.parent / file_part) if file_part else md_file
        if file_part and not linked.exists():
            dead.append(target)
        elif anchor and linked.suffix == ".md":
            headings = text if linked == md_file else linked.read_text(encoding="utf-8")
            if anchor not in anchors(headings):
                dead.append(target)
    return dead


def python_prose(source: str) -> str:
    """The comments and docstrings of a Python module, one per line."""
    parts = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def hash_comments(source: str) -> str:
    """The ``#`` comments of a shell script or TOML file (a whole line, or after code)."""
    lines = []
    for line in source.splitlines():
        match = re.search(r"(?:^|\s)#(?![!{])(.*)", line)
        if match:
            lines.append(match.group(1))
    return "\n".join(lines)


def code_files() -> Iterator[Path]:
    """Every Python and shell file of the folders whose comments are checked."""
    for name in CODE_DIRS:
        for path in sorted((REPO / name).rglob("*")):
            if path.suffix in (".py", ".sh") and "__pycache__" not in path.parts:
                yield path
    yield REPO / ".ci" / "run"
    yield REPO / "pyproject.toml"


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert dead_paths(text) == [], f"{_rel(doc)} names paths that do not exist"
    assert dead_links(text, doc) == [], f"{_rel(doc)} links to files that do not exist"


def test_every_path_a_comment_or_docstring_names_exists() -> None:
    dead = {}
    for path in code_files():
        source = path.read_text(encoding="utf-8")
        prose = python_prose(source) if path.suffix == ".py" else hash_comments(source)
        if missing := dead_paths(prose):
            dead[_rel(path)] = missing
    assert dead == {}


def test_the_docs_and_code_are_actually_read() -> None:
    # Guards the scan itself: were the regex or the file lists to find nothing, every
    # test above would pass on an empty list.
    assert {_rel(d) for d in DOCS} >= {"README.md", "docs/architecture.md", "sbatch/README.md"}
    assert "toolkit/resources.py" in paths_named((REPO / "pyproject.toml").read_text())
    assert len(list(code_files())) > 200


SAMPLE = """\
See `toolkit/resources.py` and toolkit/cluster/ (with tests/unit/<package>/, cmd_*.py in
toolkit/cli/cmd_*.py, docs/gpu-runs/2026-11-26-h200.*, tests/unit/*/, RUN_DIR/report/,
/opt/site/docs/x.md, toolkit.cluster.up, sbatch/srun/scontrol, sbatch/srun/..., README.md
and inventory.example.yaml). Gone:
`tests/test_sensors.py`, scripts/install.sh, toolkit/cli/cmd_nothing_*.py,
tests/unit/<package>/test_nothing.py and docs/gpu.md/, a file where a folder is meant.
"""


def test_a_dead_path_is_reported_and_live_ones_and_placeholders_are_not() -> None:
    assert dead_paths(SAMPLE) == [
        "tests/test_sensors.py",
        "scripts/install.sh",
        "toolkit/cli/cmd_nothing_*.py",
        "tests/unit/<package>/test_nothing.py",
        "docs/gpu.md/",
    ]
    named = paths_named(SAMPLE)
    assert "RUN_DIR/report/" not in named
    assert not any(p.startswith(("docs/x", "sbatch/srun", "toolkit.")) for p in named)
    assert {
        "toolkit/resources.py",
        "toolkit/cluster/",
        "README.md",
        "inventory.example.yaml",
    } <= set(named)


def test_a_dead_path_in_a_comment_or_docstring_is_found() -> None:
    source = '"""Reads docs/nothing.md."""\n\nX = "tests/ignored.py"  # see tests/gone.py\n'
    assert dead_paths(python_prose(source)) == ["tests/gone.py", "docs/nothing.md"]
    assert dead_paths(hash_comments('echo "#x" # runs scripts/install.sh\n')) == [
        "scripts/install.sh"
    ]


def test_a_dead_markdown_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "here.md").write_text(
        "# Here\n\n## Live endpoint: `--prometheus-port`\n\n```bash\n# not a heading\n```\n"
    )
    doc = tmp_path / "doc.md"
    text = (
        "# Top\n[a](here.md) [b](gone.md#x) [c](https://example.org) [d](#top)"
        " [e](here.md#live-endpoint---prometheus-port) [f](here.md#gone) [g](#gone)"
        " [h](here.md#not-a-heading)"
    )
    assert dead_links(text, doc) == ["gone.md#x", "here.md#gone", "#gone", "here.md#not-a-heading"]
