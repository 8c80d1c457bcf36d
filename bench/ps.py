"""M/M/1 processor sharing, 200,000 customers, serQ against Ciw in one process: CPU time
(time.process_time) of each run, in interleaved rounds (serQ, Ciw, serQ, Ciw, ...), and last the
median ratio of their speeds with its min and max. Both report the mean response, which M/G/1-PS
puts at E[S] / (1 - rho) (1 / (mu - lambda) for exponential service).

    .venv/bin/python bench/ps.py           # PS_CUSTOMERS=200000 PS_ROUNDS=5

serQ runs examples/single-turn/ps.sq with its Erlang-4 service made exponential (the one change,
made to the file's text here, so the bench follows the example). Ciw (the `ciw` package on PyPI)
runs its PSNode with unbounded capacity. Ciw is not one of serQ's dependencies, nor a dev extra:
only this bench uses it, so when it is missing the bench says so and installs it into the running
interpreter with pip (PS_NO_INSTALL=1: stop instead).

serQ's time is its run (api.run); loading the program is start-up, not counted. Ciw's is
simulate_until_max_customers plus reading its records.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT, cpu, spread, verdict  # noqa: E402

N = int(os.environ.get("PS_CUSTOMERS", 200_000))
ROUNDS = int(os.environ.get("PS_ROUNDS", 5))
LAM, MEAN = 0.8, 1.0
TARGET = 4.0
EXAMPLE = os.path.join(ROOT, "examples", "single-turn", "ps.sq")


def need_ciw():
    try:
        import ciw  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("PS_NO_INSTALL"):
        sys.exit("bench/ps.py needs Ciw: pip install ciw (PS_NO_INSTALL is set, so not installing it)")
    print(f"Ciw is not installed: installing it into {sys.executable} (pip install ciw) ...", flush=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "ciw"])
    if r.returncode != 0:
        sys.exit("bench/ps.py: `pip install ciw` failed; install Ciw by hand and run again")


def serq_program():
    from serq import api
    with open(EXAMPLE, encoding="utf-8") as fh:
        text = fh.read()
    law = "~erlang(4, mean)"
    assert law in text, "examples/single-turn/ps.sq changed its service law: update bench/ps.py"
    return api.load_text(text.replace(law, "~exp(mean)"), EXAMPLE, {"lambda": LAM, "mean": MEAN})


def serq_round(prog, n=N):
    from serq import api
    from serq.ir.model import Settings

    def go():
        rep = api.run(prog, Settings(arrivals=n, seed=1))
        return rep["client"]["response"]["mean"], rep["sessions"]["completed"]
    return cpu(go)


def ciw_round(n=N):
    import ciw

    def go():
        net = ciw.create_network(arrival_distributions=[ciw.dists.Exponential(rate=LAM)],
                                 service_distributions=[ciw.dists.Exponential(rate=1 / MEAN)],
                                 number_of_servers=[float("inf")])  # a PSNode's capacity: all share
        ciw.seed(1)
        sim = ciw.Simulation(net, node_class=ciw.PSNode)
        sim.simulate_until_max_customers(n, method="Finish")
        recs = sim.get_all_records()
        return sum(r.exit_date - r.arrival_date for r in recs) / len(recs), len(recs)
    return cpu(go)


def main():
    need_ciw()
    import ciw
    theory = MEAN / (1 - LAM * MEAN)
    print(f"M/M/1-PS, lambda {LAM}, mean service {MEAN}, {N:,} customers; "
          f"theory mean response E[S]/(1-rho) = {theory:.3f}; Ciw {ciw.__version__}")
    print("CPU seconds (time.process_time), rounds interleaved serQ, Ciw, ...")
    prog = serq_program()
    serq_round(prog, 1000), ciw_round(1000)  # untimed warm-up: imports and first-call costs
    ratios = []
    for k in range(ROUNDS):
        s_dt, (s_mean, s_n) = serq_round(prog)
        c_dt, (c_mean, c_n) = ciw_round()
        r = (s_n / s_dt) / (c_n / c_dt)
        ratios.append(r)
        print(f"round {k + 1}: serQ {s_dt:6.2f} s ({s_n / s_dt:9,.0f}/s, mean response {s_mean:.3f})   "
              f"Ciw {c_dt:6.2f} s ({c_n / c_dt:9,.0f}/s, mean response {c_mean:.3f})   ratio {r:.2f}x",
              flush=True)
        for name, m in (("serQ", s_mean), ("Ciw", c_mean)):
            if abs(m - theory) > 0.1 * theory:
                print(f"  WARNING: {name}'s mean response {m:.3f} is off the theory {theory:.3f}")
    med = statistics.median(ratios)
    print()
    print(f"command: .venv/bin/python bench/ps.py   (PS_CUSTOMERS={N} PS_ROUNDS={ROUNDS})")
    print("| what | serQ / Ciw, median of rounds (min, max) | target |")
    print("| --- | --- | --- |")
    print(f"| M/M/1-PS, {N:,} customers, CPU time | {spread(ratios)} | >= {TARGET:g}x: {verdict(med, TARGET)} |")


if __name__ == "__main__":
    main()
