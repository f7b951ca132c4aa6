"""Set by ``cli.boot`` before ``kvdoctor.cli`` is imported: the one verb to register (None = all)."""

ONLY: str | None = None
