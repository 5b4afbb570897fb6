"""A growing server log read as cumulative counters, from where the last read stopped.

Some runtimes report a counter only in their log (llama.cpp's prompt-cache lookups and
hits, `arms.runtimes.llamacpp_telemetry`); a probe's target keeps one reader per log
(`arms.probes.base.ProbeTarget.log_tail`), and `arms.probes.counters` reads it beside the
metrics endpoint.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping


class LogTail:
    """Cumulative counters of a growing server log, read from where the last read stopped.

    Why: at trace verbosity a server log grows by megabytes over a probe; reading and
    scanning all of it for every counter read costs more each time and competes with the
    streams being timed. Only the bytes added since the last read are scanned (up to the
    last complete line; a half-written line waits for the next read), and the counts are
    added to running totals. A log that shrank or was replaced by a new file (truncation,
    rotation) is read again from its start; the totals keep counting, so they never go
    backwards and per-probe deltas stay right.
    """

    def __init__(self, path: str, count: Callable[[str], Mapping[str, float]]):
        self.path = path
        self.count = count
        self.offset = 0
        self.totals: dict[str, float] = {}
        self.resets = 0
        self._partial = b""
        self._file_id: tuple[int, int] | None = None
        self._lock = threading.Lock()  # one reader at a time (reads run in worker threads)

    def read(self) -> dict[str, float]:
        """The totals after reading what the log gained; raises OSError if it cannot be read."""
        with self._lock:
            with open(self.path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                file_id = (stat.st_dev, stat.st_ino)
                if self._file_id is not None and (file_id != self._file_id or stat.st_size < self.offset):
                    self.offset, self._partial = 0, b""
                    self.resets += 1
                self._file_id = file_id
                fh.seek(self.offset)
                data = fh.read()
            self.offset += len(data)
            data = self._partial + data
            end = data.rfind(b"\n") + 1
            self._partial = data[end:]
            if end:
                for name, value in self.count(data[:end].decode("utf-8", errors="replace")).items():
                    self.totals[name] = self.totals.get(name, 0.0) + float(value)
            for name in self.count(""):  # every counter exists from the first read, even at 0
                self.totals.setdefault(name, 0.0)
            return dict(self.totals)
