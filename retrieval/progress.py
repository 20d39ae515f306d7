"""Progress with an ETA for the long parts of an index build (parsing, embedding, training).

    bar = Progress("embedding", total=8709, log=log)
    for batch in batches:
        ...
        bar.advance(len(batch))
    bar.close()

On a terminal (stderr a TTY) the bar redraws one line in place; anywhere else (a log file, a
pipe, the test runner) it goes through ``log`` as a line at most every ``interval`` seconds
and once at the end, so logs stay short. The ETA is the elapsed time per unit so far times
the units left; units may be weighted (bytes of source for parsing, so a big target counts
for what it costs). Without ``log`` and without a terminal it says nothing.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional


def format_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    def __init__(self, label: str, total: float, log: Optional[Callable[[str], None]] = None,
                 interval: float = 15.0, unit: str = "", stream=None, tty: Optional[bool] = None):
        self.label = label
        self.total = max(float(total), 0.0)
        self.log = log
        self.interval = interval
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", lambda: False)())
        self.done = 0.0
        self.started = time.monotonic()
        self._last = self.started
        self._drawn = False
        self._closed = False

    # ---- what is shown
    def eta(self) -> Optional[float]:
        if self.done <= 0 or self.total <= 0:
            return None
        return (time.monotonic() - self.started) / self.done * max(self.total - self.done, 0.0)

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        pct = 100.0 * self.done / self.total if self.total else 100.0
        unit = f" {self.unit}" if self.unit else ""
        count = (f"{int(self.done)}/{int(self.total)}{unit}" if self.total == int(self.total)
                 else f"{self.done:.0f}/{self.total:.0f}{unit}")
        eta = self.eta()
        tail = f", ETA {format_seconds(eta)}" if eta is not None and self.done < self.total else ""
        return f"{self.label}: {count} ({pct:.0f}%), {format_seconds(elapsed)} elapsed{tail}"

    def bar(self, width: int = 24) -> str:
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        full = int(round(frac * width))
        return f"[{'#' * full}{'.' * (width - full)}] " + self.line()

    # ---- updates
    def advance(self, n: float = 1.0, note: str = "") -> None:
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        now = time.monotonic()
        if self.tty:
            if now - self._last >= 0.2 or self.done >= self.total:
                self.stream.write("\r" + self.bar() + (f" {note}" if note else "") + "\x1b[K")
                self.stream.flush()
                self._drawn = True
                self._last = now
        elif self.log is not None and now - self._last >= self.interval and self.done < self.total:
            self.log(self.line() + (f" ({note})" if note else ""))
            self._last = now

    def close(self, note: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        self.done = self.total if self.total else self.done
        if self.tty:
            self.stream.write("\r" + self.bar() + (f" {note}" if note else "") + "\x1b[K\n")
            self.stream.flush()
        elif self.log is not None:
            self.log(self.line() + (f" ({note})" if note else ""))
