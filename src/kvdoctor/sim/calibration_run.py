"""The one `vllm bench serve` run to calibrate a deployment on (``kvdoctor calibrate --suggest-run``).

Why one ramp: a run at one load measures the step at one batch size, so how the step grows with the batch is the
fit's assumption (``calibration.identifiability_notes``). On public series calibrated on one load that is where the
10 % bar was missed (docs/simulation.md: a lone request predicted from a saturated closed loop of 64, a saturated load
predicted from a lone request). ``vllm bench serve --ramp-up-strategy linear`` raises the request rate request by
request, so one run passes from a lone request through the deployment's saturation: every batch size it will hold, its
queue, and (with spread lengths) several prompt lengths. vLLM's CPU engine is calibrated on such a ramp in the live
test (``testbed.series``), the only place the design has been measured.

Sizing, each a stated choice, not a fit:
- lengths: the target load's mean prompt and output, spread ``RANGE_RATIO`` either side (the bench's
  ``--random-range-ratio``), narrowed to fit ``max_model_len``;
- capacity: the uncalibrated simulation of the target lengths at rate inf (requests finished per second);
- rates: from 1 request/s (the bench's linear ramp must start above 0) to ``OVERSHOOTS[0]`` x that capacity, so the
  batch fills even when the prior is that much too slow, raised (``OVERSHOOTS``) until the range the run would
  calibrate holds the target load;
- length: enough requests for the sends to span about ``RAMP_SECONDS`` (a linear ramp over the request index spends
  ``sum(1/rate_i)`` seconds), within ``MIN_PROMPTS`` .. ``MAX_PROMPTS``.
The suggestion is then simulated and the range it would calibrate (``calibration.calibrated_range``) is checked
against the target load (``calibration.outside_range``), the same test a prediction made with the resulting calibration
gets.
"""

from __future__ import annotations

import math
import shlex
from kvdoctor.errors import InputError
from kvdoctor.sim.benchline import bench_words
from kvdoctor.sim.calibration import calibrated_range, outside_range, range_notes
from kvdoctor.sim.workload import WorkloadSpec, build_workload

RANGE_RATIO = 0.5
# the ramp's top rate over the predicted capacity, tried in this order until the run's calibrated range holds the
# target load: 1.5 fills the batch even where the prior is that much too slow; a burst target (rate inf) needs more of
# the run queued at the top, because the range counts engine steps and a ramp's light start has many short ones
OVERSHOOTS = (1.5, 2.0, 3.0, 4.0)
RAMP_SECONDS = 90.0
MIN_PROMPTS = 200
MAX_PROMPTS = 3000
CAPACITY_PROMPTS = (100, 2000)  # requests of the rate-inf run that reads the capacity: 3 x max_num_seqs within these
# flags of a pasted bench line that say where and how to send, carried into the suggested line unchanged
CONNECTION_FLAGS = ("--backend", "--base-url", "--host", "--port", "--endpoint", "--model", "--served-model-name",
                    "--tokenizer", "--trust-remote-code")


def ramp_prompts(start: float, end: float, seconds: float = RAMP_SECONDS) -> int:
    """Requests whose linear ramp (rate over the request index, as the bench's) spans about ``seconds``: the gaps
    sum to ``n * ln(end/start) / (end - start)`` (the mean of 1/rate over the ramp), or ``n / start`` when flat."""
    per = math.log(end / start) / (end - start) if end > start else 1.0 / start
    return int(min(MAX_PROMPTS, max(MIN_PROMPTS, round(seconds / per))))


def range_ratio_for(prompt: int, output: int, max_model_len: int) -> float:
    """``RANGE_RATIO``, narrowed so the longest request the bench can draw ((1 + r) x each length) fits."""
    total = prompt + output
    if total > max_model_len:
        raise InputError(f"the target load's requests ({prompt} + {output} tokens) exceed max_model_len "
                         f"{max_model_len}: vLLM would reject them")
    return max(0.0, min(RANGE_RATIO, math.floor((max_model_len / total - 1.0) * 100) / 100))


def connection_args(bench_cmd: str | None) -> list[str]:
    """The pasted bench line's connection flags (``CONNECTION_FLAGS``), values kept, in their order."""
    if not bench_cmd:
        return []
    try:  # the words parse_bench_cmd reads: one command of the pasted block, continuations joined, a prompt dropped
        tokens = bench_words(bench_cmd)
    except InputError:
        return []
    out: list[str] = []
    for i, tok in enumerate(tokens):
        name, eq, val = tok.partition("=")
        if name not in CONNECTION_FLAGS:
            continue
        if eq:
            out.append(f"{name}={val}")
        elif name == "--trust-remote-code":
            out.append(name)
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            out += [name, tokens[i + 1]]
    return out


def bench_line(spec: WorkloadSpec, model: str, connection: list[str], result_file: str,
               served: str | None = None) -> str:
    """The `vllm bench serve` command line that runs ``spec`` and saves what ``kvdoctor calibrate`` reads. ``served``:
    the server's --served-model-name (the bench's --model then still names the tokenizer)."""
    args = ["vllm", "bench", "serve"]
    names = {a.split("=", 1)[0] for a in connection}
    if "--model" not in names:
        args += ["--model", model]
    if served and served != model and "--served-model-name" not in names:
        args += ["--served-model-name", served]
    args += connection
    args += ["--dataset-name", "random", "--random-input-len", str(spec.random_input_len),
             "--random-output-len", str(spec.random_output_len), "--random-range-ratio", f"{spec.random_range_ratio:g}",
             "--ignore-eos", "--num-prompts", str(spec.num_prompts), "--ramp-up-strategy", spec.ramp_up_strategy,
             "--ramp-up-start-rps", str(spec.ramp_up_start_rps), "--ramp-up-end-rps", str(spec.ramp_up_end_rps),
             "--seed", str(spec.seed), "--save-result", "--save-detailed", "--result-filename", result_file]
    return shlex.join(args)


def suggest_run(simulate, target: WorkloadSpec, max_model_len: int, max_num_seqs: int, model: str, *,
                served: str | None = None, bench_cmd: str | None = None,
                result_file: str = "kvdoctor-calibration-run.json") -> dict:
    """The ramp to calibrate on, sized for ``target`` (a ``WorkloadSpec``: the load the deployment serves).
    ``simulate(workload, on_step)`` runs the uncalibrated simulation of this deployment (``SimResult``). Returns the
    run (its spec and command line), the capacity it was sized on, the range it would calibrate and whether the target
    lies inside it, each with its source."""
    import numpy as np

    tw = build_workload(target)
    if len(tw) == 0:
        raise InputError("the target workload has no requests")
    prompt = max(1, int(round(float(np.mean(tw.prompt)))))
    output = max(1, int(round(float(np.mean(tw.output)))))
    ratio = range_ratio_for(prompt, output, max_model_len)
    lo, hi = CAPACITY_PROMPTS
    cap_spec = WorkloadSpec(dataset_name="random", num_prompts=int(min(hi, max(lo, 3 * max_num_seqs))),
                            random_input_len=prompt, random_output_len=output, random_range_ratio=ratio,
                            ignore_eos=True, seed=target.seed, special_tokens=target.special_tokens)
    cap = simulate(build_workload(cap_spec), None)
    finished = int((cap.status == 2).sum())
    if finished == 0 or cap.summary.duration_s <= 0:
        raise InputError("no request of the target's lengths finishes on this configuration: nothing to calibrate on")
    capacity = finished / cap.summary.duration_s
    t = simulate(tw, None)
    t_prompt = float(np.mean(tw.prompt))
    tried = []
    for factor in OVERSHOOTS:
        end = max(2, math.ceil(factor * capacity))
        spec = WorkloadSpec(dataset_name="random", num_prompts=ramp_prompts(1.0, float(end)), random_input_len=prompt,
                            random_output_len=output, random_range_ratio=ratio, ignore_eos=True, seed=target.seed,
                            special_tokens=target.special_tokens, ramp_up_strategy="linear", ramp_up_start_rps=1,
                            ramp_up_end_rps=end)
        spec.validate()
        running: list[int] = []
        rw = build_workload(spec)
        ramp = simulate(rw, lambda rec: running.append(int(rec.running)))
        rng = calibrated_range([rw], running, [ramp.summary.max_step_tokens])
        items = outside_range(rng, t_prompt, t.summary.mean_running, t.summary.max_step_tokens)
        tried.append({"end_rps": end, "factor": factor, "running_range": rng["running_requests"] if rng else None,
                      "target_inside": not items})
        if not items:
            break
    notes = []
    if capacity < 2.0:
        notes.append(f"this deployment is predicted to keep up with {capacity:.2f} requests/s of these lengths: the "
                     "bench's ramp starts at 1 request/s (its rates are whole numbers), so the run queues from its "
                     "start and will not measure a light load; add a run at --max-concurrency 1 and fit on both "
                     "(--fit-on each file)")
    return {
        "notes": notes,
        "bench_command": bench_line(spec, model, connection_args(bench_cmd), result_file, served),
        "result_file": result_file,
        "run": {**{k: v for k, v in spec.describe().items() if k in (
            "num_prompts", "random_input_len", "random_output_len", "random_range_ratio", "ramp_up_strategy",
            "ramp_up_start_rps", "ramp_up_end_rps", "seed")},
                "predicted_duration_s": round(float(ramp.summary.duration_s), 1),
                "predicted_peak_running": int(max(running) if running else 0),
                "source": "predicted (uncalibrated simulation of this run)"},
        "capacity_rps": {"value": round(capacity, 3), "source": "predicted (uncalibrated)",
                         "formula": f"requests finished / time, {len(cap.status)} requests of {prompt} in / "
                                    f"{output} out at rate inf",
                         "end_rate": f"ceil({tried[-1]['factor']:g} x capacity) = {end} requests/s"},
        "tried": tried,
        "calibrated_range": rng,
        "target": {"mean_prompt_tokens": round(t_prompt, 1), "mean_output_tokens": round(float(np.mean(tw.output)), 1),
                   "mean_running": round(float(t.summary.mean_running), 2),
                   "max_step_tokens": int(t.summary.max_step_tokens), "outside_range": items,
                   "inside": not items, "notes": range_notes(items)},
    }

