"""`navi exec` as a real process: policy + Executor + audit + the Docker backend.

Containers are watched through the engine's event stream, filtered by a tenant label unique
to the test: an allowed call shows a `create` event for its exec_id (so the watch works), a
denied call shows none, and is audited as `denied` with its rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from runtime.audit import verify_store
from runtime.audit.verify import connect_readonly
from tests.docker.sandbox_fixtures import DEFAULT_IMAGE, sweep

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image_prefix(docker_api: docker.APIClient, sandbox_image: str) -> Iterator[str]:
    """`navi` when navi/python is built; else the fallback image tagged under a test prefix."""
    if sandbox_image == DEFAULT_IMAGE:
        yield "navi"
        return
    prefix = f"navi-test-{uuid.uuid4().hex[:8]}"
    docker_api.tag(sandbox_image, f"{prefix}/python", "latest")
    yield prefix
    docker_api.remove_image(f"{prefix}/python:latest", noprune=True)


@pytest.fixture
def data_dir(tmp_path: Path, docker_api: docker.APIClient) -> Iterator[Path]:
    data = tmp_path / "data"
    data.mkdir()
    instance = f"navi-test-{uuid.uuid4().hex[:12]}"
    (data / "instance_id").write_text(instance + "\n")
    yield data
    sweep(docker_api, instance)


def navi_exec(data: Path, prefix: str, *args: str, tenant: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NAVI_IMAGE_PREFIX": prefix, "NAVI_DATA_DIR": str(data)}
    env.pop("NAVI_POLICY", None)
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", "exec", "--tenant", tenant, *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )


def created(api: docker.APIClient, tenant: str, since: float) -> list[dict]:
    events = api.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                        filters={"type": "container", "event": "create",
                                 "label": [f"navi.tenant={tenant}"]})
    return [e for e in events]


def records(data: Path) -> list[dict]:
    conn = connect_readonly(data)
    assert conn is not None
    with conn:
        return [json.loads(b) for (b,) in conn.execute("SELECT body FROM audit ORDER BY seq")]


def test_allowed_call_runs_in_a_container_and_is_audited(
    data_dir: Path, image_prefix: str, docker_api: docker.APIClient
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    start = time.time()
    done = navi_exec(data_dir, image_prefix, "--tool", "code_exec", "--arg", "language=python",
                     "--arg", "code=print(6*7)", "--json", tenant=tenant)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ok"] is True and out["stdout"] == "42\n" and out["exit_code"] == 0
    assert {"ok", "exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
            "duration_ms", "exec_id", "audit_seq"} <= set(out)
    events = created(docker_api, tenant, start)
    assert [e["Actor"]["Attributes"]["navi.exec_id"] for e in events] == [out["exec_id"]]
    rows = [r for r in records(data_dir) if r["exec_id"] == out["exec_id"]]
    assert [r["kind"] for r in rows] == ["intent", "outcome"]
    assert rows[1]["seq"] == out["audit_seq"] and rows[1]["exit_code"] == 0
    assert rows[0]["rule"] == "profiles.developer.allow[group:exec]"
    assert rows[1]["image_digest"], "the outcome records what image ran"
    assert verify_store(data_dir).ok


def test_denied_call_creates_no_container_and_is_audited(
    data_dir: Path, image_prefix: str, docker_api: docker.APIClient
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    start = time.time()
    done = navi_exec(data_dir, image_prefix, "--tool", "terminal", "--arg", "command=id",
                     "--profile", "secretary", tenant=tenant)
    assert done.returncode == 126
    assert "profiles.secretary.deny[group:exec]" in done.stderr
    web = navi_exec(data_dir, image_prefix, "--tool", "http_request", "--json", tenant=tenant)
    assert web.returncode == 126
    assert json.loads(web.stdout)["error"]["rule"] == "profiles.developer.deny[group:web]"
    assert created(docker_api, tenant, start) == []
    denied = [(r["kind"], r["rule"], r["tenant"]) for r in records(data_dir)]
    assert denied == [("denied", "profiles.secretary.deny[group:exec]", tenant),
                      ("denied", "profiles.developer.deny[group:web]", tenant)]
    assert verify_store(data_dir).ok


def test_exit_code_timeout_and_workspace(
    data_dir: Path, image_prefix: str, tmp_path: Path
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    done = navi_exec(data_dir, image_prefix, "--tool", "code_exec", "--arg", "language=bash",
                     "--arg", "code=echo out; echo err >&2; exit 7", tenant=tenant)
    assert done.returncode == 7
    assert done.stdout == "out\n" and done.stderr.startswith("err\n")
    assert "exit 7" in done.stderr and "audit seq" in done.stderr
    done = navi_exec(data_dir, image_prefix, "--tool", "terminal", "--arg", "command=sleep 20",
                     "--timeout", "1", "--json", tenant=tenant)
    assert done.returncode == 124
    out = json.loads(done.stdout)
    assert out["timed_out"] is True and out["ok"] is False and out["timeout_s"] == 1
    ws = tmp_path / "ws" / "project"
    ws.mkdir(parents=True)
    done = navi_exec(data_dir, image_prefix, "--tool", "terminal", "--arg",
                     "command=pwd; echo hi > note.txt", "--workspace", str(ws), tenant=tenant)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "/workspace\n" and (ws / "note.txt").read_text() == "hi\n"


def test_bad_arguments_are_a_usage_error(data_dir: Path, image_prefix: str) -> None:
    done = navi_exec(data_dir, image_prefix, "--tool", "code_exec", "--arg", "language=perl",
                     "--arg", "code=1", tenant="t")
    assert done.returncode == 2 and "language" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_arguments_for_a_denied_tool_answer_the_denial(
    data_dir: Path, image_prefix: str, docker_api: docker.APIClient
) -> None:
    """`navi exec` runs through the API's call service: arguments a denied tool would refuse
    are answered as the API answers them, policy first (the denial, audited), not as a usage
    error."""
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    start = time.time()
    done = navi_exec(data_dir, image_prefix, "--tool", "code_exec", "--arg", "language=perl",
                     "--profile", "secretary", "--json", tenant=tenant)
    assert done.returncode == 126, done.stderr
    assert json.loads(done.stdout)["error"]["rule"] == "profiles.secretary.deny[group:exec]"
    assert created(docker_api, tenant, start) == []
    assert [(r["kind"], r["rule"]) for r in records(data_dir)] == [
        ("denied", "profiles.secretary.deny[group:exec]")]
