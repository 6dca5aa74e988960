"""Identifiers of stored records: short, random, url-safe, and checked against one strict pattern.

Ids reach the file system (workspace directories are named after tenant and session ids) and
URLs, so every id that comes from outside is validated here before it is used anywhere.
"""

from __future__ import annotations

import re
import secrets
from typing import NewType

from runtime.errors import InvalidInput

TenantId = NewType("TenantId", str)
"""A tenant's id (``t_`` + 16 hex): storage, audit records, paths, labels."""
TenantName = NewType("TenantName", str)
"""A tenant's name (what the operator typed, e.g. ``acme``): what policy files match. Both
are `str` at run time; mypy refuses one where the other is meant."""

TENANT_PREFIX = "t_"
SESSION_PREFIX = "s_"
TOKEN_PREFIX = "k_"

_ID_HEX = 16
TENANT_ID_RE = re.compile(r"^t_[0-9a-f]{16}\Z")
SESSION_ID_RE = re.compile(r"^s_[0-9a-f]{16}\Z")
TOKEN_ID_RE = re.compile(r"^k_[0-9a-f]{16}\Z")

TENANT_ID_PATTERN = TENANT_ID_RE.pattern.replace("\\Z", "$")
SESSION_ID_PATTERN = SESSION_ID_RE.pattern.replace("\\Z", "$")
TOKEN_ID_PATTERN = TOKEN_ID_RE.pattern.replace("\\Z", "$")


def new_id(prefix: str) -> str:
    """A fresh id such as ``t_3f9c0a1b2c3d4e5f`` (64 random bits)."""
    return prefix + secrets.token_hex(_ID_HEX // 2)


def new_tenant_id() -> str:
    return new_id(TENANT_PREFIX)


def new_session_id() -> str:
    return new_id(SESSION_PREFIX)


def new_token_id() -> str:
    return new_id(TOKEN_PREFIX)


def is_tenant_id(value: object) -> bool:
    return isinstance(value, str) and TENANT_ID_RE.match(value) is not None


def is_session_id(value: object) -> bool:
    return isinstance(value, str) and SESSION_ID_RE.match(value) is not None


def is_token_id(value: object) -> bool:
    return isinstance(value, str) and TOKEN_ID_RE.match(value) is not None


def check_tenant_id(value: object) -> str:
    """Return ``value`` if it is a well-formed tenant id, else raise ``InvalidInput``."""
    if not is_tenant_id(value):
        raise InvalidInput("malformed tenant id")
    assert isinstance(value, str)
    return value


def check_session_id(value: object) -> str:
    """Return ``value`` if it is a well-formed session id, else raise ``InvalidInput``."""
    if not is_session_id(value):
        raise InvalidInput("malformed session id")
    assert isinstance(value, str)
    return value
