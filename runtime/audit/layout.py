"""Where the audit log keeps its files in a data dir.

One place for the names, so the store, the verifier, ``navi audit`` and backup/restore
always agree on what makes up a log.
"""

from __future__ import annotations

DB_NAME = "audit.sqlite3"  # the record of truth
MIRROR_NAME = "audit.jsonl"  # the plain-text copy (``runtime.audit.mirror``)
CHECKPOINT_NAME = "audit.checkpoint.json"  # the latest signed checkpoint, outside the db
INSTANCES_DIR = "audit.instances"  # one lock file per process with the log open

__all__ = ["CHECKPOINT_NAME", "DB_NAME", "INSTANCES_DIR", "MIRROR_NAME"]
