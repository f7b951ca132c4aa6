"""The simulator's contracts: what the event loop (``sim/run.py``) needs from a step-time model, and
what it tells an observer about every engine step.

Kept minimal on purpose: any object with these two methods is a step-time model
(``sim.steptime.LinearStepTime``, ``RooflineStepTime``, a calibrated model, a test double).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable


@runtime_checkable
class StepTimeModel(Protocol):
    def step(self, tokens: int, sampled: int, kv_decode: int, prefill_pairs: float, num_reqs: int,
             cross_pairs: float = 0.0) -> float:
        """Seconds for one step that computes ``tokens`` tokens (prefill chunks + decodes), samples
        ``sampled`` next tokens, whose decodes read ``kv_decode`` cached tokens and whose prefill
        chunks attend ``prefill_pairs`` (query, key) pairs, over ``num_reqs`` requests; ``cross_pairs``: pairs of
        prefill tokens from two different chunks of the step (the chunks' tokens squared less each chunk's own)."""
        ...

    def decode_line(self, n: int) -> tuple[float, float]:
        """``(A, B)``: a step of ``n`` decodes that read ``kv`` cached tokens takes ``A + B * kv``
        seconds. Must agree with ``step(n, n, kv, 0, n)``: the event loop jumps over stretches of
        identical decode steps with it."""
        ...

    def decode_cpu_line(self, n: int) -> tuple[float, float] | None:
        """A model whose decode step is the larger of two lines (async scheduling: the engine's CPU work
        overlapping the GPU step) returns the second ``(A2, B2)``; ``step`` must then equal the ``max`` of
        ``decode_line`` and this. None: the decode step is the one line."""
        ...


@dataclass(frozen=True)
class StepExtras:
    """Time the event loop adds to a step for the engine's state, not its batch (0 unless a calibration measured it;
    docs/simulation.md, "The first step of each size").

    ``wake_s``: on the step that starts an idle engine (nothing running or waiting; the engine starts idle).
    ``new_shape_s + new_shape_per_token_s * tokens``: on the first step of each token count, where the engine builds
    a kernel per size (vLLM's CPU backend: a oneDNN matmul primitive per activation M, csrc/cpu/dnnl_helper);
    ``warm_shapes``: the sizes it had run before the simulation starts. Invariant: every cost >= 0."""

    wake_s: float = 0.0
    new_shape_s: float = 0.0
    new_shape_per_token_s: float = 0.0
    warm_shapes: frozenset[int] = frozenset()

    def __post_init__(self):
        if min(self.wake_s, self.new_shape_s, self.new_shape_per_token_s) < 0:
            raise ValueError("a step's extra time is never negative")

    @property
    def shaped(self) -> bool:
        return self.new_shape_s > 0 or self.new_shape_per_token_s > 0


@dataclass(frozen=True)
class StepRecord:
    """One engine step as vLLM's scheduler would report it (``--steps-out``).

    ``sched``: (request index, tokens scheduled) in scheduling order; ``preempted``: request
    indexes preempted while planning the step; ``finished``: requests whose last token this step
    sampled. ``kv_blocks_used``, ``running`` and ``waiting`` are read after the step's output is
    processed (finished requests freed): ``num_gpu_blocks - 1 - free blocks`` (the null block is
    never counted), ``len(running)`` and the waiting queue's length. ``t``: when the step starts
    (simulated seconds; arrivals up to ``t`` are in the queues when it is planned).
    """

    step: int
    t: float
    sched: tuple[tuple[int, int], ...]
    preempted: tuple[int, ...]
    finished: tuple[int, ...]
    kv_blocks_used: int
    running: int
    waiting: int
    # requests that reached the engine (the scheduler's queue, or a front-end rejection) since the
    # previous step was planned and before this one was
    arrived: tuple[int, ...] = ()
    t_end: float = 0.0  # when the step ends (the next plan starts then, unless the engine idles)
    # async scheduling: this step's plan came after an empty one that processed the step in flight (every running
    # request's last token was in flight, and nothing waiting fitted): the requests of ``arrived`` that reached the
    # engine before that empty plan (None: no empty plan came first)
    replanned: tuple[int, ...] | None = None


StepObserver = Callable[[StepRecord], None]
