"""A new session's first call warmed at create (``runtime.executor.prewarm``): the backend is
asked for the very call ``code_exec`` would make, and only when the policy allows it outright.
The Docker side (a warm container launched, the first call runs warm) is
``tests/docker/test_warm_api.py``."""

from __future__ import annotations

from pathlib import Path

from runtime.executor.prewarm import FIRST_CALL, prewarm
from runtime.policy import PolicyEngine, Subject
from runtime.sandbox.models import ExecRequest
from runtime.sandbox.stdin_program import python_program

ROOT = Path(__file__).resolve().parents[2]
ENGINE = PolicyEngine.from_file(ROOT / "policies" / "default.yaml")


class Prefilling:
    """What a backend that can prefill is asked (the Docker backend's ``prefill``)."""

    def __init__(self) -> None:
        self.asked: list[ExecRequest] = []

    async def prefill(self, request: ExecRequest) -> bool:
        self.asked.append(request)
        return True


def subject(**update: object) -> Subject:
    return Subject(tenant="t_new", user="tok", session="s_1", sandbox_uid=20001,
                   **update)  # type: ignore[arg-type]


async def test_the_first_call_of_a_session_is_asked_for(tmp_path: Path) -> None:
    backend = Prefilling()
    warmed = await prewarm(ENGINE, backend, lambda name: f"navi/{name}:latest", subject(),
                           tmp_path / "ws", tmp_path / "tmp")
    assert warmed
    [request] = backend.asked
    assert request.argv == python_program("")[0]
    assert (request.image, request.tenant, request.session, request.uid) == \
        ("navi/python:latest", "t_new", "s_1", 20001)
    assert (request.workspace, request.tmp) == (tmp_path / "ws", tmp_path / "tmp")
    assert request.limits == ENGINE.decide(subject(), FIRST_CALL).limits
    assert request.network == "none" and not request.env


async def test_a_call_the_policy_would_not_allow_warms_nothing(tmp_path: Path) -> None:
    backend = Prefilling()
    for who in (subject(role="auditor"), subject(profile="secretary")):
        assert not await prewarm(ENGINE, backend, str, who, tmp_path, None)
    assert backend.asked == []


async def test_a_backend_that_cannot_prefill_warms_nothing(tmp_path: Path) -> None:
    assert not await prewarm(ENGINE, object(), str, subject(), tmp_path, None)



async def test_a_call_that_would_ask_for_approval_warms_nothing(tmp_path: Path) -> None:
    text = (ROOT / "policies" / "strict.yaml").read_text()
    asking = text.replace("- tools: [group:user_tools]", "- tools: [group:user_tools, code_exec]")
    assert asking != text
    (tmp_path / "asking.yaml").write_text(asking)
    engine = PolicyEngine.from_file(tmp_path / "asking.yaml")
    assert engine.decide(subject(), FIRST_CALL).verdict == "ask"
    backend = Prefilling()
    assert not await prewarm(engine, backend, str, subject(), tmp_path, None)
    assert backend.asked == []
