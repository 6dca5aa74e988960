"""`runtime.client` against a real `navi serve` and a real engine: sync and async, streamed
exec, events with resume, files, the admin calls, audit, and errors as their exceptions
(403 `policy_denied` with its rule, 404, 401, 422, 429 with Retry-After). Also README's
"The same tour in Python", cut out of README.md and run as written."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest
import yaml

from runtime.client import (
    AsyncNaviClient,
    AuditRecord,
    AuthenticationError,
    BadRequestError,
    Event,
    ExecChunk,
    ExecOut,
    NaviClient,
    NotFoundError,
    PolicyDeniedError,
    RateLimitError,
    ResponseTooLarge,
)
from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = pytest.mark.docker

SLOW = "slow"  # a tenant the policy allows one exec a minute


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The default policy, plus a tenant `slow` with a quota of one exec a minute."""
    tmp = tmp_path_factory.mktemp("client")
    policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    policy["tenants"][SLOW] = {**policy["tenants"]["*"], "quotas": {"execs_per_minute": 1}}
    (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    srv = start_server(tmp, policy=tmp / "policy.yaml", extra_env={"NAVI_EMBEDDED_MODEL": "off"},
                       ready_s=90)
    yield srv
    stop_server(srv)


@pytest.fixture
def navi(server: Server, account: tuple[str, str]) -> Iterator[NaviClient]:
    with NaviClient(server.url, account[1]) as client:
        yield client


def test_the_client_imports_nothing_of_the_server() -> None:
    """`navi_client` loads no `runtime` module; `runtime.client`, only the package itself."""
    server_deps = "{'fastapi', 'starlette', 'docker', 'aiosqlite', 'structlog', 'yaml', 'mcp'}"
    for module, allowed in (("navi_client", "()"), ("runtime.client", "('runtime',)")):
        code = (f"import sys, {module}; print(sorted(m for m in sys.modules "
                f"if m.split('.')[0] in {server_deps} or (m.split('.')[0] == 'runtime' "
                f"and m not in {allowed} + ('runtime.client',))))")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        assert out.strip() == "[]", module


def test_tenants_and_tokens(server: Server) -> None:
    with NaviClient(server.url, server.admin_token) as admin:
        tenant = admin.create_tenant("client-admin")
        assert tenant in admin.list_tenants()
        made = admin.create_token(tenant.id, "user", name="ci", expires_in_s=3600)
        assert made.token and made.tenant == tenant.id and made.expires_at is not None
        [listed] = admin.list_tokens(tenant.id)
        assert (listed.id, listed.name, listed.revoked_at) == (made.id, "ci", None)
        with NaviClient(server.url, made.token) as user:
            assert user.list_sessions() == []
            admin.revoke_token(tenant.id, made.id)
            with pytest.raises(AuthenticationError) as err:
                user.list_sessions()
        assert (err.value.status, err.value.code) == (401, "unauthorized")
        assert admin.list_tokens(tenant.id)[0].revoked_at is not None


def test_sessions_and_files_round_trip(navi: NaviClient) -> None:
    session = navi.create_session(title="files")
    assert navi.get_session(session.id) == session and session in navi.list_sessions()
    data = bytes(range(256)) * 4
    odd = "dir/a name?#%.bin"  # '?', '#', '%' are part of the name, not of the URL
    entry = navi.put_file(session.id, odd, data)
    assert (entry.path, entry.size) == (odd, len(data))
    navi.put_file(session.id, "notes.txt", "héllo")
    assert {e.path: e.size for e in navi.list_files(session.id)} == {odd: 1024, "notes.txt": 6}
    assert navi.get_file(session.id, odd) == data
    assert navi.get_file(session.id, "notes.txt").decode() == "héllo"
    with pytest.raises(ResponseTooLarge):
        navi.get_file(session.id, odd, max_bytes=1000)
    navi.delete_file(session.id, odd)
    with pytest.raises(NotFoundError) as err:
        navi.get_file(session.id, odd)
    assert (err.value.status, err.value.code) == (404, "not_found")
    navi.delete_session(session.id)
    with pytest.raises(NotFoundError):
        navi.get_session(session.id)


def test_exec_plain_and_streamed(navi: NaviClient) -> None:
    session = navi.create_session().id
    done = navi.exec(session, "code_exec", {"language": "python", "code": "print(6 * 7)"})
    assert isinstance(done, ExecOut) and done.ok and done.stdout == "42\n"
    assert done.exec_id.startswith("ex_") and isinstance(done.audit_seq, int)
    failed = navi.exec(session, "terminal", {"command": "echo oops >&2; exit 3"})
    assert (failed.ok, failed.exit_code, failed.stderr) == (False, 3, "oops\n")
    items = list(navi.exec_stream(session, "terminal",
                                  {"command": "for i in 1 2 3; do echo step $i; sleep 0.3; done"}))
    chunks, result = items[:-1], items[-1]
    assert chunks and all(isinstance(c, ExecChunk) for c in chunks)
    assert isinstance(result, ExecOut) and result.ok and result.stdout == "step 1\nstep 2\nstep 3\n"
    assert "".join(c.data for c in chunks if isinstance(c, ExecChunk)) == result.stdout
    assert {c.exec_id for c in chunks if isinstance(c, ExecChunk)} == {result.exec_id}


def test_events_with_resume(navi: NaviClient) -> None:
    session = navi.create_session().id
    navi.exec(session, "terminal", {"command": "echo one"})
    navi.exec(session, "terminal", {"command": "echo two"})
    seen: list[Event] = []
    # everything kept, from the start (a read timeout below the 15 s keep-alive: a test that
    # waits for an event that never comes fails instead of hanging)
    for event in navi.events(session, last_event_id=0, read_timeout=10):
        seen.append(event)
        if event.type == "tool_result" and event.get("stdout") == "two\n":
            break
    types = [e.type for e in seen]
    assert types.count("tool_call") == 2 and types.count("tool_result") == 2
    ids = [e.id for e in seen]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(ids)
    first_result = next(e for e in seen if e.type == "tool_result")
    assert first_result["stdout"] == "one\n"
    resumed = []
    for event in navi.events(session, last_event_id=first_result.id, read_timeout=10):
        resumed.append(event)
        if event.id == seen[-1].id:
            break
    assert resumed == seen[seen.index(first_result) + 1:]


def test_errors_carry_code_rule_and_retry_after(server: Server, navi: NaviClient) -> None:
    secretary = navi.create_session(profile="secretary").id
    args = {"language": "python", "code": "print(1)"}
    with pytest.raises(PolicyDeniedError) as denied:
        navi.exec(secretary, "code_exec", args)
    assert (denied.value.status, denied.value.code) == (403, "policy_denied")
    assert denied.value.rule is not None and denied.value.rule.startswith("profiles.secretary")
    with pytest.raises(PolicyDeniedError) as streamed:  # the same, from the stream's last frame
        list(navi.exec_stream(secretary, "code_exec", args))
    assert streamed.value.rule == denied.value.rule
    with pytest.raises(NotFoundError) as missing:
        navi.exec("ses_nosuchsession", "code_exec", args)
    assert missing.value.code == "not_found"
    with pytest.raises(BadRequestError) as bad:
        navi.exec(secretary, "no such tool!", {})
    assert (bad.value.status, bad.value.code) == (422, "invalid_request")
    _, slow = server.tenant_with_user(SLOW)
    with NaviClient(server.url, slow) as client:
        session = client.create_session().id
        assert client.exec(session, "terminal", {"command": "true"}).ok
        with pytest.raises(RateLimitError) as limited:
            client.exec(session, "terminal", {"command": "true"})
    assert (limited.value.status, limited.value.code) == (429, "quota_exceeded")
    assert limited.value.retry_after is not None and limited.value.retry_after >= 1


def test_tools_audit_and_verify(server: Server, account: tuple[str, str],
                                navi: NaviClient) -> None:
    tools = {t.name: t for t in navi.list_tools()}
    assert "code_exec" in tools and tools["code_exec"].parameters["type"] == "object"
    secretary = navi.create_session(profile="secretary").id
    assert "code_exec" not in {t.name for t in navi.list_tools(session=secretary)}
    assert navi.get_tool("terminal").name == "terminal" and "terminal" in navi.manual("terminal")
    session = navi.create_session().id
    ran = navi.exec(session, "terminal", {"command": "true"})
    with NaviClient(server.url, server.token_for(account[0], "auditor")) as auditor:
        records = auditor.audit(session=session)
        assert all(isinstance(r, AuditRecord) for r in records)
        assert (records[0].action, records[0].decision) == ("session.create", "allow")
        runs = [r for r in records if r.exec_id == ran.exec_id]
        assert {r.action for r in runs} == {"exec"} and ran.audit_seq in {r.seq for r in runs}
        assert any(r.model_extra and r.model_extra.get("args_sha256") for r in runs)
        verified = auditor.verify_audit()
        assert verified.ok and verified.records >= 2 and verified.first_bad_seq is None


def test_messages_start_a_turn_whose_events_stream(navi: NaviClient) -> None:
    """No model answers here (the embedded one is off): the turn ends in an `error` event."""
    session = navi.create_session().id
    turn = navi.post_message(session, "hello")
    assert turn.session == session
    for event in navi.events(session, last_event_id=0, read_timeout=10):
        if event.get("turn_id") == turn.turn_id and event.type in ("error", "stream_end"):
            break
    assert [m.role for m in navi.list_messages(session)][:1] == ["user"]


def test_the_async_client(server: Server, account: tuple[str, str]) -> None:
    async def scenario() -> None:
        async with AsyncNaviClient(server.url, account[1]) as navi:
            session = (await navi.create_session(title="async")).id
            await navi.put_file(session, "in.txt", b"5\n")
            assert [e.path for e in await navi.list_files(session)] == ["in.txt"]
            items = [item async for item in navi.exec_stream(
                session, "terminal", {"command": "cat in.txt; echo done"})]
            result = items[-1]
            assert isinstance(result, ExecOut) and result.stdout == "5\ndone\n"
            assert all(isinstance(i, ExecChunk) for i in items[:-1])
            assert await navi.get_file(session, "in.txt") == b"5\n"
            events = []
            async for event in navi.events(session, last_event_id=0, read_timeout=10):
                events.append(event)
                if event.type == "tool_result":
                    break
            assert events[-1].get("exec_id") == result.exec_id
            later = [e async for e in _first(
                navi.events(session, last_event_id=events[0].id, read_timeout=10))]
            assert later == events[1:2]
            with pytest.raises(PolicyDeniedError) as denied:
                secretary = (await navi.create_session(profile="secretary")).id
                await navi.exec(secretary, "code_exec", {"language": "bash", "code": "true"})
            assert denied.value.rule and denied.value.code == "policy_denied"
            await navi.delete_session(session)
            with pytest.raises(NotFoundError):
                await navi.get_session(session)

    asyncio.run(scenario())


async def _first(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    async for event in events:  # one event, then stop reading
        yield event
        return


def test_readme_python_tour_runs_as_written(server: Server) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The same tour in Python", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README's Python tour has no ```python block"
    env = {**os.environ, "NAVI_URL": server.url, "NAVI_ADMIN_TOKEN": server.admin_token}
    run = subprocess.run([sys.executable, "-c", match.group(1)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "True 12" in out and "step 1\nstep 2\nstep 3\n" in out and "exit 0" in out, out
    assert "sum.txt: 12" in out and "policy_denied profiles.secretary" in out, out
    assert "ok=True" in out, out
