"""``kvdoctor experiment``: change one variable and measure before and after, for real.

Thin: the shared configuration options give the baseline; ``--set FLAG=VALUE`` or ``--next-level`` the one
change; the load options (names shared with ``simulate``) the load. The library (kvdoctor.experiment) starts
vLLM, drives `vllm bench serve`, stops what it started, predicts, journals and judges. Progress on stderr.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvdoctor.cli import app, common, workload_opts

if TYPE_CHECKING:
    from kvdoctor.deployment import Deployment
    from kvdoctor.engine.config import EngineConfig

experiment_app = typer.Typer(
    name="experiment",
    help=("Change one variable and measure before and after on a real vLLM server: start it (or --attach), drive "
          "`vllm bench serve`, scrape /metrics, stop it, record both runs in the journal beside kvdoctor's "
          "prediction, and say: enough, not enough, or stop-loss. `experiment chain` walks chain one's levels."),
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(experiment_app, name="experiment")

SCHEMA = "kvdoctor.experiment/1"
_CH = "The change"
_LOAD = "Load (vllm bench serve)"
_RUN = "Server"
_J = "Journal and verdict"

SetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", help="The one change: FLAG=VALUE as vLLM spells the flag (--set max-num-seqs=8). Refused when it moves more than one variable.",
    rich_help_panel=_CH)]
NextOpt = Annotated[bool, typer.Option(
    "--next-level", help="The change is the next level of chain one (`kvdoctor plan`) from the baseline (needs --gpu).",
    rich_help_panel=_CH)]
AttachOpt = Annotated[Optional[str], typer.Option(
    "--attach", help="Measure a server already running at this URL (never started or stopped by kvdoctor); measure-only.",
    rich_help_panel=_RUN)]
VllmCmdOpt = Annotated[str, typer.Option(
    "--vllm-cmd", help="How to run vLLM: 'vllm', a path, or 'python -m vllm.entrypoints.cli.main'.", rich_help_panel=_RUN)]
HostOpt = Annotated[str, typer.Option("--host", help="Address the server binds to.", rich_help_panel=_RUN)]
PortOpt = Annotated[Optional[int], typer.Option("--port", help="Port (default: a free one). A port in use is refused.", rich_help_panel=_RUN)]
HealthOpt = Annotated[float, typer.Option("--health-timeout", help="Seconds to wait for /health.", rich_help_panel=_RUN)]
BenchTOpt = Annotated[float, typer.Option("--bench-timeout", help="Seconds one load may take.", rich_help_panel=_RUN)]
ServedOpt = Annotated[Optional[str], typer.Option("--served-model-name-for-bench", help="Model name the bench sends (default: the served name, else the model).", rich_help_panel=_RUN, hidden=True)]
OutOpt = Annotated[Optional[Path], typer.Option("--out", help="Folder for every file of the runs (default: ./kvdoctor-experiments/<time>).", rich_help_panel=_RUN)]

TraceOpt = Annotated[Optional[str], typer.Option("--trace", help="Replay a request trace (CSV/JSONL as `simulate --trace`: arrival, prompt and output tokens) at its timestamps (bench's timed_trace dataset).", rich_help_panel=_LOAD)]
DistOpt = Annotated[Optional[str], typer.Option("--prompt-dist", help="Lengths: fixed:PROMPT:OUTPUT or random:PROMPT:OUTPUT:RANGE_RATIO (bench's random dataset; default fixed:512:128). Or use the bench-style options below.", rich_help_panel=_LOAD)]
ReqOpt = Annotated[Optional[int], typer.Option("--requests", "-n", help="Number of requests (bench --num-prompts; default 100).", rich_help_panel=_LOAD)]
RateOpt = Annotated[Optional[float], typer.Option("--rate", help="Requests per second (default: all at once).", rich_help_panel=_LOAD)]
ArrOpt = Annotated[str, typer.Option("--arrival", help="poisson or gamma (bench --burstiness = 1/cv²).", rich_help_panel=_LOAD)]
CvOpt = Annotated[float, typer.Option("--cv", help="Coefficient of variation of gamma inter-arrivals.", rich_help_panel=_LOAD)]
NoProbeOpt = Annotated[bool, typer.Option("--no-host-probe", help="Do not time a lone decode before and after each load (the probe that tells the host's drift from the change's effect; 12 short requests per run, 6 before and 6 after its load).", rich_help_panel=_LOAD)]
WarmOpt = Annotated[Optional[int], typer.Option("--warmup-requests", help="Requests sent to each server before the timed load and discarded: the same load with another seed (default: a tenth of --requests, 8-200, and none for --attach; 0: none).", rich_help_panel=_LOAD)]

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="Journal file (default: $KVDOCTOR_JOURNAL or ./kvdoctor-journal.sqlite).", rich_help_panel=_J, dir_okay=False)]
JournalOpt = Annotated[Optional[str], typer.Option("--journal", "-j", help="Journal name (default: 'experiment'; created when absent).", rich_help_panel=_J)]
NoRecOpt = Annotated[bool, typer.Option("--no-record", help="Do not write to the journal (the run folder still keeps everything).", rich_help_panel=_J)]
NoteOpt = Annotated[Optional[str], typer.Option("--note", help="Why this experiment (kept verbatim in the journal).", rich_help_panel=_J)]
MaxPreOpt = Annotated[Optional[int], typer.Option("--max-preemptions", help="Target: at most this many preemptions during the load (default 0).", rich_help_panel=_J)]
MinTpsOpt = Annotated[Optional[float], typer.Option("--min-output-tps", help="Target: output throughput at least this (tok/s).", rich_help_panel=_J)]
MaxTtftOpt = Annotated[Optional[float], typer.Option("--max-ttft-p99", help="Target: TTFT p99 at most this (seconds).", rich_help_panel=_J)]
MaxWaitOpt = Annotated[Optional[int], typer.Option("--max-waiting", help="Target: peak waiting requests at most this.", rich_help_panel=_J)]
TConcOpt = Annotated[Optional[int], typer.Option("--target-concurrency", help="Chain one's target (as `plan`): concurrent requests at the context limit.", rich_help_panel=_CH)]
TCtxOpt = Annotated[Optional[int], typer.Option("--target-context", help="Chain one's target (as `plan`): the context the business must serve.", rich_help_panel=_CH)]


@dataclass
class RunOptions:
    """The server, load, journal and target options ``experiment`` and ``experiment chain`` share."""

    vllm_cmd: str = "vllm"
    host: str = "127.0.0.1"
    port: Optional[int] = None
    health_timeout: float = 600.0
    bench_timeout: float = 1800.0
    out: Optional[Path] = None
    trace: Optional[str] = None
    prompt_dist: Optional[str] = None
    requests: Optional[int] = None
    rate: Optional[float] = None
    arrival: str = "poisson"
    cv: float = 1.0
    warmup_requests: Optional[int] = None
    no_host_probe: bool = False
    db: Optional[Path] = None
    journal: Optional[str] = None
    no_record: bool = False
    note: Optional[str] = None
    max_preemptions: Optional[int] = None
    min_output_tps: Optional[float] = None
    max_ttft_p99: Optional[float] = None
    max_waiting: Optional[int] = None
    target_concurrency: Optional[int] = None
    target_context: Optional[int] = None
    json_out: bool = False
    quiet: bool = False


run_options = common.option_bundle("run", RunOptions, {
    "vllm_cmd": VllmCmdOpt, "host": HostOpt, "port": PortOpt, "health_timeout": HealthOpt, "bench_timeout": BenchTOpt,
    "out": OutOpt, "trace": TraceOpt, "prompt_dist": DistOpt, "requests": ReqOpt, "rate": RateOpt, "arrival": ArrOpt,
    "cv": CvOpt, "warmup_requests": WarmOpt, "no_host_probe": NoProbeOpt, "db": DbOpt, "journal": JournalOpt, "no_record": NoRecOpt, "note": NoteOpt,
    "max_preemptions": MaxPreOpt, "min_output_tps": MinTpsOpt, "max_ttft_p99": MaxTtftOpt, "max_waiting": MaxWaitOpt,
    "target_concurrency": TConcOpt, "target_context": TCtxOpt, "json_out": common.JsonOpt, "quiet": common.QuietOpt,
})


def _stderr(msg: str) -> None:
    sys.stderr.write(f"kvdoctor experiment: {msg}\n")
    sys.stderr.flush()


@experiment_app.callback()
@common.config_options
@workload_opts.workload_options
@run_options
def experiment_cmd(
    ctx: typer.Context,
    opts: common.ConfigOptions,
    wl: workload_opts.WorkloadOptions,
    run: RunOptions,
    set_: SetOpt = None,
    next_level: NextOpt = False,
    attach: AttachOpt = None,
) -> None:
    """Baseline + ONE change (--set FLAG=VALUE or --next-level), each run on a real vLLM server and measured
    with `vllm bench serve`; both recorded in the journal beside kvdoctor's prediction."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = dict(locals())  # `experiment chain` reads the shared options given before it
        return
    from kvdoctor.errors import InputError

    if set_ and next_level:
        raise InputError("give either --set FLAG=VALUE or --next-level, not both: one change per experiment")
    if not set_ and not next_level and not attach:
        raise InputError("no change: give --set FLAG=VALUE or --next-level (or --attach URL to measure only); "
                         "see 'kvdoctor experiment --help'")
    opts, how = _running_version(opts, run, attach)
    base = _baseline(opts)
    base.notes.append(f"vLLM {base.vllm_version}: {how}")
    levels = [_level("before", base.config)]
    if set_ or next_level:
        levels.append(_change_level(base, opts, set_, next_level, run.target_concurrency, run.target_context))
    _run(levels, base, wl, run, attach=attach, stop_early=False, version_how=how)


@experiment_app.command("chain")
@common.config_options
@workload_opts.workload_options
@run_options
def chain_cmd(
    ctx: typer.Context,
    opts: common.ConfigOptions,
    wl: workload_opts.WorkloadOptions,
    run: RunOptions,
) -> None:
    """Walk chain one's levels for real: measure the baseline, then each level of `kvdoctor plan` on top of the
    previous one, until a level is enough or the stop-loss line (a level that buys nothing, or none left)."""
    from kvdoctor.errors import InputError

    opts, how = _running_version(opts, run, None)
    base = _baseline(opts)
    base.notes.append(f"vLLM {base.vllm_version}: {how}")
    if base.gpu is None:
        raise InputError("experiment chain needs --gpu: chain one's levels come from the memory ledger")
    from kvdoctor.chains.plan import State, Target, make_plan

    p = make_plan(base.shape, base.gpu, base.config, version=base.vllm_version,
                  target=Target(concurrency=run.target_concurrency, context=run.target_context), stop_when_enough=False,
                  before=State(base.config, base.resolved, base.predicted_ledger))
    levels = [_level("before", base.config)]
    cfg = base.config
    for lv in p.levels:
        if not lv.applicable or not lv.flag_change:
            continue
        from kvdoctor.experiment.core import Level, TwoVariables, apply_change

        try:
            cfg, change = apply_change(cfg, dict(lv.flag_change), origin=f"chain one level {lv.level}")
        except TwoVariables as exc:
            _stderr(f"level {lv.level} ({lv.flags}) moves more than one variable: the chain stops before it ({exc})")
            break
        levels.append(Level(f"level{lv.level}", cfg, change, title=f"chain one, level {lv.level}: {lv.title} ({lv.flags})"))
    if len(levels) == 1:
        raise InputError("chain one has no applicable level for this configuration (see `kvdoctor plan`): nothing to try")
    exhausted = None
    if p.stop_loss is not None:
        exhausted = f"kvdoctor plan's stop-loss: {getattr(p.stop_loss, 'title', '')} {getattr(p.stop_loss, 'summary', '')}".strip()
    _run(levels, base, wl, run, stop_early=True, exhausted_note=exhausted, version_how=how)


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureOnly:
    """The baseline of a model kvdoctor cannot read (not in the catalog, no config.json here): its configuration
    is still run and measured, with no shape and no GPU, so nothing is predicted. Reads like a ``Deployment``
    where ``_run`` and ``_change_level`` read one (``shape``, ``gpu``, ``vllm_version``, ``notes``)."""

    config: EngineConfig
    vllm_version: str
    notes: list[str]
    shape: None = None
    gpu: None = None


def _running_version(opts: common.ConfigOptions, run: RunOptions, attach: str | None
                     ) -> tuple[common.ConfigOptions, str]:
    """--vllm-version, else the version of the vLLM that will run (the server at --attach, else --vllm-cmd): its
    defaults and scheduler are the ones to predict with. (options, how the version was chosen)."""
    import dataclasses
    import json

    from kvdoctor.engine.version import parse_version
    from kvdoctor.experiment.server import detect_vllm_version, http_get

    if opts.vllm_version:
        return opts, "--vllm-version"
    if attach:
        url = f"{attach.rstrip('/')}/version"
        status, body = http_get(url, timeout=5.0)
        v, how = None, f"GET {url}"
        try:
            v = json.loads(body).get("version") if status == 200 else None
        except (ValueError, AttributeError):
            how += ": not JSON"
    else:
        v, how = detect_vllm_version(run.vllm_cmd)
    if isinstance(v, str):
        try:
            parse_version(v)
        except Exception:  # noqa: BLE001 - an unreadable answer leaves the default, said in a note
            v = None
    if not isinstance(v, str):
        return opts, f"not read ({how}): the default applies"
    return dataclasses.replace(opts, vllm_version=v), how


def _baseline(opts: common.ConfigOptions) -> Deployment | MeasureOnly:
    """The baseline's Inputs. Without --gpu the model is still read when it can be (prediction needs both)."""
    from kvdoctor.errors import KvdoctorError

    try:
        return common.resolve_inputs(opts, need_gpu=False)
    except KvdoctorError:
        if opts.serve or opts.config or opts.model:
            from kvdoctor.deployment import DEFAULT_VLLM_VERSION, merge_config

            return MeasureOnly(config=merge_config(common.deployment_inputs(opts)),
                               vllm_version=opts.vllm_version or DEFAULT_VLLM_VERSION,
                               notes=["kvdoctor cannot read this model: no prediction"])
        raise


def _level(label: str, cfg):
    from kvdoctor.experiment.core import Level

    return Level(label, cfg)


def _change_level(base: Deployment | MeasureOnly, opts, set_, next_level, tconc, tctx):
    from kvdoctor.errors import InputError
    from kvdoctor.experiment.core import Level, apply_change, parse_set

    if set_:
        changed, ch = apply_change(base.config, parse_set(set_))
        return Level("after", changed, ch)
    if base.gpu is None or base.shape is None:
        raise InputError("--next-level needs --gpu and a model kvdoctor can read: chain one's levels come from the ledger")
    from kvdoctor.chains.plan import State, Target, make_plan

    p = make_plan(base.shape, base.gpu, base.config, version=base.vllm_version,
                  target=Target(concurrency=tconc, context=tctx), stop_when_enough=False,
                  before=State(base.config, base.resolved, base.predicted_ledger))
    for lv in p.levels:
        if lv.applicable and lv.flag_change:
            changed, ch = apply_change(base.config, dict(lv.flag_change), origin=f"chain one level {lv.level}")
            return Level("after", changed, ch, title=f"chain one, level {lv.level}: {lv.title} ({lv.flags})")
    raise InputError("chain one has no applicable level for this configuration (see `kvdoctor plan`)")


def _load(wl: workload_opts.WorkloadOptions, o: RunOptions):
    """The load: kvdoctor simulate's options (--prompt-dist, --rate, --requests, --arrival/--cv, --trace) or the
    shared bench-style ones (--random-input-len, --request-rate, --num-prompts, --burstiness ...: workload_opts);
    --max-concurrency and --seed apply to both. Not both styles at once."""
    from kvdoctor.errors import InputError
    from kvdoctor.experiment.load import LoadSpec, parse_prompt_dist

    legacy = [n for n, v in (("--prompt-dist", o.prompt_dist), ("--rate", o.rate), ("--requests", o.requests))
              if v is not None] + (["--arrival"] if o.arrival != "poisson" else []) + (["--cv"] if o.cv != 1.0 else [])
    trace = o.trace
    if trace and not Path(trace).is_file():
        raise InputError(f"--trace: no such file: {trace}")
    if wl.asked():
        if legacy:
            raise InputError(f"give the load either with {', '.join(legacy)} or with the bench-style options "
                             "(--random-input-len, --request-rate, --num-prompts ...), not both")
        spec = wl.spec(trace=trace, default_prompts=100)
        if spec is not None and spec.offline:
            raise InputError(f"experiment drives `vllm bench serve` against the server it starts; a `vllm bench "
                             f"{spec.offline}` line is an offline run (give its lengths as --random-input-len/"
                             "--random-output-len, or predict it with kvdoctor simulate --bench-cmd)")
        load = LoadSpec.from_workload_spec(spec)
    else:
        if trace and o.rate is not None:
            raise InputError("give either --trace (replayed at its own timestamps) or --rate, not both")
        p_len, o_len, ratio = parse_prompt_dist(o.prompt_dist or "fixed:512:128")
        load = LoadSpec(prompt_len=p_len, output_len=o_len, range_ratio=ratio,
                        requests=o.requests if o.requests is not None else 100, rate=o.rate,
                        arrival=o.arrival, cv=o.cv, max_concurrency=wl.max_concurrency, seed=wl.seed,
                        trace=trace)
    if load.trace:
        load.sim_workload()  # a trace kvdoctor cannot read is bad input now, not after a server started
    return load


def _run(levels, base: Deployment | MeasureOnly, wl: workload_opts.WorkloadOptions, o: RunOptions, *,
         attach: str | None = None, stop_early: bool, exhausted_note: str | None = None,
         version_how: str = "") -> None:
    from kvdoctor.cli.output import console, emit_json
    from kvdoctor.experiment.core import Experiment, Targets, run_experiment
    from kvdoctor.experiment.load import LoadSpec, parse_prompt_dist

    load = _load(wl, o)
    load.warmup(o.warmup_requests)  # a negative count is bad input before any server starts
    targets = Targets(max_preemptions=0 if o.max_preemptions is None else o.max_preemptions,
                      min_output_tps=o.min_output_tps, max_ttft_p99_s=o.max_ttft_p99,
                      max_waiting_peak=o.max_waiting)
    out = o.out or Path("kvdoctor-experiments") / time.strftime("%Y%m%d-%H%M%S")
    quiet = o.quiet
    log = (lambda m: None) if quiet else _stderr
    exp = Experiment(levels=levels, load=load, out_dir=Path(out), vllm_cmd=o.vllm_cmd, host=o.host,
                     port=o.port, attach=attach, health_timeout_s=o.health_timeout,
                     bench_timeout_s=o.bench_timeout, journal_db=str(o.db) if o.db else None,
                     journal_name=o.journal, record=not o.no_record, note=o.note, targets=targets,
                     shape=base.shape, gpu=base.gpu, vllm_version=base.vllm_version, vllm_version_how=version_how,
                     stop_early=stop_early,
                     exhausted_note=exhausted_note, calibration=wl.load_calibration(),
                     # an attached server is the operator's own, already serving: no warm-up unless asked for
                     warmup_requests=0 if attach and o.warmup_requests is None else o.warmup_requests,
                     host_probe=not o.no_host_probe)
    for n in base.notes:
        log(f"note: {n}")
    rec = run_experiment(exp, log)
    if o.json_out:
        emit_json(rec)
    elif quiet:  # docs/cli.md "--quiet": the verdict, one line
        from kvdoctor.report.oneline import experiment_line
        from kvdoctor.report.terminal import one_line

        one_line(experiment_line(rec))
    else:
        from kvdoctor.experiment.render import render

        render(rec, console())
    if rec["status"] != "complete":
        raise typer.Exit(3 if rec.get("reason_code") == "interrupted" else 1)
