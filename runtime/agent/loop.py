"""One turn of the agent: model -> tool calls -> Executor -> results -> model ... -> answer.

Events, in order, all carrying `turn_id`:
- `stream_start` once (`model`, `backend`: which model serves); `notice` {message} when
  the runtime has something to say about that (the embedded model takes over);
- per model step: `thinking_delta`* {content}, `thinking_end`, `stream_delta`* {content};
- per tool call: `tool_call` {tool,args,exec_id,call_id}, (`approval_required`),
  `exec_output`* {exec_id,stream,data}, `tool_result` {tool,success,output,exec_id,...};
- exactly one ending: `stream_end` {content, stop_reason, usage, iterations} where
  stop_reason is `stop` (final answer), `max_iterations`, `stalled`, `cancelled` or
  `too_long`; or `error` {code, message} when the model server failed, or `token_revoked`
  when the turn's token was revoked or expired (checked before every model step and every
  tool call, sub-agents' too: `runtime.agent.token_check`).
Everything the turn produced is stored as it happens (user, assistant and tool rows).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from runtime import tracing
from runtime.agent.answers import ModelAnswers
from runtime.agent.caps import ANSWER_TEXT, clip
from runtime.agent.context import ContextBuilder
from runtime.agent.events import TurnEvents
from runtime.agent.llm import types as llm
from runtime.agent.models import profile_models
from runtime.agent.planning import MandatoryPlanning
from runtime.agent.prompt import Situation, annotate, system_prompt
from runtime.agent.step_calls import run_calls
from runtime.agent.token_check import check_token
from runtime.agent.tool_runner import Stalled, ToolRunner
from runtime.agent.turn_setup import TurnSetup
from runtime.agent.turn_snapshots import TurnSnapshots
from runtime.errors import NaviError
from runtime.events import ErrorEvent, StopReason, StreamEnd, StreamStart
from runtime.events import Notice as NoticeEvent
from runtime.events import Usage as EventUsage
from runtime.logging import get_logger
from runtime.tools.builtin.memory import section_scope

log = get_logger(__name__)

class Turn:
    def __init__(self, setup: TurnSetup, events: TurnEvents) -> None:
        self.s = setup
        self.events = events
        self.usage = llm.Usage()
        self.iterations = 0
        self.partial = ""
        self.answers = ModelAnswers(setup, events)
        self.runner: ToolRunner | None = None
        self.offered_names: list[str] = []
        service = getattr(setup.services, "snapshots", None)
        self.checkpoint = (TurnSnapshots(service, setup.services, lambda: self.s.subject,
                                         setup.turn_id, events.emit)
                           if service is not None and setup.parent_call is None else None)
        """Snapshots the session before the turn's first file change (not a sub-agent's:
        its parent's turn holds the checkpoint)."""
        self.ended: tuple[str, str] | None = None  # (stop reason or "error", final text)
        self.release: Callable[[], None] = lambda: None
        """Called just before the final event, so a client that reacts to it by sending the
        next message never finds this turn still registered."""

    async def run(self) -> None:
        s = self.s
        with tracing.span(f"invoke_agent {s.profile.name}", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": s.profile.name,
                "gen_ai.conversation.id": s.subject.session, "gen_ai.request.model": s.model,
                "navi.tenant": s.subject.tenant, "navi.session": s.subject.session,
                "navi.turn_id": s.turn_id, "navi.parent_call": s.parent_call}) as span:
            await self._run()
            tracing.annotate(span, {
                "navi.stop_reason": self.ended[0] if self.ended else None,
                "navi.iterations": self.iterations,
                "gen_ai.usage.input_tokens": self.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": self.usage.completion_tokens})

    async def _run(self) -> None:
        s = self.s
        model_for = getattr(s.backend, "model_for", None)
        self.events.emit(StreamStart(
            turn_id=s.turn_id, model=model_for(s.model) if model_for else s.model,
            profile=s.profile.name, backend=s.backend.name,
            max_iterations=s.profile.max_iterations, parent_call=s.parent_call))
        try:
            reason, content = await self._steps()
        except Stalled as exc:
            reason = "stalled"
            content = (f"Stopped: `{exc.tool}` was called {exc.times} times with the same "
                       "arguments without making progress. Try rephrasing the request.")
            if self.partial:
                content = self.partial + "\n\n" + content
        except asyncio.CancelledError:
            said = "".join(self.answers.live) or self.partial
            await asyncio.shield(self._finish("cancelled", said or "(cancelled)"))
            raise
        except NaviError as exc:
            await s.history.append(s.subject.session, s.turn_id, "assistant", "",
                                   meta={"error": exc.code, "message": clip(exc.message, 500)})
            log.warning("turn_failed", code=exc.code, message=exc.message)
            self.release()
            self.ended = ("error", f"{exc.code}: {exc.message}")
            self.events.emit(ErrorEvent(turn_id=s.turn_id, code=exc.code,
                                        message=clip(exc.message, 2000),
                                        iterations=self.iterations))
            return
        await self._finish(reason, content)

    async def _finish(self, reason: StopReason, content: str) -> None:
        s = self.s
        usage = self.usage.model_dump()
        if reason != "stop":  # a stop's answer is already stored with its step
            await s.history.append(s.subject.session, s.turn_id, "assistant", content,
                                   meta={"stop_reason": reason, "usage": usage})
        self.release()
        self.ended = (reason, content)
        self.events.emit(StreamEnd(turn_id=s.turn_id, content=clip(content, ANSWER_TEXT),
                                   stop_reason=reason, usage=EventUsage(**usage),
                                   iterations=self.iterations))
        log.info("turn_done", turn=s.turn_id, stop_reason=reason, iterations=self.iterations,
                 **usage)

    async def _offer(self) -> tuple[list[dict[str, Any]], str]:
        """The tools the model is offered (the profile's, as the policy lets this subject
        use them) and the system prompt; the runner calls exactly those."""
        s = self.s
        specs = await s.services.tools.registry.specs(s.subject)
        offered = [t for t in specs if s.profile.offers(t.name, t.group)]
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters}
                 for t in offered]
        groups = {t.name: t.group for t in offered}
        if self.runner is None:
            plans = getattr(s.services, "plan_modes", None)
            self.runner = ToolRunner(
                s.services.calls, s.subject, self.events, groups, s.profile.stall_repeats,
                self.checkpoint.before_call if self.checkpoint else None,
                (lambda: plans.active(s.subject.tenant, s.subject.session)) if plans else None)
        else:  # offered again (a new profile, a tool just written): the turn's counts stay
            self.runner.subject = s.subject
            self.runner.offered = groups
        self.offered_names = [t.name for t in offered]
        return tools, await self._system()

    async def _system(self) -> str:
        """The system prompt as of now: the date and time and the memory sections are read
        again before every model call."""
        s = self.s
        agent = getattr(s.services, "agent", None)
        settings = getattr(agent, "settings", None)
        memory = getattr(getattr(s.services, "tools", None), "memory", None)
        sections: dict[str, str] = {}
        if memory is not None:
            sections = await memory.sections(s.subject.tenant, {
                name: section_scope(name, s.subject.user, s.subject.session)
                for name in ("user_profile", "project")})
        situation = Situation(public_url=getattr(settings, "public_url", None),
                              sections=sections)
        return system_prompt(s.profile, s.persona, self.offered_names, situation)

    async def _follow_profile(self) -> bool:
        """After a step: did the session move to another profile (`switch_profile`)? Then
        the turn goes on under it (subject, agent profile), from the next step."""
        s = self.s
        record = await s.services.store.get_session(s.subject.tenant, s.subject.session)
        if record is None or record.profile == s.subject.profile:
            return False
        s.subject = s.subject.model_copy(update={"profile": record.profile})
        agent = getattr(s.services, "agent", None)
        if agent is not None:
            s.profile = agent.profiles.get(record.profile)
            s.models = profile_models(s.profile.model, s.profile.models, agent.settings.model)
            s.model = s.models[0]
        log.info("turn_profile_switched", turn=s.turn_id, profile=record.profile)
        return True

    async def _steps(self) -> tuple[StopReason, str]:
        s = self.s
        tools, system = await self._offer()
        reported = await s.backend.context_window(s.model)
        window = min(s.profile.context_window, reported or s.profile.context_window)
        builder = ContextBuilder(s.history, s.backend, s.model, window, s.subject.session,
                                 s.turn_id)
        images: dict[str, list[llm.ImageInput]] = await self._user_images()
        failed: set[str] = set()
        last_text = ""
        phases = await self._mandatory_planning()
        for iteration in range(1, s.profile.max_iterations + 1):
            self.iterations = self.events.iteration = iteration
            await check_token(s.services.store, s.subject)
            if iteration > 1:
                system = await self._system()
            messages = await builder.build(system, tools, images, functools.partial(
                annotate, profile=s.profile, iteration=iteration, goal=s.content,
                failed_calls=failed))
            answer = await self.answers.ask(llm.ChatRequest(
                model=s.model, messages=messages, tools=tools,
                temperature=s.profile.temperature, think=s.profile.think, num_ctx=window),
                iteration)
            self.usage = self.usage + answer.usage
            calls = [c.model_copy(update={"id": f"{s.turn_id}_{iteration}_{n}"})
                     for n, c in enumerate(answer.calls, start=1)]
            await s.history.append(
                s.subject.session, s.turn_id, "assistant", answer.text,
                thinking=answer.thinking or None,
                tool_calls=[c.model_dump() for c in calls],
                meta={"usage": answer.usage.model_dump(), "iteration": iteration,
                      "served_by": answer.served_by, **({} if calls else {
                          "stop_reason": "too_long" if answer.too_long else "stop"})})
            last_text = answer.text
            if answer.too_long:
                return "too_long", answer.text + "\n\n[stopped: the answer was too long]"
            if not calls:
                if phases is not None and await phases.after_answer():
                    continue  # the next planning phase
                return "stop", answer.text
            self.partial = answer.text
            images = {k: v for k, v in images.items() if k.startswith("user:")}
            assert self.runner is not None  # made by _offer
            step = await run_calls(s, self.runner, calls, failed, images)
            if phases is not None:
                await phases.after_calls(step.done)
            if await self._follow_profile() or step.reoffer:
                tools, system = await self._offer()
        note = (f"Stopped after {s.profile.max_iterations} steps (max_iterations) without a "
                "final answer.")
        return "max_iterations", (last_text + "\n\n" + note) if last_text else note

    async def _user_images(self) -> dict[str, list[llm.ImageInput]]:
        """This turn's images, unless the model is known not to see images: then a notice
        says so and the model reads only their paths."""
        s = self.s
        if not s.user_images:
            return {}
        sees = getattr(s.backend, "sees_images", None)
        if sees is None or await sees(s.model) is not False:
            return dict(s.user_images)
        count = sum(len(v) for v in s.user_images.values())
        self.events.emit(NoticeEvent(turn_id=s.turn_id, phase="images", message=(
            f"Model {s.model} cannot see images: the {count} image(s) of this message were "
            "not sent to it (it reads their file names only).")))
        return {}

    async def _mandatory_planning(self) -> MandatoryPlanning | None:
        """The planning phases, when the session's policy profile makes them mandatory (for
        a top-level turn: a sub-agent works under its parent's approved plan)."""
        s = self.s
        plans = getattr(s.services, "plan_modes", None)
        rule = s.services.policy.policy.profiles.get(s.subject.profile)
        if plans is None or rule is None or not rule.planning_mandatory \
                or s.parent_call is not None:
            return None
        phases = MandatoryPlanning(
            modes=plans, notes=getattr(s.services.tools, "notes", None), history=s.history,
            subject=lambda: s.subject, turn_id=s.turn_id, emit=self.events.emit)
        await phases.start()
        return phases
