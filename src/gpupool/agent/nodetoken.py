"""The node token kept across agent restarts, so a restarted agent registers its node again as itself.

The server lets a join token register a node's name only while that node is not live (``server.gateway``):
a rogue with the join token cannot take a live node over. The real agent, restarted within the lost-timeout,
proves it is that node with the node token its last registration got, kept in ``<state-dir>/node-token``
(mode 0600 in the agent's private state directory: no workload reads it; jobs run as other users).
"""

from __future__ import annotations

import os
from pathlib import Path

FILE = "node-token"


class KeptToken:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE

    def read(self) -> str:
        """The kept token, or "" when none is kept (or the file cannot be read: the join token then serves)."""
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def write(self, token: str) -> None:
        """Keep ``token`` (replacing the file whole: a crash leaves the old token or the new, never half)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, token.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
