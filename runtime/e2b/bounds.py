"""Bounds on what the SDK sends in maps (metadata, env vars): counts and lengths."""

from __future__ import annotations

from runtime.errors import InvalidInput

MAX_METADATA = 64
MAX_ENVS = 128
MAX_KV_LEN = 4096


def check_map(name: str, values: dict[str, str] | None, limit: int) -> dict[str, str]:
    values = values or {}
    if len(values) > limit:
        raise InvalidInput(f"{name}: at most {limit} entries")
    for key, value in values.items():
        if not key or len(key) > 256 or len(value) > MAX_KV_LEN or "\x00" in key + value:
            raise InvalidInput(f"{name}: keys 1-256 characters, values at most {MAX_KV_LEN}")
    return values
