"""Tenants' memories and notes are not readable by other local users (the embedded model's
uid among them): their SQLite files, and the journals SQLite makes beside them, are 0600."""

from __future__ import annotations

import stat
from pathlib import Path

from runtime.tools.memory_store import MemoryStore
from runtime.tools.notes_store import NotesStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_memory_and_notes_files_are_private(tmp_path: Path) -> None:
    for store in (MemoryStore.in_data_dir(tmp_path), NotesStore.in_data_dir(tmp_path)):
        await store.open()
        try:
            assert _mode(store.path) == 0o600
            assert _mode(Path(f"{store.path}-wal")) == 0o600
        finally:
            await store.close()


async def test_a_file_an_older_version_left_readable_is_narrowed(tmp_path: Path) -> None:
    store = NotesStore.in_data_dir(tmp_path)
    await store.open()
    await store.close()
    store.path.chmod(0o644)
    wal = Path(f"{store.path}-wal")
    wal.touch()
    wal.chmod(0o644)
    await store.open()
    try:
        assert _mode(store.path) == 0o600 and _mode(wal) == 0o600
    finally:
        await store.close()
