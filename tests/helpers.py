"""Shared test helpers."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def serq(*args, cwd=None):
    """`serq ARGS` as a user runs it, in a process of its own (from the repository by default): its
    stderr never holds a traceback."""
    r = subprocess.run([sys.executable, "-m", "serq.cli", *args], capture_output=True, text=True, cwd=cwd or ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def cli_main(capsys, *args):
    """`serq ARGS` in this process: (exit status, stdout, stderr), stderr never a traceback."""
    from serq import cli
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


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


def oracle_lean_files() -> list[str]:
    """lean/Serq/Oracle.lean and its parts (lean/Serq/Oracle/PartNN.lean, the theorems), in order."""
    import glob
    return ([os.path.join(ROOT, "lean", "Serq", "Oracle.lean")]
            + sorted(glob.glob(os.path.join(ROOT, "lean", "Serq", "Oracle", "Part*.lean"))))


def oracle_lean_text() -> str:
    """The Oracle's files as one text, in order."""
    out = []
    for path in oracle_lean_files():
        with open(path, encoding="utf-8") as fh:
            out.append(fh.read())
    return "".join(out)
