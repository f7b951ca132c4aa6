"""Journal operations the CLI calls: start, record, show, compare. I/O (files, SQLite) stays here and
in store.py; the rule and the arithmetic live in configs.py, figures.py and handbook.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.journal import configs, figures
from kvdoctor.journal.store import JournalStore, Step, StepInput, clean

SCHEMA = "kvdoctor.journal/1"


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def gather_evidence(paths: list[str] | None = None, *, bench: list[str] | None = None,
                    prometheus: str | None = None, window: str | None = None,
                    progress: Any = None, simulated: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figures, evidence record) from logs / metrics dumps / bench results / a Prometheus window.

    ``progress``: a factory ``(description, total=) -> context manager yielding advance(n)``, handed
    in by the caller (the CLI's progress bar), so the library never imports the command line.
    ``simulated``: the evidence is a simulator's output (``kvdoctor simulate --log/--metrics``), so
    its figures are labelled ``simulated``, never ``measured``; kvdoctor's own simulated logs are
    recognised by themselves (see looks_simulated).

    The whole summary is kept in the step (``evidence.summary``) besides the journal's figures, so a
    figure added to the journal later can still be read from old steps.
    """
    all_paths = [*(paths or []), *(bench or [])]
    if not all_paths and not prometheus:
        return {}, {}
    if window and not prometheus:
        raise InputError("--window needs --prometheus URL")
    for p in all_paths:
        if not Path(p).exists():
            raise InputError(f"no such file: {p}")
    from kvdoctor.evidence import summary as summarize
    from kvdoctor.evidence.load import load_evidence

    kwargs: dict[str, Any] = {}
    if prometheus:
        kwargs["prometheus"] = prometheus
        if window:
            kwargs["window"] = window
    if progress is None:
        progress = _no_progress

    simulated = simulated or any(looks_simulated(p) for p in all_paths)
    total = sum(Path(p).stat().st_size for p in all_paths if Path(p).is_file())
    with progress("Reading evidence", total=total or None) as advance:
        ev = load_evidence(all_paths, progress=advance, **kwargs)
    summ = summarize(ev)
    # the summary keeps provenance for some figures in sources{}: use it where it exists
    joined = dict(summ)
    for key, fig in (summ.get("sources") or {}).items():
        if isinstance(fig, dict) and "source" in fig and summ.get(key) is not None:
            joined[key] = {**fig, "how": f"evidence summary {key}: {fig.get('how', '')}".rstrip(": ")}
    joined.pop("sources", None)
    for b in getattr(ev, "bench", None) or []:  # TPOT is in bench results, not in the evidence summary
        for key in ("median_tpot_ms", "p99_tpot_ms"):
            if key not in joined and isinstance(getattr(b, "fields", {}).get(key), (int, float)):
                joined[key] = b.fields[key]
    source = "simulated" if simulated else "measured"
    figs = figures.extract(joined, source=source, how_prefix=f"{source} evidence summary: ")
    if simulated:  # the summary's own provenance says "measured" (it reads a log): the log is simulated
        figs = {k: {**f, "source": "simulated"} for k, f in figs.items()}
    if all_paths and not figs and not prometheus:
        # A step is its before/after figures: a binary file or an empty "result" given as --bench
        # used to be recorded as a step with nothing in it (and the next step compared against it).
        raise InputError(f"{', '.join(all_paths)}: no figures could be read (expected a vLLM log with stats "
                         "lines, a /metrics dump or a `vllm bench serve` result)")
    kinds = getattr(ev, "kinds", None) or {}
    if prometheus:
        kinds = {**kinds, prometheus: "prometheus"}
    record = {
        "sources": [str(s) for s in (getattr(ev, "sources", None) or all_paths or [prometheus])],
        "kinds": sorted(set(kinds.values())),
        "prometheus": prometheus, "window": window, "summary": clean(summ),
    }
    digests = file_digests(all_paths)
    if digests:
        record["digests"] = digests
    return figs, record


def file_digests(paths: list[str]) -> list[str]:
    """sha256 of each evidence file's bytes, sorted (order of the options does not matter).

    Kept so a step whose "after" evidence is the very same file as the step before can be told
    apart from a change that truly did nothing (see ``record``). Folders and Prometheus windows
    have no single file to hash; they are left out.
    """
    import hashlib

    out = []
    for p in paths:
        f = Path(p)
        if f.is_file():
            h = hashlib.sha256()
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            out.append(h.hexdigest())
    return sorted(out)


@contextmanager
def _no_progress(description: str = "", total: float | None = None):
    yield lambda n=1: None


def looks_simulated(path: str) -> bool:
    """A log or /metrics dump written by ``kvdoctor simulate`` (sim/writers.py): its envelope carries
    the writer's fixed process ids, both of them, in the first lines. A real server reusing both
    pids is not impossible, so ``--simulated`` exists as well; this only spares the operator the flag."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192).decode("utf-8", "replace")
    except OSError:
        return False
    return all(m in head for m in SIMULATED_MARKERS)


# sim/writers.write_vllm_log's default process ids (api_pid=4242, core_pid=4343); a test writes a
# simulated log and checks that it is recognised, so the two cannot drift apart unnoticed
SIMULATED_MARKERS = ("(APIServer pid=4242)", "(EngineCore pid=4343)")


def read_prediction(path: str | None) -> dict[str, Any] | None:
    """A saved ``--json`` payload (plan, simulate, diagnose...) that predicted this step."""
    if path is None:
        return None
    from kvdoctor.safeio import read_json_file

    p = Path(path)
    data = read_json_file(p, missing=f"--prediction: no such file: {p}", unreadable=lambda exc: (
        f"--prediction: {p}: JSON nested too deeply to read" if isinstance(exc, RecursionError)
        else f"--prediction: {p} is not a readable JSON payload ({exc})"))
    if not isinstance(data, dict) or not str(data.get("schema_version", "")).startswith("kvdoctor."):
        raise InputError(f"--prediction: {p} is not a kvdoctor --json payload (no kvdoctor schema_version)")
    return data


# --------------------------------------------------------------------------------------------
# operations
# --------------------------------------------------------------------------------------------


def _config_input(config: Any) -> tuple[Any, str, str]:
    """(EngineConfig, text, origin) from a ``--config`` value or an EngineConfig already built (the
    configuration ``kvdoctor experiment`` launched: its serve line is kept as the text)."""
    if isinstance(config, str):
        return configs.read_config(config)
    from kvdoctor.chains.plan import serve_line

    env = " ".join(f"{k}={v}" for k, v in (config.env or {}).items())
    text = f"{env} {serve_line(config, config.model or '')}".strip()
    return config, text, str(config.origin or "experiment")


def start(db: str | Path | None, name: str, *, config: Any, evidence: list[str] | None = None,
          bench: list[str] | None = None, prometheus: str | None = None, window: str | None = None,
          note: str | None = None, progress: Any = None, simulated: bool = False,
          extra_evidence: dict[str, Any] | None = None, extra_figures: dict[str, Any] | None = None) -> Step:
    """``extra_evidence``: kept under the step's evidence (``kvdoctor experiment`` stores its run record);
    ``extra_figures``: measured figures (provenance dicts) the caller read itself, over the evidence's.
    ``progress``: a progress factory handed in by the caller (see gather_evidence); ``simulated``: the
    evidence is a simulator's output."""
    cfg, text, origin = _config_input(config)
    figs, ev = _gathered(evidence, bench, prometheus, window, progress, simulated, extra_evidence, extra_figures)
    step = StepInput(config=configs.config_to_dict(cfg), config_text=text, config_origin=origin, note=note,
                     figures=figs, evidence=ev)
    with JournalStore(db) as store:
        return store.start(name, step)


def _gathered(evidence, bench, prometheus, window, progress, simulated: bool, extra_evidence: dict[str, Any] | None,
              extra_figures: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figures, evidence) of a step: what ``gather_evidence`` reads, with the caller's own on top."""
    figs, ev = gather_evidence(evidence, bench=bench, prometheus=prometheus, window=window, progress=progress,
                               simulated=simulated)
    if extra_evidence:
        ev = {**ev, **extra_evidence}
    if extra_figures:
        figs = {**figs, **extra_figures}
    return figs, ev


def record(db: str | Path | None, journal: str | None = None, *, config: Any = None,
           evidence: list[str] | None = None, bench: list[str] | None = None, prometheus: str | None = None,
           window: str | None = None, note: str | None = None, prediction: str | None = None,
           force_multi: bool = False, progress: Any = None, simulated: bool = False,
           extra_evidence: dict[str, Any] | None = None, prediction_payload: dict[str, Any] | None = None,
           extra_figures: dict[str, Any] | None = None) -> Step:
    """Append a step. Without ``--config`` the configuration is the previous step's (a re-measure).

    ``config`` may be an EngineConfig already built; ``prediction_payload`` a payload already in memory
    (instead of a ``--prediction`` file); ``extra_evidence`` is kept under the step's evidence;
    ``extra_figures`` (provenance dicts) are measured figures the caller read itself, over the evidence's;
    ``progress`` and ``simulated`` as for start."""
    if config is None and not (evidence or bench or prometheus or note or prediction or prediction_payload):
        raise InputError("nothing to record: give --config and/or --evidence/--bench/--prometheus (or --note)")
    new_cfg = None
    if config is not None:
        cfg, text, origin = _config_input(config)
        new_cfg = (configs.config_to_dict(cfg), text, origin)
    figs, ev = _gathered(evidence, bench, prometheus, window, progress, simulated, extra_evidence, extra_figures)
    pred_payload = prediction_payload if prediction_payload is not None else read_prediction(prediction)

    def build(prev: Step) -> StepInput:
        cfg_dict, text, origin = new_cfg if new_cfg else (prev.config, None, f"same as step #{prev.seq}")
        return StepInput(config=cfg_dict, config_text=text, config_origin=origin, note=note, figures=figs,
                         evidence=ev, prediction=pred_payload)

    def check(prev: Step, new: StepInput) -> tuple[list[dict[str, Any]], bool]:
        changes, multi = configs.one_variable(prev.config, prev.seq, new.config, force_multi=force_multi)
        before_kinds, after_kinds = prev.evidence.get("kinds") or [], new.evidence.get("kinds") or []
        if before_kinds and after_kinds and before_kinds != after_kinds:
            # a log's instantaneous throughput and a load test's average are different quantities
            new.evidence["mismatch"] = (f"before measured from {', '.join(before_kinds)}, after from "
                                        f"{', '.join(after_kinds)}: the figures are not like for like")
        same = prev.evidence.get("digests")
        if changes and same and same == new.evidence.get("digests"):
            # The operator re-attached the previous step's result file: the before/after table would
            # read "flat" for every figure and the handbook would record that the change did nothing.
            note = (f"the after evidence is byte-identical to step #{prev.seq}'s (same file contents): it cannot "
                    "show what this change did; re-run the load test (or collect the logs) after the change")
            new.evidence["mismatch"] = (f"{new.evidence['mismatch']}; {note}" if new.evidence.get("mismatch")
                                        else note)
        if pred_payload is not None:
            new.predicted, why_none = figures.explain_prediction(pred_payload, changes)
            if why_none:  # shown beside the empty predicted cells: "—" alone says nothing
                new.evidence["prediction_note"] = why_none
        return changes, multi

    with JournalStore(db, create=False) as store:
        name = store.resolve_name(journal)
        return store.record(name, build, check)


def add_note(db: str | Path | None, journal: str | None, seq: int, text: str) -> None:
    with JournalStore(db, create=False) as store:
        store.add_note(store.resolve_name(journal), seq, text)


def load_steps(db: str | Path | None, journal: str | None) -> tuple[str, list[Step], str]:
    with JournalStore(db, create=False) as store:
        name = store.resolve_name(journal)
        return name, store.steps(name), str(store.path)


def step_payload(s: Step) -> dict[str, Any]:
    d = s.as_dict()
    d.pop("journal", None)
    # the prediction payload can be large (a whole simulate run): show it by reference
    pred = d.pop("prediction", None)
    d["prediction_kind"] = (str(pred.get("schema_version")) if isinstance(pred, dict) else None)
    d["config_given"] = configs.given(s.config)
    return d


def show_payload(db: str | Path | None, journal: str | None) -> dict[str, Any]:
    name, steps, path = load_steps(db, journal)
    return {
        "schema_version": SCHEMA,
        "db": path,
        "journal": {"name": name, "created_at": steps[0].created_at if steps else None, "steps": len(steps)},
        "figures": {k: {"label": v[0], "unit": v[1], "better": {1: "higher", -1: "lower", 0: "neither"}[v[2]]}
                    for k, v in figures.FIGURES.items()},
        "steps": [step_payload(s) for s in steps],
    }


def compare_payload(db: str | Path | None, journal: str | None, a: int, b: int) -> dict[str, Any]:
    name, steps, path = load_steps(db, journal)
    by_seq = {s.seq: s for s in steps}
    for x in (a, b):
        if x not in by_seq:
            raise InputError(f"journal {name!r} has no step #{x} (steps: 0..{steps[-1].seq})")
    sa, sb = by_seq[a], by_seq[b]
    rows = []
    for fname, (label, unit, _) in figures.FIGURES.items():
        va, vb = sa.figures.get(fname), sb.figures.get(fname)
        if va is None and vb is None:
            continue
        rows.append({"figure": fname, "label": label, "unit": unit, "a": va, "b": vb,
                     "delta": figures.delta(fname, va, vb),
                     "predicted_b": sb.predicted.get(fname)})
    between = [s for s in steps if min(a, b) < s.seq <= max(a, b)]
    return {
        "schema_version": SCHEMA,
        "db": path,
        "journal": {"name": name},
        "compare": {
            "a": a, "b": b,
            "changes": configs.config_changes(sa.config, sb.config),
            "multi_steps_between": [s.seq for s in between if s.multi],
            "figures": rows,
        },
    }


__all__ = ["start", "record", "add_note", "show_payload", "compare_payload", "gather_evidence"]
