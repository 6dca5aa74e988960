"""`navi_client`'s calls for a session's longer work, against a real `navi serve`, a real
engine and a scripted model: background processes (input, output, signals, stop), kernels
(state kept between executes, errors, list, delete), preview links, the agent's questions
(`ask_user`: listed, a wrong option 422, answered, a second answer 409) and snapshots
(create, list, restore, fork, delete); sync, and the same through the async client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from navi_client import (
    AsyncNaviClient,
    BadRequestError,
    ConflictError,
    ExecChunk,
    ExecOut,
    KernelResultOut,
    NaviClient,
    NotFoundError,
    ProcessOut,
    QuestionOut,
    SnapshotOut,
)

from tests.e2e.conftest import Server, start_server, stop_server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.docker
T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("client-work"), ready_s=90, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_MODEL": "gemma3:270m",
        "NAVI_OPENAI_BASE_URL": ""})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def token(server: Server) -> str:
    return server.tenant_with_user()[1]


@pytest.fixture
def navi(server: Server, token: str) -> Iterator[NaviClient]:
    with NaviClient(server.url, token) as client:
        yield client


def wait_for(get: Callable[[], T], ok: Callable[[T], bool], timeout_s: float = 60) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = get()
        if ok(value) or time.monotonic() > deadline:
            assert ok(value), value
            return value
        time.sleep(0.2)


def test_processes(navi: NaviClient) -> None:
    session = navi.create_session().id
    proc = navi.start_process(session, "read line; echo got:$line; sleep 600", name="reader")
    assert isinstance(proc, ProcessOut) and proc.id.startswith("p_")
    assert (proc.state, proc.name, proc.kind) == ("running", "reader", "command")
    navi.process_input(session, proc.id, "hello\n")
    out = wait_for(lambda: navi.process_output(session, proc.id), lambda o: "got:hello" in o.output)
    assert out.state == "running" and out.next >= len("got:hello\n") and out.first == 0
    assert navi.process_output(session, proc.id, since=out.next).output == ""
    assert [p.id for p in navi.list_processes(session)] == [proc.id]
    navi.signal_process(session, proc.id, "KILL")
    ended = wait_for(lambda: navi.get_process(session, proc.id), lambda p: p.state == "exited")
    assert ended.exit_code is not None and ended.ended_at is not None
    other = navi.start_process(session, "sleep 600")
    navi.stop_process(session, other.id)
    stopped = wait_for(lambda: navi.get_process(session, other.id), lambda p: p.state == "exited")
    assert stopped.reason == "stopped"
    with pytest.raises(NotFoundError):
        navi.get_process(session, "p_nosuchprocess")
    with pytest.raises(BadRequestError) as bad:
        navi.signal_process(session, proc.id, "STOP")  # type: ignore[arg-type]
    assert bad.value.status == 422


def test_kernels(navi: NaviClient) -> None:
    session = navi.create_session().id
    first = navi.kernel_execute(session, "x = 20\nx + 1")
    assert isinstance(first, KernelResultOut) and first.ok and first.kernel == "default"
    assert first.results[-1]["text/plain"] == "21"
    again = navi.kernel_execute(session, "print(x * 2)")
    assert again.ok and again.stdout == "40\n"
    ticks = "import time\nfor i in range(3):\n    print('tick', i, flush=True); time.sleep(0.3)"
    items = list(navi.kernel_execute_stream(session, ticks))
    chunks, last = items[:-1], items[-1]
    assert chunks and all(isinstance(c, ExecChunk) for c in chunks)
    assert isinstance(last, ExecOut) and last.ok and last.stdout == "tick 0\ntick 1\ntick 2\n"
    assert "".join(c.data for c in chunks if isinstance(c, ExecChunk)) == "tick 0\ntick 1\ntick 2\n"
    failed = navi.kernel_execute(session, "1 / 0")
    assert not failed.ok and failed.error is not None and failed.error.name == "ZeroDivisionError"
    [kernel] = navi.list_kernels(session)
    assert (kernel.name, kernel.state) == ("default", "running")
    navi.delete_kernel(session)
    assert navi.list_kernels(session) == []
    with pytest.raises(NotFoundError):
        navi.delete_kernel(session)


def test_previews(navi: NaviClient) -> None:
    session = navi.create_session().id
    navi.start_process(session, "python3 -m http.server 8765 --bind 127.0.0.1", ports=[8765])
    link = navi.create_preview(session, 8765, expires_in_s=600)
    assert link.port == 8765 and link.url.startswith("http")
    assert 500 < link.expires_at - time.time() <= 600
    assert navi.list_previews(session) == [link]
    navi.delete_preview(session, link.id)
    assert navi.list_previews(session) == []
    with pytest.raises(NotFoundError):  # no running process of the session declares it
        navi.create_preview(session, 8766)


def test_questions(navi: NaviClient, ollama: FakeOllama) -> None:
    def answered(request: dict) -> str:  # type: ignore[type-arg]
        text = str([m for m in request["messages"] if m["role"] == "tool"][-1]["content"])
        return text.split("\n\n[navi]")[0]

    ollama.model.add(
        Reply(calls=[Call("ask_user", {"question": "Which colour?", "options": ["red", "blue"]})]),
        lambda req: Reply(content="Colour: " + answered(req)))
    session = navi.create_session().id
    turn = navi.post_message(session, "make a chart")
    [question] = wait_for(lambda: navi.list_questions(session), bool)
    assert isinstance(question, QuestionOut) and question.turn_id == turn.turn_id
    assert (question.question, question.options, question.status) == (
        "Which colour?", ["red", "blue"], "pending")
    with pytest.raises(BadRequestError) as wrong:
        navi.answer_question(session, question.question_id, "green")
    assert wrong.value.status == 422
    done = navi.answer_question(session, question.question_id, "blue")
    assert (done.status, done.answer) == ("answered", "blue")
    with pytest.raises(ConflictError):
        navi.answer_question(session, question.question_id, "red")
    with pytest.raises(NotFoundError):
        navi.answer_question(session, "q_nosuchquestion", "red")
    said = wait_for(lambda: navi.list_messages(session),
                    lambda ms: any(m.role == "assistant" and m.content for m in ms))
    assert [m.content for m in said if m.role == "assistant" and m.content] == ["Colour: blue"]
    assert navi.list_questions(session) == []


def test_snapshots_restore_and_fork(navi: NaviClient) -> None:
    session = navi.create_session().id
    navi.put_file(session, "a.txt", "one")
    snap = navi.create_snapshot(session, name="first")
    assert isinstance(snap, SnapshotOut) and snap.name == "first"
    assert navi.list_snapshots(session) == [snap]
    navi.put_file(session, "a.txt", "two")
    assert navi.restore_snapshot(session, snap.id).id == snap.id
    assert navi.get_file(session, "a.txt") == b"one"
    navi.put_file(session, "a.txt", "three")
    fork = navi.fork_session(session, snapshot=snap.id)
    assert fork.id != session and navi.get_file(fork.id, "a.txt") == b"one"
    navi.delete_snapshot(session, snap.id)
    assert navi.list_snapshots(session) == []
    with pytest.raises(NotFoundError):
        navi.restore_snapshot(session, snap.id)


def test_the_async_client_has_the_same_calls(server: Server, token: str) -> None:
    async def scenario() -> None:
        async with AsyncNaviClient(server.url, token) as navi:
            session = (await navi.create_session()).id
            proc = await navi.start_process(session, "echo ready; sleep 600")
            assert [p.id for p in await navi.list_processes(session)] == [proc.id]
            result = await navi.kernel_execute(session, "6 * 7")
            assert result.ok and result.results[-1]["text/plain"] == "42"
            snap = await navi.create_snapshot(session)
            assert await navi.list_snapshots(session) == [snap]
            await navi.stop_process(session, proc.id)
            assert await navi.list_questions(session) == []

    asyncio.run(scenario())
