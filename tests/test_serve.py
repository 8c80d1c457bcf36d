"""The reference's theorems on the serving order (its *Engines*: "without a per-request chunk cap,
serving in admission order is serving decode-first (SerqLang.Serve.serve_eq_decode_first; a cap
breaks it, chunk_cap_breaks_shape)"), lean/Serq/Serve.lean as tools/gen_serve_lean.py writes it:
the file is current, and each statement holds on the Python twin, the interpreter agreeing."""
from __future__ import annotations

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_serve_lean as G  # noqa: E402

from serq import api, ref  # noqa: E402


def test_serve_lean_is_current_and_names_the_references_theorems():
    assert G.main(["--check"]) == 0
    with open(G.OUT, encoding="utf-8") as fh:
        text = fh.read()
    assert "namespace SerqLang.Serve" in text
    for name in ("theorem serve_eq_decode_first_family", "def ServeEqDecodeFirst : Prop",
                 "theorem chunk_cap_breaks_shape"):
        assert name in text


def test_admission_order_is_decode_first_without_a_cap_and_not_with_one():
    """On every workload of the family the two orders answer every request at the same times (the
    kernel), and the interpreter runs them so too on a sample; with a cap on the admission the
    breaking workload is answered otherwise, by the kernel and by the interpreter alike."""
    progs = {ns: ref.convert(G.load(ns)) for ns in G.READINGS}
    ws = G.family()
    for wl in ws + G.wider():     # what Lean checks, and the rest of three sessions at 0 or 1
        assert G.token_times(progs["Admission"], wl) == G.token_times(progs["DecodeFirst"], wl)
    a = G.token_times(progs["CappedAdmission"], G.BREAK)
    d = G.token_times(progs["CappedDecodeFirst"], G.BREAK)
    assert a != d
    # session 1 (a prompt of 1 admitted after session 0's 9, which took one token) decodes behind it
    assert [x for x in a if x[0] == 1][0][3] > [x for x in d if x[0] == 1][0][3]

    def interp(ns, wl):
        run = api.run(G.load(ns), None, None, {"sessions": [{"arrival": s.arrival, "draws": list(s.draws)}
                                                             for s in wl.sessions]})
        return run["client"]["response"]

    assert interp("CappedAdmission", G.BREAK) != interp("CappedDecodeFirst", G.BREAK)
    for wl in ws[::37]:
        assert interp("Admission", wl) == interp("DecodeFirst", wl)
    # the fuel each theorem states is what its runs take
    with open(G.OUT, encoding="utf-8") as fh:
        text = fh.read()
    fuel = max(ref.moves(progs[k], wl) for wl in ws for k in ("Admission", "DecodeFirst"))
    assert re.search(rf"SerqGen\.ServeDecodeFirst\.program wl\s+{fuel}\)", text)
