"""The streaming log reader's limits and sentinels, shared by its strategies (one place to change them)."""

CHUNK = 1 << 20  # small: a chunk that needs the full path costs little
MAX_LINE = 1 << 16  # longer lines are cut (and counted); no evidence line is that long
MAX_EVENTS_PER_KIND = 5000  # bounded memory on a log full of errors; the rest are counted
BURST_GAP_LINES = 5000  # one process's error lines in one second, other processes' lines between them
MAX_WARNINGS = 200_000  # v0 warnings carry the preemption counts: keep (nearly) all
STICKY_LINES = 500  # full path this many lines after the last start-up fact
GAP_S = 60.0  # a stats stream silent for longer than this (and 4 intervals) is read in full around the gap
SMALL_FILE = 4 << 20  # files below this are read on the full path only (excerpts, small logs)
NAN = float("nan")
# A v1 stats line without "Preemptions:": 0 or unknown, settled per segment in finish()
# (segments.settle_preemptions). Never a real count (those are >= 0).
ABSENT = -1.0

# Stats lines without a timestamp (a pasted excerpt) kept until the source is read: used, untimed, only when the
# source has no timed stats line; beyond this many they are counted as skipped.
MAX_UNTIMED_STATS = 10_000
