"""``vllm bench throughput`` and ``vllm bench latency``: the offline benchmarks (vLLM's ``LLM`` class in the bench's own
process, no API server) → :class:`OfflineResult`.

What they print (vLLM 0.33 ``vllm/benchmarks/throughput.py`` and ``latency.py``; the scripts
``benchmarks/benchmark_throughput.py`` / ``benchmark_latency.py`` before them printed the same lines):

* throughput: ``Throughput: 24.05 requests/s, 27701.23 total tokens/s, 3078.35 output tokens/s`` then
  ``Total num prompt tokens:  1024000`` and ``Total num output tokens:  128000``; before mid-2024 only
  ``Throughput: 5.23 requests/s, 2677.76 tokens/s`` (all tokens). ``--output-json`` saves ``elapsed_time,
  num_requests, total_num_tokens, requests_per_second, tokens_per_second``.
* latency: ``Avg latency: 1.234 seconds`` then ``10% percentile latency: ... seconds`` (10, 25, 50, 75, 90, 99);
  ``--output-json`` saves ``avg_latency, latencies, percentiles``.

The command (``vllm bench throughput ...``, ``python benchmark_throughput.py ...``) or the ``Namespace(...)`` the
scripts print at start, when the capture holds it, gives the run's workload (``command``): its own flags are split
from the engine's (:func:`split_args`), so the same line also configures the deployment (usage context "llm").

Invariant: an offline result is never a serving result (``BenchResult``): it has no TTFT, no API server and no
arrival process, so it is kept apart and never calibrates or diagnoses a server.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

# vLLM 0.33's own flags of each offline bench (benchmarks/throughput.py and latency.py add_cli_args, plus the random
# dataset's base flags throughput adds); everything else on the line is an engine flag (EngineArgs.add_cli_args).
# name -> takes a value
THROUGHPUT_FLAGS: dict[str, bool] = {
    "--backend": True, "--dataset-name": True, "--dataset-path": True, "--dataset": True, "--no-oversample": False,
    "--enable-multimodal-chat": False, "--custom-output-len": True, "--input-len": True, "--output-len": True,
    "--n": True, "--num-prompts": True, "--num-warmups": True, "--hf-max-batch-size": True,
    "--hf-enable-torch-compile": False, "--output-json": True, "--async-engine": False, "--prequeue-requests": False,
    "--disable-detokenize": False, "--lora-path": True, "--lora-assignment": True, "--prefix-len": True,
    "--hf-subset": True, "--hf-split": True, "--hf-name": True, "--profile": False,
    "--prefix-repetition-prefix-len": True, "--prefix-repetition-suffix-len": True,
    "--prefix-repetition-num-prefixes": True, "--prefix-repetition-output-len": True,
    "--asr-min-audio-len-sec": True, "--asr-max-audio-len-sec": True, "--random-input-len": True,
    "--random-output-len": True, "--random-range-ratio": True, "--random-prefix-len": True,
    "--random-batch-size": True, "--random-mm-base-items-per-request": True, "--random-mm-limit-mm-per-prompt": True,
    "--random-mm-num-mm-items-range-ratio": True, "--random-mm-bucket-config": True, "--no-reranker": False,
}
LATENCY_FLAGS: dict[str, bool] = {
    "--input-len": True, "--output-len": True, "--batch-size": True, "--n": True, "--use-beam-search": False,
    "--num-iters-warmup": True, "--num-iters": True, "--profile": False, "--output-json": True,
    "--disable-detokenize": False,
}
TOOL_FLAGS = {"throughput": THROUGHPUT_FLAGS, "latency": LATENCY_FLAGS}

# `vllm bench throughput`, `python -m vllm.entrypoints.cli.main bench latency`, `benchmarks/benchmark_throughput.py`
_COMMAND = re.compile(r"(?:^|[\s/;&|$#>])(?:vllm(?:\.entrypoints\.cli\.main)?\s+bench\s+(throughput|latency)|"
                      r"benchmark_(throughput|latency)(?:\.py)?)(?=\s|$)")
_THROUGHPUT = re.compile(r"\bThroughput:\s*(\d+(?:\.\d+)?)\s*requests/s,\s*(\d+(?:\.\d+)?)\s*(total\s+)?tokens/s"
                         r"(?:,\s*(\d+(?:\.\d+)?)\s*output tokens/s)?")
_TOTAL = re.compile(r"\bTotal num (prompt|output) tokens:\s*(\d+)")
_AVG_LATENCY = re.compile(r"\bAvg latency:\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*seconds")
_PCT_LATENCY = re.compile(r"\b(\d+)% percentile latency:\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*seconds")
_NAMESPACE = re.compile(r"\bNamespace\((.*)\)\s*$")
_NS_ITEM = re.compile(r"\b([a-z_][a-z0-9_]*)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\s]+)")
_LOOKS = re.compile(r"\bThroughput:\s*\d+(?:\.\d+)?\s*requests/s,|\bAvg latency:\s*\d")


@dataclass
class OfflineResult:
    """One offline run: ``tool`` "throughput" or "latency"; ``fields`` as vLLM names them in ``--output-json`` where it
    has a name (``requests_per_second``, ``tokens_per_second``, ``output_tokens_per_second``, ``total_prompt_tokens``,
    ``total_output_tokens``, ``num_requests``, ``elapsed_time``; ``avg_latency`` and ``latency_pNN`` in seconds);
    ``command``: the bench's own flags of the command or Namespace found before it (``--input-len`` -> "1024"), with
    ``engine_args`` the rest of that line; ``line``: 1-based line of the result (0: a JSON file)."""

    source: str
    tool: str
    fields: dict[str, float]
    command: dict[str, str] = field(default_factory=dict)
    engine_args: list[str] = field(default_factory=list)
    line: int = 0
    version: str | None = None  # "vLLM 0.11.0" where the capture names it
    # package versions the capture lists after this result (`pip list | grep torch`: "torch  2.9.1+rocm7.1.1"), up to
    # the next result: what two runs of one workload differ in (sweep 264 item 08)
    environment: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        f = self.fields
        if self.tool == "throughput":
            parts = [f"{f['requests_per_second']:.2f} requests/s"]
            if "output_tokens_per_second" in f:
                parts.append(f"{f['output_tokens_per_second']:.2f} output tokens/s")
            if "tokens_per_second" in f:
                parts.append(f"{f['tokens_per_second']:.2f} total tokens/s")
            if "total_prompt_tokens" in f and "total_output_tokens" in f:
                parts.append(f"{f['total_prompt_tokens']:.0f} prompt / {f['total_output_tokens']:.0f} output tokens")
            return ", ".join(parts)
        parts = [f"avg latency {f['avg_latency']:.3f} s"]
        if "latency_p50" in f:
            parts.append(f"p50 {f['latency_p50']:.3f} s")
        if "latency_p99" in f:
            parts.append(f"p99 {f['latency_p99']:.3f} s")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "tool": f"vllm bench {self.tool}", "fields": dict(self.fields),
                "command": dict(self.command), "engine_args": list(self.engine_args), "line": self.line or None,
                "vllm_version": self.version}


def offline_tool(text: str) -> str | None:
    """"throughput" / "latency" when ``text`` holds such a bench command, else None."""
    m = _COMMAND.search(text)
    return (m.group(1) or m.group(2)) if m else None


def split_args(tool: str, args: list[str]) -> tuple[dict[str, str], list[str]]:
    """The bench's own flags of an offline command's arguments (``{"--input-len": "1024", "--async-engine": ""}``,
    underscores read as dashes, as vLLM's parser does) and the engine's arguments left over, in their order."""
    own = TOOL_FLAGS[tool]
    bench: dict[str, str] = {}
    engine: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        name, eq, val = tok.partition("=")
        key = name.replace("_", "-") if name.startswith("--") else name
        if key not in own:
            engine.append(tok)
            continue
        if own[key] and not eq:
            # a value, a negative number included ("--batch-size -3": argparse takes it as the value)
            if i < len(args) and (not args[i].startswith("-") or re.fullmatch(r"-\d+(?:\.\d*)?", args[i])):
                val = args[i]
                i += 1
        bench[key] = val
    return bench, engine


_SHELL_OPS = frozenset({"|", "||", "&&", ";", "&", "|&"})
_REDIRECT = re.compile(r"^(?:\d?>>?|&>>?|<|\d?>&\d)")


def command_args(text: str) -> tuple[str, list[str]] | None:
    """(tool, the arguments after the command) of the first offline bench command in ``text`` (continuation lines
    joined; the shell's tail after a pipe, ``&&`` or a redirection cut), or None."""
    import shlex

    joined = re.sub(r"\\[ \t]*\r?\n", " ", text.replace("\r\n", "\n"))
    for ln in joined.split("\n"):
        m = _COMMAND.search(ln)
        if m is None:
            continue
        tail = ln[m.end():]
        try:
            words = shlex.split(tail, comments=True)
        except ValueError:  # unbalanced quotes in a pasted line: its words as they stand
            words = tail.split()
        rest = []
        for t in words:
            if t in _SHELL_OPS or _REDIRECT.match(t):
                break
            rest.append(t)
        return (m.group(1) or m.group(2)), rest
    return None


def _namespace_command(line: str) -> tuple[str, dict[str, str], list[str]] | None:
    """The bench flags of ``Namespace(...)`` as the scripts print it at start (only the offline ones: it names
    ``bench_type``, or holds ``batch_size`` and ``num_iters`` (latency) or ``num_prompts`` and ``backend`` without a
    ``request_rate`` (throughput))."""
    m = _NAMESPACE.search(line)
    if not m:
        return None
    items = {k: v for k, v in _NS_ITEM.findall(m.group(1))}
    tool = None
    bt = items.get("bench_type", "").strip("'\"")
    if bt in ("throughput", "latency"):
        tool = bt
    elif "request_rate" in items:
        return None  # vllm bench serve's
    elif "num_iters" in items and "batch_size" in items:
        tool = "latency"
    elif "num_prompts" in items and "backend" in items:
        tool = "throughput"
    if tool is None:
        return None
    bench: dict[str, str] = {}
    for name in TOOL_FLAGS[tool]:
        v = items.get(name[2:].replace("-", "_"))
        if v is None or v == "None":
            continue
        v = v.strip("'\"")
        if v in ("False", ""):
            continue
        bench[name] = "" if v == "True" else v
    engine: list[str] = []
    for key in _NS_ENGINE:
        v = items.get(key)
        if v is None or v == "None":
            continue
        v = v.strip("'\"")
        flag = "--" + key.replace("_", "-")
        if v in ("True", "False"):
            if v == "True":
                engine.append(flag)
            elif key not in _NS_ENGINE_OFF_DEFAULT:  # an explicit off (vLLM 0.33 defaults it on)
                engine.append("--no-" + flag[2:])
            continue
        engine += [flag, v]
    return tool, bench, engine


# the engine settings a Namespace(...) line carries that change the deployment kvdoctor models (EngineArgs' names)
_NS_ENGINE = ("model", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs",
              "max_num_batched_tokens", "gpu_memory_utilization", "enforce_eager", "quantization", "dtype",
              "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill", "block_size", "num_gpu_blocks_override")
_NS_ENGINE_OFF_DEFAULT = ("enforce_eager",)  # a flag whose False is the default: only True is written


def parse_offline_text(text: str, source: str) -> list[OfflineResult]:
    """Every offline result printed in ``text``, each with the command (or Namespace) last seen before it of its own
    tool. A ``Throughput:`` line without ``requests/s, ... tokens/s`` (the 2023 serving summary) is not one."""
    out: list[OfflineResult] = []
    last: dict[str, tuple[dict[str, str], list[str]]] = {}
    version = None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    cur: OfflineResult | None = None
    while i < len(lines):
        ln = lines[i]
        i += 1
        v = re.search(r"\bvLLM(?: API server)? version:?\s*v?(\d+\.\d+\.\d+\S*)", ln)
        if v:
            version = v.group(1)
        ns = _namespace_command(ln)
        if ns is not None:
            last[ns[0]] = (ns[1], ns[2])
            continue
        if offline_tool(ln) and not _LOOKS.search(ln):
            # a command, possibly over continuation lines
            block = [ln]
            while block[-1].rstrip().endswith("\\") and i < len(lines):
                block.append(lines[i])
                i += 1
            got = command_args("\n".join(block))
            if got is not None:
                last[got[0]] = split_args(*got)
            continue
        m = _THROUGHPUT.search(ln)
        if m:
            f: dict[str, float] = {"requests_per_second": float(m.group(1))}
            if m.group(4) is not None or m.group(3):
                f["tokens_per_second"] = float(m.group(2))
                if m.group(4) is not None:
                    f["output_tokens_per_second"] = float(m.group(4))
            else:  # the older line: "tokens/s" are all tokens (prompt + output)
                f["tokens_per_second"] = float(m.group(2))
            cur = _result("throughput", f, last, source, i, version)
            out.append(cur)
            continue
        t = _TOTAL.search(ln)
        if t and cur is not None and cur.tool == "throughput":
            cur.fields[f"total_{t.group(1)}_tokens"] = float(t.group(2))
            continue
        m = _AVG_LATENCY.search(ln)
        if m:
            cur = _result("latency", {"avg_latency": float(m.group(1))}, last, source, i, version)
            out.append(cur)
            continue
        p = _PCT_LATENCY.search(ln)
        if p and cur is not None and cur.tool == "latency":
            cur.fields[f"latency_p{int(p.group(1))}"] = float(p.group(2))
    return out


def _result(tool, fields, last, source, line, version) -> OfflineResult:
    bench, engine = last.get(tool, ({}, []))
    r = OfflineResult(source=source, tool=tool, fields=fields, command=dict(bench), engine_args=list(engine),
                      line=line, version=version)
    if tool == "throughput" and "requests_per_second" in fields and "--num-prompts" in bench:
        try:
            r.fields.setdefault("num_requests", float(bench["--num-prompts"]))
        except ValueError:
            pass
    return r


def looks_like_offline_json(doc: Any) -> str | None:
    """"throughput" / "latency" for a document ``--output-json`` of an offline bench saved, else None."""
    if not isinstance(doc, dict):
        return None
    if "requests_per_second" in doc and "elapsed_time" in doc and "num_requests" in doc:
        return "throughput"
    if "avg_latency" in doc and ("latencies" in doc or "percentiles" in doc):
        return "latency"
    return None


def parse_offline_json(doc: dict, source: str) -> OfflineResult | None:
    tool = looks_like_offline_json(doc)
    if tool is None:
        return None
    f: dict[str, float] = {}
    if tool == "throughput":
        for k in ("requests_per_second", "tokens_per_second", "elapsed_time", "num_requests", "total_num_tokens"):
            v = _num(doc.get(k))
            if v is not None:
                f[k] = v
        if "requests_per_second" not in f:
            return None
    else:
        v = _num(doc.get("avg_latency"))
        if v is None:
            return None
        f["avg_latency"] = v
        for k, val in (doc.get("percentiles") or {}).items():
            x = _num(val)
            if x is not None and str(k).isdigit():
                f[f"latency_p{int(k)}"] = x
    return OfflineResult(source=source, tool=tool, fields=f)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def looks_like_offline_text(head: str) -> bool:
    return bool(_LOOKS.search(head)) and bool(_THROUGHPUT.search(head) or _AVG_LATENCY.search(head))

