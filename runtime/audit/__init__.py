"""Audit: a write-ahead, hash-chained, signed log of every decision and execution.

``AuditLog`` appends (fail-closed: ``AuditUnavailable``); ``verify_store`` recomputes the chain
read-only; ``export_jsonl`` streams it out.
"""

from runtime.audit.records import (
    AuditAction,
    AuditEntry,
    AuditRecord,
    StateChange,
    canonical_json,
    digest_json,
    sha256_hex,
)
from runtime.audit.signing import Checkpoint
from runtime.audit.store import AuditLog
from runtime.audit.verify import VerifyReport, export_jsonl, verify_store

__all__ = [
    "AuditAction",
    "AuditEntry",
    "AuditLog",
    "AuditRecord",
    "Checkpoint",
    "StateChange",
    "VerifyReport",
    "canonical_json",
    "digest_json",
    "export_jsonl",
    "sha256_hex",
    "verify_store",
]
