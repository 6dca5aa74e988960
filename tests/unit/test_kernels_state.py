"""Kernels without an engine: the on-disk layout, names, results in events, the policy's
image, and that the supervisor has no way to unpickle saved state."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import InvalidInput
from runtime.kernels import state
from runtime.kernels.models import (
    EVENT_RESULTS_BYTES,
    KernelError,
    KernelResult,
    check_kernel_name,
    kernel_view,
    result_text,
)
from runtime.policy.decision import Action, Subject
from runtime.policy.engine import PolicyEngine


@pytest.mark.parametrize("name", ["default", "a", "x-1_y", "z" * 32])
def test_good_kernel_names(name: str) -> None:
    assert check_kernel_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "a b", "../x", "a/b", "z" * 33, "é", "x\n"])
def test_bad_kernel_names(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_kernel_name(name)


def test_saved_kernels_need_a_record_and_state(tmp_path: Path) -> None:
    directory = state.state_dir(tmp_path, "one", os.getuid())
    assert state.saved(tmp_path) == []  # a directory alone is no kernel
    (directory / state.STATE_FILE).write_bytes(b"opaque")
    assert state.saved(tmp_path) == []  # state without the supervisor's record: not listed
    state.write_record(tmp_path, "one", state.KernelRecord(state="running", started_at=1.0))
    assert state.saved(tmp_path) == []  # running, not saved
    state.write_record(tmp_path, "one", state.KernelRecord(state="saved", started_at=1.0,
                                                           last_used_at=2.0))
    (listed,) = state.saved(tmp_path)
    assert (listed.name, listed.state, listed.started_at, listed.last_used_at) == (
        "one", "saved", 1.0, 2.0)
    assert state.remove(tmp_path, "one") is True
    assert state.saved(tmp_path) == [] and not directory.exists()
    assert state.remove(tmp_path, "one") is False


def test_removing_state_never_follows_the_sandboxs_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    session = tmp_path / "session"
    session.mkdir()
    directory = state.state_dir(session, "k", os.getuid())
    os.symlink(outside, directory / "link")
    (directory / state.STATE_FILE).symlink_to(outside / "keep.txt")
    assert not state.has_saved_state(session, "k")  # a link is not saved state
    state.remove(session, "k")
    assert (outside / "keep.txt").read_text() == "host file"


def test_a_state_dir_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    os.mkdir(tmp_path / state.KERNELS, 0o711)
    os.symlink(tmp_path / "elsewhere", tmp_path / state.KERNELS / "k")
    with pytest.raises(OSError):
        state.state_dir(tmp_path, "k", os.getuid())


def test_kernel_view_keeps_events_small() -> None:
    png = "A" * (EVENT_RESULTS_BYTES // 2 + 10)
    said = {"kernel": "default", "results": [{"text/plain": "<Figure>", "image/png": png},
                                             {"text/plain": "<Figure>", "image/png": png},
                                             {"text/plain": "42"}],
            "error": None, "execution_count": 3, "restored": ["x"], "lost": ["f"]}
    view = kernel_view(said)
    assert view is not None
    assert view["results"][0]["image/png"] == png
    assert view["results"][1] == {"text/plain": "<Figure>"}  # past the budget: text only
    assert view["results"][2] == {"text/plain": "42"}
    assert (view["restored"], view["lost"]) == (["x"], ["f"])
    assert kernel_view(None) is None and kernel_view("x") is None


def test_result_text_for_the_model() -> None:
    result = KernelResult(
        ok=False, stdout="hi\n", stderr="", results=[{"text/plain": "<Figure>",
                                                      "image/png": "AAAA"}],
        error=KernelError(name="ValueError", value="bad", traceback=["Traceback", "ValueError"]),
        execution_count=2, kernel="default", restored=["x"], lost=["fh"], duration_ms=5,
        exec_id="ex_1", audit_seq=3)
    text = result_text(result)
    assert "hi" in text and "[image/png shown]" in text and "lost: fh" in text
    assert text.endswith("Traceback\nValueError")


def test_kernel_exec_runs_under_code_execs_image_and_group() -> None:
    engine = PolicyEngine.from_file(PROJECT_ROOT / "policies" / "default.yaml")
    subject = Subject(tenant="t1", role="user", user="tok", profile="developer", session="s1")
    decision = engine.decide(subject, Action(tool="kernel_exec", args={"code": "1"},
                                             group="group:exec"))
    assert decision.verdict == "allow", decision
    assert decision.image == engine.decide(subject, Action(
        tool="code_exec", args={"language": "python", "code": "1"}, group="group:exec")).image
    secretary = subject.model_copy(update={"profile": "secretary"})
    assert engine.decide(secretary, Action(tool="kernel_exec", args={"code": "1"},
                                           group="group:exec")).verdict == "deny"


PICKLERS = {"pickle", "dill", "cloudpickle", "_pickle", "shelve", "marshal", "joblib"}


def test_the_supervisor_never_imports_an_unpickler() -> None:
    """Saved kernel state is tenant-written pickle data: only the in-sandbox runner may load
    it. No supervisor module imports a pickle library (the runner's text is the only place
    `dill` appears, and it is never imported here)."""
    offenders = []
    runner = PROJECT_ROOT / "runtime" / "kernels" / "runner.py"
    for path in (PROJECT_ROOT / "runtime").rglob("*.py"):
        if path == runner:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            offenders += [f"{path.relative_to(PROJECT_ROOT)}: {n}" for n in names
                          if n in PICKLERS]
    assert offenders == []
