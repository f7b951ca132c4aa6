"""`docker compose logs` of two vLLM services at once (a public vLLM 0.16.1 excerpt, verbatim:
tests/fixtures/startup_logs/compose-two-services-qwen35-v0161-excerpt.log): the start-up collector merges their lines into
one engine start, so the read says so instead of passing the mix off as one server's ledger."""

from __future__ import annotations

from pathlib import Path

from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs import read_startup_facts

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "compose-two-services-qwen35-v0161-excerpt.log"


def test_two_interleaved_services_are_named(tmp_path):
    (facts,) = read_startup_facts(LOG)
    assert facts.engine_config["interleaved_services"] == ["qwen3.5-4b", "qwen3.5-9b"]
    ev = load_evidence([str(LOG)])
    assert any("2 docker compose services (qwen3.5-4b, qwen3.5-9b) interleaved" in n for n in ev.notes)
    # one service's own log (what `docker compose logs qwen3.5-9b` prints) is one server: nothing to say
    one = tmp_path / "one.log"
    one.write_text("".join(x for x in LOG.read_text().splitlines(keepends=True) if x.startswith("qwen3.5-9b ")))
    (facts,) = read_startup_facts(one)
    assert "interleaved_services" not in facts.engine_config and facts.kv_cache_tokens == 39072
    assert not any("docker compose services" in n for n in load_evidence([str(one)]).notes)


def test_the_ledger_from_such_a_log_says_it_too():
    from kvdoctor.cli import common
    from kvdoctor.ledger.from_log import log_ledger

    (facts,) = read_startup_facts(LOG)
    led = log_ledger(facts, source=str(LOG), why_no_model="test")
    assert "docker compose services" in led.notes[0]
    inputs_notes = common.resolve_inputs(common.ConfigOptions(from_log=str(LOG), model="Qwen/Qwen3-8B")).notes
    assert any("docker compose services (qwen3.5-4b, qwen3.5-9b)" in n for n in inputs_notes)
