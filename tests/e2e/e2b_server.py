"""What the E2B SDK suites share: a `navi serve` with the E2B test policy, the three
variables set as a user sets them (nothing else configures the SDK), the audit as admin."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.conftest import Server, start_server

E2B_VARS = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")
POLICY = Path(__file__).parent / "policies" / "e2b.yaml"  # upload_mb 8, session disk 64 MiB


def start_e2b_server(tmp: Path, **env: str) -> Server:
    """A server for one module (share it: module-scoped fixtures); `env`: more settings."""
    return start_server(tmp, policy=POLICY,
                        extra_env={"NAVI_EMBEDDED_MODEL": "off", **env}, ready_s=120)


@contextmanager
def e2b_vars(navi: Server, api_key: str) -> Iterator[str]:
    """E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at `navi` (put back after)."""
    saved = {k: os.environ.get(k) for k in E2B_VARS}
    os.environ["E2B_API_URL"] = f"{navi.url}/e2b"
    os.environ["E2B_SANDBOX_URL"] = f"{navi.url}/e2b"
    os.environ["E2B_API_KEY"] = api_key
    try:
        yield api_key
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def audit(navi: Server, tenant_id: str) -> list[dict[str, object]]:
    with navi.client(navi.admin_token) as admin:
        resp = admin.get("/v1/audit", params={"tenant": tenant_id, "limit": 10000})
        resp.raise_for_status()
        return list(resp.json())
