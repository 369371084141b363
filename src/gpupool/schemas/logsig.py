"""The signature on the server's log requests to an agent: ``X-Gpupool-Signature: t=<unix s>,v1=<hex>``.

``v1`` is HMAC-SHA256 under the node's log key of ``METHOD\\nTARGET\\nT`` (TARGET: the path with its query,
as sent). The server holds the key (derived from the node's stored token hash) and hands it to the agent in
its registration reply; the agent serves a log only to a request signed with it within ``MAX_AGE_S`` of its
own clock. A job on the node, which knows neither the node token nor the key, cannot sign.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "X-Gpupool-Signature"
MAX_AGE_S = 60.0  # either way: room for clock skew between server and node, little for a replay


def _mac(key: str, method: str, target: str, at: int) -> str:
    return hmac.new(key.encode(), f"{method.upper()}\n{target}\n{at}".encode(), hashlib.sha256).hexdigest()


def sign(key: str, method: str, target: str, now_s: float) -> str:
    """The header value for a request of ``method`` to ``target`` (path and query) made at ``now_s``."""
    at = int(now_s)
    return f"t={at},v1={_mac(key, method, target, at)}"


def problem(key: str, method: str, target: str, value: str | None, now_s: float) -> str | None:
    """Why ``value`` does not sign this request (None: it does)."""
    if not key:
        return "this agent has no log key yet (it has not registered)"
    if not value:
        return f"no {HEADER} header: logs are served to the gpupool server only"
    fields = dict(part.partition("=")[::2] for part in value.split(","))
    at, mac = fields.get("t", ""), fields.get("v1", "")
    if not at.isdigit() or not mac:
        return f"{HEADER} must read t=<unix seconds>,v1=<hex>"
    if abs(now_s - int(at)) > MAX_AGE_S:
        return f"the signature is {now_s - int(at):.0f} s old (at most {MAX_AGE_S:g} s either way)"
    if not hmac.compare_digest(mac, _mac(key, method, target, int(at))):
        return "the signature does not match"
    return None
