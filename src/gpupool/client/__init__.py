"""Typed HTTP client of the gpupool REST API v1 (httpx), and where its address and token come from.
May import: ``gpupool.schemas``, ``gpupool.domain`` (errors), httpx, pyyaml.
Must not import: ``store``, ``server``, ``scheduler``, ``cluster``, ``agent``, ``sim``.
"""

from gpupool.client.http import (
    ApiError,
    AuthFailedError,
    Client,
    ClientConfig,
    ServerDownError,
    load_client_config,
)
from gpupool.client.jobfile import job_schema, read_job_file, read_jobs_file

__all__ = [
    "ApiError",
    "AuthFailedError",
    "Client",
    "ClientConfig",
    "ServerDownError",
    "job_schema",
    "load_client_config",
    "read_job_file",
    "read_jobs_file",
]
