"""``Client``: one method per REST call, answers parsed into the API's pydantic models.

Failures become gpupool errors with one clear sentence: a server that does not answer (ServerDownError), a
token it refuses (AuthFailedError), or what the server said (ApiError with its status and message).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import yaml
from pydantic import BaseModel, ValidationError

from gpupool.domain.errors import GpupoolError, ParseError
from gpupool.schemas import accounts, admin, api

M = TypeVar("M", bound=BaseModel)
DEFAULT_SERVER = "http://127.0.0.1:8765"
DEFAULT_CONFIG = Path("~/.config/gpupool/client.yaml")


class ServerDownError(GpupoolError):
    code = "SERVER_DOWN"


class AuthFailedError(GpupoolError):
    code = "UNAUTHENTICATED"


class ApiError(GpupoolError):
    code = "API_ERROR"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ClientConfig:
    server: str = DEFAULT_SERVER
    token: str = field(default="", repr=False)


def load_client_config(env: Mapping[str, str] | None = None, path: str | Path | None = None) -> ClientConfig:
    """``GPUPOOL_SERVER`` / ``GPUPOOL_TOKEN`` win over the config file (``GPUPOOL_CONFIG`` or the default)."""
    env = os.environ if env is None else env
    file = Path(path or env.get("GPUPOOL_CONFIG") or DEFAULT_CONFIG).expanduser()
    data: dict[str, Any] = {}
    if file.is_file():
        try:
            loaded = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise ParseError(f"not YAML: {e}", source=str(file)) from None
        if not isinstance(loaded, dict):
            raise ParseError("the client config must be a mapping (server:, token:)", source=str(file), line=1)
        data = loaded
    server = env.get("GPUPOOL_SERVER") or str(data.get("server") or DEFAULT_SERVER)
    token = env.get("GPUPOOL_TOKEN") or str(data.get("token") or "")
    return ClientConfig(server.rstrip("/"), token)


class Client:
    def __init__(self, config: ClientConfig, *, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None):
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self.server = config.server
        self._http = httpx.Client(base_url=config.server, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, model: type[M], **kw: Any) -> M:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise ServerDownError(f"the gpupool server at {self.server} does not answer ({type(e).__name__})") from None
        if r.status_code == 401:
            raise AuthFailedError(f"the server refused the token: {_message(r)} (set GPUPOOL_TOKEN)")
        if r.status_code >= 400:
            raise ApiError(f"{r.status_code}: {_message(r)}", r.status_code)
        try:
            return model.model_validate(r.json())
        except (ValueError, ValidationError) as e:
            raise ApiError(
                f"the server's answer to {method} {path} is not what the API promises: {e}", r.status_code
            ) from None

    # -- jobs ----------------------------------------------------------------------------------------------------
    def submit(self, job: api.JobSubmit, idempotency_key: str | None = None) -> api.SubmitOut:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = job.model_dump(mode="json", exclude_none=True)
        return self._call("POST", "/v1/jobs", api.SubmitOut, json=body, headers=headers)

    def jobs(
        self,
        *,
        states: Sequence[str] = (),
        active: bool | None = None,
        tenant: str | None = None,
        pool: str | None = None,
        array: str | None = None,
        q: str | None = None,
        submitted_after: float | None = None,
        submitted_before: float | None = None,
        sort: str = "default",
        order: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> api.JobList:
        """One page of ``GET /v1/jobs`` (``total`` counts every match)."""
        pairs: list[tuple[str, str | int | float | bool | None]] = [("state", s) for s in states]
        pairs += [
            ("active", None if active is None else str(active).lower()),
            ("tenant", tenant),
            ("pool", pool),
            ("array", array),
            ("q", q),
            ("submitted_after", submitted_after),
            ("submitted_before", submitted_before),
            ("sort", sort),
            ("order", order),
            ("limit", limit),
            ("offset", offset),
        ]
        return self._call("GET", "/v1/jobs", api.JobList, params=[(k, v) for k, v in pairs if v is not None])

    def queue(
        self, *, tenant: str | None = None, pool: str | None = None, limit: int = 100, offset: int = 0
    ) -> api.QueueOut:
        pairs = (("tenant", tenant), ("pool", pool), ("limit", limit), ("offset", offset))
        return self._call("GET", "/v1/queue", api.QueueOut, params={k: v for k, v in pairs if v is not None})

    def array(self, array_id: str) -> api.ArrayOut:
        return self._call("GET", f"/v1/arrays/{array_id}", api.ArrayOut)

    def cancel_array(self, array_id: str) -> api.ArrayOut:
        return self._call("POST", f"/v1/arrays/{array_id}/cancel", api.ArrayOut)

    def job(self, job_id: str) -> api.JobDetail:
        return self._call("GET", f"/v1/jobs/{job_id}", api.JobDetail)

    def events(self, job_id: str) -> api.EventList:
        return self._call("GET", f"/v1/jobs/{job_id}/events", api.EventList)

    def attempts(self, job_id: str) -> api.AttemptList:
        return self._call("GET", f"/v1/jobs/{job_id}/attempts", api.AttemptList)

    def why(self, job_id: str) -> api.WhyOut:
        return self._call("GET", f"/v1/jobs/{job_id}/why", api.WhyOut)

    def cancel(self, job_id: str) -> api.JobOut:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel", api.JobOut)

    def logs(
        self, job_id: str, *, stream: str = "stdout", tail: int = 200, rank: int = 0, offset: int | None = None
    ) -> api.LogsOut:
        """The last ``tail`` lines of a rank's log, or with ``offset`` what it holds from that byte on."""
        params: dict[str, str | int] = {"stream": stream, "rank": rank}
        params.update({"tail": tail} if offset is None else {"offset": offset})
        return self._call("GET", f"/v1/jobs/{job_id}/logs", api.LogsOut, params=params)

    # -- operators -----------------------------------------------------------------------------------------------
    def nodes(self) -> api.NodeList:
        return self._call("GET", "/v1/nodes", api.NodeList)

    def drain(self, node: str, reason: str) -> api.NodeList:
        return self._call("POST", f"/v1/nodes/{node}/drain", api.NodeList, json={"reason": reason})

    def undrain(self, node: str) -> api.NodeList:
        return self._call("POST", f"/v1/nodes/{node}/undrain", api.NodeList)

    def labels(self, node: str) -> api.LabelsOut:
        return self._call("GET", f"/v1/nodes/{node}/labels", api.LabelsOut)

    def set_labels(self, node: str, set_: dict[str, str], remove: list[str]) -> api.LabelsOut:
        body = {"set": set_, "remove": remove}
        return self._call("PATCH", f"/v1/nodes/{node}/labels", api.LabelsOut, json=body)

    def pools(self) -> api.PoolList:
        return self._call("GET", "/v1/pools", api.PoolList)

    def usage(self, from_s: float | None = None, to_s: float | None = None) -> accounts.UsageOut:
        params = {k: v for k, v in (("from", from_s), ("to", to_s)) if v is not None}
        return self._call("GET", "/v1/usage", accounts.UsageOut, params=params)

    def accounting(
        self, from_s: float, to_s: float, tenant: str | None = None, offset: int = 0, limit: int = 1000
    ) -> accounts.AccountingPage:
        params: dict[str, float | str] = {"from": from_s, "to": to_s, "offset": offset, "limit": limit}
        if tenant is not None:
            params["tenant"] = tenant
        return self._call("GET", "/v1/accounting/jobs", accounts.AccountingPage, params=params)

    def statement(self, month: str, tenant: str | None = None) -> accounts.StatementOut:
        params = {"month": month} if tenant is None else {"month": month, "tenant": tenant}
        return self._call("GET", "/v1/accounting/statement", accounts.StatementOut, params=params)

    # -- the operator's: tenants, quotas, pools and calendars (gpupool admin) -----------------------------------
    def tenants(self) -> api.TenantList:
        return self._call("GET", "/v1/tenants", api.TenantList)

    def create_tenant(self, name: str, weight: float = 1.0) -> api.TenantOut:
        return self._call("POST", "/v1/tenants", api.TenantOut, json={"name": name, "weight": weight})

    def update_tenant(self, name: str, weight: float) -> api.TenantOut:
        return self._call("PATCH", f"/v1/tenants/{_seg(name)}", api.TenantOut, json={"weight": weight})

    def delete_tenant(self, name: str) -> admin.DeletedOut:
        return self._call("DELETE", f"/v1/tenants/{_seg(name)}", admin.DeletedOut)

    def quotas(self, tenant: str | None = None) -> api.QuotaList:
        path = "/v1/quotas" if tenant is None else f"/v1/tenants/{_seg(tenant)}/quotas"
        return self._call("GET", path, api.QuotaList)

    def set_quota(self, tenant: str, body: api.QuotaIn) -> api.QuotaOut:
        return self._call("PUT", f"/v1/tenants/{_seg(tenant)}/quotas", api.QuotaOut, json=body.model_dump(mode="json"))

    def delete_quota(self, tenant: str, pool: str, gpu_model: str = "") -> admin.QuotaKeyOut:
        path = f"/v1/tenants/{_seg(tenant)}/quotas/{_seg(pool)}"
        return self._call("DELETE", path, admin.QuotaKeyOut, params={"gpu_model": gpu_model})

    def put_pool(self, name: str, body: api.PoolIn) -> api.PoolOut:
        json = body.model_dump(mode="json", exclude_none=True)
        return self._call("PUT", f"/v1/pools/{_seg(name)}", api.PoolOut, json=json)

    def delete_pool(self, name: str) -> admin.DeletedOut:
        return self._call("DELETE", f"/v1/pools/{_seg(name)}", admin.DeletedOut)

    def calendar(self, pool: str, at_s: float | None = None) -> admin.CalendarOut:
        params = {} if at_s is None else {"at": at_s}
        return self._call("GET", f"/v1/pools/{_seg(pool)}/calendar", admin.CalendarOut, params=params)

    def create_token(self, body: accounts.TokenIn) -> accounts.TokenOut:
        return self._call("POST", "/v1/tokens", accounts.TokenOut, json=body.model_dump(mode="json", exclude_none=True))

    def tokens(self, tenant: str | None = None) -> accounts.TokenList:
        params = {} if tenant is None else {"tenant": tenant}
        return self._call("GET", "/v1/tokens", accounts.TokenList, params=params)

    def revoke_token(self, token_id: str) -> accounts.TokenInfoOut:
        return self._call("DELETE", f"/v1/tokens/{quote(token_id, safe='')}", accounts.TokenInfoOut)

    def create_join_token(self, body: accounts.JoinTokenIn) -> accounts.TokenOut:
        return self._call(
            "POST", "/v1/join-tokens", accounts.TokenOut, json=body.model_dump(mode="json", exclude_none=True)
        )

    def join_tokens(self) -> accounts.JoinTokenList:
        return self._call("GET", "/v1/join-tokens", accounts.JoinTokenList)

    def revoke_join_token(self, token_id: str) -> accounts.JoinTokenInfoOut:
        return self._call("DELETE", f"/v1/join-tokens/{quote(token_id, safe='')}", accounts.JoinTokenInfoOut)


def _seg(name: str) -> str:
    """``name`` as one path segment: a slash or a ``?`` in a name stays inside it."""
    return quote(name, safe="")


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:200] or r.reason_phrase
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    if isinstance(body, dict) and isinstance(body.get("detail"), list) and body["detail"]:
        d = body["detail"][0]
        return f"{'.'.join(str(x) for x in d.get('loc', []))}: {d.get('msg', '')}"
    return str(body)[:200]
