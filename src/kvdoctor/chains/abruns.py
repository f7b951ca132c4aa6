"""Runs of one tuning session in one text: each `vllm bench serve` result after its own `vllm serve` command.

A write-up that tunes a flag at a time pastes the server's command, then the bench's block, again and again (sweep 263:
five commands and blocks, one flag changed each time). Read one by one, the blocks say nothing of the flag; read in
pairs they are the one-variable experiment the chapter asks for. This note lists, for each run whose command differs
from the run before, the flags that changed and what the headline figures did, with the noise a single run carries.
"""

from __future__ import annotations

import shlex
from typing import Any

# a single bench run's headline figures move by this much between repeats of the same load (the real engine's repeats,
# docs/simulation.md; public repeats 2-5 %): a change inside it is not read as the flag's
NOISE = 0.05
_FIGURES = (("mean_ttft_ms", "mean TTFT", "ms"), ("mean_tpot_ms", "mean TPOT", "ms"),
            ("output_throughput", "output", "tok/s"), ("p99_itl_ms", "p99 ITL", "ms"))


def serve_flags(command: str) -> dict[str, str]:
    """A server command's flags as ``--name`` -> value ("" for a switch), with its environment assignments
    (``VLLM_USE_V1=0``) and the model: what two commands of one session differ in."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        words = command.split()
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            name, eq, val = w.partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                val, i = words[i + 1], i + 1
            out[name.replace("_", "-")] = val
        elif "=" in w and w.split("=", 1)[0].isupper():
            k, v = w.split("=", 1)
            out[k] = v
        elif w == "serve" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            out["model"], i = words[i + 1], i + 1
        i += 1
    return out


def _diff(a: dict[str, str], b: dict[str, str]) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        if k not in a:
            out.append(f"added {k}{' ' + b[k] if b[k] else ''}")
        elif k not in b:
            out.append(f"dropped {k}{' ' + a[k] if a[k] else ''}")
        else:
            out.append(f"{k} {a[k]} → {b[k]}")
    return out


def ab_note(bench: list) -> str | None:
    """The note for a text whose bench results follow server commands (two or more that differ); None otherwise."""
    runs = [b for b in bench or [] if b.raw.get("serve_command")]
    if len(runs) < 2 or len({b.raw["serve_command"] for b in runs}) < 2 or len({b.source for b in runs}) > 1:
        return None
    # the runs after each server command, in order; a write-up may run several loads on each server (sweep 263 item
    # 02: a dynamic and a static dataset after each command, the bench's two commands pasted once at the top): the
    # i-th run after a command is compared with the i-th after the command before, when their loads agree
    groups: list[list[int]] = []
    for k, b in enumerate(runs):
        if not groups or b.raw.get("serve_new") or runs[groups[-1][0]].raw["serve_command"] != b.raw["serve_command"]:
            groups.append([])
        groups[-1].append(k)
    parts = [_pair(runs, j, k) for g in range(1, len(groups)) for i, k in enumerate(groups[g])
             if i < len(groups[g - 1]) and _same_load(runs[(j := groups[g - 1][i])].fields, runs[k].fields)]
    parts = [p for p in parts if p]
    if not parts:
        return None
    servers = len({b.raw["serve_command"] for b in runs})
    return (f"{len(runs)} bench runs after {servers} server commands: read in pairs on the same load, each is a "
            f"one-variable experiment (single runs: a change under {NOISE:.0%} is within run-to-run noise; repeat a "
            "run before acting on a small one). " + " | ".join(parts))


def _pair(runs: list, j: int, k: int) -> str | None:
    """Run k against run j: the settings that changed and what each headline figure did."""
    a, b = runs[j], runs[k]
    flags = _diff(serve_flags(a.raw["serve_command"]), serve_flags(b.raw["serve_command"]))
    if not flags:
        return None
    moves = []
    for key, name, unit in _FIGURES:
        x, y = a.fields.get(key), b.fields.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x > 0:
            ch = y / x - 1
            moves.append(f"{name} {x:,.0f} → {y:,.0f} {unit} ({ch:+.0%}{'' if abs(ch) >= NOISE else ', noise'})")
    caveat = f" [{len(flags)} settings changed at once: not one variable]" if len(flags) > 1 else ""
    return f"run {k + 1} vs run {j + 1} ({', '.join(flags)}): " + ("; ".join(moves) or "no figure to compare") + caveat


def _same_load(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same requests: completed count, total input tokens and the command's prompt count equal (within 1 %) where
    both give them."""
    for key in ("completed", "total_input_tokens", "num_prompts"):
        x, y = a.get(key), b.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x and abs(y / x - 1) > 0.01:
            return False
    return True


def offline_ab_note(offline: list) -> str | None:
    """Offline throughput runs of one workload (the same prompt and output token totals) in one text, compared in order:
    what the packages listed after each say changed, and the throughput it moved (sweep 264 item 08: torch 2.8.0 ->
    2.9.1 under one vLLM build, 5.94 -> 1.21 req/s, read as two unrelated results). None with fewer than two."""
    runs = [r for r in offline or [] if r.tool == "throughput" and r.fields.get("requests_per_second")]
    parts, regressed = [], False
    for a, b in zip(runs, runs[1:]):
        same = all(a.fields.get(k) == b.fields.get(k) for k in ("total_prompt_tokens", "total_output_tokens"))
        if not same or a.source != b.source:
            continue
        x, y = a.fields["requests_per_second"], b.fields["requests_per_second"]
        ch = y / x - 1
        env = [f"{k} {a.environment[k]} → {b.environment[k]}" for k in sorted(set(a.environment) & set(b.environment))
               if a.environment[k] != b.environment[k]]
        regressed |= bool(env) and ch <= -NOISE
        parts.append(f"line {b.line} vs line {a.line}: {x:g} → {y:g} requests/s ({ch:+.0%}"
                     + (", within run-to-run noise" if abs(ch) < NOISE else "") + ")"
                     + (f"; the packages listed after each differ: {', '.join(env)}" if env else
                        "; what changed between them is in the text around each (versions, flags), not in the result"))
    if not parts:
        return None
    return ("offline runs of one workload (the same prompt and output tokens), compared in order: " + " | ".join(parts)
            + (". A drop beyond noise with only packages changed is theirs: pin the faster versions and report the "
               "regression with both results" if regressed else ""))
