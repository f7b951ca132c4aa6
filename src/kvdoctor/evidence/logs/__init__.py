"""vLLM log reading: the envelope, start-up facts (stdlib only) and the streaming reader."""

from kvdoctor.evidence.logs.startup import StartupCollector, read_startup_facts

__all__ = ["StartupCollector", "read_startup_facts"]
