"""The attach IO threads: reused when idle, never queued behind a blocked job, daemon."""

from __future__ import annotations

import threading
import time

from runtime.sandbox.docker.attach import DaemonThreads


def _run(pool: DaemonThreads, fn) -> threading.Event:  # noqa: ANN001
    done = threading.Event()

    def job() -> None:
        fn()
        done.set()

    pool.submit(job, "navi-test")
    return done


def test_idle_thread_is_reused() -> None:
    pool = DaemonThreads(idle_s=5)
    seen: list[threading.Thread] = []
    for _ in range(3):
        assert _run(pool, lambda: seen.append(threading.current_thread())).wait(5)
        time.sleep(0.05)  # the thread is back to idle
    assert len({id(t) for t in seen}) == 1
    assert seen[0].daemon and seen[0].name == "navi-test"


def test_blocked_job_never_delays_the_next() -> None:
    pool = DaemonThreads(idle_s=5)
    release = threading.Event()
    blocked = _run(pool, lambda: release.wait(10))
    try:
        assert _run(pool, lambda: None).wait(2), "second job waited for the blocked one"
        assert not blocked.is_set()
    finally:
        release.set()
    assert blocked.wait(5)


def test_idle_threads_exit() -> None:
    pool = DaemonThreads(idle_s=0.1)
    ran: list[threading.Thread] = []
    assert _run(pool, lambda: ran.append(threading.current_thread())).wait(5)
    ran[0].join(timeout=5)
    assert not ran[0].is_alive()
    assert _run(pool, lambda: None).wait(5)  # a fresh thread after the idle one left
