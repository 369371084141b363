"""Where the server reaches an agent's log server: the registration's peer address, with only the scheme and
port of the URL the agent announced (no host, no path, no credentials of its choosing)."""

from __future__ import annotations

import pytest

from gpupool.server.gateway import log_url


@pytest.mark.parametrize(
    ("announced", "peer", "want"),
    [
        ("http://127.0.0.1:9100", "10.0.0.7", "http://10.0.0.7:9100"),
        ("http://169.254.169.254/latest/meta-data/", "10.0.0.7", "http://10.0.0.7"),
        ("https://evil.example:8443/x?y=1#z", "10.0.0.7", "https://10.0.0.7:8443"),
        ("http://user:pw@db.internal:5432", "10.0.0.7", "http://10.0.0.7:5432"),
        ("http://[::1]:9100", "fd00::7", "http://[fd00::7]:9100"),
        ("", "10.0.0.7", ""),  # no log server announced
        ("file:///etc/shadow", "10.0.0.7", ""),
        ("gopher://127.0.0.1:25", "10.0.0.7", ""),
        ("http://127.0.0.1:99999", "10.0.0.7", ""),  # not a port
        ("http://127.0.0.1:9100", "", ""),  # no peer address known
    ],
)
def test_log_url(announced: str, peer: str, want: str) -> None:
    assert log_url(announced, peer) == want
