"""Year-less log timestamps → epoch seconds, one by one (``Clock``) and on arrays (``year_table``).

vLLM prints ``MM-DD HH:MM:SS``: the year comes from the line when it has one, else from the reader's
``year``; a jump back of more than ``ROLLOVER_S`` is a year rollover, a smaller one an out-of-order line
(counted in ``backwards``). ``low_mask`` serves the newline bitmaps of the fast path and the pre-scan.
"""

from __future__ import annotations

import calendar
from functools import lru_cache
from typing import Any

from kvdoctor.evidence.logs.envelope import FOREIGN_ISO_B

ROLLOVER_S = 180 * 86400


class Clock:
    """Year-less timestamps → epoch seconds (read as UTC: only intervals matter)."""

    def __init__(self, year: int):
        self.year = year
        self.max_t: float | None = None
        self.rollovers = 0
        self.backwards = 0
        self._days: dict[tuple[int, int, int], float] = {}

    def state(self) -> tuple:
        return (self.year, self.max_t, self.rollovers, self.backwards)

    def restore(self, st: tuple) -> None:
        self.year, self.max_t, self.rollovers, self.backwards = st

    def _day(self, y: int, mon: int, day: int) -> float:
        key = (y, mon, day)
        v = self._days.get(key)
        if v is None:
            if not (1 <= mon <= 12 and 1 <= day <= calendar.monthrange(y, mon)[1]):
                raise ValueError("bad date")
            v = float(calendar.timegm((y, mon, day, 0, 0, 0)))
            self._days[key] = v
        return v

    def epoch(self, year: int | None, mon: int, day: int, hh: int, mi: int, ss: float) -> float:
        if hh > 23 or mi > 59 or ss >= 61:
            raise ValueError("bad time")
        if year is not None:
            self.year = year
        y = self.year
        t = self._day(y, mon, day) + hh * 3600 + mi * 60 + ss
        if year is None and self.max_t is not None and t < self.max_t - ROLLOVER_S:
            # "12-31 23:59:59" then "01-01 00:00:03": the log crossed New Year.
            self.year += 1
            self.rollovers += 1
            t = self._day(self.year, mon, day) + hh * 3600 + mi * 60 + ss
        if self.max_t is not None and t < self.max_t:
            self.backwards += 1
        if self.max_t is None or t > self.max_t:
            self.max_t = t
        return t


def stamp(clock: Any, m: Any, line: bytes) -> float | None:
    """Epoch seconds of the envelope ``m`` of ``line`` on ``clock`` (its year from the line or a foreign ISO
    prefix when present); None for an impossible date."""
    # (an EnvMatch: its level/timestamp match answers these groups; one call for all of them)
    year, mon, day, hh, mi, ss, frac = getattr(m, "m", m).group("year", "mon", "day", "hh", "mi", "ss", "frac")
    y = int(year) if year else None
    if y is None:
        st = m.start()
        if st > 0:
            fm = FOREIGN_ISO_B.search(line, 0, st)
            if fm is not None:
                y = int(fm.group("year"))
    sec = float(ss + frac.replace(b",", b".")) if frac else float(ss)
    try:
        return clock.epoch(y, int(mon), int(day), int(hh), int(mi), sec)
    except ValueError:
        return None


@lru_cache(maxsize=8)
def year_table(year: int):
    """``Clock`` on arrays: (epoch of day 0 of each month, days in each month) indexed by month 1-12,
    the bounds of (month, day, hour, minute, second) and the weights of (day, hour, minute, second)."""
    import numpy as np

    first = np.zeros(13, dtype=np.int64)  # day 0 of each month: day 1 minus a day
    mdays = np.zeros(13, dtype=np.int64)
    for mon in range(1, 13):
        first[mon] = calendar.timegm((year, mon, 1, 0, 0, 0)) - 86400
        mdays[mon] = calendar.monthrange(year, mon)[1]
    return (first, mdays, np.array(TS_MIN, dtype=np.int64), np.array(TS_MAX, dtype=np.int64),
            np.array(TS_W, dtype=np.int64))


# "MM-DD HH:MM:SS" as (month, day, hour, minute, second): tens digits at 0, 3, 6, 9, 12, units one byte on
TS_MIN = (1, 1, 0, 0, 0)  # Clock.epoch's checks (second < 61)
TS_MAX = (12, 31, 23, 59, 60)
TS_W = (86400, 3600, 60, 1)  # day (from 1: the month table holds day 0), hour, minute, second


@lru_cache(maxsize=1)
def low_mask():
    """uint64 masks of the bits below bit 0..63 (the newlines before a byte in its 64-byte word)."""
    import numpy as np

    return (np.uint64(1) << np.arange(64, dtype=np.uint64)) - np.uint64(1)
