"""inspect_ai's own sandbox conformance checks (`inspect_ai/util/_sandbox/self_check.py`)
against the `navi` provider and a real `navi serve` with a real engine.

Every check runs; the ones the server's policy refuses by design are expected to fail
(`BY_DESIGN`, each with the reason; docs/integrations.md, "inspect_ai", lists the same), and the
test below pins that list so a change in either direction shows. /tmp persists and the files
API acts as the sandbox uid, so only running as another user is left."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from inspect_ai.util._sandbox import self_check
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from runtime.bridges.inspect_sandbox import NaviSandboxConfig, NaviSandboxEnvironment
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker

BY_DESIGN = {
    # another user than the tenant's sandbox uid: root only where a policy runs the call
    # under gVisor with `allow_root: true` (not this server's default policy), and no user
    # an earlier call's adduser made (/etc is the image's, fresh for each call)
    "test_exec_as_user": "no root, no other users: SandboxUserUnsupportedError",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("inspect"),
                       extra_env={"NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def config(server: Server) -> NaviSandboxConfig:
    _, token = server.tenant_with_user()
    return NaviSandboxConfig(url=server.url, token=token)


@pytest.fixture
async def sandbox_env(request: pytest.FixtureRequest, server: Server
                      ) -> AsyncIterator[NaviSandboxEnvironment]:
    name = request.node.originalname
    if name in BY_DESIGN:
        request.applymarker(pytest.mark.xfail(reason=BY_DESIGN[name], strict=True))
    # a tenant per check: the whole suite runs more calls than one tenant's execs_per_minute
    config = NaviSandboxConfig(url=server.url, token=server.tenant_with_user()[1])
    envs = await NaviSandboxEnvironment.sample_init("self-check", config, {})
    env = envs["default"]
    assert isinstance(env, NaviSandboxEnvironment)
    yield env
    await NaviSandboxEnvironment.sample_cleanup("self-check", config, envs, interrupted=False)


def test_the_by_design_list_names_real_checks() -> None:
    assert set(BY_DESIGN) <= set(self_check.__all__)


async def test_a_sample_s_session_is_gone_after_cleanup(server: Server,
                                                        config: NaviSandboxConfig) -> None:
    envs = await NaviSandboxEnvironment.sample_init("t", config, {})
    env = envs["default"]
    assert isinstance(env, NaviSandboxEnvironment)
    session = env.session
    await NaviSandboxEnvironment.sample_cleanup("t", config, envs, interrupted=False)
    with server.client(config.token) as client:
        assert client.get(f"/v1/sessions/{session}").status_code == 404


def test_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.bridges.inspect_sandbox import load_config

    monkeypatch.setenv("NAVI_URL", "http://127.0.0.1:1")
    assert load_config(None).url == "http://127.0.0.1:1"
    monkeypatch.delenv("NAVI_URL")
    with pytest.raises(RuntimeError, match="NAVI_URL"):
        load_config(None)
    assert os.environ.get("NAVI_URL") is None


def test_an_eval_runs_end_to_end_with_sandbox_navi(server: Server, config: NaviSandboxConfig,
                                                   tmp_path: os.PathLike[str]) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from inspect_ai.log import read_eval_log

    root = Path(__file__).resolve().parents[2]
    logs = Path(tmp_path) / "logs"
    env = {**os.environ, "NAVI_URL": server.url, "NAVI_TOKEN": config.token or "",
           "INSPECT_LOG_DIR": str(logs), "INSPECT_DISPLAY": "none"}
    run = subprocess.run(
        [str(Path(sys.executable).with_name("inspect")), "eval",
         "tests/fakes/inspect_eval.py", "--model", "mockllm/model", "--sandbox", "navi",
         "--log-dir", str(logs)],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [log_file] = list(logs.glob("*.eval")) or list(logs.glob("*.json"))
    log = read_eval_log(str(log_file))
    assert log.status == "success", log.error
    assert log.samples is not None and log.samples[0].output.completion == "42"
    assert log.results is not None
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    with server.client(config.token) as client:  # the sample's session is gone
        assert [s for s in client.get("/v1/sessions").json()
                if s["title"] == "inspect: navi_multiply"] == []
