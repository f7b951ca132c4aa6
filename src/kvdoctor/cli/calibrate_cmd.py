"""``kvdoctor calibrate``: fit one deployment's step-time and front-end coefficients on its own
`vllm bench serve` results, report the held-out error, write a calibration file that
``simulate``, ``plan``, ``swap`` and ``experiment`` take with ``--calibration FILE``.

Thin: the deployment options (cli/common.py) give the scheduler limits and the roofline; the fit
lives in ``sim.calibration``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Optional

import typer

from kvdoctor.cli import app, common

SCHEMA = "kvdoctor.calibrate/1"


# the table's words for ``calibration.outside_range``'s quantities: one per quantity it can flag (step_tokens since
# 2026-12-06)
_RANGE_WORDS = {"prompt_tokens": "prompts", "running_requests": "batch", "step_tokens": "step size"}


@app.command("calibrate")
@common.config_options
def calibrate_cmd(
    opts: common.ConfigOptions,
    bench: Annotated[Optional[list[str]], typer.Argument(help="`vllm bench serve --save-result` JSON files of this deployment (--save-detailed adds per-request lengths and send times), or what the bench printed: each 'Serving Benchmark Result' block of a capture is one run (FILE#k); GuideLLM's printed tables or saved report: each row one run (FILE#STRATEGY); vllm bench sweep's summary.csv: each row one run; GenAI-Perf's table, CSV or JSON export.")] = None,
    stats_log: Annotated[Optional[list[str]], typer.Option("--stats-log", help="The server's log with its periodic stats lines (repeatable): busy intervals constrain the step time.")] = None,
    iteration_log: Annotated[Optional[list[str]], typer.Option("--iteration-log", help="A server log with vLLM's per-step lines (vllm serve --enable-logging-iteration-details; repeatable; --linear): each step's batch and model time pin the step model.")] = None,
    finish_cost: Annotated[bool, typer.Option("--finish-cost", help="Also fit the API server's work per finished request (the last chunk and [DONE]): the response ends when that work does, so a --max-concurrency slot frees then and what is sent after waits for it (a closed loop's wave: requests that finish in one step release their successors one after another).")] = False,
    out: Annotated[str, typer.Option("--output", "--out", "-o", help="Where to write the calibration file (JSON).")] = "kvdoctor-calibration.json",
    fit_on: Annotated[Optional[list[str]], typer.Option("--fit-on", help="Fit on this result (file name; repeatable). Default: the first. The others are held out and predicted.")] = None,
    special_tokens: Annotated[int, typer.Option("--special-tokens", min=0, help="Tokens the server's tokenizer adds to each prompt (a BOS: 1, Llama-style; Qwen: 0). The bench counts prompts without them.")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="The bench's --seed (its JSON does not keep it): the send schedule of a closed loop with a finite --request-rate.")] = 0,
    same_server: Annotated[bool, typer.Option("--same-server", help="The results ran in the order given, back to back, on ONE server with prefix caching on (V1's default), random dataset, the same --seed and fixed lengths (--random-range-ratio 0): request i of a later run then starts with request i of every earlier run, and the server had those tokens cached. Give every run that ran on that server, in order. The files keep no seed: if each run had its own --seed, the prompts differ and nothing is shared — leave this off. Checked: the files' `date` must not go backwards, one `model_id`.")] = False,
    bench_test_request: Annotated[bool, typer.Option("--bench-test-request", help="The bench sent request 0 once, untimed, before each run, so request 0 found its prompt cached: benchmark_serving.py and vllm bench serve before vllm#30975 (Dec 2025) always did; later ones only with --ready-check-timeout-sec > 0 or --num-warmups > 0.")] = False,
    fit_prefill: Annotated[bool, typer.Option("--fit-prefill", help="Also fit the deployment's own cost per prompt token (its prefill rate), apart from the decode the roofline's scale follows. Needs --fit-on runs at two clearly different prompt lengths (e.g. 128 and 1024 tokens); without this the prefill rate is the public prior's.")] = False,
    token_steps: Annotated[bool, typer.Option("--token-steps", help="Measure a prompt token's cost on the engine's steps rebuilt from the --fit-on runs' per-token times (vllm bench serve --save-detailed keeps them: the tokens that reach the client together are one step's outputs) and hold it while the rest is fitted; with --linear. One run's bench figures cannot tell the prefill from the front end.")] = False,
    fit_spread: Annotated[bool, typer.Option("--fit-spread", help="Also match the per-request TTFT/TPOT quartiles and the mean TTFT of the shorter and longer prompts of runs whose batch varies (open loops at a finite rate, --ramp-up-strategy runs; needs --save-detailed).")] = False,
    fit_context: Annotated[bool, typer.Option("--fit-context", help="Also fit a decode's cost per token of context (attention reading the KV cache), apart from its per-request cost; needs fitted runs whose contexts and batches vary (a ramp-up with spread lengths).")] = False,
    parse_share: Annotated[float, typer.Option("--parse-share", min=0.0, max=0.99, help="Share of the API server's per-request work done as each request arrives, ahead of earlier requests (the event loop runs each new connection's handler first), so requests sent together reach the engine together. 0: one FIFO. One run rarely shows it; 0.43 was measured on vLLM's CPU engine's closed-loop bursts (docs/simulation.md).")] = 0.0,
    linear: Annotated[bool, typer.Option("--linear", help="Fit a linear step time alone (engines the GPU roofline does not describe, e.g. vLLM's CPU backend). Default: scale the roofline and add linear terms.")] = False,
    suggest_run: Annotated[bool, typer.Option("--suggest-run", help="Fit nothing: print the one `vllm bench serve` run to calibrate this deployment on (a linear ramp of the request rate from a lone request past the predicted saturation, spread lengths around the load it serves), the range of loads it would calibrate, and whether --bench-cmd's load lies inside it.")] = False,
    bench_cmd: Annotated[Optional[str], typer.Option("--bench-cmd", help="With --suggest-run: the load this deployment serves, as a pasted `vllm bench serve` line (its lengths size the run; its --model, --host, --port, --base-url, --backend and --endpoint are kept). Default: the bench's defaults (random, 1024 in / 128 out).")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    """Fit this deployment's time model on its own bench results; report the error on held-out runs."""
    if suggest_run or bench_cmd:
        return _suggest(opts, suggest_run, bench, stats_log, iteration_log, linear, bench_cmd, seed, special_tokens,
                        json_out, quiet)
    from kvdoctor.cli.output import emit_json
    from kvdoctor.errors import InputError
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim import calibration as C
    from kvdoctor.sim.whatif import layout_of, sched_config

    if not bench and not stats_log:
        raise InputError("give bench results (vllm bench serve --save-result JSON) and/or --stats-log SERVER.log")
    runs = C.load_bench_runs(bench, special_tokens=special_tokens, seed=seed) if bench else []
    stats = C.load_stats_observations(list(stats_log)) if stats_log else None
    iters = C.load_iteration_observations(list(iteration_log)) if iteration_log else None
    if iteration_log and not iters:
        raise InputError(f"{', '.join(iteration_log)}: no per-step lines (start vllm serve with --enable-logging-iteration-details)")
    if iters and not linear:
        raise InputError("the per-step log calibrates the linear step model only: add --linear")
    if not runs and not linear:
        raise InputError("a stats log alone calibrates the linear step model only: add --linear")
    if (same_server or bench_test_request) and not runs:
        raise InputError("--same-server and --bench-test-request describe bench results: give some")
    if same_server:
        if any(r.offline for r in runs):
            raise InputError("--same-server: an offline `vllm bench throughput/latency` run starts its own engine, "
                             "not the server's")
        C.check_same_server(runs)
    model_note = None
    if not (opts.model or opts.serve or opts.config or opts.from_log):
        ids = sorted({r.model_id for r in runs if r.model_id})
        if len(ids) == 1:  # the bench result names the model it asked for (--model of vllm bench serve)
            opts = dataclasses.replace(opts, model=ids[0])
            model_note = (f"model {ids[0]} from the bench results' model_id; its engine flags are vLLM's defaults: "
                          "pass the server's --serve line for its real configuration")
    inputs = common.resolve_inputs(opts)
    led = build_ledger(inputs.shape, inputs.gpu, inputs.resolved, startup=inputs.startup)
    if not led.fit_ok:
        raise InputError(f"vLLM would not start with this configuration: {led.startup_error}")
    cfg = sched_config(inputs.resolved, led.num_blocks, layout_of(inputs.shape, inputs.gpu, inputs.resolved))
    if (same_server or bench_test_request) and not cfg.enable_prefix_caching:
        raise InputError("--same-server / --bench-test-request: this configuration has prefix caching off, "
                         "so nothing earlier traffic sent stays cached; drop the option or the override")
    runs = C.warm_prefixes(runs, same_server=same_server, test_request=bench_test_request,
                           block_size=cfg.block_size, num_blocks=cfg.num_blocks)
    runs = _offline_engine(opts, runs)
    kind = "linear" if linear else "roofline+linear"
    base = None
    if not linear:
        from kvdoctor.sim.steptime import from_deployment

        base = from_deployment(inputs.shape, inputs.gpu, inputs.resolved)
    deployment = {"model": inputs.shape.name, "gpu": inputs.gpu.name, "vllm_version": inputs.vllm_version,
                  "engine": {k: v for k, v in inputs.config.given().items() if not str(k).startswith("extra.")}}
    if fit_prefill and linear:
        raise InputError("--fit-prefill refines the roofline model; --linear already fits a cost per token")
    if token_steps and not linear:
        raise InputError("--token-steps measures the linear step model's cost per token: add --linear")
    if (token_steps or fit_spread or fit_context) and not runs:
        raise InputError("--token-steps, --fit-spread and --fit-context read bench results: give some")
    from kvdoctor.cli.output import progress

    # each fit iteration re-simulates the fitted runs: seconds for a saturated run of hundreds of requests
    n_iter = 600 if fit_context else 250
    with progress("Fitting (re-simulating the fitted runs)", total=n_iter, quiet=quiet or json_out) as advance:
        cal = C.calibrate(runs, C.Setup(cfg=cfg, base=base), kind=kind, fit_on=fit_on, deployment=deployment,
                          stats=stats, prefill_term=fit_prefill, iterations=iters, finish_cost=finish_cost,
                          use_token_steps=token_steps, spread=fit_spread, kv_term=fit_context, iters=n_iter,
                          on_iter=advance, parse_share=parse_share, client_after_finish=finish_cost)
    cal.fit["warm_prefix"] = {"same_server": same_server, "bench_test_request": bench_test_request}
    if linear and cfg.async_scheduling:
        # the linear model is for engines the GPU roofline does not describe, vLLM's CPU backend first among them, and
        # that backend never schedules asynchronously: fitted as if it did, the closed loops come out a few points off
        cal.fit["notes"] = list(cal.fit.get("notes") or []) + [
            "simulated with asynchronous scheduling (vLLM's default on GPUs from 0.13); vLLM's CPU backend runs "
            "without it: for a CPU server give its start-up log (--from-log) or --serve '... --no-async-scheduling'"]
    if model_note:
        cal.fit["notes"] = list(cal.fit.get("notes") or []) + [model_note]
    if not same_server:
        cal.fit["notes"] = list(cal.fit.get("notes") or []) + (C.same_server_hint(runs) or C.cached_prompt_hint(runs))
    spec = C.speculative_decoding_note(list(stats_log or []) + list(iteration_log or []),
                                       int(inputs.resolved.num_speculative_tokens or 0),
                                       [r.spec_acceptance_length for r in runs if r.spec_acceptance_length])
    if spec:
        cal.fit["notes"] = list(cal.fit.get("notes") or []) + [spec]
    try:
        with open(out, "w", encoding="utf-8") as f:
            import json

            json.dump(cal.to_json(), f, indent=1, default=str)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror}") from None
    payload = {**cal.to_json(), "schema_version": SCHEMA, "calibration_file": out}
    if json_out:
        emit_json(payload)
        return
    _render(payload, quiet)


def _deployment_args(opts: common.ConfigOptions, special_tokens: int) -> list[str]:
    """The deployment as this invocation gave it (``ConfigOptions``' fields under their option names), for the
    suggested `kvdoctor calibrate` line: it repeats the deployment exactly, and nothing that is not the deployment's."""
    out: list[str] = []
    for f in dataclasses.fields(opts):
        v = getattr(opts, f.name)
        if v is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        else:
            out += [flag, str(v)]
    if special_tokens != 1:
        out += ["--special-tokens", str(special_tokens)]
    return out


def _suggest(opts, suggest_run, bench, stats_log, iteration_log, linear, bench_cmd, seed, special_tokens, json_out,
             quiet) -> None:
    """``--suggest-run``: size the calibration ramp on this deployment (``sim.calibration_run``)."""
    import shlex

    from kvdoctor.cli import workload_opts
    from kvdoctor.cli.output import emit_json
    from kvdoctor.errors import InputError
    from kvdoctor.sim import whatif
    from kvdoctor.sim.calibration_run import suggest_run
    from kvdoctor.sim.workload import WorkloadSpec

    if not suggest_run:
        raise InputError("--bench-cmd describes the load to size a calibration run for: it goes with --suggest-run")
    if bench or stats_log or iteration_log:
        raise InputError("--suggest-run fits nothing: give the deployment (and --bench-cmd for its load), no bench "
                         "results or logs")
    if linear:
        raise InputError("--suggest-run sizes the run with the GPU model's prediction; --linear engines (vLLM's CPU "
                         "backend) have none: calibrate on a --ramp-up-strategy linear run from 1 request/s past the "
                         "rate the server keeps up with")
    inputs = common.resolve_inputs(opts)
    if inputs.gpu is None:
        raise InputError("--suggest-run needs the GPU (--gpu) to predict the deployment's capacity")
    led = inputs.ledger
    if not led.fit_ok:
        raise InputError(f"vLLM would not start with this configuration: {led.startup_error}")
    if bench_cmd:
        target = workload_opts.WorkloadOptions(bench_cmd=bench_cmd, seed=seed).spec(vllm_version=inputs.vllm_version)
        if target.offline:
            raise InputError("--bench-cmd: an offline bench has no API server; give the `vllm bench serve` line of "
                             "the load the server serves")
        if target.dataset_name == "trace":
            raise InputError("--bench-cmd: give a random or sharegpt load")
    else:
        target = WorkloadSpec(seed=seed)
    target = dataclasses.replace(target, special_tokens=special_tokens)
    layout = whatif.kv_layout(led.plan.grouping) if led.plan is not None else {}

    def simulate(workload, on_step):
        return whatif.run(inputs.shape, inputs.gpu, inputs.resolved, led.num_blocks, workload, layout=layout,
                          on_step=on_step)

    served = (str(inputs.resolved.served_model_name).split() or [None])[0] if inputs.resolved.served_model_name \
        else None
    res = suggest_run(simulate, target, int(inputs.resolved.max_model_len), int(inputs.resolved.max_num_seqs),
                      inputs.shape.name, served=served, bench_cmd=bench_cmd)
    cal_line = shlex.join(["kvdoctor", "calibrate", res["result_file"], *_deployment_args(opts, special_tokens),
                           "--fit-spread"])
    payload = {"schema_version": SUGGEST_SCHEMA, "model": inputs.shape.name, "gpu": inputs.gpu.name,
               "vllm_version": inputs.vllm_version, **res, "calibrate_command": cal_line,
               "notes": list(res.pop("notes")) + list(inputs.notes) + list(target.notes)}
    if json_out:
        emit_json(payload)
        return
    _render_suggestion(payload, quiet)


SUGGEST_SCHEMA = "kvdoctor.calibrate.suggest/1"


def _render_suggestion(p: dict, quiet: bool) -> None:
    from rich.markup import escape

    from kvdoctor.cli.output import console

    con = console()
    if quiet:
        con.print(escape(p["bench_command"]), soft_wrap=True)
        return
    run, cap, rng, t = p["run"], p["capacity_rps"], p["calibrated_range"], p["target"]
    con.print(f"[bold]kvdoctor calibrate --suggest-run[/bold] — {escape(p['model'])} on {escape(p['gpu'])}")
    con.print(f"1. run once, on a server nothing else sends to (sends over ~{run['predicted_duration_s']:.0f} s, "
              "predicted):")
    con.print("   " + escape(p["bench_command"]), soft_wrap=True)
    con.print("2. calibrate on it:")
    con.print("   " + escape(p["calibrate_command"]), soft_wrap=True)
    con.print(f"sized on: capacity {cap['value']:.2f} requests/s ({cap['source']}: {escape(cap['formula'])}); rate "
              f"1 → {run['ramp_up_end_rps']} requests/s ({escape(cap['end_rate'])}), {run['num_prompts']:,} requests, "
              f"lengths {run['random_input_len']} / {run['random_output_len']} ± {run['random_range_ratio']:.0%}")
    if rng:
        (p0, p1), (r0, r1) = rng["prompt_tokens"], rng["running_requests"]
        con.print(f"it would calibrate: prompts {p0:,.0f}-{p1:,.0f} tokens, {r0:g}-{r1:g} requests running, engine "
                  f"steps up to {rng['step_tokens'][1]:,.0f} tokens (predicted; up to {run['predicted_peak_running']} "
                  "running at the top of the ramp)")
    where = "inside that range" if t["inside"] else "outside it"
    con.print(f"the load it is sized for (mean prompt {t['mean_prompt_tokens']:,.0f} tokens, {t['mean_running']:g} "
              f"running on average, predicted): {where}")
    for n in t["notes"]:
        con.print(f"note: {escape(n)}")
    con.print("why one ramp: a run at one load measures the step at one batch size, so how it grows with the batch "
              "is assumed; the ramp passes from a lone request through saturation (docs/simulation.md, "
              "\"The run to calibrate on\")")
    for n in p["notes"]:
        con.print(f"note: {escape(n)}")


def _offline_engine(opts, runs: list) -> list:
    """The offline runs (`vllm bench throughput/latency`) on the engine they ran: this deployment's flags in vLLM's
    offline usage context (the LLM class's batch defaults), its own scheduler limits and KV pool."""
    if not any(r.offline for r in runs):
        return runs
    from kvdoctor.errors import InputError
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim.whatif import layout_of, sched_config

    inputs = common.resolve_inputs(opts, usage="llm")
    led = build_ledger(inputs.shape, inputs.gpu, inputs.resolved, startup=inputs.startup)
    if not led.fit_ok:
        raise InputError(f"the offline runs' engine (LLM class defaults) would not start: {led.startup_error}")
    cfg = sched_config(inputs.resolved, led.num_blocks, layout_of(inputs.shape, inputs.gpu, inputs.resolved))
    return [dataclasses.replace(r, cfg=cfg) if r.offline else r for r in runs]


def _render(p: dict, quiet: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kvdoctor.cli.output import console

    con = console()
    fit = p["fit"]
    if quiet:  # docs/cli.md "--quiet": the file and how far to trust it, one line
        from kvdoctor.report.oneline import calibrate_line
        from kvdoctor.report.terminal import one_line

        one_line(calibrate_line(p))
        return
    on = list(fit["fit_on"]) + ([f"{fit['stats_intervals']} stats-log intervals"] if fit.get("stats_intervals") else []) \
        + ([f"{fit['iterations']} logged engine steps"] if fit.get("iterations") else [])
    con.print(f"[bold]kvdoctor calibrate[/bold] — {escape(str(p['deployment'].get('model')))} "
              f"({p['kind']}), fitted on {escape(', '.join(on))}")
    if not quiet:
        t = Table(show_header=True, header_style="bold")
        for c in ("run", "split", "output tok/s", "mean TTFT", "mean TPOT"):
            t.add_column(c)
        for name, r in fit["runs"].items():
            def cell(k):
                m, pr, e = r["measured"].get(k), r["predicted"].get(k), r["error"].get(k)
                return "—" if m is None or pr is None else f"{m:.1f} → {pr:.1f} ({e:+.0%})"
            out = "; ".join(f"{_RANGE_WORDS[o['quantity']]} {o['direction']}" for o in r.get("outside_range") or ())
            split = r["split"] + (f" (outside the range: {out})" if out else "")
            t.add_row(escape(name), split, cell("output_throughput"), cell("mean_ttft_ms"), cell("mean_tpot_ms"))
        con.print(t)
    for label, key in (("fit", "fit_median_abs_error"), ("held out", "held_out_median_abs_error")):
        e = fit.get(key)
        if e:
            parts = [f"{k.replace('_', ' ')} {v:.0%}" for k, v in e.items() if v is not None]
            con.print(f"median |error| on {label}: " + ", ".join(parts))
    rng = fit.get("calibrated_range")
    if rng:
        (p0, p1), (r0, r1) = rng["prompt_tokens"], rng["running_requests"]
        steps = (f", engine steps up to {rng['step_tokens'][1]:,.0f} tokens" if rng.get("step_tokens") else "")
        con.print(f"calibrated range: prompts {p0:,.0f}-{p1:,.0f} tokens, {r0:g}-{r1:g} requests running (the fitted "
                  f"runs' 5th-95th percentile){steps}; a prediction beyond it says so")
        n_out = sum(1 for r in fit["runs"].values() if r.get("outside_range"))
        inside = fit.get("held_out_in_range_median_abs_error")
        if n_out and inside:
            con.print("median |error| on held out inside the range: "
                      + ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in inside.items() if v is not None))
    if not fit.get("held_out"):
        con.print("note: no held-out run — give two or more results to know how far to trust the fit")
    rep = fit.get("repeatability")
    if rep:
        from kvdoctor.sim.calibration import HEADLINE_LABELS

        for pair in rep["pairs"]:
            a, b = (escape(n) for n in pair["runs"])
            con.print(f"repeatability: {a} and {b} ran one load; {b} moved "
                      + ", ".join(f"{HEADLINE_LABELS[m]} {v:+.0%}" for m, v in pair["moved"].items())
                      + " — errors of that size are the host's run-to-run noise")
    warm = {k: v for k, v in fit["runs"].items() if "warm_prompt_tokens" in v}
    if warm:
        how = " and ".join(w for w, on in (("--same-server", fit.get("warm_prefix", {}).get("same_server")),
                                           ("--bench-test-request", fit.get("warm_prefix", {}).get("bench_test_request")))
                           if on)
        con.print(f"warm prefix cache ({how}): prompt tokens cached when each run started: " + ", ".join(
            f"{escape(k)} {v['warm_prompt_tokens'] / max(1, v['prompt_tokens']):.0%}" for k, v in warm.items()))
    ts = fit.get("token_steps")
    if ts:
        con.print(f"prefill rate measured on the rebuilt engine steps: {ts['per_token_s'] * 1e3:.3f} ms per prompt token "
                  f"({ts['steps_used']} of {ts['steps']} steps, {ts['prefill_steps']} with a prefill; held in the fit)")
    for n in fit.get("notes") or ():
        con.print(f"note: {escape(n)}")
    con.print(f"wrote {escape(p['calibration_file'])} (use: --calibration {escape(p['calibration_file'])})")
