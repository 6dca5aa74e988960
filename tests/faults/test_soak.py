"""The soak's short form: ~1,000 API calls (execs warm and cold, uploads, downloads, file and
session deletes, agent turns with the fake model) from 4 clients over 3 tenants against a
real `navi serve`; after warm-up, RSS, fds, threads, containers and mounts stay within
bench/soak.py's BOUNDS and the data dir grows by at most DATA_BYTES_PER_CALL per call; no
call fails, the audit verifies, nothing is left after the server stops. About a minute here;
the long form is `navi bench soak --calls N` (bench/results/soak-*.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Soak

pytestmark = pytest.mark.docker


def test_soak_short_form_is_flat(tmp_path: Path) -> None:
    result = Soak(1000, clients=4, tenants=3, sample_s=1.5, workdir=tmp_path).run()
    summary = {k: v for k, v in result.items() if k != "samples"}
    assert result["error_count"] == 0, summary
    assert result["audit_verify"]["ok"] is True, summary
    assert result["calls"] >= 1000
    assert result["flatness"]["ok"] is True, result["flatness"]
    assert result["mounts_after_stop"] == 0 and result["containers_after_stop"] == 0, summary
