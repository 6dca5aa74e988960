"""The tool calls of one model step, run in order through the turn's `ToolRunner`: at most
`MAX_CALLS_PER_STEP` (the rest answered with an error, unrun), the token checked before
each, every result stored in the history as a `tool` row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.agent.llm import types as llm
from runtime.agent.token_check import check_token
from runtime.agent.tool_runner import ToolRunner
from runtime.agent.turn_setup import TurnSetup

MAX_CALLS_PER_STEP = 8
REOFFER_AFTER = frozenset({"write_tool", "delete_tool", "reload_tools"})
"""Calls after which the tools offered are listed again (a tool written is callable at once)."""


@dataclass
class StepCalls:
    """What a step's calls did: (tool, success, meta) of each run, and whether the tools
    offered must be listed again."""

    done: list[tuple[str, bool, dict[str, Any]]] = field(default_factory=list)
    reoffer: bool = False


async def run_calls(s: TurnSetup, runner: ToolRunner, calls: list[llm.ToolCallRequest],
                    failed: set[str], images: dict[str, list[llm.ImageInput]]) -> StepCalls:
    """Run the step's `calls`; a failed call's id goes into `failed`, a call's images into
    `images` (by call id)."""
    step = StepCalls()
    for n, call in enumerate(calls):
        if n >= MAX_CALLS_PER_STEP:
            await store_tool(s, call, f"Error: at most {MAX_CALLS_PER_STEP} tool calls per "
                             "step; this one was not run.", {"success": False})
            failed.add(call.id)
            continue
        await check_token(s.services.store, s.subject)
        outcome = await runner.run(call)
        if not outcome.success:
            failed.add(call.id)
        if outcome.images:
            images[call.id] = outcome.images
        if outcome.success and call.name in REOFFER_AFTER:
            step.reoffer = True
        step.done.append((call.name, outcome.success, outcome.meta))
        await store_tool(s, call, outcome.content, outcome.meta)
    return step


async def store_tool(s: TurnSetup, call: llm.ToolCallRequest, content: str,
                     meta: dict[str, Any]) -> None:
    await s.history.append(s.subject.session, s.turn_id, "tool", content,
                           tool_call_id=call.id, tool_name=call.name, meta=meta)
