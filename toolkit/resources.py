"""Files rtk ships beside its code: ``templates/`` and ``sbatch/``.

In a built wheel they sit in ``toolkit/_data/`` (see pyproject's force-include); in
a source checkout (editable install, tests) they are read from the repository's top.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

from toolkit.shell import comment_text, quote

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory ``templates`` or ``sbatch``, wherever this install keeps it.

    Raises:
        FileNotFoundError: Neither the packaged nor the source copy exists.
    """
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"rtk's {name}/ directory is missing from this install")


@cache
def template_env(name: str = "templates") -> jinja2.Environment:
    """A Jinja2 environment over ``templates/`` (or ``sbatch/``), strict about undefined names."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir(name))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shquote"] = quote
    env.filters["comment"] = comment_text
    return env


def render(template: str, directory: str = "templates", **values: object) -> str:
    """Render one template file with ``values``."""
    return template_env(directory).get_template(template).render(**values)
