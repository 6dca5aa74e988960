"""`HealthProbe`: polls `GET /v1/healthz` from its own thread while a scenario runs; the
tenancy tests assert on the slowest answer (`max_s`) and on `failures`."""

from __future__ import annotations

import threading
import time

import httpx


class HealthProbe:
    def __init__(self, url: str, interval_s: float = 0.02) -> None:
        self.url = url
        self.interval_s = interval_s
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    status = client.get("/v1/healthz").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    status = 0
                self.latencies.append(time.monotonic() - start)
                if status != 200:
                    self.failures.append(f"status {status}")
                self._stop.wait(self.interval_s)

    @property
    def max_s(self) -> float:
        return max(self.latencies, default=0.0)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
