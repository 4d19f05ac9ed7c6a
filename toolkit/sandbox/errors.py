"""The sandbox's one error type."""

from __future__ import annotations

from toolkit.errors import RtkError


class SandboxError(RtkError):
    """A sandbox could not be created, reached or removed on this machine."""

    exit_code = 7
