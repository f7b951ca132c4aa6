"""The real-engine scenarios: one vLLM configuration and one load each, on the test bed's tiny model.

Shared by the test fixtures (tests/realvllm/) and by scripts/realvllm_scenarios.py, which writes the frozen
copies under tests/fixtures/realvllm/. The pool is sized explicitly in every scenario — the CPU worker
would otherwise take most of the machine's RAM:

- ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) gives the budget; the tiny model's KV costs 512 B/token
  (2 layers × K,V × 2 KV heads × 32 head dim × 2 bytes), so 1 GiB = 65,536 blocks of 32 tokens, and
  ``--num-gpu-blocks-override N`` then shrinks the pool to N blocks (N − 1 usable: vLLM keeps a null block);
- the start-up failure uses ``--kv-cache-memory-bytes`` instead (the override does not enter vLLM's
  "enough memory for one max-length request" check; the byte budget does).

Pinned because the assertions depend on them: block size 32 (the CPU attention backend needs a multiple
of 32), ``--max-num-batched-tokens`` (CPU serve's default differs from GPU's), ``--max-model-len``,
``--max-num-seqs``, the seed, eager mode, bf16, and VLLM_LOG_STATS_INTERVAL=1 (a stats line a second).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvdoctor.experiment.load import LoadSpec

COMMON_FLAGS = ["--block-size", "32", "--enforce-eager", "--dtype", "bfloat16", "--seed", "0"]
# VLLM_CPU_OMP_THREADS_BIND=nobind: vLLM's "auto" binding pins every engine's OpenMP threads to the same core
# (core 0 on a 2-core machine, core 1 "reserved"), so two servers on one machine — two CI jobs, or a test run
# beside another — fight over one core while the other idles (measured: TPOT 14 -> 102 ms). Unpinned, the OS
# spreads them.
COMMON_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    flags: list[str]
    load: LoadSpec | None  # None: the server is expected not to start
    env: dict[str, str] = field(default_factory=lambda: dict(COMMON_ENV))

    @property
    def expect_startup_failure(self) -> bool:
        return self.load is None

    def all_flags(self) -> list[str]:
        return [*self.flags, *COMMON_FLAGS]

    def serve_line(self, model: str = "MODEL") -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{env} vllm serve {model} {' '.join(self.all_flags())}".strip()


def _pool(max_model_len: int, max_num_seqs: int, blocks: int) -> list[str]:
    """The flags of a scenario sized by its pool: 2,048 batched tokens a step, ``blocks`` KV blocks."""
    return ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
            "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", str(blocks)]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario(
        "healthy_full",
        "KV usage high (4 requests of 256 + 90 tokens, 11 blocks each even with a BOS token, hold 44 of 47 usable "
        "blocks), no queue (the client never has more in flight than --max-num-seqs), no preemption; request logging "
        "on (--enable-log-requests: a Received and an Added line per request)",
        [*_pool(512, 4, 48), "--enable-log-requests"],
        LoadSpec(prompt_len=256, output_len=90, requests=16, rate=None, max_concurrency=4, seed=0),
    ),
    Scenario(
        "capacity_short",
        "pool of 20 blocks (640 tokens) for 8 sequences of 192 tokens: preemptions and a queue",
        _pool(512, 8, 20),
        LoadSpec(prompt_len=128, output_len=64, requests=40, rate=None, max_concurrency=16, seed=0),
    ),
    Scenario(
        "config_starved",
        "--max-num-seqs 2 with a pool of 400 blocks (12,800 tokens): KV mostly free, requests queue",
        _pool(512, 2, 400),
        LoadSpec(prompt_len=128, output_len=64, requests=40, rate=20.0, seed=0),
    ),
    Scenario(
        "prefill_bound",
        "a burst of 16 prompts of 3,072 tokens with 8 output tokens each, 2,048 batched tokens a step",
        _pool(4096, 16, 2000),
        LoadSpec(prompt_len=3072, output_len=8, requests=16, rate=None, seed=0),
    ),
    Scenario(
        "startup_failure",
        "--max-model-len 4096 with a 1 MiB KV budget (2,048 tokens): vLLM refuses to start",
        ["--max-model-len", "4096", "--max-num-seqs", "4", "--kv-cache-memory-bytes", "1048576"],
        None,
        env={"VLLM_LOG_STATS_INTERVAL": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    ),
    Scenario(
        "memory_held",
        "no explicit KV budget and --gpu-memory-utilization 0.99: vllm-cpu wants 99 % of the node's memory free at "
        "start-up and refuses (the API server alone holds more than 1 %)",
        ["--max-model-len", "512", "--max-num-seqs", "2", "--gpu-memory-utilization", "0.99"],
        None,
        env={"VLLM_LOG_STATS_INTERVAL": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    ),
    Scenario(
        "max_len_over_model",
        "--max-model-len 65536 on a model whose config.json allows 8,192 positions: vLLM refuses while it parses its "
        "arguments, before any engine starts",
        ["--max-model-len", "65536", "--max-num-seqs", "2"],
        None,
    ),
)}
