"""GPU facts: memory as torch reports it, bandwidth, peak throughput, compute capability.

``GpuSpec`` is built by ``catalog.gpus.lookup_gpu`` (catalog table, alias, or a plain size); read by the
engine defaults, the ledger, the simulator's step time and the chains. ``capability_int`` /
``capability_text`` are the one normaliser of compute-capability spellings. Imports nothing from kvdoctor.
"""

from __future__ import annotations

from dataclasses import dataclass


def capability_int(cc: object) -> int | None:
    """vLLM's integer compute capability (90 for SM 9.0) from any spelling kvdoctor meets.

    (9, 0) / [9, 0] / "9.0" / 9.0 / 9 -> 90; 90 / "90" -> 90 (already the integer form); None or
    anything unreadable -> None. Invariant: the result is None or major*10 + minor with minor < 10.
    """
    if cc is None or isinstance(cc, bool):
        return None
    if isinstance(cc, (tuple, list)):
        if len(cc) != 2:
            return None
        return int(cc[0]) * 10 + int(cc[1])
    if isinstance(cc, int):
        return cc if cc >= 20 else cc * 10
    try:
        f = float(cc)
    except (TypeError, ValueError):
        return None
    return int(round(f * 10)) if f < 20 else int(f)


def capability_text(cc: object, *, sep: str = ".", unknown: str = "unknown") -> str:
    """"9.0" (or "90" with ``sep=""``) from any spelling; ``unknown`` when not known."""
    c = capability_int(cc)
    return unknown if not c else f"{c // 10}{sep}{c % 10}"


@dataclass(frozen=True)
class GpuSpec:
    """A GPU model: memory as torch reports it, bandwidth, dense TFLOPS, capability, aliases."""
    name: str
    aliases: tuple[str, ...]
    memory_bytes: int  # total as torch reports it
    memory_source: str  # "torch total_memory ... seen in public logs" / "derived: ..." / "given: ..."
    hbm_bandwidth_gbps: float | None = None  # GB/s (1e9)
    bf16_tflops: float | None = None  # dense
    fp8_tflops: float | None = None  # dense
    int8_tops: float | None = None  # dense
    fp4_tflops: float | None = None  # dense
    compute_capability: tuple[int, int] | None = None  # (major, minor); None for AMD / unknown
    nvlink_gbps: float | None = None  # bidirectional per GPU
    notes: str = ""

    @property
    def is_anonymous(self) -> bool:
        """True for a GPU given only as a size: nothing but memory is known."""
        return self.memory_source.startswith("given")

    @property
    def capability(self) -> int | None:
        """vLLM's integer form (90 for 9.0), as quantization min-capability checks use it."""
        return capability_int(self.compute_capability)
