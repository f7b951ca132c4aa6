"""The vocabulary of ``vllm bench serve``'s command line: its flags, which take no value, and how vLLM's parser resolves
an abbreviated one. Shared by the bench reader (``evidence.bench``: the send options of a command pasted above a
result block) and ``sim.benchline`` (``--bench-cmd``: the whole workload)."""

from __future__ import annotations

from kvdoctor.errors import InputError

# every flag of vLLM 0.33's `vllm bench serve` (benchmarks/serve.py add_cli_args, listed from its parser): argparse
# there accepts any unique prefix of one (allow_abbrev), so a prefix is resolved against this list as vLLM would
BENCH_FLAGS = (
    '--append-result', '--asr-max-audio-len-sec', '--asr-min-audio-len-sec', '--backend', '--base-url',
    '--bfcl-categories', '--blazedit-max-distance', '--blazedit-min-distance', '--burstiness', '--chat-template-kwargs',
    '--custom-ensure-client-side-data', '--custom-output-len', '--dataset-name', '--dataset-path', '--disable-shuffle',
    '--disable-tqdm', '--enable-multimodal-chat', '--endpoint', '--extra-body', '--frequency-penalty', '--goodput',
    '--header', '--help', '--hf-name', '--hf-output-len', '--hf-split', '--hf-subset', '--host', '--ignore-eos',
    '--input-len', '--insecure', '--label', '--logprobs', '--lora-assignment', '--lora-modules', '--max-concurrency',
    '--metadata', '--metric-percentiles', '--min-p', '--model', '--no-oversample', '--no-reranker', '--no-self-timed',
    '--no-stream', '--num-prompts', '--num-warmups', '--output-len', '--percentile-metrics', '--plot-dataset-stats',
    '--plot-timeline', '--port', '--prefix-repetition-num-prefixes', '--prefix-repetition-output-len',
    '--prefix-repetition-prefix-len', '--prefix-repetition-suffix-len', '--presence-penalty', '--probe-request-rate',
    '--profile', '--ramp-up-end-rps', '--ramp-up-start-rps', '--ramp-up-strategy', '--random-batch-size',
    '--random-input-len', '--random-mm-base-items-per-request', '--random-mm-bucket-config',
    '--random-mm-limit-mm-per-prompt', '--random-mm-num-mm-items-range-ratio', '--random-output-len',
    '--random-prefix-len', '--random-range-ratio', '--ready-check-timeout-sec', '--repetition-penalty',
    '--request-id-prefix', '--request-rate', '--result-dir', '--result-filename', '--save-detailed', '--save-result',
    '--seed', '--self-timed', '--served-model-name', '--sharegpt-output-len', '--skip-chat-template',
    '--skip-tokenizer-init', '--spec-bench-category', '--spec-bench-output-len', '--speed-bench-category',
    '--speed-bench-dataset-subset', '--speed-bench-output-len', '--temperature', '--timed-trace-chunk-hash-size',
    '--timed-trace-label-hash-ids', '--timed-trace-label-input-length', '--timed-trace-label-output-length',
    '--timed-trace-label-timestamp', '--timed-trace-sec-multiplier', '--timeline-itl-thresholds', '--tokenizer',
    '--tokenizer-mode', '--top-k', '--top-p', '--trust-remote-code', '--use-beam-search',
)
# flags without a value (everything else takes one, or carries it after "=")
FLAGS_NO_VALUE = frozenset({
    "--ignore-eos", "--save-result", "--save-detailed", "--append-result", "--trust-remote-code", "--disable-tqdm",
    "--profile", "--use-beam-search", "--no-stream", "--no-oversample", "--disable-shuffle", "--skip-chat-template",
    "--insecure", "--plot-timeline", "--plot-dataset-stats", "--skip-tokenizer-init", "--enable-multimodal-chat",
    "--custom-skip-chat-template", "--no-reranker",
})


def resolve_flag(name: str, known: frozenset[str] | dict = frozenset()) -> tuple[str, str | None]:
    """A flag as vLLM's parser reads it: itself, or the one bench flag it is a unique prefix of (argparse's
    allow_abbrev); (name, note). ``known``: more names taken as they are. InputError when it is ambiguous."""
    if name in BENCH_FLAGS or name in known:
        return name, None
    cands = [f for f in BENCH_FLAGS if f.startswith(name)]
    if len(cands) == 1:
        return cands[0], f"{name} read as {cands[0]} (vLLM's parser accepts a unique prefix)"
    if len(cands) > 1:
        raise InputError(f"{name} is ambiguous for vllm bench serve ({', '.join(cands[:4])}"
                         f"{', ...' if len(cands) > 4 else ''})")
    return name, None
