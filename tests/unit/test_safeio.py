"""safeio: the hostile-input helpers, property by property (issue 14)."""

from __future__ import annotations

import gzip
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor import safeio
from kvdoctor.errors import InputError


@settings(max_examples=300)
@given(st.text())
def test_one_line_is_one_terminal_safe_line(text):
    out = safeio.one_line(text)
    assert "\n" not in out and "\r" not in out and "\x1b" not in out and "\x07" not in out
    assert not any(ord(c) < 32 and c != " " for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)
    assert len(out) <= 2000


@settings(max_examples=300)
@given(user=st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12),
       pw=st.text("abcdefghijklmnopqrstuvwxyzABCDEF0123456789!$&'()*+,;=:@%~-", min_size=1, max_size=20),
       host=st.sampled_from(["prom", "10.0.0.1:9090", "[::1]:9090", "prom.example.com"]),
       scheme=st.sampled_from(["http", "https", "HTTP"]))
def test_credentials_are_stripped_from_any_url(user, pw, host, scheme):
    url = f"{scheme}://{user}:{pw}@{host}/api"
    for text in (url, f"error talking to {url}: refused", f"{url}\n{url}"):
        out = safeio.redact_url(text)
        assert f"{user}:{pw}" not in out and "***@" + host in out
        assert safeio.one_line(text).count("***@") == text.count("://")
    assert safeio.redact({"sources": [url], url: {"k": url}}) == {
        "sources": [f"{scheme}://***@{host}/api"], f"{scheme}://***@{host}/api": {"k": f"{scheme}://***@{host}/api"}}


def test_urls_without_credentials_are_unchanged():
    for u in ("http://prom:9090/x", "see user@example.com", "https://a.b/c?d=e@f"):
        assert safeio.redact_url(u) == u


def test_escape_sequences_removed_text_kept():
    s = "bad\x1b]0;title\x07 \x1b[31mred\x1b[0m\nnext\tline\x00"
    assert safeio.one_line(s) == "bad red next line"


def test_nested_json_is_an_input_error():
    with pytest.raises(InputError, match="nested too deeply"):
        safeio.loads_json("[" * 100_000, "x.json")
    with pytest.raises(InputError, match="not valid JSON"):
        safeio.loads_json('{"a": NaN}', "c.json", strict_numbers=True)
    with pytest.raises(InputError, match="not valid JSON"):
        safeio.loads_json('{"a": 1e400}', "c.json", strict_numbers=True)
    assert safeio.loads_json('{"a": 1.5}', "c.json", strict_numbers=True) == {"a": 1.5}


def test_magnitudes():
    safeio.check_magnitudes({"a": [1, 2.5, {"b": 2**53}], "t": True}, "c")
    with pytest.raises(InputError, match=r"hidden_size"):
        safeio.check_magnitudes({"hidden_size": 1e308}, "c")
    with pytest.raises(InputError, match=r"x\[1\]"):
        safeio.check_magnitudes({"x": [1, -(2**60)]}, "c")


def test_yaml_anchors_and_aliases_expanded():
    assert safeio.load_yaml_text("a: &x 1\nb: 2\n", "c.yaml") == {"a": 1, "b": 2}
    got = safeio.load_yaml_text("a: &x [1, 2]\nb: *x\n", "c.yaml")
    assert got == {"a": [1, 2], "b": [1, 2]}
    got["a"].append(3)  # each alias is its own value: editing one key never edits another
    assert got["b"] == [1, 2]
    # merge keys, the way shared vLLM configs use them
    text = ("base: &base\n  max-model-len: 8192\n  block-size: 16\n"
            "model: m\nserve:\n  <<: *base\n  block-size: 32\n")
    assert safeio.load_yaml_text(text, "c.yaml")["serve"] == {"max-model-len": 8192, "block-size": 32}


def _bomb(levels: int, fan: int) -> str:
    lines = ["a: &a [" + ",".join(["x"] * fan) + "]"]
    names = "abcdefghijklmnop"
    for i in range(1, levels):
        lines.append(f"{names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * fan) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_refused_in_one_line_before_expansion():
    with pytest.raises(InputError, match=r"aliases expand to more than 100,000 values") as ei:
        safeio.load_yaml_text(_bomb(9, 9), "c.yaml")  # 9^9 = 387 M values: counted, never built
    assert "\n" not in str(ei.value)
    # the bound is on the expanded count: just under it reads, just over it does not
    assert safeio.MAX_YAML_NODES == 100_000
    small = _bomb(5, 9)  # 74,738 values expanded (e alone 66,430 = 1 + 9 × 7,381)
    assert len(safeio.load_yaml_text(small, "c.yaml")["e"]) == 9
    with pytest.raises(InputError, match="alias"):
        safeio.load_yaml_text(_bomb(6, 7), "c.yaml")  # 7^6 = 117,649 leaves


def test_yaml_recursive_alias_refused():
    with pytest.raises(InputError, match="refers to the node that contains it"):
        safeio.load_yaml_text("a: &x [1, *x]\n", "c.yaml")
    with pytest.raises(InputError, match="refers to the node that contains it"):
        safeio.load_yaml_text("a: &x {b: {c: *x}}\n", "c.yaml")


def test_gunzip_is_bounded():
    data = gzip.compress(b"\n" * (8 << 20))
    assert len(safeio.gunzip_bounded(data, 16 << 20, "x")) == 8 << 20
    with pytest.raises(InputError, match="decompresses to more than"):
        safeio.gunzip_bounded(data, 1 << 20, "x")
    two = gzip.compress(b"a\n") + gzip.compress(b"b\n")  # concatenated members
    assert safeio.gunzip_bounded(two, 100, "x") == b"a\nb\n"
    with pytest.raises(InputError, match="corrupt gzip"):
        safeio.gunzip_bounded(b"\x1f\x8b\x08\x00garbage", 100, "x")


def test_more_lines_than(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"h\n" + b"1\n" * 1000)
    assert safeio.more_lines_than(p, 1000) and not safeio.more_lines_than(p, 1001)
    g = tmp_path / "t.csv.gz"
    g.write_bytes(gzip.compress(p.read_bytes()))
    assert safeio.more_lines_than(g, 1000) and not safeio.more_lines_than(g, 1001)


def test_binary_reason():
    assert safeio.binary_reason(b"INFO 01-01 00:00:00 ok\n" * 10) is None
    assert safeio.binary_reason(b"INFO \xff one stray byte\n" * 10) is None
    assert "NUL" in safeio.binary_reason(b"text\x00text")
    assert "not UTF-8" in safeio.binary_reason(bytes(range(128, 256)) * 4)
    assert "control" in safeio.binary_reason(bytes(range(1, 9)) * 40)
    assert safeio.binary_reason(b"\x1b[32mINFO\x1b[0m colour\n" * 20) is None  # ANSI logs are text


def test_non_regular_inputs_refused(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    for p, kind in ((fifo, "FIFO"), ("/dev/zero", "character device")):
        with pytest.raises(InputError, match=kind):
            safeio.check_input_file(p, "--trace")
        with pytest.raises(InputError, match=kind):
            safeio.read_document(p)
    with pytest.raises(InputError, match="no such file"):
        safeio.check_input_file(tmp_path / "missing")
    assert safeio.check_input_file(tmp_path, allow_dir=True) == tmp_path


def test_read_document_limit(tmp_path):
    p = tmp_path / "d.json"
    p.write_bytes(b" " * 2000)
    assert len(safeio.read_document(p, limit=2000)) == 2000
    with pytest.raises(InputError, match="larger than"):
        safeio.read_document(p, limit=1999)


def test_writes_replace_files_follow_links_and_write_through_fifos(tmp_path):
    import threading

    f = tmp_path / "out.html"
    f.write_text("old")
    os.chmod(f, 0o640)
    safeio.write_text_safely(f, "new")
    assert f.read_text() == "new" and stat.S_IMODE(os.stat(f).st_mode) == 0o640
    assert not [x for x in os.listdir(tmp_path) if ".tmp-" in x]  # no temporary left behind
    target = tmp_path / "target.html"
    link = tmp_path / "link.html"
    link.symlink_to(target)
    safeio.write_text_safely(link, "via link")
    assert link.is_symlink() and target.read_text() == "via link"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    th = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    th.start()
    safeio.write_text_safely(fifo, "through the pipe")
    th.join(10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(InputError, match="directory"):
        safeio.write_text_safely(tmp_path, "x")
    with pytest.raises(InputError, match="does not exist"):
        safeio.write_text_safely(tmp_path / "no" / "x.html", "x")


def test_finite():
    assert safeio.finite("2.5", "x", lo=0, hi=3) == 2.5
    for bad in ("nan", "inf", "-inf", "abc", None, "1e400"):
        with pytest.raises(InputError):
            safeio.finite(bad, "x")
    with pytest.raises(InputError, match="must be >"):
        safeio.finite(0, "x", lo=0, lo_open=True)
