"""Shell quoting and environment files: the only way inventory values reach a shell.

Every value that lands in a command line or an env file passes through ``quote``;
tests feed hostile values through here and check that nothing runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping

quote = shlex.quote

# What Ray takes for "on" in RAY_USE_TLS, in any case (its gRPC setup compares the
# lowered value with these).
TRUE_WORDS = ("1", "true")


def join(argv: Iterable[str]) -> str:
    """Quote each word and join them into one command line."""
    return " ".join(quote(word) for word in argv)


def parse_env_file(text: str) -> dict[str, str]:
    """Read back the ``KEY='value'`` lines of an env file (``templates/node.env.j2``).

    ``PATH``, which the file extends (``PATH='DIR'"${PATH:+:$PATH}"``) rather than
    sets, is not among them: only a shell can read it back.
    """
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, rest = line.partition("=")
        if key.strip() == "PATH":
            continue
        words = shlex.split(rest)
        env[key.strip()] = words[0] if words else ""
    return env


def ray_tls_on(env: Mapping[str, str]) -> bool:
    """True when env file values ``env`` (``parse_env_file``) turn Ray's TLS on.

    ``RAY_USE_TLS`` as Ray reads it: ``1`` or ``true`` in any case; absent is off.
    ``toolkit.node.facts``, which runs on the nodes with the standard library alone,
    keeps its own copy of this rule.
    """
    return env.get("RAY_USE_TLS", "0").lower() in TRUE_WORDS


def comment_text(text: str) -> str:
    """``text`` fit for a ``#`` comment line: unprintable characters shown escaped.

    A newline would end the comment, and the shell would run the rest of the text.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def with_env_file(path: str, command: str) -> str:
    """Run ``command`` with every variable of the env file at ``path`` exported."""
    return f"set -a && . {quote(path)} && set +a && {command}"
