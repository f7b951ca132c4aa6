"""vLLM's coloured process prefix as rsyslog escapes control characters (``#033[1;36m(EngineCore_0 pid=75)#033[0;0m``,
a trailing ``#015`` for the CR), the way a SageMaker / EC2 container's log reaches CloudWatch through journald and
rsyslog, and exported as CSV (``epoch_ms,"message"``). Found by the sweep of vLLM under serving platforms
(2026-12-05): such an export's engine traceback was filed under "main", and a start-up of eight TP workers read this
way lost their per-worker figures and the model. The escaped copies here are made from a committed fixture the way
rsyslog and the export write them."""

from __future__ import annotations

from pathlib import Path

import pytest

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "l40s-qwen3-235b-fp8-tp8-ep-v1.log"
PREFIX = ("(EngineCore", "(APIServer", "(Worker")


def _coloured(text: str, esc: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith(PREFIX):
            head, _, rest = line.partition(")")
            line = f"{esc}[1;36m{head}){esc}[0;0m{rest}"
        out.append(line)
    return "\n".join(out) + "\n"


def _rsyslog(text: str) -> str:
    return "".join(line + "#015\n" for line in _coloured(text, "#033").splitlines())


def _cloudwatch_csv(text: str) -> str:
    rows = []
    for i, line in enumerate(_rsyslog(text).splitlines()):
        msg = f'"{line.replace(chr(34), chr(34) * 2)}"' if ('"' in line or "," in line) else line
        rows.append(f"{1756144012376 + 10 * i},{msg}")
    return "\n".join(rows) + "\n"


def _readers(path: Path):
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.reader import read_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    return read_log(path).startups[0], collect_startup_facts(path)[0], scan_log(str(path))["startup"]


def _figures(f) -> dict:
    d = dict(vars(f))
    for k in ("line_refs", "first_line", "last_line"):
        d.pop(k)
    # a CSV export doubles the quotes inside a message; the config echo's JSON strings keep them (every figure,
    # flag and number is read the same)
    d["engine_config"] = {k: v for k, v in d["engine_config"].items() if not isinstance(v, str) or '"' not in v}
    return d


@pytest.mark.parametrize("form", [_rsyslog, _cloudwatch_csv], ids=["rsyslog", "cloudwatch-csv"])
def test_escaped_colour_codes_read_as_the_plain_log(tmp_path, form):
    plain = _readers(LOG)
    p = tmp_path / "export.log"
    p.write_text(form(LOG.read_text()))
    for want, got in zip(plain, _readers(p)):
        assert _figures(got) == _figures(want)
    assert plain[0].model == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8" and len(plain[0].per_worker) > 1


def test_an_escaped_engine_traceback_is_the_engine_s(tmp_path):
    """sweep 45's SageMaker export, in its shape: the traceback lines of EngineCore_0 read as in the plain log."""
    from kvdoctor.evidence.logs.reader import read_log

    lines = "\n".join(["(EngineCore_0 pid=75) ERROR 08-25 10:46:52 [core.py:700] EngineCore failed to start.",
                       "(EngineCore_0 pid=75) ERROR 08-25 10:46:52 [core.py:700] Traceback (most recent call last):",
                       '(EngineCore_0 pid=75) ERROR 08-25 10:46:52 [core.py:700]   File "/usr/local/lib/python3.12/'
                       'dist-packages/vllm/v1/engine/core.py", line 80, in __init__'])
    plain, csv = tmp_path / "plain.log", tmp_path / "cw.csv"
    plain.write_text(_coloured(lines, "\x1b"))
    csv.write_text(_cloudwatch_csv(lines))

    def read(p: Path) -> list:
        return [(s.engine, [(e.kind, e.line_no) for e in s.events]) for s in read_log(p).segments]

    assert read(csv) == read(plain)
    assert any(kind == "engine-dead" for _, evs in read(csv) for kind, _ in evs)
