"""A pasted ``vllm bench serve`` (or ``benchmark_serving.py``) command line → the workload options it sets.

The operator's load is usually written down as the bench command they ran; ``--bench-cmd`` reads its workload
part so it need not be re-typed flag by flag. Names follow vLLM 0.33 ``benchmarks/serve.py`` and
``benchmarks/datasets``; vLLM's argument parser accepts ``--flag value``, ``--flag=value`` and underscores for
dashes, and so does this.

Invariants: only the flags below are read; a dataset the simulator does not model (hf, sonnet, custom, ...) is an
error, never a silent substitute; flags that change nothing in the load kvdoctor models (the server address, the
model name, result files, sampling parameters) are listed as ``ignored``, so a caller can say what was not read.
"""

from __future__ import annotations

import os

from kvdoctor.engine.sources import REDIRECT_RE, SHELL_OPS, split_command_line
from kvdoctor.errors import InputError

# bench flag -> (WorkloadOptions field, kind)
_READ = {
    "--dataset-name": ("dataset_name", str),
    "--num-prompts": ("num_prompts", int),
    "--request-rate": ("request_rate", str),
    "--burstiness": ("burstiness", float),
    "--max-concurrency": ("max_concurrency", int),
    "--random-input-len": ("random_input_len", int),
    "--random-output-len": ("random_output_len", int),
    "--random-range-ratio": ("random_range_ratio", float),
    "--random-prefix-len": ("random_prefix_len", int),
    "--ignore-eos": ("ignore_eos", bool),
    "--sharegpt-output-len": ("sharegpt_output_len", int),
    "--ramp-up-strategy": ("ramp_up_strategy", str),
    "--ramp-up-start-rps": ("ramp_up_start_rps", int),
    "--ramp-up-end-rps": ("ramp_up_end_rps", int),
    "--seed": ("seed", int),
}
# flags without a value (everything else takes one, or carries it after "=")
_FLAGS_NO_VALUE = frozenset({
    "--ignore-eos", "--save-result", "--save-detailed", "--append-result", "--trust-remote-code", "--disable-tqdm",
    "--profile", "--use-beam-search", "--no-stream", "--no-oversample", "--disable-shuffle", "--skip-chat-template",
    "--insecure", "--plot-timeline", "--plot-dataset-stats", "--skip-tokenizer-init", "--enable-multimodal-chat",
    "--custom-skip-chat-template", "--no-reranker",
})
_DATASETS = ("random", "sharegpt")


def _args_start(tokens: list[str]) -> int:
    """Index of the first bench argument: after ``vllm bench serve`` or ``...benchmark_serving.py``."""
    for i, t in enumerate(tokens):
        base = os.path.basename(t)
        if base == "vllm" and tokens[i + 1:i + 3] == ["bench", "serve"]:
            return i + 3
        if t == "bench" and tokens[i + 1:i + 2] == ["serve"] and i > 0 and "vllm" in tokens[i - 1]:
            return i + 2  # python -m vllm.entrypoints.cli.main bench serve
        if base in ("benchmark_serving.py", "benchmark_serving"):
            return i + 1
    raise InputError("--bench-cmd: not a `vllm bench serve` or `benchmark_serving.py` command line")


def parse_bench_cmd(text: str) -> tuple[dict, list[str]]:
    """(workload option values, flags not read). Values keep the option types of ``WorkloadOptions``."""
    try:
        tokens = split_command_line(text)
    except InputError as exc:
        raise InputError(f"--bench-cmd: {exc}") from None
    i = _args_start(tokens)
    out: dict = {}
    ignored: list[str] = []
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok in SHELL_OPS or REDIRECT_RE.match(tok):
            break  # the rest of a shell pipeline or a redirection: not the bench's
        if not tok.startswith("--"):
            continue  # a stray value of a flag already passed over
        name, eq, val = tok.partition("=")
        name = name.replace("_", "-")
        takes = name not in _FLAGS_NO_VALUE
        if takes and not eq:
            if i < len(tokens) and not tokens[i].startswith("--"):
                val = tokens[i]
                i += 1
            elif name in _READ and _READ[name][1] is not bool:
                raise InputError(f"--bench-cmd: {name} needs a value")
        if name not in _READ:
            ignored.append(name)
            continue
        field, kind = _READ[name]
        if kind is bool:
            out[field] = True
            continue
        try:
            out[field] = kind(val)
        except ValueError:
            raise InputError(f"--bench-cmd: {name} {val!r} is not a{'n integer' if kind is int else ' number'}") from None
    ds = out.get("dataset_name")
    if ds is not None:
        if ds not in _DATASETS:
            raise InputError(f"--bench-cmd: --dataset-name {ds}: kvdoctor models the random and sharegpt datasets "
                             "(give the lengths as --dataset-name random, or replay the requests with --trace)")
    # --dataset-path stays among the ignored: the bench's is the ShareGPT JSON itself, kvdoctor's a length table (the
    # shared ShareGPT statistics stand in; give --dataset-path to use the operator's own lengths)
    return out, ignored
