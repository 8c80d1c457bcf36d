"""Start-up's caches (serq/_cache.py): the parser's tables and the IR's schemas, built at first use
into a per-user directory. A command's output is the same byte for byte with a cold cache, a warm
one, a damaged one and none at all (bench/startup.py measures the time they save)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

from serq import _cache

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")
BROKEN = "fn main() {\n  stage svc : fifo;\n  workload { arrive poisson(1); }\n  server {\n    run svc (cost(svc, 1) ;\n  }\n}\n"


def serq(cache, *args, cwd=ROOT):
    """serq's (exit status, stdout, stderr) with XDG_CACHE_HOME at `cache`."""
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    r = subprocess.run([sys.executable, "-m", "serq.cli", *args], capture_output=True, text=True, cwd=cwd, env=env)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def outputs(cache, broken):
    """What the cache could change: the IR's JSON, its JSON Schema, a parse error's expected tokens,
    a run's report."""
    return [serq(cache, "ir", VLLM, "--horizon", "20"), serq(cache, "ir", "--schema"),
            serq(cache, "check", broken),
            serq(cache, "run", "examples/single-turn/mg1.sq", "--arrivals", "200", "--quiet")]


def test_outputs_alike_cold_warm_damaged_and_without_a_cache(tmp_path):
    broken = tmp_path / "broken.sq"
    broken.write_text(BROKEN)
    cache = tmp_path / "cache"
    cold = outputs(cache, broken)   # the first command writes all four files
    files = sorted(glob.glob(str(cache / "serq" / "*.pickle")))
    assert [os.path.basename(f).split("-")[0] for f in files] == ["ir", "parser", "records", "regexes"]
    assert oct(os.stat(cache / "serq").st_mode & 0o777) == "0o700"
    inodes = [os.stat(f).st_ino for f in files]
    warm = outputs(cache, broken)
    assert [os.stat(f).st_ino for f in files] == inodes  # read, not written again
    for f in files:  # damaged (a truncated write, another version's bytes): rebuilt, and mended
        with open(f, "r+b") as fh:
            fh.truncate(100)
    damaged = outputs(cache, broken)
    assert all(os.path.getsize(f) > 1000 for f in files)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    none = outputs(not_a_dir, broken)  # no cache directory can be made: no cache, same outputs
    assert cold == warm == damaged == none
    assert cold[2][0] == 1 and "error[P001]" in cold[2][2] and "expected" in cold[2][2]
    assert cold[3][0] == 0 and cold[3][1]


def test_the_key_is_everything_an_artifact_is_built_from(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = _cache.path("parser", "grammar", "1.3.1")
    assert a == _cache.path("parser", "grammar", "1.3.1")
    assert a.startswith(str(tmp_path / "serq") + os.sep)
    assert len({a, _cache.path("parser", "grammar!", "1.3.1"), _cache.path("parser", "grammar", "1.3.2"),
                _cache.path("parser", "gramma", "r1.3.1"), _cache.path("ir-schemas", "grammar", "1.3.1")}) == 5
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _cache.path("parser", "g").startswith(str(tmp_path / "home" / ".cache" / "serq"))


def test_save_is_whole_or_nothing(tmp_path):
    f = str(tmp_path / "serq" / "x.pickle")
    _cache.save(f, lambda fh: fh.write(b"whole"))
    assert open(f, "rb").read() == b"whole"

    def fails(fh):
        fh.write(b"half")
        raise ValueError("cannot write this artifact")
    _cache.save(f, fails)
    assert open(f, "rb").read() == b"whole"
    assert os.listdir(tmp_path / "serq") == ["x.pickle"]  # no temporary file left behind


def test_the_process_ends_with_its_output_whole(tmp_path):
    """serq, run as a process, ends without the interpreter's teardown (cli._exit): what it wrote to
    a file (block-buffered) or a pipe is all there, and the exit status is the command's."""
    from serq import api
    prog = os.path.join(ROOT, "examples", "vendors", "gpu_testbeds.sq")
    want = api.load(prog).model_dump_json(indent=1, exclude_none=True) + "\n"
    out = tmp_path / "ir.json"
    with open(out, "w") as fh:
        r = subprocess.run([sys.executable, "-m", "serq.cli", "ir", prog], stdout=fh, stderr=subprocess.PIPE,
                           text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == ""
    assert out.read_text() == want
    code, stdout, _ = serq(tmp_path / "cache", "ir", prog)
    assert code == 0 and stdout == want
    code, _, stderr = serq(tmp_path / "cache", "check", str(tmp_path / "missing.sq"))
    assert code == 1 and "error[P006]" in stderr


def test_files_unused_for_a_month_are_removed_when_one_is_written(tmp_path, monkeypatch):
    """Another version's artifacts (another key) go once unused for KEEP_DAYS; a file read is marked
    used; a recent one of another key (a second checkout in use) and other kinds are kept."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    d = tmp_path / "serq"
    d.mkdir()
    now = time.time()
    ages = {"parser-old.pickle": 40, "parser-recent.pickle": 5, "ir-schemas-old.pickle": 40,
            ".tmp-crashed": 2, ".tmp-writing": 0}
    for name, days in ages.items():
        (d / name).write_bytes(b"x")
        os.utime(d / name, (now - days * _cache.DAY, now - days * _cache.DAY))
    _cache.used(str(d / "ir-schemas-old.pickle"))   # read today: kept
    _cache.save(str(d / "parser-new.pickle"), lambda fh: fh.write(b"y"))
    assert sorted(os.listdir(d)) == [".tmp-writing", "ir-schemas-old.pickle", "parser-new.pickle",
                                     "parser-recent.pickle"]
    _cache.save(str(d / "ir-schemas-new.pickle"), lambda fh: fh.write(b"z"))
    assert "ir-schemas-old.pickle" in os.listdir(d)  # used today


def test_the_command_line_loads_no_pydantic_plugins_unless_told(tmp_path):
    """Finding plugins scans every installed package's metadata (cli.md): a check does not, and a
    PYDANTIC_DISABLE_PLUGINS the user set is theirs."""
    code = ("import os, importlib.metadata as m; scans = []; found = m.entry_points\n"
            "m.entry_points = lambda **kw: scans.append(kw) or found(**kw)\n"
            "import serq.cli; serq.cli.main(['check', %r])\n"
            "print(os.environ['PYDANTIC_DISABLE_PLUGINS'], len(scans))" % VLLM)
    for preset, said in ((None, "__all__ 0"), ("logfire", "logfire 1")):
        env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
        env["XDG_CACHE_HOME"] = str(tmp_path)
        if preset:
            env["PYDANTIC_DISABLE_PLUGINS"] = preset
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == said


def test_the_regular_expressions_kept_are_those_re_compiles(monkeypatch):
    """serq/_regexes.py: a pattern made from the kept compiler output is the one re.compile makes
    (Pattern equality compares the compiled code), and matches alike; a full cache takes none."""
    import re

    from serq import _regexes
    monkeypatch.setattr(re, "_cache", {})
    patterns = [r"(?P<NAME>[a-z_][a-z_0-9]*)|(?P<NUMBER>[0-9]+(\.[0-9]*)?)", r"\s+", r"(?i:fifo)|ps\b"]
    snap = _regexes.snapshot([(str, p, 0) for p in patterns] + [(bytes, b"x", 0)])
    assert [s[0] for s in snap] == patterns  # bytes patterns are left to re
    for p in patterns:
        re._cache.pop((str, p, 0), None)
    _regexes.install(snap)
    for p in patterns:
        made = re._cache[(str, p, 0)]
        assert re.compile(p) is made
        re._cache.pop((str, p, 0))
        assert made == re.compile(p)
        for text in ("abc_1", "12.5", "  x", "FIFO", "ps x"):
            m1, m2 = made.match(text), re.compile(p).match(text)
            assert (m1 and (m1.span(), m1.groupdict())) == (m2 and (m2.span(), m2.groupdict()))
    monkeypatch.setattr(re, "_cache", {("filler", i, 0): None for i in range(re._MAXCACHE - 32)})
    _regexes.install(snap)
    assert len(re._cache) == re._MAXCACHE - 32


def _parses(parser, texts):
    """What a parser makes of each text: its tree, or its error's class, place and expected set."""
    from lark.exceptions import UnexpectedInput
    out = []
    for text, start in texts:
        try:
            out.append(parser.parse(text, start=start))
        except UnexpectedInput as e:
            out.append((type(e).__name__, e.line, e.column, sorted(getattr(e, "expected", None) or
                                                                    getattr(e, "allowed", None) or [])))
    return out


def test_the_cached_parser_object_parses_as_lark_builds_it(tmp_path, monkeypatch):
    """parse._parser keeps the parser object pickled (actions by identity, modules by name): read
    back, it makes the same trees and the same errors as the parser lark builds from the grammar, on
    every example and on broken text; a file in lark's own format is read as well."""
    from lark import Lark

    from serq.lang import parse as P
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with open(P._GRAMMAR, encoding="utf-8") as fh:
        built = Lark(fh.read(), **P._OPTIONS)
    texts = [(open(f, encoding="utf-8").read(), "start")
             for f in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True))]
    texts += [(BROKEN, "start"), ("fn main() { stage s : fifo; ]", "start"), ("1 + * 2", "frag_expr"),
              ("a = 1; b = ;", "frag_stmts"), ("x @ y", "frag_expr")]
    want = _parses(built, texts)
    assert sum(isinstance(w, tuple) for w in want) >= 4
    P._parser.cache_clear()
    try:
        cold = P._parser()                       # built, and written as the object
        [path] = glob.glob(str(tmp_path / "serq" / "parser-*.pickle"))
        P._parser.cache_clear()
        warm = P._parser()                       # read back
        assert warm is not cold and isinstance(warm, Lark)
        assert _parses(cold, texts) == _parses(warm, texts) == want
        with open(path, "wb") as fh:             # lark's own format in the file: read too
            built.save(fh)
        P._parser.cache_clear()
        assert _parses(P._parser(), texts) == want
    finally:
        P._parser.cache_clear()


def test_the_plugin_loader_stand_in_says_what_pydantic_would(tmp_path):
    """cli._plugin_loader_stand_in: with plugins off, a check imports no importlib.metadata; the
    stand-in's get_plugins is empty as pydantic's is, and any other name comes from the real loader."""
    code = ("import sys, serq.cli; serq.cli.main(['check', %r])\n"
            "loader = sys.modules['pydantic.plugin._loader']\n"
            "print('importlib.metadata' in sys.modules, list(loader.get_plugins()))\n"
            "print(loader.PYDANTIC_ENTRY_POINT_GROUP, 'importlib.metadata' in sys.modules)\n"
            "import pydantic.plugin._loader as real; print(real is not loader, real.get_plugins())" % VLLM)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-3:] == ["False []", "pydantic True", "True ()"]
