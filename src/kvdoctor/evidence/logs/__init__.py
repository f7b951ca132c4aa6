"""vLLM log reading: the envelope, start-up facts (stdlib only) and the streaming reader."""

from kvdoctor.evidence.logs.facts import read_startup_facts
from kvdoctor.evidence.logs.startup import StartupCollector

__all__ = ["StartupCollector", "read_startup_facts"]
