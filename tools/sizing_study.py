"""How good the roofline of examples/sizing/lib/roofline.sq is against measured iterations (docs/sizing.md,
*How good it is*): for each Splitwise file in examples/data/, its error before calibration (the
catalogue's default efficiency factors) and after `serq calibrate ... --fit mfu --fit mbu --fit c0`,
on prefill and decode rows apart; the same fit bounded to mfu, mbu <= 1; and the physical floors (a
decode's weights at the full bandwidth, any row's roofline at the peaks). Prints Markdown.

    .venv/bin/python tools/sizing_study.py

Both steps run the CLI as a user would (`serq inputs --json`, `serq calibrate -o`), then evaluate
the program's own execute on every row with serq calibrate's evaluator; the held-back rows are those
calibrate holds back (its defaults, --holdout 0.2 --seed 1), checked against the MAPE it prints.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from serq.exp.calibrate import cost_model, held_back, read_measured  # noqa: E402

SQ = "examples/sizing/vllm.sq"
GPUS = {"a100": "a100-80", "h100": "h100"}   # the files' GPU names -> the catalogue's (both 80 GB SXM)
FIT = ("mfu", "mbu", "c0")
PHYSICAL = ("--bound", "mfu=0,1", "--bound", "mbu=0,1")   # a fraction of a peak is at most 1
HOLDOUT, SEED = 0.2, 1   # serq calibrate's defaults


def serq(*argv: str) -> str:
    out = subprocess.run([sys.executable, "-m", "serq.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"serq {' '.join(argv)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def errors(pred, t) -> np.ndarray:
    return (pred - t) / t * 100


def mape_max(e: np.ndarray) -> tuple[str, str]:
    """MAPE, and the largest error with its sign (+: the roofline predicts too long)."""
    if not len(e):
        return "-", "-"
    worst = e[np.argmax(np.abs(e))]
    return f"{np.mean(np.abs(e)):.1f}%", f"{worst:+.0f}%"


def study(path: str) -> dict:
    stem = os.path.basename(path)[len("splitwise_"):-len(".csv")]
    model, gpu, tp = stem.split("_")
    sizing = ["--model", model, "--gpu", GPUS[gpu], "--tp", tp[2:]]
    rel = os.path.relpath(path, ROOT)
    before = json.loads(serq("inputs", SQ, *sizing, "--json"))
    fit = [x for f in FIT for x in ("--fit", f)]
    with tempfile.TemporaryDirectory() as tmp:
        inst = os.path.join(tmp, "fit.json")
        printed = serq("calibrate", SQ, *sizing, "--measured", rel, *fit, "-o", inst)
        with open(inst, encoding="utf-8") as fh:
            after = json.load(fh)["inputs"]
        serq("calibrate", SQ, *sizing, "--measured", rel, *fit, *PHYSICAL, "-o", inst)
        with open(inst, encoding="utf-8") as fh:
            bounded = json.load(fh)["inputs"]
    inputs = {k: float(v) for k, v in before["inputs"].items()}
    cost = cost_model(os.path.join(ROOT, SQ), inputs, None)
    cols, t, _ = read_measured(path, cost)
    with open(path, newline="", encoding="utf-8") as fh:
        phase = np.array([r["phase"] for r in csv.DictReader(fh)])
    pre, dec = phase == "prefill", phase == "decode"
    held = np.array(held_back(len(t), HOLDOUT, SEED))
    p0 = cost.predict(inputs, cols, len(t))
    p1 = cost.predict({**inputs, **{k: float(after[k]) for k in FIT}}, cols, len(t))
    p2 = cost.predict({**inputs, **{k: float(bounded[k]) for k in FIT}}, cols, len(t))
    e0, e1, e2 = errors(p0, t), errors(p1, t), errors(p2, t)
    # the held-back rows are calibrate's: its printed held-back MAPE is ours
    m = re.search(r"^held back\s+(\d+)\s+([0-9.]+)%", printed, re.M)
    assert m and int(m.group(1)) == held.sum(), printed
    assert f"{np.mean(np.abs(e1[held])):.3g}" == f"{float(m.group(2)):.3g}", (m.group(2), np.mean(np.abs(e1[held])))
    # the physical floors: a decode reads its weights once at the HBM's full bandwidth; any row takes at
    # least the roofline at the peaks (mfu = mbu = 1, no overhead, no all-reduce)
    floor = inputs["w_read"] / inputs["bw"]
    peaks = cost.predict({**inputs, "mfu": 1.0, "mbu": 1.0, "c0": 0.0, "ar_lat": 0.0, "link": float("inf")},
                         cols, len(t))
    # what one more KV token costs a decode: measured (one request: the prompt and output sweeps) against
    # the roofline's at the full bandwidth
    one = dec & (cols["decoding"] == 1)
    slope = np.polyfit(cols["kv_decode"][one], t[one], 1)[0]
    return {"name": stem, "rows": (int(pre.sum()), int(dec.sum())),
            "held": (int((held & pre).sum()), int((held & dec).sum())),
            "before": (mape_max(e0[pre]), mape_max(e0[dec])),
            "after_held": (mape_max(e1[held & pre]), mape_max(e1[held & dec])),
            "after_all": (mape_max(e1[pre]), mape_max(e1[dec])),
            "fitted": {k: float(after[k]) for k in FIT},
            "bounded": {k: float(bounded[k]) for k in FIT},
            "bounded_held": (mape_max(e2[held & pre]), mape_max(e2[held & dec])),
            "floor": floor, "fastest_decode": float(t[dec].min()),
            "predicted_ok": all(bool((p[dec] >= floor).all()) for p in (p0, p1, p2)),
            "under_floor": int((t[dec] < floor).sum()),
            "peaks_ratio": (float((t[pre] / peaks[pre]).min()), float((t[dec] / peaks[dec]).min())),
            "kv_ratio": slope / (inputs["kv_tok"] / inputs["bw"])}


def table(head: list[str], rows: list[list]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def main() -> int:
    res = [study(p) for p in sorted(glob.glob(os.path.join(ROOT, "examples", "data", "splitwise_*.csv")))]
    print("The roofline's error, (predicted - measured) / measured: MAPE and the largest (signed: + the "
          "roofline is slower). *Before*: the catalogue's default factors, every row. *After*: `--fit mfu "
          "--fit mbu --fit c0`, on the rows calibrate held back (`--holdout 0.2 --seed 1`).\n")
    table(["file", "rows prefill / decode", "before: prefill MAPE", "max", "decode MAPE", "max",
           "held back prefill / decode", "after: prefill MAPE", "max", "decode MAPE", "max"],
          [[r["name"], "%d / %d" % r["rows"], *r["before"][0], *r["before"][1], "%d / %d" % r["held"],
            *r["after_held"][0], *r["after_held"][1]] for r in res])
    print("\nThe fitted factors, and the fit's error on every row (fitted and held back).\n")
    table(["file", "mfu", "mbu", "c0 (ms)", "all rows: prefill MAPE", "max", "decode MAPE", "max"],
          [[r["name"], f"{r['fitted']['mfu']:.3f}", f"{r['fitted']['mbu']:.3g}", f"{r['fitted']['c0'] * 1e3:.1f}",
            *r["after_all"][0], *r["after_all"][1]] for r in res])
    print("\nThe same fit with the factors bounded to what is physical (`" + " ".join(PHYSICAL) + "`), its "
          "error on the held-back rows.\n")
    table(["file", "mfu", "mbu", "c0 (ms)", "held back: prefill MAPE", "max", "decode MAPE", "max"],
          [[r["name"], f"{r['bounded']['mfu']:.3f}", f"{r['bounded']['mbu']:.3f}", f"{r['bounded']['c0'] * 1e3:.1f}",
            *r["bounded_held"][0], *r["bounded_held"][1]] for r in res])
    print("\nThe floors. *Decode floor*: the weights per GPU an iteration reads (`w_read`) over the HBM "
          "bandwidth (`bw`); *at the peaks*: the roofline with mfu = mbu = 1, no overhead and no all-reduce; "
          "*KV token*: a decode's measured time per KV token (one request) over the roofline's, kv_tok / bw.\n")
    table(["file", "decode floor (ms)", "fastest decode (ms)", "measured / floor", "rows under the floor",
           "predicted >= floor", "least measured / at the peaks: prefill", "decode", "KV token, measured / roofline"],
          [[r["name"], f"{r['floor'] * 1e3:.1f}", f"{r['fastest_decode'] * 1e3:.1f}",
            f"{r['fastest_decode'] / r['floor']:.2f}", r["under_floor"], "yes" if r["predicted_ok"] else "NO",
            f"{r['peaks_ratio'][0]:.2f}", f"{r['peaks_ratio'][1]:.2f}", f"{r['kv_ratio']:.1f}"] for r in res])
    return 0


if __name__ == "__main__":
    sys.exit(main())
