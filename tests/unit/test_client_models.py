"""The client's answers of the processes, kernels, previews and questions routes
(`navi_client.wire`) have the fields the server's own models answer with: a field the
server adds, renames or makes optional shows here, not in a user's program."""

from __future__ import annotations

import time

import pytest
from navi_client import wire
from pydantic import BaseModel

from runtime.kernels.models import KernelError, KernelInfo, KernelResult
from runtime.ports.previews import PreviewOut as ServerPreviewOut
from runtime.processes.models import ProcessInfo, ProcessOutput
from runtime.questions import Question


def fields(model: type[BaseModel]) -> dict[str, bool]:
    """Each field the model answers with, and whether it is required."""
    return {name: f.is_required() for name, f in model.model_fields.items() if not f.exclude}


@pytest.mark.parametrize(("client", "server"), [
    (wire.ProcessOut, ProcessInfo), (wire.ProcessOutputOut, ProcessOutput),
    (wire.KernelResultOut, KernelResult), (wire.KernelInfoOut, KernelInfo),
    (wire.KernelError, KernelError), (wire.PreviewOut, ServerPreviewOut),
])
def test_the_client_reads_what_the_server_answers(client: type[BaseModel],
                                                  server: type[BaseModel]) -> None:
    assert set(fields(client)) == set(fields(server))
    # whatever the server always sends, the client may require; nothing else
    assert {n for n, req in fields(client).items() if req} <= {
        n for n, req in fields(server).items() if req}


def test_a_process_and_a_kernel_result_as_the_server_dumps_them_read_back() -> None:
    process = ProcessInfo(id="p_1", name=None, command="sleep 9", cwd="/workspace",
                          state="running", started_at=time.time(), ports=[8000])
    assert wire.ProcessOut.model_validate_json(process.model_dump_json()).ports == [8000]
    result = KernelResult(ok=True, stdout="", stderr="", results=[{"text/plain": "2"}],
                          error=None, execution_count=1, kernel="default", restored=[],
                          lost=[], duration_ms=3, exec_id="ex_1", audit_seq=4, main_result=0)
    read = wire.KernelResultOut.model_validate_json(result.model_dump_json())
    assert read.results == [{"text/plain": "2"}] and read.execution_count == 1


def test_a_question_as_the_server_answers_it_reads() -> None:
    question = Question(id="q_1", tenant="t", session="s", question="Which?",
                        options=["a", "b"], created_at=time.time(),
                        expires_at=time.time() + 600, turn_id="turn_1")
    public = question.public()
    read = wire.QuestionOut.model_validate(public)
    assert set(public) == set(wire.QuestionOut.model_fields)
    assert (read.question_id, read.options, read.status) == ("q_1", ["a", "b"], "pending")
