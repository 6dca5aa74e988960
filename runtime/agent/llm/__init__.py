"""Model backends behind one interface (`LLMBackend`), and the choice between them.

`build_backend(settings)`: an OpenAI-compatible server when `NAVI_OPENAI_BASE_URL` is set,
otherwise Ollama on the hosts of `NAVI_OLLAMA_HOST` (default `http://127.0.0.1:11434`);
with `NAVI_EMBEDDED_MODEL=auto` (the default) the embedded model takes over when that does
not answer (`FallbackBackend`). Nothing connects until the first request.
"""

from __future__ import annotations

from runtime.agent.llm.embedded import EmbeddedServer
from runtime.agent.llm.embedded_confine import default_directory
from runtime.agent.llm.fallback import FallbackBackend
from runtime.agent.llm.hosts import HostPool, parse_hosts
from runtime.agent.llm.ollama import OllamaBackend
from runtime.agent.llm.openai import OpenAIBackend
from runtime.agent.llm.types import (
    ChatMessage,
    ChatRequest,
    Chunk,
    Done,
    ImageInput,
    LLMBackend,
    Notice,
    TextDelta,
    ThinkingDelta,
    ToolCallChunk,
    ToolCallRequest,
    Usage,
)
from runtime.config import Settings

__all__ = [
    "ChatMessage", "ChatRequest", "Chunk", "Done", "EmbeddedServer", "FallbackBackend",
    "HostPool", "ImageInput", "LLMBackend", "Notice", "OllamaBackend", "OpenAIBackend",
    "TextDelta", "ThinkingDelta", "ToolCallChunk", "ToolCallRequest", "Usage",
    "build_backend", "parse_hosts",
]


def build_backend(settings: Settings) -> LLMBackend:
    primary: LLMBackend
    if settings.openai_base_url:
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        primary = OpenAIBackend(settings.openai_base_url, key, timeout_s=settings.llm_timeout_s)
    else:
        primary = OllamaBackend(parse_hosts(settings.ollama_host),
                                timeout_s=settings.llm_timeout_s,
                                blacklist_s=settings.ollama_blacklist_s)
    if settings.embedded_model == "off":
        return primary
    directory = settings.embedded_dir or default_directory(
        settings.data_dir, settings.embedded_uid, settings.sandbox_uid_base)
    server = EmbeddedServer(directory.resolve(), uid=settings.embedded_uid,
                            uid_base=settings.sandbox_uid_base, passwd=settings.host_passwd)
    return FallbackBackend(primary, server, timeout_s=settings.llm_timeout_s)
