"""The one-variable experiment: baseline and one change, each run for real, predicted, journaled, judged.

Order of work (each step's files stay in ``out_dir/<label>/`` whatever happens later):

1. check everything that needs no server: the change moves exactly one variable (engine.diff), the vLLM
   command exists, the journal accepts the baseline (one-variable rule against its last step);
2. predict both configurations with kvdoctor's simulator (sim.whatif) on the same load — when the model and
   GPU are known — *before* measuring, so the prediction cannot be tuned to the outcome;
3. measure the baseline, record it (a new journal's baseline, or a re-measure step);
4. measure the change, record it as a step with the prediction and the prediction's error;
5. the verdict: enough (targets met and the primary figure not worse), not enough (better but targets
   missed), stop-loss (the change bought nothing measurable), inconclusive (the host probe says the machine
   itself moved as much as the figures did: experiment.probe).

A run that cannot complete (vLLM missing, port taken, server died, Ctrl-C) is never recorded as a step — a
step's figures become the next step's "before", and half a measurement would mislead every later step.
It is recorded as a note on the journal's last step (reason and folder), its files are kept, and the
experiment's own record (``experiment.json``) marks it ``incomplete`` with the reason.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor.engine.config import ENGINE_FIELDS, EngineConfig
from kvdoctor.errors import InputError, KvdoctorError
from kvdoctor.experiment.load import LoadSpec
from kvdoctor.experiment.measure import RunResult, measure_run
from kvdoctor.experiment.probe import confounds, describe, drift
from kvdoctor.experiment.readout import read_run, read_startup
from kvdoctor.experiment.server import ExperimentError, check_port_free, free_port, resolve_cmd

SCHEMA = "kvdoctor.experiment/1"
FLAT = 0.05  # as the journal: one before/after pair has no error bars; 5 % ≈ a bench's run-to-run spread
# Settings an experiment owns (where the server listens): never part of the configuration under test.
_LAUNCH_OWNED = {"host", "port", "uds"}

# Figures compared before/after: name -> (label, unit, direction: +1 higher better, -1 lower, 0 neither)
COMPARED: dict[str, tuple[str, str, int]] = {
    "output_tps": ("output throughput", "tok/s", +1),
    "request_throughput": ("request throughput", "req/s", +1),
    "ttft_p50_s": ("TTFT p50", "s", -1),
    "ttft_p99_s": ("TTFT p99", "s", -1),
    "tpot_p50_s": ("TPOT p50", "s", -1),
    "tpot_p99_s": ("TPOT p99", "s", -1),
    "itl_p50_s": ("ITL p50", "s", -1),
    "itl_p99_s": ("ITL p99", "s", -1),
    "preemptions": ("preemptions", "", -1),
    "waiting_peak": ("waiting peak", "req", -1),
    "queue_time_mean_s": ("mean queue time", "s", -1),
    "kv_usage_peak_pct": ("KV usage peak", "%", 0),
    "kv_usage_mean_pct": ("KV usage mean", "%", 0),
    "prefix_cache_hit_pct": ("prefix-cache hits", "%", 0),
    "pool_tokens": ("KV pool", "tokens", 0),
}
# simulator summary key -> our figure name
_PRED_KEYS = {"output_tokens_per_s": "output_tps", "ttft_p50_s": "ttft_p50_s", "ttft_p99_s": "ttft_p99_s",
              "tbt_p50_s": "itl_p50_s", "tbt_p99_s": "itl_p99_s", "preemptions": "preemptions",
              "peak_kv_usage_pct": "kv_usage_peak_pct", "mean_kv_usage_pct": "kv_usage_mean_pct",
              "queue_mean_s": "queue_time_mean_s"}


class TwoVariables(KvdoctorError):
    """The requested change moves more (or fewer) than one variable: the experiment refuses (exit 1)."""

    exit_code = 1


# --------------------------------------------------------------------------------------------
# configurations


def launch_args(cfg: EngineConfig) -> tuple[str, list[str], dict[str, str]]:
    """(model, flags, env) to start ``cfg`` with ``vllm serve``. host/port are the experiment's own."""
    from kvdoctor.chains.plan import flag_text

    if not cfg.model:
        raise InputError("no model: the baseline needs one (--model, a --serve line or a --config file)")
    flags: list[str] = []
    for name in ENGINE_FIELDS:
        if name == "model":
            continue
        v = getattr(cfg, name)
        if v is None:
            continue
        if isinstance(v, (dict, list)):
            flags += [f"--{name.replace('_', '-')}", json.dumps(v)]
        elif isinstance(v, bool):
            flags.append(flag_text(name, v))
        else:
            flags += [f"--{name.replace('_', '-')}", str(v)]
    for k, v in (cfg.extra or {}).items():
        if k in _LAUNCH_OWNED:
            continue
        flag = f"--{str(k).replace('_', '-')}"
        if v is True:
            flags.append(flag)
        elif v is False:
            flags.append(f"--no-{str(k).replace('_', '-')}")
        elif isinstance(v, (dict, list)):
            flags += [flag, json.dumps(v)]
        else:
            flags += [flag, str(v)]
    return cfg.model, flags, {str(k): str(v) for k, v in (cfg.env or {}).items()}


def without_launch_owned(cfg: EngineConfig) -> EngineConfig:
    from dataclasses import replace

    return replace(cfg, extra={k: v for k, v in cfg.extra.items() if k not in _LAUNCH_OWNED})


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set FLAG=VALUE`` (FLAG as vLLM spells it, with or without ``--``) -> {dest: value}."""
    out: dict[str, Any] = {}
    for it in items:
        if "=" not in it:
            raise InputError(f"--set {it!r}: expected FLAG=VALUE, e.g. --set max-num-seqs=8")
        k, v = it.split("=", 1)
        dest = k.strip().lstrip("-").replace("-", "_")
        if not dest:
            raise InputError(f"--set {it!r}: no flag name")
        if dest in _LAUNCH_OWNED:
            raise InputError(f"--set {dest}: where the server listens is not a variable under test (use --host/--port)")
        low = v.strip().lower()
        out[dest] = True if low == "true" else False if low == "false" else v.strip()
    return out


def apply_change(baseline: EngineConfig, change: dict[str, Any], origin: str = "--set") -> tuple[EngineConfig, Any]:
    """(changed configuration, the one engine.diff Change). Refuses anything but exactly one variable."""
    from dataclasses import replace

    from kvdoctor.engine import sources
    from kvdoctor.engine.diff import diff

    if not change:
        raise InputError("no change: give --set FLAG=VALUE or --next-level")
    part = sources.from_flags(change, origin=origin)
    changed = baseline.overlay(part)
    # a boolean extra set to False must replace, not merge away
    changed = replace(changed, origin=f"{baseline.origin} + {origin}")
    moved = diff(baseline, changed)
    if len(moved) != 1:
        what = "; ".join(str(c) for c in moved) or "nothing (the baseline already has that value)"
        raise TwoVariables(f"an experiment changes exactly one variable; this change moves {len(moved)}: {what}")
    return changed, moved[0]


# --------------------------------------------------------------------------------------------
# prediction


@dataclass
class Prediction:
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    ledger: dict[str, Any] = field(default_factory=dict)

    def payload(self, load: LoadSpec) -> dict[str, Any]:
        """A kvdoctor payload the journal reads as the step's prediction (``predicted{}``)."""
        return {"schema_version": SCHEMA, "kind": "prediction", "predicted": {
            "output_tps": self.after.get("output_tps"), "ttft_p50_s": self.after.get("ttft_p50_s"),
            "ttft_p99_s": self.after.get("ttft_p99_s"), "tbt_p50_s": self.after.get("itl_p50_s"),
            "tbt_p99_s": self.after.get("itl_p99_s"), "kv_usage_peak_pct": self.after.get("kv_usage_peak_pct"),
            "kv_usage_mean_pct": self.after.get("kv_usage_mean_pct"),
            "preemptions": self.after.get("preemptions"), "duration_s": self.after.get("duration_s")},
            "before": self.before, "after": self.after, "load": load.as_dict(), "notes": self.notes,
            "ledger": self.ledger}


def predict_one(shape: Any, gpu: Any, version: str, cfg: EngineConfig, load: LoadSpec,
                calibration: Any = None) -> dict[str, Any]:
    """Simulated figures of one configuration on the load (the same requests and seed for every config)."""
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.engine.version import parse_version
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim import whatif

    r = resolve(cfg, shape, gpu, version=parse_version(version), usage="api")
    led = build_ledger(shape, gpu, r)
    if not led.fit_ok:
        return {"error": f"predicted not to start: {led.startup_error}"}
    layout = whatif.kv_layout(led.plan.grouping) if led.plan is not None else None
    res = whatif.run(shape, gpu, r, led.num_blocks, load.sim_workload(), layout=layout, calibration=calibration)
    s = res.summary.as_dict()
    out: dict[str, Any] = {name: s.get(key) for key, name in _PRED_KEYS.items()}
    out["duration_s"] = s.get("duration_s")
    out["num_blocks"] = int(led.num_blocks)
    out["pool_tokens"] = int(led.num_blocks) * int(r.block_size)
    out["max_num_seqs"] = r.max_num_seqs
    outside = whatif.calibrated_range_check(calibration, res)
    if outside.get("outside_range"):
        out["outside_calibrated_range"] = outside["notes"]
    return out


def predict(shape: Any, gpu: Any, version: str, before: EngineConfig, after: EngineConfig,
            load: LoadSpec) -> Prediction:
    """Simulate both configurations on the load (same requests, same seed)."""
    return Prediction(before=predict_one(shape, gpu, version, before, load),
                      after=predict_one(shape, gpu, version, after, load), notes=load.prediction_notes())


# --------------------------------------------------------------------------------------------
# comparison and verdict


def _val(f: Any) -> float | None:
    if isinstance(f, dict):
        f = f.get("value")
    if isinstance(f, bool) or f is None:
        return None
    try:
        x = float(f)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _rel(b: float | None, a: float | None) -> float | None:
    if b is None or a is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else None
    return (a - b) / abs(b)


def compare(before: dict[str, Any], after: dict[str, Any], pred: Prediction | None) -> list[dict[str, Any]]:
    """One row per figure: measured before/after and change; predicted before/after and change; the
    prediction's error on the after value ((predicted − measured) / measured) and on the change
    (predicted change − measured change, in points)."""
    rows = []
    for name, (label, unit, direction) in COMPARED.items():
        mb, ma = _val(before.get(name)), _val(after.get(name))
        pb = _val((pred.before if pred else {}).get(name))
        pa = _val((pred.after if pred else {}).get(name))
        if mb is None and ma is None and pa is None:
            continue
        m_rel, p_rel = _rel(mb, ma), _rel(pb, pa)
        if m_rel is None:
            call = None
        elif abs(m_rel) < FLAT:
            call = "flat"
        elif direction == 0:
            call = "changed"
        else:
            call = "better" if m_rel * direction > 0 else "worse"
        rows.append({
            "figure": name, "label": label, "unit": unit,
            "measured_before": mb, "measured_after": ma, "measured_change": m_rel, "call": call,
            "predicted_before": pb, "predicted_after": pa, "predicted_change": p_rel,
            "error_after": ((pa - ma) / abs(ma)) if (pa is not None and ma) else None,
            "error_change_points": ((p_rel - m_rel) * 100.0) if (p_rel is not None and m_rel is not None) else None,
        })
    return rows


@dataclass
class Targets:
    max_preemptions: int | None = 0
    min_output_tps: float | None = None
    max_ttft_p99_s: float | None = None
    max_waiting_peak: int | None = None

    def check(self, figs: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for name, limit, op, label in (("preemptions", self.max_preemptions, "<=", "preemptions"),
                                       ("output_tps", self.min_output_tps, ">=", "output throughput"),
                                       ("ttft_p99_s", self.max_ttft_p99_s, "<=", "TTFT p99"),
                                       ("waiting_peak", self.max_waiting_peak, "<=", "waiting peak")):
            if limit is None:
                continue
            v = _val(figs.get(name))
            met = None if v is None else (v <= limit if op == "<=" else v >= limit)
            out.append({"figure": name, "label": label, "limit": limit, "op": op, "value": v, "met": met})
        return out

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def verdict(rows: list[dict[str, Any]], checks: list[dict[str, Any]],
            host: dict[str, Any] | None = None) -> tuple[str, str]:
    """(enough | not enough | stop-loss | inconclusive, why). The primary figure is output throughput; preemptions
    count too (chain one's goal is to end persistent preemption). ``host``: the host probe's drift between and
    within the two runs (experiment.probe.drift); where the throughput change cannot be told from the host's
    movement (experiment.probe.confounds), no call is made on it: inconclusive, rerun."""
    by = {r["figure"]: r for r in rows}
    tps = by.get("output_tps", {})
    pre = by.get("preemptions", {})
    if host and confounds(tps.get("measured_change"), host, FLAT):
        return "inconclusive", (
            f"output throughput {tps['measured_before']:.1f} → {tps['measured_after']:.1f} tok/s "
            f"({tps['measured_change']:+.0%}), but the host itself moved by up to {host['size']:.0%} "
            f"({_host_words(host)}): the change cannot be told from the host; rerun the experiment on a quiet host")
    improved = tps.get("call") == "better" or (
        pre.get("measured_before") and (pre.get("measured_after") or 0) < pre["measured_before"] * (1 - FLAT))
    worse = tps.get("call") == "worse"
    missed = [c for c in checks if c["met"] is False]
    unknown = [c for c in checks if c["met"] is None]
    tps_txt = (f"output throughput {tps['measured_before']:.1f} → {tps['measured_after']:.1f} tok/s "
               f"({tps['measured_change']:+.0%})" if tps.get("measured_change") is not None else
               "output throughput not measured")
    if not missed and not unknown and not worse:
        return "enough", f"every target met after the change; {tps_txt}"
    missed_txt = "; ".join(f"{c['label']} {c['value']:g} (target {c['op']} {c['limit']:g})" for c in missed)
    if unknown and not missed:
        missed_txt = "not measured: " + ", ".join(c["label"] for c in unknown)
    if improved and not worse:
        return "not enough", f"{tps_txt}, but {missed_txt or 'a target is missed'}: take the next step"
    why = "made it worse" if worse else "moved nothing beyond the 5 % noise band"
    return "stop-loss", (f"the change {why} ({tps_txt}; {missed_txt or 'targets met but throughput fell'}): "
                         "stop turning this knob")


def _host_words(host: dict[str, Any]) -> str:
    return (host.get("text") or describe(host)).removeprefix("host probe: ")


# --------------------------------------------------------------------------------------------
# the experiment


@dataclass
class Level:
    """One configuration of the sequence: the baseline (change None) or one change on top of the previous."""

    label: str
    config: EngineConfig
    change: Any = None  # engine.diff.Change from the previous level's configuration
    title: str | None = None  # e.g. "chain one, level 2: KV cache in FP8"


@dataclass
class Experiment:
    levels: list[Level]  # [baseline, change...]; one element = measure only
    load: LoadSpec
    out_dir: Path
    vllm_cmd: str = "vllm"
    host: str = "127.0.0.1"
    port: int | None = None
    attach: str | None = None
    health_timeout_s: float = 600.0
    bench_timeout_s: float = 1800.0
    journal_db: str | None = None
    journal_name: str | None = None
    record: bool = True
    note: str | None = None
    targets: Targets = field(default_factory=Targets)
    shape: Any = None
    gpu: Any = None
    vllm_version: str = "0.33.0"
    vllm_version_how: str = ""  # "--vllm-version", "the installed package's metadata", "GET .../version", ...
    served_name: str | None = None
    tokenizer: str | None = None
    calibration: Any = None  # sim.calibration.Calibration (--calibration FILE): this deployment's time model
    warmup_requests: int | None = None  # --warmup-requests: None = LoadSpec.warmup's default, 0 = none
    stop_early: bool = False  # chain: stop at the first level that is enough, or at stop-loss
    exhausted_note: str | None = None  # chain: what to say when every level was tried and none was enough
    host_probe: bool = True  # time a lone decode before and after each load (experiment.probe): the host's drift

    @property
    def baseline(self) -> EngineConfig:
        return self.levels[0].config


def _journal_exists(db: str | None, name: str) -> bool:
    from kvdoctor.journal.store import JournalStore, default_db_path

    path = Path(db) if db else default_db_path()
    if not path.exists() or path.stat().st_size == 0:
        return False
    with JournalStore(db, create=False) as store:
        return any(j["name"] == name for j in store.journals())


def _journal_precheck(exp: Experiment) -> dict[str, Any]:
    """Before any server starts: will the journal take the baseline (and then the change)?"""
    from kvdoctor.journal import configs
    from kvdoctor.journal.store import JournalStore

    name = exp.journal_name or "experiment"
    if not _journal_exists(exp.journal_db, name):
        return {"name": name, "exists": False, "baseline_as": "baseline"}
    with JournalStore(exp.journal_db, create=False) as store:
        last = store.steps(name)[-1]
    changes = configs.config_changes(last.config, configs.config_to_dict(without_launch_owned(exp.baseline)))
    if len(changes) > 1:
        raise TwoVariables(
            f"journal {name!r}: the baseline differs from its last step #{last.seq} in {len(changes)} variables ("
            + "; ".join(f"{c['field']}: {c['before']} -> {c['after']}" for c in changes)
            + "); start the experiment from that step's configuration, or use another --journal")
    return {"name": name, "exists": True, "last_seq": last.seq,
            "baseline_as": "re-measure" if not changes else f"a step changing {changes[0]['field']}"}


# The journal's figures from what the run itself measured (the 1-s /metrics samples and the counter): a
# scrape taken after the load is idle and would read peak waiting/KV as 0.
_JOURNAL_FIGS = {"waiting_peak": "waiting_peak", "waiting_mean": "waiting_mean",
                 "kv_usage_peak_pct": "kv_usage_peak_pct", "kv_usage_mean_pct": "kv_usage_mean_pct",
                 "preemptions_per_min": "preemptions_per_min"}


def _journal_inputs(run: RunResult, measured: dict[str, Any]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """(bench files, extra figures, file references) for a journal step. The bench result is the measure of
    record for throughput and latency (one kind of evidence on both sides: like for like); the server log and
    the /metrics scrapes are kept by reference (path + sha256), their facts in the experiment record."""
    from kvdoctor.journal.api import file_digests

    bench = [str(run.file("bench"))] if run.file("bench") else []
    figs = {name: measured[key] for key, name in _JOURNAL_FIGS.items() if key in measured}
    refs = {k: str(p) for k in ("serve_log", "metrics_before", "metrics_after", "metrics_samples")
            if (p := run.file(k)) is not None}
    return bench, figs, {"files": refs, "file_digests": {k: file_digests([v])[0] for k, v in refs.items()}}


def cached_load_note(measured: dict[str, Any], load: LoadSpec) -> str | None:
    """A timed load that found far more of its prompts in the prefix cache than its shared prefix explains: an earlier
    run with the same --seed on the same server left them there (vllm#54227: TTFT 49x lower, TPOT -34 % on a repeat),
    so its latencies are a warm cache's. Said for any run; on a server kvdoctor starts it should not happen."""
    hit = (measured.get("prefix_cache_hit_pct") or {}).get("value")
    if hit is None or load.trace:
        return None
    shared = 100.0 * load.prefix_len / (load.prefix_len + load.prompt_len) if load.prefix_len else 0.0
    if hit < shared + 25.0:
        return None
    return (f"the timed load found {hit:g} % of its prompt tokens in the prefix cache, where its shared prefix "
            f"explains {shared:.0f} %: an earlier run with the same --seed {load.seed} on this server left its prompts "
            "there (vllm#54227), so its TTFT and TPOT are a warm cache's. Use another --seed, or reset the cache "
            "(POST /reset_prefix_cache on a server started with VLLM_SERVER_DEV_MODE=1)")


def _change_dict(ch: Any) -> dict[str, Any] | None:
    return None if ch is None else {"field": str(ch.field), "before": ch.before, "after": ch.after}


def run_experiment(exp: Experiment, log: Callable[[str], None]) -> dict[str, Any]:
    """Run it. Returns the experiment record (also written to ``out_dir/experiment.json``). SIGTERM/SIGHUP are
    handled as Ctrl-C while it runs."""
    from kvdoctor.experiment.server import terminate_as_interrupt

    with terminate_as_interrupt():
        return _run_experiment(exp, log)


def _run_experiment(exp: Experiment, log: Callable[[str], None]) -> dict[str, Any]:
    from kvdoctor.journal import api

    t0 = time.time()
    if exp.attach and len(exp.levels) > 1:
        raise InputError("--attach measures a server kvdoctor did not start: it cannot change its configuration "
                         "(drop --set/--next-level, or let kvdoctor start the server)")
    vllm_argv = resolve_cmd(exp.vllm_cmd)  # vLLM missing: refused before anything starts
    if exp.port is not None and not exp.attach:
        check_port_free(exp.host, exp.port)
    journal = _journal_precheck(exp) if exp.record else None
    exp.out_dir.mkdir(parents=True, exist_ok=True)
    rec: dict[str, Any] = {
        "schema_version": SCHEMA, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "directory": str(exp.out_dir), "status": "running", "reason": None, "reason_code": None,
        "levels": [{"label": lv.label, "title": lv.title, "change": _change_dict(lv.change)} for lv in exp.levels],
        "change": _change_dict(exp.levels[1].change) if len(exp.levels) > 1 else None,
        "load": exp.load.as_dict(), "load_text": exp.load.describe(), "targets": exp.targets.as_dict(),
        "warmup": (w := exp.load.warmup(exp.warmup_requests)) and {"requests": w.requests, "seed": w.seed},
        "vllm_version": {"value": exp.vllm_version, "how": exp.vllm_version_how or "default"},
        "journal": journal, "runs": {}, "measured": {}, "startup": {}, "predicted": {}, "prediction_notes": [],
        "steps": [], "comparison": [], "verdict": None, "verdict_why": None,
        "journal_steps": [], "journal_notes": [], "measurement_notes": [],
    }
    _write(exp.out_dir, rec)

    prev: Level | None = None
    try:
        if len(exp.levels) > 1 and exp.shape is not None and exp.gpu is not None:
            log("predicting every configuration with kvdoctor's simulator (before measuring anything)")
            rec["prediction_notes"] = exp.load.prediction_notes() + (
                ["time model: this deployment's calibration (--calibration)"] if exp.calibration is not None else
                ["time model: kvdoctor's GPU step-time model for --gpu (no --calibration)"])
            from kvdoctor.sim.whatif import uncertainty, uncertainty_text, workload_regime

            band = uncertainty_text(uncertainty(exp.calibration, regime=workload_regime(exp.load.sim_workload())))
            if band:  # how far the prediction is to be trusted before it meets the measurement
                rec["prediction_notes"].append("prediction uncertainty: " + band)
            for lv in exp.levels:
                try:
                    rec["predicted"][lv.label] = predict_one(exp.shape, exp.gpu, exp.vllm_version, lv.config, exp.load,
                                                             exp.calibration)
                    rec["prediction_notes"] += [f"{lv.label}: {n}" for n in
                                                rec["predicted"][lv.label].get("outside_calibrated_range", [])]
                except KvdoctorError as exc:
                    rec["predicted"][lv.label] = {"error": f"prediction failed: {exc}"}
        elif len(exp.levels) > 1:
            rec["prediction_notes"] = ["no prediction: pass --gpu (and a model kvdoctor can read) to get one"]
        _write(exp.out_dir, rec)

        for lv in exp.levels:
            run = _measure(exp, lv.label, lv.config, vllm_argv, log)
            rec["runs"][lv.label] = run.as_dict()
            rec["measured"][lv.label] = read_run(run)
            rec["startup"][lv.label] = read_startup(run) if not exp.attach else {}
            if exp.host_probe and len(exp.levels) == 1 and run.probes:  # measure-only: the one movement there is
                rec["measurement_notes"].append(describe(drift(None, run.probes, None), ("", lv.label)))
            if (warm := cached_load_note(rec["measured"][lv.label], exp.load)) is not None:
                rec["measurement_notes"].append(f"{lv.label}: {warm}")
                log(f"[{lv.label}] note: {warm}")
            _write(exp.out_dir, rec)
            if not run.complete:
                rec["status"], rec["reason"] = "incomplete", f"{lv.label} run: {run.reason}"
                rec["reason_code"] = run.reason_code
                break
            step_rec: dict[str, Any] | None = None
            if prev is not None:
                pred = None
                pb, pa = rec["predicted"].get(prev.label), rec["predicted"].get(lv.label)
                if pb and pa and "error" not in pb and "error" not in pa:
                    pred = Prediction(before=pb, after=pa, notes=rec["prediction_notes"])
                rows = compare(rec["measured"][prev.label], rec["measured"][lv.label], pred)
                checks = exp.targets.check(rec["measured"][lv.label])
                host = None
                if exp.host_probe:
                    host = drift(rec["runs"][prev.label].get("probes"), rec["runs"][lv.label].get("probes"),
                                 getattr(lv.change, "field", None))
                    host["text"] = describe(host, (prev.label, lv.label))
                    rec["measurement_notes"].append(f"{lv.label}: {host['text']}")
                    log(f"[{lv.label}] {host['text']}")
                v, why = verdict(rows, checks, host)
                step_rec = {"from": prev.label, "to": lv.label, "title": lv.title, "change": _change_dict(lv.change),
                            "comparison": rows, "target_checks": checks, "verdict": v, "verdict_why": why,
                            "host": host, "prediction": pred.payload(exp.load) if pred else None}
                rec["steps"].append(step_rec)
                rec["comparison"], rec["target_checks"] = rows, checks
                rec["verdict"], rec["verdict_why"] = v, why
                log(f"[{lv.label}] verdict: {v} — {why}")
            if exp.record:
                rec["journal_steps"].append(_record(exp, lv, prev, run, rec, step_rec, journal, api, log))
            _write(exp.out_dir, rec)
            prev = lv
            if exp.stop_early and step_rec is not None and step_rec["verdict"] in ("enough", "stop-loss", "inconclusive"):
                rec["stopped_at"] = lv.label
                break
    except KeyboardInterrupt as exc:
        rec["status"], rec["reason"], rec["reason_code"] = "incomplete", f"interrupted ({exc or 'Ctrl-C'})", "interrupted"
        _finish_incomplete(exp, rec, journal, api, log)
        raise
    if rec["status"] == "incomplete":
        _finish_incomplete(exp, rec, journal, api, log)
        return rec
    rec["status"] = "complete"
    if exp.stop_early and rec["verdict"] == "not enough" and prev is exp.levels[-1]:
        rec["verdict"] = "stop-loss"
        rec["verdict_why"] = (f"every level of the chain was tried and none was enough ({rec['verdict_why']})"
                              + (f"; {exp.exhausted_note}" if exp.exhausted_note else ""))
    rec["wall_s"] = round(time.time() - t0, 1)
    _write(exp.out_dir, rec)
    return rec


def _measure(exp: Experiment, label: str, cfg: EngineConfig, vllm_argv: list[str], log) -> RunResult:
    import os

    model, flags, env = launch_args(cfg)
    full_env = dict(os.environ)
    full_env.update(env)
    port = exp.port or free_port(exp.host if exp.host not in ("0.0.0.0", "") else "127.0.0.1")
    return measure_run(label, exp.out_dir / label, vllm_cmd=vllm_argv, model=model, flags=flags, env=full_env,
                       load=exp.load, host=exp.host, port=port, health_timeout_s=exp.health_timeout_s,
                       bench_timeout_s=exp.bench_timeout_s, served_name=exp.served_name or cfg.served_model_name,
                       tokenizer=exp.tokenizer, log=log, attach_url=exp.attach,
                       warmup=exp.load.warmup(exp.warmup_requests), host_probe=exp.host_probe)


def _record(exp: Experiment, lv: Level, prev: Level | None, run: RunResult, rec: dict[str, Any],
            step_rec: dict[str, Any] | None, journal: dict[str, Any] | None, api: Any, log) -> dict[str, Any]:
    name = journal["name"] if journal else (exp.journal_name or "experiment")
    bench, figs, refs = _journal_inputs(run, rec["measured"].get(lv.label) or {})
    extra = {"experiment": {**refs,
        "schema_version": SCHEMA, "run": lv.label, "title": lv.title, "directory": str(run.directory),
        "status": run.status, "measured": rec["measured"].get(lv.label), "startup": rec["startup"].get(lv.label),
        "predicted": rec["predicted"].get(lv.label), "load": rec["load"], "change": _change_dict(lv.change),
        "serve_argv": run.argv, "env": run.env,
        "comparison": step_rec["comparison"] if step_rec else None,
        "verdict": step_rec["verdict"] if step_rec else None,
        "verdict_why": step_rec["verdict_why"] if step_rec else None,
    }}
    what = lv.title or (f"{lv.change.field}: {lv.change.before} -> {lv.change.after}" if lv.change else "baseline")
    note_txt = f"kvdoctor experiment, {lv.label} ({what}); load: {rec['load_text']}"
    if exp.note:
        note_txt += f"; {exp.note}"
    if step_rec and step_rec.get("host"):
        note_txt += f"; {step_rec['host']['text']}"
        if step_rec["verdict"] == "inconclusive":
            note_txt += f"; INCONCLUSIVE: {step_rec['verdict_why']}"
    cfg = without_launch_owned(lv.config)
    if prev is None and journal and not journal["exists"]:
        step = api.start(exp.journal_db, name, config=cfg, bench=bench, note=note_txt,
                         extra_evidence=extra, extra_figures=figs)
        journal["exists"] = True
    else:
        payload = step_rec["prediction"] if step_rec else None
        step = api.record(exp.journal_db, name, config=cfg, bench=bench, note=note_txt,
                          extra_evidence=extra, prediction_payload=payload, extra_figures=figs)
    log(f"[{lv.label}] journal {name!r}: step #{step.seq} recorded")
    return {"run": lv.label, "journal": name, "seq": step.seq}


def _finish_incomplete(exp: Experiment, rec: dict[str, Any], journal: dict[str, Any] | None, api: Any, log) -> None:
    """Mark the experiment incomplete in the journal (a note on its last step) and on disk."""
    _write(exp.out_dir, rec)
    if not exp.record or not journal or not journal.get("exists"):
        log(f"experiment incomplete: {rec['reason']} (nothing recorded in the journal; files in {exp.out_dir})")
        return
    from kvdoctor.journal.store import JournalStore

    text = (f"kvdoctor experiment INCOMPLETE ({rec.get('reason_code')}): {rec['reason']}"
            + "".join(f"; {lv['label']}: {lv['change']['field']} {lv['change']['before']} -> {lv['change']['after']}"
                      for lv in rec.get("levels", []) if lv.get("change"))
            + f"; measured so far kept in {exp.out_dir}")
    try:
        with JournalStore(exp.journal_db, create=False) as store:
            seq = store.steps(journal["name"])[-1].seq
        api.add_note(exp.journal_db, journal["name"], seq, text)
        rec["journal_notes"].append({"journal": journal["name"], "seq": seq, "text": text})
        log(f"experiment incomplete: noted on journal {journal['name']!r} step #{seq}")
    except KvdoctorError as exc:
        log(f"experiment incomplete; could not add the journal note: {exc}")
    _write(exp.out_dir, rec)


def _write(out_dir: Path, rec: dict[str, Any]) -> None:
    from kvdoctor.journal.store import clean
    from kvdoctor.provenance import json_default

    tmp = out_dir / "experiment.json.tmp"
    tmp.write_text(json.dumps(clean(rec), indent=1, default=json_default, allow_nan=False) + "\n")
    tmp.replace(out_dir / "experiment.json")


__all__ = ["Experiment", "Level", "Targets", "TwoVariables", "apply_change", "parse_set", "run_experiment", "launch_args",
           "predict", "compare", "verdict", "ExperimentError"]
