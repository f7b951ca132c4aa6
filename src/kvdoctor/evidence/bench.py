"""``vllm bench serve`` / ``benchmark_serving.py`` results → :class:`BenchResult`.

* JSON saved with ``--save-result`` (``vllm/benchmarks/serve.py``: ``duration, completed, failed,
  total_input_tokens, ..., mean_ttft_ms, p99_itl_ms, ...``) and, with ``--save-detailed``, the
  per-request arrays ``input_lens, output_lens, ttfts, itls, latencies, start_times, errors`` →
  one :class:`RequestRecord` per request.
* The printed ``Serving Benchmark Result`` block (every version: with/without goodput, P50/P90/P95,
  failed requests, peak throughput/concurrency) and the legacy (2023-early 2024) summary
  (``Total time: / Throughput: / Average latency: ...``).

Field names are normalised to the JSON's (``fields``); the printed labels map onto them, so a
printed block and its JSON give the same keys. Times in ``*_ms`` fields stay milliseconds as vLLM
prints them; legacy seconds are converted to those names with ``_ms``.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.startup import SERVE_COMMAND
from kvdoctor.evidence.model import BenchResult, RequestRecord
from kvdoctor.units import as_float

_LABELS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "output token throughput (tok/s)": "output_throughput",
    # benchmark_serving.py of 2024 printed the prompt side too (sweep 193 item 01); its JSON named it so
    "input token throughput (tok/s)": "input_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "traffic request rate": "request_rate",
    "burstiness factor": "burstiness",
    "maximum request concurrency": "max_concurrency",
    # vLLM >= 0.10.1 prints it inside the block whenever --request-rate is finite (benchmarks/serve.py)
    "request rate configured (rps)": "request_rate",
    # sglang's bench_serving, whose block imitates vLLM's (its client is also pointed at vLLM servers)
    "max request concurrency": "max_concurrency",
    # the block's "Speculative Decoding" section (vllm bench serve against a server that drafts), as its JSON names them
    "acceptance rate (%)": "spec_decode_acceptance_rate",
    "acceptance length": "spec_decode_acceptance_length",
    "drafts": "spec_decode_num_drafts",
    "draft tokens": "spec_decode_draft_tokens",
    "accepted tokens": "spec_decode_accepted_tokens",
}
_PRE_BLOCK = ("request_rate", "burstiness", "max_concurrency")
# A paste that starts below the header (a ticket quotes the figures only) opens its block at the first line every
# version prints right under it; a headless block is kept only with HEADLESS_MIN of the block's own figures, so that
# prose ("Successful requests: 5") is not a run.
_HEADLESS_OPENERS = ("completed", "duration")
HEADLESS_MIN = 4
_HEADLESS_LABELS = re.compile(r"(Successful requests|Benchmark duration \(s\)|Output token throughput \(tok/s\)|"
                              r"Request throughput \(req/s\)|Mean TTFT \(ms\)|Mean TPOT \(ms\)):\s+\d")
# values may carry thousands separators where a person re-typed the block ("Mean TTFT (ms): 2,352"), and a mark the
# person added after the value ("27.44             <========" in a 2026 ticket); a second number is not a mark (two
# runs side by side are not one run's figure)
_STAT_LINE = re.compile(r"^(Mean|Median|Std|P\d+(?:\.\d+)?) (TTFT|TPOT|ITL|E2EL) \(ms\):\s+(-?\d[\d,]*(?:\.\d+)?|nan|inf)"
                        r"(?:\s+[^\d\s.+-].*)?\s*$", re.I)
# Two or more runs printed side by side, one column each under a line naming them ("PR   Main" in a pull request's
# comparison, sweep 220 item 03): the figures after the first are the other columns' runs
_MORE_COLS = re.compile(r"((?:\s+-?\d[\d,]*(?:\.\d+)?)+)\s*$")
_STAT_COLS = re.compile(r"^(Mean|Median|Std|P\d+(?:\.\d+)?) (TTFT|TPOT|ITL|E2EL) \(ms\):\s+(-?\d[\d,]*(?:\.\d+)?)"
                        r"((?:\s+-?\d[\d,]*(?:\.\d+)?)+)\s*$", re.I)
_COL_NAMES = re.compile(r"^[\w.#+-]+(?:\s{2,}[\w.#+-]+)+$")
# (the value ends at a non-word character, a sentence's full stop included: "Successful requests: 100.")
_KV_LINE = re.compile(r"^([A-Za-z][A-Za-z ()/.%-]*?):\s+(-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?|inf|None)(?!\w)(?!\.\d)")
# A block whose line breaks were lost when it was pasted (a web form, a chat) arrives as one line: it is cut back into
# lines before each of the block's own labels and rules.
_COLLAPSED_CUT = re.compile(
    r"\s+(?=(?:Successful requests|Failed requests|Benchmark duration|Total input tokens|Total generated tokens|"
    r"Request throughput|Request goodput|Output token throughput|Peak output token throughput|Peak concurrent requests|"
    r"Total Token throughput|Traffic request rate|Burstiness factor|Maximum request concurrency|Request rate configured|"
    r"Input token throughput|(?:Mean|Median|Std|P\d+(?:\.\d+)?) (?:TTFT|TPOT|ITL|E2EL))(?: \([^)]*\))?:|={5,}|-{5,})")
_LEGACY = {
    "total time": ("duration", 1.0, r"([\d.]+) s"),
    "throughput": ("request_throughput", 1.0, r"([\d.]+) requests/s"),
    "average latency": ("mean_e2el_ms", 1000.0, r"([\d.]+) s"),
    "average latency per token": ("mean_latency_per_token_ms", 1000.0, r"([\d.]+) s"),
    "average latency per output token": ("mean_latency_per_output_token_ms", 1000.0, r"([\d.]+) s"),
}
_LEGACY_RX = re.compile(
    r"(Total time|Throughput|Average latency per output token|Average latency per token|Average latency):\s*"
    r"(\d+(?:\.\d+)?|\.\d+)\s*(s|requests/s)\b"
)
BLOCK_HEADER = "Serving Benchmark Result"
# what a capture puts before each line: a k8s/CI ISO time, a docker-compose "service | ", a markdown quote or a shell
# comment ("> ", "# "), or a Ray / SkyPilot task's "(name, pid=N) " (Michaelvll/llm-ie-benchmarks' logs). The block's
# labels are read after it.
_LINE_PREFIX = re.compile(r"^(?:\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\s+)?(?:[\w.-]+\s+\|\s?)?(?:\([^()]*\bpid=\d+[^()]*\)\s?)?"
                          # a harness that logs the bench's lines through Python's logging: pytest's "INFO     root:
                          # vllm_bench.py:126 " (sweep 208 item 09, a CI job) or basicConfig's "INFO:root:"
                          r"(?:(?:DEBUG|INFO|WARNING)\s+[\w.]+:[\w.-]+:\d+\s+|(?:DEBUG|INFO|WARNING):[\w.]+:)?"
                          r"(?:[>#]+\s?)*")
_RAMP_OR_TRACE = re.compile(r"Traffic ramp-up strategy:|Self timing is set")
# The command a capture shows before its block (a ticket's paste: "$ vllm bench serve --model ... \" and its
# continuation lines), or the Namespace(...) the bench prints at start: the send options of the run that follows, where
# the bench printed no 'Traffic request rate:' line (or it was not kept).
# A command, not prose that names one ("we ran vllm bench serve (0.11) at 4 req/s"): at most a shell prompt (or a
# loop's "do", a "&&"), a `docker exec ... CONTAINER`, env assignments, a launcher and a path before it, and flags after.
_BENCH_CMD = re.compile(r"^\s*(?:.*?(?:[$#>;]|&&|\bdo|\bthen)\s+)?(?:(?:docker|podman|kubectl)\s+exec\s+.*?\s+)?"
                        r"(?:[A-Za-z_]\w*=\S*\s+)*(?:(?:sudo|nohup|time|uv\s+run|python[\d.]*)\s+)*"
                        r"(?:\S*/)?(?:vllm\s+bench\s+serve|benchmark_serving\.py)\s+(--.*)$")
_NAMESPACE = re.compile(r"\bNamespace\(.*\brequest_rate=")
_NS_ARG = re.compile(r"\b(request_rate|max_concurrency|burstiness|ramp_up_strategy)=('[^']*'|[^,)\s]+)")
# flag -> field (vLLM's parser takes --request_rate for --request-rate too, and a unique prefix: evidence.benchflags)
_CMD_FLAGS = {"--request-rate": "request_rate", "--max-concurrency": "max_concurrency", "--burstiness": "burstiness",
              "--num-prompts": "num_prompts"}


def bench_command_options(line: str) -> tuple[dict[str, float], bool, dict[str, str]] | None:
    """The send options of a ``vllm bench serve`` / ``benchmark_serving.py`` command line, or of the ``Namespace(...)``
    the bench prints at start: ``(fields, ramp, provenance)``. ``fields`` holds ``request_rate`` (vLLM's default inf
    where the command gives none), ``max_concurrency`` and ``burstiness`` where given as numbers; an option given as a
    shell variable (``--request-rate $RATE``) is unknown and left out, and so is the default rate then. ``ramp``: a
    ramp-up run (no single rate). ``provenance``: where each field came from, in words. None: not such a line."""
    ns = _NAMESPACE.search(line)
    if ns:
        args = {k: v.strip("'") for k, v in _NS_ARG.findall(line)}
        ramp = args.get("ramp_up_strategy", "None") not in ("None", "")
        out = {}
        for k in ("request_rate", "max_concurrency", "burstiness", "num_prompts"):
            v = args.get(k)
            f = float("inf") if v == "inf" else (None if v in (None, "None") else as_float(v))
            if f is not None and not math.isnan(f):
                out[k] = f
        return out, ramp, {k: "from the bench's Namespace(...) line" for k in out}
    m = _BENCH_CMD.search(line)
    if not m:
        return None
    import shlex

    try:
        words = shlex.split(m.group(1), comments=True)
    except ValueError:  # unbalanced quotes in a pasted line: its words as they stand
        words = m.group(1).split()
    from kvdoctor.evidence.benchflags import FLAGS_NO_VALUE, resolve_flag

    out: dict[str, float] = {}
    unknown, ramp = set(), False
    i = 0
    while i < len(words):
        flag, eq, val = words[i].partition("=")
        i += 1
        if not flag.startswith("--"):
            continue  # a value, or a word of something after the command
        try:  # as vLLM's parser reads it: underscores for dashes, a unique prefix for the flag
            flag, _ = resolve_flag(flag.replace("_", "-"))
        except InputError:  # an ambiguous abbreviation: vLLM would refuse it; what it might have set is unknown
            unknown.update(v for k, v in _CMD_FLAGS.items() if k.startswith(flag.replace("_", "-")))
            continue
        if flag in FLAGS_NO_VALUE:
            continue
        if not eq and i < len(words) and not words[i].startswith("--"):
            val, i = words[i], i + 1
        if flag == "--ramp-up-strategy":
            ramp = True
        key = _CMD_FLAGS.get(flag)
        if key is None:
            continue
        f = float("inf") if val.lower() == "inf" else as_float(val)
        if f is None or math.isnan(f):
            unknown.add(key)
        else:
            out[key] = f
    prov = {k: "from the command line before it" for k in out}
    if "request_rate" not in out and "request_rate" not in unknown and not ramp:
        out["request_rate"] = float("inf")  # the bench's default --request-rate
        prov["request_rate"] = "from the command line before it (no --request-rate: the bench's default, inf)"
    if "num_prompts" not in out and "num_prompts" not in unknown:
        # the bench sends --num-prompts requests, 1000 by default (oversampling a dataset that has fewer): a block
        # of 987 successes under a command without the flag lost 13 (sweep 231 item 05)
        out["num_prompts"] = 1000.0
        prov["num_prompts"] = "from the command line before it (no --num-prompts: the bench's default, 1000)"
    return out, ramp, prov


# the block's figures vLLM prints as integers ("{:<10}"); every other figure is "{:<10.2f}"
_INT_FIGURES = ("completed", "failed", "total_input_tokens", "total_output_tokens", "max_concurrency",
                "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")


def _cut_figure(line: str) -> bool:
    """A float figure without its decimals on a text's last line: the paste ended inside the number ("Median ITL
    (ms): 1" where vLLM printed 171.92). A whole number elsewhere is a person's re-typing and is read."""
    line = line[_LINE_PREFIX.match(line).end():].strip()
    m = _STAT_LINE.match(line)
    if m:
        val = m.group(3)
    else:
        k = _KV_LINE.match(line)
        if not k or _LABELS.get(k.group(1).strip().lower()) in (None, *_INT_FIGURES):
            return False
        val = k.group(2)
    return val[:1].isdigit() and "." not in val and "," not in val and line.endswith(val)


def join_continuations(lines):
    """A shell command's backslash continuations as one line (a pasted ``vllm bench serve`` over several lines)."""
    held = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        yield held + line
        held = ""
    if held:
        yield held


_BOLD_FIGURE = re.compile(r"\*\*([^*\n]+?)\*\*")


def parse_text(text: str, source: str = "") -> list[BenchResult]:
    """Every result block in a text (a terminal capture may hold several runs)."""
    results: list[BenchResult] = []
    cur: dict[str, float] | None = None
    pre: dict[str, float] = {}  # rate/burstiness/concurrency lines printed just before a block
    pre_ramp = cur_ramp = False  # a ramp-up or timed-trace run: it prints no rate line, and is not a burst at t=0
    # the options of the bench command (or Namespace line) shown before the next block, and where they came from;
    # the lines the bench itself prints before the block take precedence
    cmd: tuple[dict[str, float], bool, dict[str, str]] | None = None
    cur_cmd: tuple[dict[str, float], bool, dict[str, str]] | None = None
    legacy: dict[str, float] | None = None
    legacies: list[dict[str, float]] = []
    # the server command pasted before the next block (a tuning write-up: each run after its own `vllm serve`), and
    # whether it is new since the block before (else the same server ran on)
    serve, serve_new, cur_serve = None, False, (None, False)
    headless = False  # the block in progress was opened by its first figure, not by its header
    alts: list[dict[str, float]] = []  # the block's other columns, runs printed beside it (_MORE_COLS)
    names: list[str] = []  # the columns' names, from the line under the header

    def close():
        nonlocal cur, headless, alts, names
        if cur and headless and len(cur) < HEADLESS_MIN:
            cur = None  # a stray figure in prose, not a run
        if cur:
            got = _block_results(cur, source, headless, cur_cmd, cur_ramp, alts, names)
            if cur_serve[0] is not None and not alts:
                got[0].raw["serve_command"], got[0].raw["serve_new"] = cur_serve
            results.extend(got)
        cur, headless, alts, names = None, False, [], []

    if "**" in text:
        # a figure a person set in Markdown bold ("**Benchmark duration (s):   118.85**": sweep 251 item 05)
        text = _BOLD_FIGURE.sub(r"\1", text)
    lines = list(join_continuations(_uncollapse(text)))
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        if i == last and cur is not None and _cut_figure(line):
            cur.setdefault("_cut", line)  # noted on the result by close(), never a figure
            continue
        if BLOCK_HEADER in line:
            close()
            cur, cur_ramp, cur_cmd = dict(pre), pre_ramp or bool(cmd and cmd[1]), cmd
            pre, pre_ramp, cmd = {}, False, None
            cur_serve, serve_new = (serve, serve_new), False
            continue
        if "serve" in line and "bench" not in line and SERVE_COMMAND.match(line):
            serve, serve_new = line[:2000], True
            continue
        opts = bench_command_options(line) if ("bench" in line or "Namespace(" in line) else None
        if opts is not None:
            if cur is not None and ("duration" in cur or "output_throughput" in cur):
                close()  # the next run's command after a block whose closing rule was cut
            cmd = opts
            continue
        line = line[_LINE_PREFIX.match(line).end():].strip()
        if not line:
            continue
        if (bar := _BENCH_BAR.match(line)) is not None:
            pre["_bar"] = float(bar.group(2))  # the run's own count (_BENCH_BAR)
            continue
        if _RAMP_OR_TRACE.search(line):
            pre_ramp = True
            continue
        m = _STAT_LINE.match(line)
        if m and cur is not None:
            stat, metric, val = m.groups()
            stat = stat.lower()
            cur[f"{stat}_{metric.lower()}_ms"] = float(val.replace(",", ""))
            continue
        if cur is not None and (mc := _STAT_COLS.match(line)) is not None:
            _stat_cols(mc, cur, alts)
            continue
        if cur is not None and not cur and not names and _COL_NAMES.match(line):
            names = line.split()  # the columns' names under the header ("PR   Main")
            continue
        if _LEGACY_RX.search(line):
            legacy = _legacy_line(line, legacy, legacies)
            continue
        k = _KV_LINE.match(line)
        if k:
            label = k.group(1).strip().lower()
            key = _LABELS.get(label)
            if key is None:
                continue
            val = k.group(2)
            f = float("inf") if val == "inf" else (None if val == "None" else float(val.replace(",", "")))
            if f is None:
                continue
            if key in _HEADLESS_OPENERS and legacy is None and (cur is None or (headless and key in cur)):
                close()  # a block pasted without its header (or the next such block of a sweep)
                cur, cur_ramp, cur_cmd, headless = dict(pre), pre_ramp or bool(cmd and cmd[1]), cmd, True
                pre, pre_ramp, cmd = {}, False, None
                cur_serve, serve_new = (serve, serve_new), False
            if cur is not None and key not in _PRE_BLOCK:
                cur[key] = f
                if (mc := _MORE_COLS.match(line, k.end())) is not None:
                    for j, v in enumerate(mc.group(1).split()):
                        _column(alts, j, key, v)
            elif cur is not None and ((("duration" in cur or "output_throughput" in cur)
                                       and (key in cur or label != "request rate configured (rps)"))
                                      # the bench prints 'Traffic request rate:' before a run, never inside its block:
                                      # after a block cut above its duration it opens the next run (sweep 208 item 06)
                                      or (label == "traffic request rate" and "completed" in cur)):
                # the next run's header lines after a block whose closing rule was cut: a new run. (vLLM >= 0.10
                # prints 'Maximum request concurrency:' and the configured rate inside the block, before its duration:
                # the same run.)
                close()
                pre[key] = f
            elif cur is not None:
                cur[key] = f
            else:
                pre[key] = f
        elif line.startswith("=====") and cur is not None and len(cur) > 3 and set(line) == {"="}:
            close()
    close()
    results += [BenchResult(source=source, fields=lg, raw={"format": "legacy"}) for lg in legacies if lg]
    return results


def _legacy_line(line: str, legacy: dict[str, float] | None, legacies: list[dict[str, float]]) -> dict | None:
    """A 2023 benchmark_serving.py summary line's figures into ``legacy`` (each "Total time" opens a run of its own,
    appended to ``legacies``); returns the run in progress."""
    for lm in _LEGACY_RX.finditer(line):
        label = lm.group(1).lower()
        if label == "total time":  # each 2023 summary opens with it: one run each
            legacy = {}
            legacies.append(legacy)
        elif legacy is None or (label == "throughput" and "tokens/s" in line):
            continue  # benchmark_throughput.py's offline 'Throughput: X requests/s, Y tokens/s'
        name, mult, _ = _LEGACY[label]
        legacy[name] = float(lm.group(2)) * mult
    return legacy


def _stat_cols(mc: re.Match, cur: dict[str, float], alts: list[dict[str, float]]) -> None:
    """A latency line with more runs' figures beside it (runs printed side by side): each into its column."""
    stat, metric, val, more = mc.groups()
    key = f"{stat.lower()}_{metric.lower()}_ms"
    cur[key] = float(val.replace(",", ""))
    for j, v in enumerate(more.split()):
        _column(alts, j, key, v)


def _column(alts: list[dict[str, float]], j: int, key: str, val: str) -> None:
    """The figure ``key`` of the run printed in the block's column j + 2."""
    while len(alts) <= j:
        alts.append({})
    alts[j][key] = float(val.replace(",", ""))


def _block_results(cur: dict[str, float], source: str, headless: bool, cur_cmd: tuple | None, cur_ramp: bool,
                   alts: list[dict[str, float]], names: list[str]) -> list[BenchResult]:
    """One printed block's run (its provenance in ``raw``), and one more per column printed beside it."""
    raw: dict[str, Any] = {"format": "block"}
    _unmeasured(cur, raw)
    if "_cut" in cur:
        raw["cut"] = (f"{cur.pop('_cut')!r}: the text's last line, whose value lacks the two decimals vLLM "
                      "prints: cut where the paste ends, not read")
    if headless:
        raw["header"] = "missing: the block was read from its first figure ('Successful requests:')"
    if (bar := cur.pop("_bar", None)) is not None:
        said = cur_cmd[0].get("num_prompts") if cur_cmd is not None else None
        cur["num_prompts"] = bar
        raw["num_prompts"] = (f"{BAR_COUNT} ({bar:,.0f}/{bar:,.0f} requests)"
                              + (f"; the command shown asks for {said:,.0f}: not this run's" if said and said != bar
                                 else ""))
    if cur_cmd is not None:
        for k, v in cur_cmd[0].items():
            if k not in cur:
                cur[k], raw[k] = v, cur_cmd[2][k]
    # vLLM >= 0.11.1 prints 'Failed requests:' and, since 0.10.1, 'Request rate configured (RPS):' whenever the
    # rate is finite: a block of that era without it (and without a ramp-up or a trace's own timing) ran at inf
    if "failed" in cur and "request_rate" not in cur and not cur_ramp:
        cur["request_rate"] = float("inf")
        raw["request_rate"] = "inferred: the block prints no 'Request rate configured (RPS):' line, so inf"
    if alts:
        raw["column"] = f"{names[0] if names else 'the first'} (column 1 of {len(alts) + 1}: runs printed side by side)"
    out = [BenchResult(source=source, fields=cur, raw=raw)]
    for j, alt in enumerate(alts):
        shared = {k: v for k, v in cur.items() if k in _PRE_BLOCK and k not in alt}
        name = names[j + 1] if j + 1 < len(names) else f"column {j + 2}"
        out.append(BenchResult(source=source, fields={**shared, **alt}, raw={
            "format": "block", "column": f"{name} (column {j + 2} of {len(alts) + 1}: runs printed side by side)"}))
    return out


# "100%|██████████| 4096/4096 [01:27<00:00, 46.61it/s]": tqdm's bar with no description before it, the bench's own over
# the requests it sends: its total is the run's count, whatever a command shown beside it says (sweep 270 items 02, 09:
# 4096/4096 with 979 completed; 100/100 under a command of --num-prompts 500)
BAR_COUNT = "the bench's progress bar"  # raw["num_prompts"]'s provenance where the bar gave the count
_BENCH_BAR = re.compile(r"^\d{1,3}%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")


def _uncollapse(text: str):
    """The text's lines; a line that holds a whole block (its line breaks lost) as the block's own lines."""
    for line in text.splitlines():
        if len(line) > 200 and BLOCK_HEADER in line and len(_COLLAPSED_CUT.findall(line)) >= 3:
            yield from _COLLAPSED_CUT.sub("\n", line).split("\n")
        else:
            yield line


def parse_json(doc: dict[str, Any], source: str = "") -> BenchResult:
    fields: dict[str, float] = {}
    for k, v in doc.items():
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            f = float("inf")  # how vLLM writes the default --request-rate
        else:
            f = None if isinstance(v, (list, dict, str)) else as_float(v)
        if f is not None and not math.isnan(f):
            fields[k.rstrip(":")] = f  # benchmark_serving.py of 2025 wrote "request_goodput:"
    reqs: list[RequestRecord] = []
    ttfts = doc.get("ttfts")
    if isinstance(ttfts, list) and ttfts:
        import numpy as np

        def col(name: str) -> list:
            v = doc.get(name)
            return v if isinstance(v, list) and len(v) == len(ttfts) else [None] * len(ttfts)

        ins, outs, itls, lats, starts, errs = (col(n) for n in
                                               ("input_lens", "output_lens", "itls", "latencies", "start_times", "errors"))
        squeue = col("server_queue_times")
        for i in range(len(ttfts)):
            failed = bool(errs[i])
            itl = itls[i]
            reqs.append(RequestRecord(
                request_id=str(i),
                arrival_s=float(starts[i]) if as_float(starts[i]) is not None else float("nan"),
                prompt_tokens=int(ins[i]) if as_float(ins[i]) is not None else None,
                output_tokens=None if failed or as_float(outs[i]) is None else int(outs[i]),
                ttft_s=None if failed or as_float(ttfts[i]) is None else float(ttfts[i]),
                e2e_s=None if failed or as_float(lats[i]) is None else float(lats[i]),
                queue_s=as_float(squeue[i]),
                itl_s=np.asarray(itl, dtype=np.float64) if isinstance(itl, list) and not failed else None,
            ))
    raw = {k: v for k, v in doc.items() if not isinstance(v, list)}
    raw["format"] = "json"
    _unmeasured(fields, raw)
    return BenchResult(source=source, fields=fields, requests=reqs, raw=raw)


# what a run measures only from completed requests (latencies, throughputs); vLLM's bench writes 0.0 for them when
# none completed
_MEASURED = ("_ms", "throughput", "goodput", "tokens_per_s", "concurrent_requests")


def _unmeasured(fields: dict[str, float], raw: dict[str, Any]) -> None:
    """A run with no completed request: its latency and throughput figures are the bench's zeros, left out (the
    counts stay) and said in ``raw["unmeasured"]``."""
    if fields.get("completed") != 0:
        return
    gone = [k for k in fields if k.endswith(_MEASURED)]
    for k in gone:
        del fields[k]
    if gone:
        raw["unmeasured"] = (f"0 requests completed ({fields.get('failed', 0):g} failed): {len(gone)} latency and "
                             "throughput figures are the bench's zeros, not read")


def decode_capture(data: bytes) -> str:
    """Text of a saved result or capture: UTF-8 (a BOM dropped), or UTF-16 with its BOM (Windows PowerShell's `>`)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data[: len(data) - len(data) % 2].decode("utf-16", "replace")  # a file's head may end mid-unit
    return data.decode("utf-8-sig", "replace")


def json_documents(text: str) -> list:
    """The JSON documents of a result file: one object, a list of them, or one per line (``--append-result``)."""
    s = text.lstrip()
    try:
        doc = json.loads(s)
    except RecursionError:
        raise InputError("JSON nested too deeply to read") from None
    except json.JSONDecodeError:
        docs = []
        for line in s.splitlines():
            try:
                docs.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError):
                continue
        return docs
    return doc if isinstance(doc, list) else [doc]


EMBEDDED_MAX_STARTS = 4096  # '{' positions tried in one text: a capture is small, a log is not scanned this way


def embedded_json_results(text: str) -> list[dict]:
    """Saved results pasted inside prose or another tool's record (a report's inline code, a harness's JSON that nests
    ``--save-result``'s object, a post cut before its end): every complete JSON object in the text that is a result,
    or holds one at any depth. An object cut short is skipped; the results inside it that are whole are still found."""
    from kvdoctor.safeio import json_in_text

    found: list[dict] = []

    def take(doc: Any) -> bool:
        hits = _bench_objects(doc)
        found.extend(hits)
        return bool(hits)

    def braces():
        i = text.find("{")
        while i >= 0:
            yield i
            i = text.find("{", i + 1)

    json_in_text(text, braces(), take, max_tries=EMBEDDED_MAX_STARTS)
    return found


def _bench_objects(doc: Any, depth: int = 0) -> list[dict]:
    if depth > 8:
        return []
    if looks_like_bench_json(doc):
        return [doc]
    kids = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else ()
    return [hit for kid in kids for hit in _bench_objects(kid, depth + 1)]


# one top-level "key": scalar line of a saved result (vLLM writes it with json.dump(indent=4) in some harnesses, flat
# one-line objects otherwise: only the indented form can be salvaged line by line)
# a JSON scalar: a number (Python's json also writes Infinity / NaN), a string (bounded where it may run on), a literal
def _scalar(string_max: str = "*") -> str:
    return (r'-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|Infinity|NaN)|"(?:[^"\\]|\\.)' + string_max
            + r'"|null|true|false')


_SCALAR_LINE = re.compile(r'^(?P<ind>[ \t]*)"(?P<k>[^"\\]{1,80})"\s*:\s*(?P<v>' + _scalar() + r')\s*,?\s*$', re.M)
_SCALAR_PAIR = re.compile(r'"(?P<k>[^"\\]{1,80})"\s*:\s*(?P<v>' + _scalar("{0,200}") + r')\s*(?=[,}\n])')
_RESULT_KEYS = frozenset((
    "date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests"))
_METRIC_KEY = re.compile(r"^(?:mean|median|std|p\d+(?:\.\d+)?)_(?:ttft|tpot|itl|e2el)_ms$")


_CUT = object()  # a value the cut left unreadable


def _scalar_value(text: str) -> Any:
    """One scalar of a cut file, or ``_CUT`` where the cut left it unreadable (a number cut to "1e", a string's
    escape cut in half)."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return _CUT


def salvage_result(text: str) -> tuple[dict[str, Any], str] | None:
    """A saved result that is not valid JSON (a bench killed while writing, a copy cut short, a file with a part cut
    out): its top-level ``"key": scalar`` lines, at the indentation of its ``completed`` / ``duration`` line, as far as
    they parse, with a note that says so. None when those lines do not make a result."""
    try:
        json.loads(text)
        return None
    except (json.JSONDecodeError, RecursionError) as exc:
        why = (f"{exc.msg} at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
               else "nested too deeply")
    hits = list(_SCALAR_LINE.finditer(text))
    anchor = next((m for m in hits if m["k"] in ("completed", "duration", "mean_ttft_ms")), None)
    how = "line by line"
    if anchor is not None:
        doc = {m["k"]: v for m in hits if m["ind"] == anchor["ind"] and (v := _scalar_value(m["v"])) is not _CUT}
    else:
        # vLLM's own one-line json.dump: its result keys wherever they stand, the first of each (the per-request
        # arrays hold numbers and texts, not these keys followed by a scalar)
        doc = {}
        for m in _SCALAR_PAIR.finditer(text):
            if (m["k"].rstrip(":") in _RESULT_KEYS or _METRIC_KEY.match(m["k"])) and \
                    (v := _scalar_value(m["v"])) is not _CUT:
                doc.setdefault(m["k"], v)
        how = "by their names"
    if not looks_like_bench_json(doc):
        return None
    return doc, (f"not valid JSON ({why}): read its {len(doc)} top-level figures {how}; the per-request arrays and "
                 "anything cut are not read")


def looks_like_bench_json(doc: Any) -> bool:
    return isinstance(doc, dict) and (
        ("completed" in doc and ("request_throughput" in doc or "duration" in doc))
        or "mean_ttft_ms" in doc
    )


def code_unquoted(s: str) -> str:
    """A JSON document a post wrapped in Markdown's inline code (`{"config": ...}`, sweep 208 item 11) or a fence
    opened on its line, without the quotes; any other text as it is."""
    t = s.lstrip("`")
    if len(t) != len(s) and t[:1] in "{[":
        return t.rstrip().rstrip("`")
    return s


def load_bench(path: str | os.PathLike) -> list[BenchResult]:
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            text = decode_capture(fh.read())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    s = code_unquoted(text.lstrip())
    # a printed block under a first line that opens with a bracket ("[2026-10-07 20:14:05] ...", a note) is text:
    # the JSON reading is tried first, and only a block header lets a file that is no JSON result go on as text
    printed = BLOCK_HEADER in text[:65536] or looks_like_bench_text(text[:65536])
    if s.startswith("{") or s.startswith("["):
        try:
            docs = json_documents(s)
        except InputError as exc:
            if not printed:
                raise InputError(f"{path}: {exc}") from None
            docs = []
        out = []
        for d in docs:
            out += [parse_json(d, path)] if looks_like_bench_json(d) else client_results("", path, [d])
        if not out and (salvaged := salvage_result(s)) is not None:
            res = parse_json(salvaged[0], path)
            res.raw["salvaged"] = salvaged[1]
            out = [res]
        if out:
            return out
        if not printed:
            raise InputError(f"{path}: JSON but not a vllm bench serve result (no completed/request_throughput) or "
                             "a GuideLLM report or GenAI-Perf export with a completed run")
    from kvdoctor.evidence.genaiperf import looks_like_genai_perf_csv
    from kvdoctor.evidence.guidellm import NEWER_TABLES, looks_like_guidellm_csv, looks_like_newer_guidellm

    if looks_like_sweep_csv(text[:65536]):
        out = [parse_json(d, path) for d in sweep_csv_results(text, path)]
        if not out:
            raise InputError(f"{path}: a vllm bench sweep summary without a completed run")
        return out
    if looks_like_genai_perf_csv(text[:65536]):
        out = client_results(text, path)
        if not out:
            raise InputError(f"{path}: a GenAI-Perf CSV export without its latency or throughput rows")
        return out
    if looks_like_guidellm_csv(text[:65536]):
        out = client_results(text, path)
        if not out:
            raise InputError(f"{path}: a GuideLLM CSV export without a benchmark that completed requests and whose "
                             "columns line up with its header (give benchmarks.json)")
        return out
    out = (parse_text(text, path) or client_results(text, path)
           or [_embedded(d, path) for d in embedded_json_results(text)])
    if not out and looks_like_newer_guidellm(text):
        from kvdoctor.evidence.guidellm import parse_guidellm_console

        out = parse_guidellm_console(text, path)
        if not out:
            raise InputError(f"{path}: {NEWER_TABLES}")
    if not out:
        raise InputError(f"{path}: no 'Serving Benchmark Result' block, GuideLLM 'Benchmarks Stats' table, GenAI-Perf "
                         "'LLM Metrics' table or legacy benchmark summary found")
    return out


def client_results(text: str, source: str, docs: list | None = None) -> list[BenchResult]:
    """The other clients' results, for ``evidence`` and ``calibrate`` alike: GuideLLM's saved report, GenAI-Perf's
    JSON export, EvalScope's and LLMPerf's summary JSON among the JSON ``docs`` of a file, else, in ``text``, the printed
    summaries of EvalScope or LLMPerf, GenAI-Perf's CSV export or the printed tables of GuideLLM or GenAI-Perf."""
    from kvdoctor.evidence import evalscope, genaiperf, guidellm, llmperf

    if docs is not None:
        return [r for d in docs for r in (guidellm.parse_guidellm_json(d, source)
                                          if guidellm.looks_like_guidellm_json(d)
                                          else genaiperf.parse_genai_perf_json(d, source)
                                          if genaiperf.looks_like_genai_perf_json(d)
                                          else evalscope.parse_evalscope_json(d, source)
                                          if evalscope.looks_like_evalscope_json(d)
                                          else llmperf.parse_llmperf_json(d, source)
                                          if llmperf.looks_like_llmperf_json(d) else [])]
    if evalscope.looks_like_evalscope(text):
        return evalscope.parse_evalscope(text, source)
    if llmperf.looks_like_llmperf(text):
        return llmperf.parse_llmperf(text, source)
    if genaiperf.looks_like_genai_perf_csv(text[:65536]):
        return genaiperf.parse_genai_perf_csv(text, source)
    if guidellm.looks_like_guidellm_csv(text[:65536]):
        return guidellm.parse_guidellm_csv(text, source)
    return (guidellm.parse_guidellm_yaml(text, source) or guidellm.parse_guidellm(text, source)
            or genaiperf.parse_genai_perf(text, source))


def _embedded(doc: dict, source: str) -> BenchResult:
    r = parse_json(doc, source)
    r.raw["embedded"] = "a saved result (JSON) inside the text"
    return r


def looks_like_sweep_csv(head: str) -> bool:
    """``vllm bench sweep serve``'s ``summary.csv``: pandas' table of every run's saved result (an unnamed index column,
    then the result's keys and the sweep's overrides)."""
    first = head.lstrip("\ufeff").split("\n", 1)[0]
    cols = {c.strip().strip('"') for c in first.split(",")}
    return "mean_ttft_ms" in cols and ("completed" in cols or "request_throughput" in cols)


SWEEP_CSV_MAX_ROWS = 100_000  # runs in one summary (a sweep has tens)


def sweep_csv_results(text: str, source: str) -> list[dict[str, Any]]:
    """Each row of a sweep's ``summary.csv`` as the saved result it was made from: numbers as numbers, ``inf`` as inf,
    the per-request lists (``input_lens``, ``ttfts`` …, written as Python lists) as lists of numbers; a list that is
    not numbers (``errors``) is left out."""
    from kvdoctor.safeio import csv_rows

    out: list[dict[str, Any]] = []
    reader = csv_rows(text, source or "the sweep summary")
    header = next(reader, None) or []
    for k, row in enumerate(reader):
        if k >= SWEEP_CSV_MAX_ROWS:
            raise InputError(f"{source}: more than {SWEEP_CSV_MAX_ROWS:,} runs in one sweep summary")
        doc: dict[str, Any] = {}
        for name, cell in zip(header, row):
            if not name or cell == "":
                continue  # pandas' index column; a value the run did not have
            doc[name] = _csv_value(cell)
        if looks_like_bench_json(doc):
            out.append(doc)
    return out


def _csv_value(cell: str) -> Any:
    c = cell.strip()
    if c.startswith("["):
        try:
            v = json.loads(c)
        except (json.JSONDecodeError, RecursionError):
            return None  # a list of strings in Python's quotes (errors): not a figure
        return v if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v) else None
    try:
        return float("inf") if c.lower() in ("inf", "infinity") else float(c)
    except ValueError:
        return c


def looks_like_bench_text(head: str) -> bool:
    """A printed result: the block (with its header, or its figures pasted without it), the legacy summary, or
    GuideLLM's tables."""
    from kvdoctor.evidence.evalscope import looks_like_evalscope
    from kvdoctor.evidence.llmperf import looks_like_llmperf
    from kvdoctor.evidence.genaiperf import looks_like_genai_perf, looks_like_genai_perf_csv
    from kvdoctor.evidence.guidellm import (looks_like_guidellm, looks_like_guidellm_csv, looks_like_guidellm_yaml,
                                            looks_like_newer_guidellm)

    return (BLOCK_HEADER in head or looks_like_guidellm_csv(head) or looks_like_guidellm_yaml(head) or bool(re.search(r"Total time: [\d.]+ s", head) and "Throughput:" in head)
            or looks_like_guidellm(head) or looks_like_newer_guidellm(head) or looks_like_sweep_csv(head)
            or looks_like_genai_perf(head) or looks_like_genai_perf_csv(head) or looks_like_evalscope(head)
            or looks_like_llmperf(head)
            or len(set(_HEADLESS_LABELS.findall(head))) >= 3
            or ('"mean_ttft_ms"' in head and '"completed"' in head))  # a saved result pasted inside text
