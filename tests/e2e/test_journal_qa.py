"""``kvdoctor journal`` regressions: readers never write, empty/binary evidence is refused,
re-attaching the previous step's result file is flagged."""

from __future__ import annotations

import json
import sqlite3

from tests.e2e.test_journal_cli import kvd, steps

BASE = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768"


def _bench(shared_data, tmp_path, bench_id: str):
    for line in (shared_data / "real" / "bench_outputs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["bench_id"] == bench_id:
            p = tmp_path / f"{bench_id}.txt"
            p.write_text(d["output"] if isinstance(d["output"], str) else json.dumps(d["output"]))
            return p
    raise KeyError(bench_id)


def test_show_on_an_empty_file_leaves_it_empty(tmp_path):
    # was: `journal show --db empty` turned the operator's empty file into a 28 KB SQLite journal
    f = tmp_path / "empty.txt"
    f.write_bytes(b"")
    for verb in (["show"], ["compare", "0", "1"], ["handbook"], ["record", "--note", "x"]):
        code, out = kvd("journal", *verb, "--db", str(f))
        assert code == 2 and "holds no journal yet" in out, (verb, out)
        assert f.stat().st_size == 0, verb


def test_a_foreign_sqlite_file_is_refused_unchanged(tmp_path):
    # was: switched to WAL (a write into someone else's database) before being refused
    f = tmp_path / "app.sqlite"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    before = f.read_bytes()
    for verb in (["start", "x", "--config", BASE], ["show"]):
        code, out = kvd("journal", *verb, "--db", str(f))
        assert code == 2 and "not a kvdoctor journal" in out, (verb, out)
    assert f.read_bytes() == before
    assert sqlite3.connect(f).execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal"


def test_evidence_without_figures_is_bad_input(shared_data, tmp_path):
    db = tmp_path / "j.sqlite"
    code, out = kvd("journal", "start", "t", "--config", BASE, "--bench", str(_bench(shared_data, tmp_path, "bo002")),
                    "--db", str(db))
    assert code == 0, out
    blob = tmp_path / "result.json"
    blob.write_bytes(bytes(range(256)) * 4)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    for bad in (blob, empty):
        # was: recorded as a step with no figures (and the next step compared against nothing)
        code, out = kvd("journal", "record", "--bench", str(bad), "--db", str(db))
        assert code == 2 and "no figures could be read" in out, out
    assert len(steps(db)) == 1


def test_the_same_result_file_after_a_change_is_flagged(shared_data, tmp_path):
    db = tmp_path / "j.sqlite"
    b1, b2 = _bench(shared_data, tmp_path, "bo002"), _bench(shared_data, tmp_path, "bo001")
    assert kvd("journal", "start", "t", "--config", BASE, "--bench", str(b1), "--db", str(db))[0] == 0
    copy = tmp_path / "after.txt"  # a copy under another name is still the same measurement
    copy.write_bytes(b1.read_bytes())
    code, out = kvd("journal", "record", "--config", BASE.replace("32768", "8192"), "--bench", str(copy),
                    "--db", str(db))
    assert code == 0, out
    assert "byte-identical to step #0" in out
    code, out = kvd("journal", "record", "--config", BASE.replace("32768", "8192") + " --kv-cache-dtype fp8",
                    "--bench", str(b2), "--db", str(db))
    assert code == 0, out
    s = steps(db)
    assert "byte-identical to step #0" in s[1]["evidence"]["mismatch"]
    assert "mismatch" not in s[2]["evidence"]  # a new measurement: no caution
    code, md = kvd("journal", "handbook", "--db", str(db))
    assert "Caution: the after evidence is byte-identical" in md
    # the HTML report shows the caution too (it used to drop it)
    code, js = kvd("journal", "show", "--db", str(db), "--json")
    from kvdoctor.report.html import render_report

    assert "byte-identical to step #0" in render_report([json.loads(js)], title="t")


def test_show_and_handbook_take_the_journal_option_the_error_message_suggests(tmp_path):
    # "holds several journals ...; pick one with --journal NAME" — and show/handbook then said
    # "No such option: -j" (they only took the name positionally)
    db = tmp_path / "j.sqlite"
    for name in ("a", "b"):
        assert kvd("journal", "start", name, "--config", BASE, "--db", str(db))[0] == 0
    code, out = kvd("journal", "show", "--db", str(db))
    assert code == 2 and "--journal NAME" in out
    for verb in ("show", "handbook"):
        for how in (["--journal", "b"], ["-j", "b"], ["b"]):
            code, out = kvd("journal", verb, *how, "--db", str(db), "--json")
            assert code == 0, (verb, how, out)
            assert json.loads(out)["journal"]["name"] == "b"
    code, out = kvd("journal", "show", "a", "--journal", "b", "--db", str(db))
    assert code == 2 and "two journal names" in out
