"""Configurations in the journal: reading ``--config`` (a ``vllm serve`` line or a YAML path), keeping
them as JSON, and the one-variable rule.

The comparison itself is ``kvdoctor.engine.diff.diff`` (normalised, so the same setting written as a
serve line and as YAML compares equal); the journal only decides what to do with its answer.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kvdoctor.errors import EXIT_FINDING, InputError, KvdoctorError

# What a change list looks like in the journal (and in docs/json/journal.md).
Change = dict  # {"field": str, "before": Any, "after": Any}


class OneVariableRefused(KvdoctorError):
    """More than one variable changed since the previous step: the experiment would be unreadable."""

    exit_code = EXIT_FINDING

    def __init__(self, changes: list[dict[str, Any]], prev_seq: int):
        self.changes = changes
        self.prev_seq = prev_seq
        listed = ", ".join(f"{c['field']} ({_show(c['before'])} -> {_show(c['after'])})" for c in changes)
        super().__init__(
            f"{len(changes)} variables changed since step #{prev_seq}: {listed}. Change one at a time, "
            "or pass --force-multi (the step is then marked as a multi-variable step for good)"
        )


def _show(v: Any) -> str:
    return "unset" if v is None else str(v)


def read_config(value: str, *, base_dir: Path | None = None) -> tuple[Any, str, str]:
    """``--config`` -> (EngineConfig, the text as the user wrote it, origin).

    A path to an existing ``.yaml``/``.yml`` file is a vLLM config file; an existing file with a
    start-up's ``non-default args`` line is a vLLM log (the latest start counts); another existing
    file is a saved serve line (``run.sh``); anything else is parsed as a serve line.
    """
    from kvdoctor.engine.sources import load_yaml, parse_serve_line, split_selector

    if not isinstance(value, str) or not value.strip():
        raise InputError("--config is empty: give a `vllm serve ...` line or a YAML path")
    p = Path(value.strip()).expanduser()
    is_file = False
    try:
        is_file = p.is_file()
    except OSError:  # a long serve line is not a valid path on some systems
        is_file = False
    if is_file:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {p}: {exc}") from None
        if p.suffix.lower() in (".yaml", ".yml"):
            return load_yaml(p), text, f"yaml:{p}"
        if "non-default args" in text:
            return _from_log(p, text), text, f"log:{p}"
        return parse_serve_line(text, base_dir=p.parent), text, f"serve-line:{p}"
    head, server = split_selector(p) if " " not in value.strip() else (p, None)
    if server and head.suffix.lower() in (".yaml", ".yml") and head.is_file():  # one server of a deployment file
        return load_yaml(p), head.read_text(encoding="utf-8", errors="replace"), f"yaml:{value.strip()}"
    if p.suffix.lower() in (".yaml", ".yml") and " " not in value.strip():
        raise InputError(f"{p}: no such file")
    return parse_serve_line(value, base_dir=base_dir), value, "serve-line"


def _from_log(p: Path, text: str) -> Any:
    """A vLLM log as the configuration: its latest start-up's ``non-default args`` (what was set)."""
    from kvdoctor.engine.sources import from_startup
    from kvdoctor.evidence.logs import read_startup_facts

    starts = [f for f in read_startup_facts(text) if f.non_default_args]
    if not starts:
        raise InputError(f"{p}: no 'non-default args' line from a vLLM start-up in this log")
    return from_startup(starts[-1], origin=f"log:{p}")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """An EngineConfig as plain JSON-able data (every dataclass field, so nothing is lost)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def config_from_dict(d: dict[str, Any]) -> Any:
    """Rebuild an EngineConfig; fields a newer/older kvdoctor does not know are ignored, not fatal."""
    from kvdoctor.engine.config import EngineConfig

    known = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**{k: v for k, v in d.items() if k in known})


def given(d: dict[str, Any]) -> dict[str, Any]:
    """What the operator set (EngineConfig.given(): vLLM fields, ``extra.<flag>``, ``env.<VAR>``)."""
    try:
        return {k: _plain(v) for k, v in config_from_dict(d).given().items()}
    except TypeError:  # a config stored by a kvdoctor whose EngineConfig differs: show what is there
        return {k: _plain(v) for k, v in d.items() if v not in (None, {}, [])}


def config_changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The variables that differ, as engine.diff sees them."""
    from kvdoctor.engine.diff import diff

    out = []
    for c in diff(config_from_dict(before), config_from_dict(after)):
        out.append({"field": str(c.field), "before": _plain(c.before), "after": _plain(c.after)})
    return out


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


def one_variable(prev_config: dict[str, Any], prev_seq: int, new_config: dict[str, Any],
                 *, force_multi: bool) -> tuple[list[dict[str, Any]], bool]:
    """(changes, multi). Raises OneVariableRefused (exit 1) when several changed without force."""
    changes = config_changes(prev_config, new_config)
    if len(changes) > 1 and not force_multi:
        raise OneVariableRefused(changes, prev_seq)
    return changes, len(changes) > 1
