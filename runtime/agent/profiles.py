"""Agent behaviour profiles: what the agent is told, which model it uses, how long it may go.

A *policy* profile (`policies/*.yaml`) says what a session may do; an *agent* profile
(`policies/profiles/<name>.yaml`, same name) says how the agent behaves in it: system
prompt, model, temperature, iteration budget, the tools it is offered, and Navi's thinking
mechanics (planning phase, iteration budget shown to the model, goal anchoring, step
validation). The tools a model sees are the profile's list intersected with what the
policy lets the session use: the policy always wins. A session whose policy profile has no
agent profile gets `fallback()` (every tool the policy allows, a neutral prompt).

Persona (`NAVI_PERSONA`): text, or `@path` to a file; it leads the system prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime.errors import ConfigError
from runtime.logging import get_logger

log = get_logger(__name__)

MAX_PROMPT_CHARS = 32 * 1024
MAX_PROFILE_BYTES = 256 * 1024
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

DEFAULT_PROMPT = (
    "You are Navi, an assistant that works inside a sandboxed runtime. Use the tools you "
    "are given when they help; every program you run executes in a fresh, isolated "
    "container with this session's files as its working directory. Be concise and "
    "accurate, and say plainly when something failed."
)


class ThinkingMechanics(BaseModel):
    """Navi's thinking aids, each a flag."""

    model_config = ConfigDict(extra="forbid")

    planning: bool = Field(True, description="ask for a short plan before the first action")
    iteration_budget: bool = Field(True, description="tell the model how many steps are left")
    goal_anchoring: bool = Field(True, description="restate the user's goal after tool steps")
    step_validation: bool = Field(True, description="ask the model to check each step result")


class AgentProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    description: str = ""
    system_prompt: str = Field(DEFAULT_PROMPT, max_length=MAX_PROMPT_CHARS)
    tools: list[str] = Field(
        default_factory=lambda: ["*"],
        description="tool names or groups (`group:exec`); `*` for every tool the policy allows")
    model: str | None = Field(None, description="model name; null: the server's NAVI_MODEL")
    models: list[str] | None = Field(
        None, min_length=1, max_length=8,
        description="models tried in order for each model call (after `model` when both are "
        "set); one that fails before answering is skipped for NAVI_MODEL_BLACKLIST_S")
    temperature: float | None = Field(0.3, ge=0, le=2)
    max_iterations: int = Field(10, ge=1, le=100)
    think: bool | None = Field(None, description="ask the model to think (when it can)")
    context_window: int = Field(8192, ge=1024, le=1_048_576,
                                description="tokens; lowered to what the model reports")
    stall_repeats: int = Field(3, ge=2, le=20,
                               description="the same call this many times ends the turn")
    thinking: ThinkingMechanics = Field(default_factory=lambda: ThinkingMechanics())

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if not isinstance(item, str) or not item.strip() or len(item) > 200:
                raise ValueError(f"bad model name {item!r}")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        for item in value:
            if not isinstance(item, str) or not item or len(item) > 80:
                raise ValueError(f"bad tool entry {item!r}")
        return value

    def offers(self, name: str, group: str) -> bool:
        """Whether the profile lists this tool (by name, by group or by `*`)."""
        return "*" in self.tools or name in self.tools or group in self.tools

    @classmethod
    def fallback(cls, name: str) -> AgentProfile:
        return cls(name=name, description="default agent profile (no file for this profile)")


class ProfileSet:
    def __init__(self, profiles: dict[str, AgentProfile]) -> None:
        self.profiles = profiles

    def get(self, name: str) -> AgentProfile:
        profile = self.profiles.get(name)
        if profile is None:
            return AgentProfile.fallback(name)
        return profile

    @classmethod
    def load(cls, directory: Path) -> ProfileSet:
        """Every `*.yaml` in `directory`; a bad file is a `ConfigError` naming it."""
        profiles: dict[str, AgentProfile] = {}
        if not directory.is_dir():
            log.warning("agent_profiles_missing", directory=str(directory))
            return cls(profiles)
        for path in sorted(directory.glob("*.yaml")):
            profile = load_profile(path)
            profiles[profile.name] = profile
        return cls(profiles)


def load_profile(path: Path) -> AgentProfile:
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_PROFILE_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_PROFILE_BYTES} bytes")
        data: Any = yaml.safe_load(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read agent profile: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an agent profile is a YAML mapping")
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ConfigError(f"{path}: name {data['name']!r} differs from the file name")
    try:
        return AgentProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(profile)'}: {e['msg']}"
            for e in exc.errors()[:5])
        raise ConfigError(f"{path}: invalid agent profile: {problems}") from None


def load_persona(value: str | None) -> str | None:
    """`NAVI_PERSONA`: the text itself, or `@path` to a UTF-8 file (at most 32 KiB)."""
    if not value:
        return None
    if not value.startswith("@"):
        return value[:MAX_PROMPT_CHARS]
    path = Path(value[1:]).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"NAVI_PERSONA: cannot read {path}: {exc}") from None
    if len(text) > MAX_PROMPT_CHARS:
        raise ConfigError(f"NAVI_PERSONA: {path} is larger than {MAX_PROMPT_CHARS} characters")
    return text.strip() or None
