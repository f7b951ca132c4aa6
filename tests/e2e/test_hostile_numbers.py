"""Every numeric option of every verb rejects non-finite and out-of-range values at the edge.

The whole class, not the audited examples: the options are discovered from the CLI itself, so a
verb added later is covered the day it lands. Values are drawn by hypothesis (NaN, ±inf, 1e308,
huge integers, negatives); each is given to the real parser in-process and must end as exit 2
with one line, before the verb does any work.
"""

from __future__ import annotations

import math

import pytest
import typer
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.cli.common import NUMERIC_BOUNDS, _bounds_for, _numeric_kind, check_number, harden_options
from kvdoctor.errors import InputError


def _numeric_params():
    root = typer.main.get_command(app)
    harden_options(root)
    out = []

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])
        for p in getattr(cmd, "params", []):
            kind = _numeric_kind(p)
            if kind:
                out.append((tuple(path), p, kind))

    walk(root, [])
    return out


PARAMS = _numeric_params()
OPTIONS = [(path, p, kind) for path, p, kind in PARAMS if any(o.startswith("--") for o in p.opts)]


def test_every_numeric_parameter_is_bounded():
    assert len(PARAMS) > 30  # the discovery found the verbs' options (a silent 0 would prove nothing)
    for path, p, _ in PARAMS:
        assert getattr(p, "_kvdoctor_bounded", False), (path, p.opts)
    named = {o for _, p, _ in PARAMS for o in p.opts}
    assert set(NUMERIC_BOUNDS) <= named, set(NUMERIC_BOUNDS) - named  # no stale entry in the table


HOSTILE = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "NaN", "Infinity", "1e308", "-1e308", "1e400", "-1",
                     "100000000000000000000000", "1e23", str(2**64), str(-(2**63))]),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not math.isfinite(x) or abs(x) > 1e16).map(repr),
    st.integers(min_value=2**53 + 1).map(str),
    st.integers(max_value=-(10**7) - 1).map(str),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(OPTIONS), HOSTILE)
def test_hostile_numbers_are_refused_by_every_option(option, text):
    path, param, kind = option
    lo, hi, lo_open = _bounds_for(param)
    x = float(text)
    # a value the option accepts (-1 for a utilisation vLLM itself rejects) is not this test's business
    assume(not (math.isfinite(x) and (x > lo if lo_open else x >= lo) and x <= hi
                and (kind == "float" or x == int(x))))
    opt = max((o for o in param.opts if o.startswith("--")), key=len)
    res = CliRunner().invoke(app, [*path, opt, text])
    exc = res.exception
    # exit 2: kvdoctor's own one-line InputError, or click's usage error for a non-integer
    if isinstance(exc, InputError):
        assert "\n" not in str(exc) and opt in str(exc), str(exc)
    else:
        assert isinstance(exc, SystemExit) and res.exit_code == 2, (path, opt, text, res.output, exc)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PARAMS), st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                           st.integers(min_value=-(2**70), max_value=2**70)))
def test_check_number_accepts_exactly_the_finite_in_bounds_values(option, value):
    _, param, kind = option
    v = float(value) if kind == "float" else (int(value) if isinstance(value, int) else None)
    if v is None:
        return
    lo, hi, lo_open = _bounds_for(param)
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    if ok:
        assert check_number(param, v) == v
    else:
        with pytest.raises(InputError):
            check_number(param, v)
