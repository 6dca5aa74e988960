"""Links of `share_file`/`content_publish` on a real SQLite store: expiry, revocation, the
per-tenant cap, and which policies let a session share at all."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtime.errors import QuotaExceeded
from runtime.policy.decision import Action, Subject
from runtime.policy.engine import PolicyEngine
from runtime.store.shares import ShareStore
from runtime.tools.base import ToolContext
from runtime.tools.builtin.share import ShareFileTool, ShareParams, publish_kind
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

ROOT = Path(__file__).resolve().parents[2]


async def test_a_link_lives_until_it_expires_or_is_revoked(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path) as h:
        shares = ShareStore(h.services.store)
        tenant, session = h.subject.tenant, h.subject.session
        token, live = await shares.create(tenant, session, "share", "a.txt", time.time() + 60)
        old, _ = await shares.create(tenant, session, "share", "b.txt", time.time() - 1)
        view, _ = await shares.create(tenant, session, "publish", "c.md", None)
        assert (await shares.by_token(token, "share")) == live
        assert await shares.by_token(token, "publish") is None  # kinds do not mix
        assert await shares.by_token(old, "share") is None      # expired
        assert await shares.by_token(view, "publish") is not None
        assert await shares.live_count(tenant) == 2
        row = await h.services.store.connection.execute_fetchall(
            "SELECT token_hash FROM shares WHERE id = ?", (live.id,))
        assert token not in str(list(row[0]))  # only its hash is kept
        await shares.revoke(live.id)
        assert await shares.by_token(token, "share") is None
        assert [r.path for r in await shares.list(tenant, session)] == ["c.md"]
        assert await h.services.store.delete_session(tenant, session)
        assert await shares.live_count(tenant) == 0  # the session's links went with it
        assert await shares.by_token(view, "publish") is None


async def test_a_tenant_keeps_at_most_its_quota_of_live_links(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path) as h:
        h.workspace_file("a.txt", b"x")
        tool = ShareFileTool(ShareStore(h.services.store), quota=lambda tenant: 1)
        ws = h.services.workspaces.open(h.subject.tenant, h.subject.session)
        ctx = ToolContext(subject=h.subject, workspace=ws, executor=h.services.executor)
        try:
            first = await tool.execute(ShareParams(path="a.txt"), ctx)
            assert first.success
            with pytest.raises(QuotaExceeded):
                await tool.execute(ShareParams(path="a.txt"), ctx)
        finally:
            ws.close()


def test_publish_kinds_come_from_magic_bytes_or_a_text_name() -> None:
    assert publish_kind("x.md", b"\x89PNG\r\n\x1a\n") == "image"
    assert publish_kind("report.bin", b"%PDF-1.7") == "pdf"
    assert publish_kind("dir.v2/page.HTML", b"<html>") == "html"
    assert publish_kind("notes.markdown", b"# a") == "markdown"
    assert publish_kind("page.png", b"<html>") is None   # a name is not an image
    assert publish_kind("md", b"text") is None


@pytest.mark.parametrize(("policy", "allowed"), [("default.yaml", True), ("strict.yaml", False)])
def test_the_developer_profile_may_share_only_where_the_policy_says(policy: str,
                                                                     allowed: bool) -> None:
    engine = PolicyEngine.from_file(ROOT / "policies" / policy)
    subject = Subject(tenant="t_0000000000000001", tenant_name="acme", profile="developer")
    decision = engine.decide(subject, Action(tool="share_file", args={}, group="group:fs"))
    assert (decision.verdict == "allow") is allowed
    publish = engine.decide(subject, Action(tool="content_publish", args={},
                                            group="group:meta"))
    assert publish.verdict == "allow"


async def test_a_published_file_reaches_the_events_and_the_stored_history(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("content_publish", {"path": "r.md"})]),
                     Reply(content="shown"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        h.workspace_file("r.md", b"# report\n")
        events = await h.turn("show the report")
        rows = await h.services.agent.history(h.services, h.subject.session)
    result = next(e.data for e in events if e.type == "tool_result")
    published = result["published"]
    assert published["kind"] == "markdown" and published["path"] == "r.md"
    assert published["url"].startswith("/v1/published/")
    [tool_row] = [r for r in rows if r.role == "tool"]
    assert tool_row.meta["published"] == published  # a reloaded chat draws it again
