"""What rtk keeps on the machine it runs on: each cluster's token, CA and ``state.json``.

``StateStore`` is the one reader and writer of ``state.json`` (``ClusterState``).
Everything lives in ``$RTK_STATE_DIR`` (default ``$XDG_STATE_HOME/rtk`` or
``~/.local/state/rtk``), one directory per cluster, mode 0700; ``rtk down`` removes it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

from toolkit.errors import StateError
from toolkit.state.cluster_state import FILE_NAME, ClusterState
from toolkit.state.tls import ClusterTls


def state_root() -> Path:
    """The directory holding every cluster's state."""
    explicit = os.environ.get("RTK_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "rtk"


class StateStore:
    """One cluster's state directory."""

    def __init__(self, cluster: str, root: Path | None = None) -> None:
        self.dir = (root or state_root()) / cluster

    @property
    def token_file(self) -> Path:
        """The cluster's Ray token on this machine (0600)."""
        return self.dir / "auth_token"

    @property
    def tls(self) -> ClusterTls:
        """The cluster's CA and certificates on this machine (``ray.tls``)."""
        return ClusterTls(self.dir.name, self.dir / "tls")

    @property
    def state_file(self) -> Path:
        """The cluster's record (``ClusterState``)."""
        return self.dir / FILE_NAME

    def token(self) -> str:
        """The cluster's token, created on first use (64 hex characters, 0600).

        Raises:
            StateError: The state directory cannot be written.
        """
        try:
            if self.token_file.exists():
                return self.token_file.read_text(encoding="utf-8").strip()
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            token = secrets.token_hex(32)
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(token)
            return token
        except OSError as e:
            raise StateError(f"cannot keep the cluster token in {self.dir}: {e}") from e

    def read_token(self) -> str | None:
        """The cluster's token if this machine has one (never creates it)."""
        try:
            return self.token_file.read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StateError(f"cannot read {self.token_file}: {e}") from e

    def save(self, state: ClusterState) -> None:
        """Write the cluster's record, replacing the file at once."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            temp = self.state_file.with_suffix(".tmp")
            temp.write_text(
                json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
            temp.replace(self.state_file)
        except OSError as e:
            raise StateError(f"cannot write {self.state_file}: {e}") from e

    def load(self) -> ClusterState | None:
        """The cluster's record, or None when there is none (or it is not a JSON object).

        Raises:
            StateError: The file is unreadable, not JSON, or a field has the wrong type.
        """
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as e:
            raise StateError(f"cannot read {self.state_file}: {e}") from e
        if not isinstance(data, dict):
            return None
        return ClusterState.from_json(data, str(self.state_file))

    def forget_credentials(self) -> None:
        """Remove the token, the CA and every certificate: the next ``rtk up`` makes new ones.

        Raises:
            StateError: They cannot be removed.
        """
        try:
            self.token_file.unlink(missing_ok=True)
            shutil.rmtree(self.tls.directory, ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StateError(f"cannot remove the cluster's credentials in {self.dir}: {e}") from e

    def remove(self) -> None:
        """Forget the cluster (token included)."""
        shutil.rmtree(self.dir, ignore_errors=True)
