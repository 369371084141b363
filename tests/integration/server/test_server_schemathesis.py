"""Schemathesis against the app's own OpenAPI document: no 5xx, and every response (status code and body) is
one the operation declares."""

from __future__ import annotations

import tempfile

import schemathesis
from hypothesis import HealthCheck, settings
from server_api_helpers import ADMIN

from gpupool.server.app import create_app
from gpupool.server.settings import Settings

app = create_app(Settings(data_dir=tempfile.mkdtemp(prefix="gpupool-st-"), admin_token=ADMIN), run_loop=False)
# The dashboard's /ui routes belong to gpupool.web and are tested there; this checks the REST API's contract.
schema = schemathesis.openapi.from_asgi("/openapi.json", app).exclude(path_regex="^/ui/")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_honours_its_openapi_document(case: schemathesis.Case) -> None:
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {ADMIN}"}
    case.call_and_validate(
        checks=[
            schemathesis.checks.not_a_server_error,
            schemathesis.checks.status_code_conformance,
            schemathesis.checks.response_schema_conformance,
        ],
    )
