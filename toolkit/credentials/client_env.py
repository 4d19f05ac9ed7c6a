"""The variables that point Ray's own CLI and SDK at an rtk cluster, as shell text.

What Ray (2.x) reads, and so what is set here:

- ``RAY_ADDRESS``: the head's GCS ``host:port``. ``ray status`` takes only that form
  (a ``ray://`` address breaks it), and ``ray.init()`` / ``ray.init(address="auto")``
  take it in place of their address on a node of the cluster.
- ``RAY_API_SERVER_ADDRESS``: the dashboard URL, for ``ray job submit/list/logs/stop``
  and ``JobSubmissionClient``; it wins over ``RAY_ADDRESS`` there.
- ``RAY_AUTH_MODE=token``: a client sends the token only when this says so.
- the token, looked for in ``RAY_AUTH_TOKEN`` (the token itself), then the file named
  by ``RAY_AUTH_TOKEN_PATH``, then ``~/.ray/auth_token``: rtk names its 0600 file and
  unsets ``RAY_AUTH_TOKEN``, which would win over that file (another cluster's token).

- with ``ray.tls``: ``RAY_USE_TLS=1`` and the CA, certificate and key files
  (``RAY_TLS_CA_CERT``, ``RAY_TLS_SERVER_CERT``, ``RAY_TLS_SERVER_KEY``): Ray's gRPC
  clients (``ray status``, ``ray.init``, Ray Client) present that certificate, which
  the cluster's servers require. The Jobs API and ``ray job`` speak HTTP to the
  dashboard and do not use them. Without ``ray.tls`` they are unset, so that another
  cluster's, left from an earlier ``eval``, are not used here.

On this machine the token file is the one ``rtk up`` keeps (``StateStore``), and the
certificate its client certificate (``ClusterTls``); on a node they are the ones
``rtk up`` wrote there next to the env file (``ClusterPaths``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.cluster.plan import TLS_VARIABLES, ClusterPlan, tls_env
from toolkit.errors import StateError
from toolkit.shell import join, quote
from toolkit.state.store import StateStore

# The shells ``render_exports`` writes for; anything else gets bash's text.
SHELLS = ("bash", "zsh", "fish")
DEFAULT_SHELL = "bash"
# Ray reads the token from this variable before the file rtk names: unset it.
TOKEN_TEXT_VARIABLE = "RAY_AUTH_TOKEN"


@dataclass(frozen=True)
class ClientEnv:
    """Variables to unset, then to set (in order), for Ray's clients to reach one cluster."""

    values: tuple[tuple[str, str], ...]
    unset: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        """The values to set, by name."""
        return dict(self.values)

    def with_values(self, *values: tuple[str, str]) -> ClientEnv:
        """This environment with ``values`` set after its own."""
        return ClientEnv((*self.values, *values), self.unset)


@dataclass(frozen=True)
class TlsFiles:
    """Where a Ray client finds the cluster's CA and its own certificate and key."""

    ca_file: str
    cert_file: str
    key_file: str


def ray_client_env(plan: ClusterPlan, token_path: str, tls: TlsFiles | None = None) -> ClientEnv:
    """What makes Ray's CLI and SDK use ``plan``'s cluster, the token read from ``token_path``.

    Args:
        plan: The cluster.
        token_path: The cluster's token file where the variables are used (unused when
            the inventory turns authentication off).
        tls: The TLS files where the variables are used (None: the node's, as
            ``rtk up`` wrote them; unused when the inventory turns TLS off).
    """
    values = [("RAY_ADDRESS", plan.head_address)]
    unset: tuple[str, ...] = ()
    if plan.inventory.ray.include_dashboard:
        values.append(("RAY_API_SERVER_ADDRESS", plan.dashboard_url))
    if plan.tls:
        paths = plan.paths
        files = tls or TlsFiles(paths.tls_ca_file, paths.tls_cert_file, paths.tls_key_file)
        values += tls_env(files.ca_file, files.cert_file, files.key_file).items()
    else:
        unset += TLS_VARIABLES
    if not plan.auth:
        return ClientEnv((*values, ("RAY_AUTH_MODE", "disabled")), unset)
    values += [("RAY_AUTH_MODE", "token"), ("RAY_AUTH_TOKEN_PATH", token_path)]
    return ClientEnv(tuple(values), (TOKEN_TEXT_VARIABLE, *unset))


def local_client_env(plan: ClusterPlan, store: StateStore, inventory_path: str | None) -> ClientEnv:
    """The variables for this machine, from the state ``rtk up`` left here; nothing is probed.

    Args:
        plan: The cluster.
        store: Its state on this machine.
        inventory_path: The inventory file, exported as ``RTK_INVENTORY`` (absolute) so
            later rtk commands can omit it; None for the embedded one.

    Raises:
        StateError: The cluster was never brought up from this machine (no record, no
            token while authentication is on, or no client certificate while TLS is).
    """
    name = plan.inventory.name
    up = "rtk up " + (quote(inventory_path) if inventory_path else "--local")
    if store.load() is None:
        raise StateError(
            f"cluster {name!r} has no state on this machine ({store.dir}): it was not "
            f"brought up from here.\nRun `{up}` here first (or set RTK_STATE_DIR to the "
            "state directory of the machine that brought it up)."
        )
    token_path = str(store.token_file.absolute())
    if plan.auth and store.read_token() is None:
        raise StateError(
            f"cluster {name!r} uses token authentication but this machine has no token "
            f"for it ({token_path}).\nRun `{up}` here first; it keeps the token there."
        )
    tls: TlsFiles | None = None
    if plan.tls:
        files = store.tls
        if not files.client_cert_file.exists():
            raise StateError(
                f"cluster {name!r} uses TLS but this machine has no client certificate "
                f"for it ({files.client_cert_file}).\nRun `{up}` here first; it makes one."
            )
        tls = TlsFiles(
            str(files.ca_cert_file.absolute()),
            str(files.client_cert_file.absolute()),
            str(files.client_key_file.absolute()),
        )
    env = ray_client_env(plan, token_path, tls)
    if inventory_path:
        env = env.with_values(("RTK_INVENTORY", os.path.abspath(inventory_path)))
    state_dir = os.environ.get("RTK_STATE_DIR")
    if state_dir:
        env = env.with_values(("RTK_STATE_DIR", str(Path(state_dir).absolute())))
    return env


def detect_shell(shell_path: str | None) -> str:
    """The shell to write for: ``$SHELL``'s name when it is one of ``SHELLS``, else bash."""
    name = os.path.basename(shell_path or "")
    return name if name in SHELLS else DEFAULT_SHELL


def fish_quote(value: str) -> str:
    r"""``value`` as one fish word: single quotes, in which only ``\\`` and ``\'`` escape."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_exports(env: ClientEnv, shell: str) -> str:
    """The lines that ``eval`` (or fish's ``source``) turns into ``env`` in ``shell``.

    bash and zsh: ``unset NAME`` then ``export NAME=value``; fish: ``set -e NAME`` then
    ``set -gx NAME value``, each line ending in ``;`` so that ``eval (...)``, which
    joins the lines, reads them too. Every value is quoted for that shell.

    Raises:
        ValueError: ``shell`` is not one of ``SHELLS``.
    """
    if shell == "fish":
        lines = [f"set -q {name}; and set -e {name};" for name in env.unset]
        lines += [f"set -gx {name} {fish_quote(value)};" for name, value in env.values]
    elif shell in SHELLS:
        lines = [f"unset {name}" for name in env.unset]
        lines += [f"export {name}={quote(value)}" for name, value in env.values]
    else:
        raise ValueError(f"no export syntax for shell {shell!r}; one of {', '.join(SHELLS)}")
    return "".join(line + "\n" for line in lines)


def node_session_script(plan: ClusterPlan, argv: Sequence[str] = ()) -> str:
    """The bash script a session on a node runs: the cluster's environment, then ``argv``.

    It loads the env file ``rtk up`` wrote on the node (the token's file and
    ``RAY_AUTH_MODE``, the network variables, the node's Python first on PATH), says on
    stderr when there is none (the cluster is not up), sets ``ray_client_env`` for the
    node's token file, and ``exec``s ``argv`` (its words quoted), or with no ``argv``
    the login user's shell, interactive (``$SHELL -i``: not a login shell, whose
    profile could reset PATH).
    """
    env_file = quote(plan.paths.env_file)
    missing = quote(
        f"rtk: no {plan.paths.env_file} on this node: cluster {plan.inventory.name} is "
        "not up here (rtk up), so the Ray CLI will not find it"
    )
    command = join(argv) if argv else '"${SHELL:-/bin/bash}" -i'
    return (
        f"if [ -f {env_file} ]; then set -a && . {env_file} && set +a; "
        f"else echo {missing} >&2; fi\n"
        + render_exports(ray_client_env(plan, plan.paths.token_file), "bash")
        + f"exec {command}\n"
    )
