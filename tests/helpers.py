"""Shared test helpers."""
from __future__ import annotations

import json


def strip_at(prog) -> dict:
    """The IR as plain data without source positions: two programs that mean the same compare equal."""
    def go(d):
        if isinstance(d, dict):
            return {k: go(v) for k, v in d.items() if k not in ("at", "files")}
        if isinstance(d, list):
            return [go(v) for v in d]
        return d
    return go(json.loads(prog.model_dump_json(exclude_none=True)))


MINIMAL = """
fn main() {
  stage svc : fifo;
  workload { arrive poisson(1); turn { Cost w = cost(svc, ~exp(0.5)); } }
  server { run svc (w); }
}
"""
