"""Every example's text and JSON report, byte for byte as recorded (tools/golden_reports.py): a
change made for speed or memory changes nothing else (issue 12). A change meant to alter a report
records it again with `python tools/golden_reports.py --update` and says why in its commit."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import golden_reports as G  # noqa: E402


@pytest.mark.parametrize("case,argv", G.cases(), ids=[c for c, _ in G.cases()])
def test_report_as_recorded(case, argv):
    text, js = G.reports(argv)
    base = os.path.join(G.OUT, G.file_name(case))
    with open(base + ".txt", encoding="utf-8") as fh:
        assert text == fh.read()
    with open(base + ".json", encoding="utf-8") as fh:
        assert js == fh.read()

