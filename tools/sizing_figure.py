"""Deployments compared in one figure (docs/tutorial.md, *Size Llama-3.1-8B on an H100*): `serq plot`
draws one sweep; this draws several, one line (or bar) per deployment.

    .venv/bin/python tools/sizing_figure.py -o sizing.png "LABEL=SWEEP_DIR" ...

Each SWEEP_DIR is what `serq sweep --out` wrote. A `--grid rate=...` sweep is a line in the p99 TTFT and
p99 TPOT panels (the mean over its seeds, the range of the seeds shaded: with two seeds a 95% interval
is 12.7 standard errors wide, and says little); a `--find` sweep is a bar of the largest rate it found
(and that rate per GPU under tensor parallelism), and its `--slo` bounds are drawn as dashed lines.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

PANELS = [("client.ttft.p99", "p99 time to first token (s)"), ("client.tpot.p99", "p99 time per output token (s)")]


def read(label_dir: str):
    label, sep, path = label_dir.partition("=")
    if not sep or not os.path.isdir(path):
        sys.exit(f"{label_dir}: expected LABEL=SWEEP_DIR (a directory serq sweep wrote)")
    with open(os.path.join(path, "sweep.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    if meta.get("find"):
        return label, "find", dict(meta["find"], tp=meta["inputs"].get("tp", 1))
    if list(meta["grid"]) != ["rate"]:
        sys.exit(f"{path}: a sweep of rate alone is drawn (its grid: {', '.join(meta['grid'])})")
    series: dict = {}
    with open(os.path.join(path, "runs.csv"), newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            for stat in dict(PANELS):
                if r["status"] == "ok" and r[stat] != "":
                    series.setdefault(stat, {}).setdefault(float(r["rate"]), []).append(float(r[stat]))
    return label, "grid", series


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", metavar="LABEL=SWEEP_DIR")
    ap.add_argument("-o", "--output", required=True, help="the figure (.png or .svg)")
    ap.add_argument("--title", help="a title above the panels")
    args = ap.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = [read(s) for s in args.sweeps]
    grids = [(lb, d) for lb, kind, d in data if kind == "grid"]
    finds = [(lb, d) for lb, kind, d in data if kind == "find"]
    labels = list(dict.fromkeys(lb for lb, _, _ in data))
    colour = {lb: f"C{i}" for i, lb in enumerate(labels)}   # one colour per deployment in every panel
    slo = {s["metric"]: s["bound"] for _, f in finds for s in f["slo"]}
    fig, axes = plt.subplots(1, 2 + bool(finds), figsize=(4.2 * (2 + bool(finds)), 3.6), constrained_layout=True)
    for ax, (stat, title) in zip(axes, PANELS):
        for lb, series in grids:
            x = sorted(series.get(stat, {}))
            seeds = [series[stat][v] for v in x]
            ax.plot(x, [sum(s) / len(s) for s in seeds], "o-", ms=3, color=colour[lb], label=lb)
            ax.fill_between(x, [min(s) for s in seeds], [max(s) for s in seeds], color=colour[lb], alpha=0.2, lw=0)
        if stat in slo:
            ax.axhline(slo[stat], ls="--", color="0.3", lw=1)
            ax.annotate(f"SLO {slo[stat]:g} s", (ax.get_xlim()[0], slo[stat]), xytext=(4, 3),
                        textcoords="offset points", fontsize=8, color="0.3")
        ax.set_yscale("log")   # overload sends the tail up by orders of magnitude
        ax.set_xlabel("requests per second")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title, fontsize=11)
    if finds:
        ax = axes[-1]
        bars = ax.bar([lb for lb, _ in finds], [f["value"] for _, f in finds], color=[colour[lb] for lb, _ in finds])
        tps = [int(f.get("tp", 1)) for f in (d for _, d in finds)]
        ax.bar_label(bars, [f"{f['value']:.1f}" + (f"\n({f['value'] / t:.1f} per GPU)" if t > 1 else "")
                            for (_, f), t in zip(finds, tps)], fontsize=8)
        ax.margins(y=0.15)
        ax.set_ylabel("requests per second")
        ax.set_title("largest rate within every SLO", fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    # no version stamp in a PNG: the same sweeps give the same bytes
    fig.savefig(args.output, dpi=130, **({"metadata": {"Software": None}} if args.output.endswith(".png") else {}))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
