"""The registry: schemas the LLM sees, validation before running, policy filtering and denial."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import PROJECT_ROOT
from runtime.errors import InvalidInput, NotFound, PolicyDenied, SandboxError
from runtime.policy import Action, PolicyEngine, Subject
from runtime.policy.model import TOOL_GROUP
from runtime.tools import GROUPS, ToolContext, ToolServices, build_tools
from tests.fakes.calls import call
from tests.fakes.executors import audited_executor

POLICIES = PROJECT_ROOT / "policies"


def subject(profile: str = "developer", role: str = "user", tenant: str = "t1") -> Subject:
    return Subject(tenant=tenant, role=role, profile=profile, session="s1")  # type: ignore[arg-type]


def test_every_builtin_has_a_known_group_matching_the_policy(services: ToolServices) -> None:
    for tool in services.registry.builtins():
        assert tool.group in GROUPS
        assert TOOL_GROUP[tool.name] == tool.group, tool.name


def test_schemas_are_clean_json_schema_objects(services: ToolServices) -> None:
    import jsonschema

    for tool in services.registry.builtins():
        schema = tool.parameters_schema()
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema.get("additionalProperties") is False
        assert "title" not in schema and "description" not in schema
        for prop in schema.get("properties", {}).values():
            assert "title" not in prop


async def test_specs_shape_and_policy_filtering(services: ToolServices) -> None:
    dev = await services.registry.specs(subject("developer"))
    names = {s.name for s in dev}
    assert {"code_exec", "terminal", "filesystem", "memory", "write_tool", "word_count"} <= names
    for spec in dev:
        assert set(spec.model_dump()) == {"name", "description", "group", "parameters"}
    sec = {s.name for s in await services.registry.specs(subject("secretary"))}
    assert "filesystem" in sec and "memory" in sec
    assert not sec & {"code_exec", "terminal", "write_tool", "word_count"}
    # an auditor may not run tools at all
    assert await services.registry.specs(subject(role="auditor")) == []
    # `only` narrows, never widens
    only = await services.registry.specs(subject("secretary"), only={"code_exec", "todo"})
    assert [s.name for s in only] == ["todo"]


async def test_hidden_tool_spec_is_404_but_call_is_403(services: ToolServices,
                                                      tmp_path: Path) -> None:
    reg = services.registry
    with pytest.raises(NotFound):
        await reg.spec("write_tool", subject("secretary"))
    async with audited_executor(tmp_path / "audit", reg.policy) as executor:
        ctx = ToolContext(subject=subject("secretary"), executor=executor)
        with pytest.raises(PolicyDenied) as exc:
            await call(reg, "write_tool", {"name": "x", "code": "x"}, ctx)
        assert exc.value.rule.startswith("profiles.secretary.deny")
        [denied] = await executor.audit.records()
        assert (denied.kind, denied.tool, denied.rule) == ("denied", "write_tool",
                                                           exc.value.rule)


async def test_nothing_is_decided_without_an_executor(services: ToolServices) -> None:
    """No second, unaudited decision path: a context without an Executor runs nothing."""
    with pytest.raises(SandboxError, match="no executor"):
        await call(services.registry, "todo", {"action": "list"},
                                       ToolContext(subject=subject()))


async def test_bad_args_are_invalid_input_before_anything_runs(services: ToolServices) -> None:
    reg = services.registry
    ctx = ToolContext(subject=subject())
    cases = [
        ("code_exec", {"language": "ruby", "code": "puts 1"}, "language"),
        ("code_exec", {"language": "python"}, "code: required argument missing"),
        ("code_exec", {"language": "python", "code": "x", "extra": 1}, "extra: unknown argument"),
        ("terminal", {"command": "a\x00b"}, "NUL"),
        ("filesystem", {"action": "write", "path": "a.txt"}, "needs content"),
        ("todo", {"action": "update"}, "needs an id"),
        ("memory", "not an object", "JSON object"),
        ("tool_manual", {"name": "../../etc/passwd"}, "name"),
    ]
    for name, args, needle in cases:
        with pytest.raises(InvalidInput) as exc:
            await call(reg, name, args, ctx)
        assert needle in exc.value.message, (name, exc.value.message)
        assert exc.value.message.startswith(f"{name}: ")


async def test_unknown_tool_is_not_found(services: ToolServices) -> None:
    with pytest.raises(NotFound):
        await call(services.registry, "nope", {}, ToolContext(subject=subject()))


async def test_web_group_denied_is_observable(services: ToolServices) -> None:
    engine = services.registry.policy
    assert engine is not None
    d = engine.decide(subject(), Action(tool="http_request", group="group:web"))
    assert d.verdict == "deny"


async def test_ask_without_approver_is_denied(tmp_path: Path) -> None:
    engine = PolicyEngine.from_file(POLICIES / "strict.yaml")
    svc = build_tools(tmp_path / "data", policy=engine)
    await svc.open()
    try:
        async with audited_executor(tmp_path / "audit", engine) as executor:
            profile = engine.default_profile("t1") or "developer"
            ctx = ToolContext(subject=subject(profile), executor=executor)
            src = (
                'name = "shout"\ndescription = "d"\nparameters = {"type": "object"}\n'
                "async def execute(params):\n    return 'x'\n"
            )
            with pytest.raises(PolicyDenied, match="approval required but no approver"):
                await call(svc.registry, "write_tool", {"name": "shout", "code": src}, ctx)
            asked: list[str] = []

            async def approve(subject: Subject, action: Action, decision: object) -> bool:
                asked.append(action.tool)
                return True

            svc.registry.approver = approve
            result = await call(svc.registry, "write_tool", {"name": "shout", "code": src},
                                               ctx)
            assert result.success and asked == ["write_tool"]
            kinds = [(r.kind, r.decision) for r in await executor.audit.records()]
            assert kinds[0] == ("denied", "deny") and ("approval", "approved") in kinds
    finally:
        await svc.close()
