"""The agent for one app: profiles, persona, the model backend, and the running turns.

At most one turn runs per session (a second message meanwhile is a `Conflict`, 409). A turn
runs as a background task; `cancel(session)` cancels it, which kills its running container
through the Executor (audited `interrupted`) and denies its pending approvals, and returns
once the turn has ended. Created by the app factory; `close()` cancels every turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from runtime.agent.deps import AgentDeps
from runtime.agent.events import TurnEvents
from runtime.agent.history import MessageStore, StoredMessage, new_turn_id
from runtime.agent.llm import LLMBackend, build_backend
from runtime.agent.llm.types import ImageInput
from runtime.agent.loop import Turn
from runtime.agent.models import ModelBlacklist, profile_models
from runtime.agent.profiles import ProfileSet, load_persona
from runtime.agent.turn_setup import TurnSetup
from runtime.config import Settings
from runtime.errors import Conflict
from runtime.events import ErrorEvent
from runtime.logging import get_logger
from runtime.policy.decision import Subject

log = get_logger(__name__)

CANCEL_WAIT_S = 30.0


class SentImage(Protocol):
    """An image sent with a message (`runtime.sessions.message_images.TakenImage`)."""

    @property
    def path(self) -> str: ...

    @property
    def media_type(self) -> str: ...

    @property
    def data_b64(self) -> str: ...


@dataclass
class RunningTurn:
    turn_id: str
    task: asyncio.Task[None] | None = None


class AgentService:
    def __init__(self, *, settings: Settings, profiles: ProfileSet, backend: LLMBackend,
                 persona: str | None) -> None:
        self.settings = settings
        self.profiles = profiles
        self.backend = backend
        self.persona = persona
        self._turns: dict[str, RunningTurn] = {}
        self.blacklist = ModelBlacklist(settings.model_blacklist_s)
        self.closers: list[Callable[[], Awaitable[None]]] = []  # background sub-agents'

    @classmethod
    def from_settings(cls, settings: Settings) -> AgentService:
        """Load profiles and persona (a bad file is a `ConfigError`); no network yet."""
        return cls(settings=settings, profiles=ProfileSet.load(settings.profiles_dir),
                   backend=build_backend(settings), persona=load_persona(settings.persona))

    def running(self, session_id: str) -> str | None:
        turn = self._turns.get(session_id)
        return turn.turn_id if turn is not None else None

    async def start_turn(self, services: AgentDeps, subject: Subject, content: str,
                         images: Sequence[SentImage] = ()) -> str:
        """Store the user's message (with its images' paths) and start the loop; returns
        the turn id. The images' bytes go to the turn's model calls."""
        session = subject.session
        if session in self._turns:
            raise Conflict("a turn is already running in this session",
                           turn_id=self._turns[session].turn_id)
        turn_id = new_turn_id()
        running = self._turns[session] = RunningTurn(turn_id)
        history = MessageStore(services.store)
        try:
            row = await history.append(session, turn_id, "user", content, meta={"images": [
                {"path": i.path, "media_type": i.media_type} for i in images]} if images
                else None)
            profile = self.profiles.get(subject.profile)
            models = profile_models(profile.model, profile.models, self.settings.model)
            setup = TurnSetup(services=services, backend=self.backend, history=history,
                              profile=profile, persona=self.persona, model=models[0],
                              subject=subject, turn_id=turn_id, content=content,
                              models=models, blacklist=self.blacklist,
                              user_images={f"user:{row}": [
                                  ImageInput(media_type=i.media_type, data_b64=i.data_b64)
                                  for i in images]} if images else {})
            turn = Turn(setup, TurnEvents(services.hub.bus(session), turn_id))
            turn.release = lambda: self._release(session, turn_id)
            running.task = asyncio.create_task(self._run(turn, session), name=f"turn {turn_id}")
        except BaseException:
            self._turns.pop(session, None)
            raise
        return turn_id

    async def _run(self, turn: Turn, session: str) -> None:
        try:
            await turn.run()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug must not leave the session stuck
            log.error("turn_crashed", turn=turn.s.turn_id, exc_info=exc)
            self._release(session, turn.s.turn_id)
            turn.events.emit(ErrorEvent(turn_id=turn.s.turn_id, code="internal_error",
                                        message="internal error"))
        finally:
            self._release(session, turn.s.turn_id)

    def _release(self, session: str, turn_id: str) -> None:
        current = self._turns.get(session)
        if current is not None and current.turn_id == turn_id:
            self._turns.pop(session, None)

    async def cancel(self, session_id: str, services: AgentDeps | None = None) -> str | None:
        """Cancel the session's running turn; returns its id (None: nothing was running)."""
        running = self._turns.get(session_id)
        if running is None or running.task is None:
            return None
        if services is not None:
            services.approvals.cancel_session(session_id)
        running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(running.task), CANCEL_WAIT_S)
        log.info("turn_cancelled", turn=running.turn_id, session=session_id)
        return running.turn_id

    async def history(self, services: AgentDeps, session_id: str, *, after: int = 0,
                      limit: int = 1000) -> list[StoredMessage]:
        return await MessageStore(services.store).list(session_id, after=after, limit=limit)

    async def close(self) -> None:
        for closer in self.closers:
            with contextlib.suppress(Exception):
                await closer()
        for session_id in list(self._turns):
            await self.cancel(session_id)
        await self.backend.close()
