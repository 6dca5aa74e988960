"""Progress of long image builds: which step runs, for how long, with a heartbeat meanwhile.

An offline build is minutes of silence otherwise (a rootfs, an import, a ``docker build``).
Steps report to a plain ``Callable[[str], None]`` sink, so the CLI prints and tests collect.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressSink = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


class Progress:
    """Reports ``[image] step ...`` lines and remembers each step's duration in ``timings``."""

    def __init__(self, sink: ProgressSink | None = None, *, heartbeat_s: float = 15.0) -> None:
        self._sink = sink or _quiet
        self._heartbeat_s = heartbeat_s
        self.timings: dict[str, dict[str, float]] = {}

    def note(self, image: str, message: str) -> None:
        self._sink(f"[{image}] {message}")

    @contextmanager
    def step(self, image: str, what: str) -> Iterator[Callable[[], float]]:
        """Time ``what``; yields a function returning the seconds elapsed so far."""
        start = time.monotonic()

        def elapsed() -> float:
            return time.monotonic() - start

        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self._heartbeat_s):
                self.note(image, f"{what}: still running ({elapsed():.0f} s)")

        self.note(image, f"{what} ...")
        ticker = threading.Thread(target=beat, name=f"progress-{image}", daemon=True)
        ticker.start()
        try:
            yield elapsed
        except BaseException:
            self.note(image, f"{what}: failed after {elapsed():.1f} s")
            raise
        finally:
            stop.set()
            ticker.join()
        seconds = elapsed()
        self.timings.setdefault(image, {})[what] = round(seconds, 2)
        self.note(image, f"{what}: done in {seconds:.1f} s")
