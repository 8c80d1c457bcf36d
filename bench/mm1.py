"""M/M/1 FIFO (examples/single-turn/mg1.sq with c2 = 1), 200,000 customers, serQ against SimPy in
one process: CPU time (time.process_time) of each run, in interleaved rounds (serQ, SimPy, serQ,
SimPy, ...), and last the median ratio of their speeds with its min and max. Both report the mean
response, which M/M/1 puts at 1 / (mu - lambda).

    .venv/bin/python bench/mm1.py          # MM1_CUSTOMERS=200000 MM1_ROUNDS=5

serQ's time is its run (api.run: the simulation and its report); loading the program (parse, link)
is start-up, not counted. SimPy's is env.run(). The SimPy model is the idiomatic one: a Resource of
capacity 1, a process per customer, random.expovariate draws.
"""
from __future__ import annotations

import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _rounds import ROOT, cpu, spread, verdict  # noqa: E402

N = int(os.environ.get("MM1_CUSTOMERS", 200_000))
ROUNDS = int(os.environ.get("MM1_ROUNDS", 5))
LAM, MEAN = 0.8, 1.0
TARGET = 2.0


def serq_round(n=N):
    from serq import api
    from serq.ir.model import Settings
    prog = api.load(os.path.join(ROOT, "examples", "single-turn", "mg1.sq"),
                    {"lambda": LAM, "mean": MEAN, "c2": 1})

    def go():
        rep = api.run(prog, Settings(arrivals=n, seed=1))
        return rep["client"]["response"]["mean"], rep["sessions"]["completed"]
    return cpu(go)


def simpy_round(n=N):
    import simpy

    def go():
        rng = random.Random(1)
        env = simpy.Environment()
        server = simpy.Resource(env, capacity=1)
        total = [0.0, 0]

        def customer(env):
            t0 = env.now
            with server.request() as req:
                yield req
                yield env.timeout(rng.expovariate(1 / MEAN))
            total[0] += env.now - t0
            total[1] += 1

        def source(env):
            for _ in range(n):
                env.process(customer(env))
                yield env.timeout(rng.expovariate(LAM))

        env.process(source(env))
        env.run()
        return total[0] / total[1], total[1]
    return cpu(go)


def main():
    theory = 1 / (1 / MEAN - LAM)
    print(f"M/M/1 FIFO, lambda {LAM}, mean service {MEAN}, {N:,} customers; "
          f"theory mean response 1/(mu-lambda) = {theory:.3f}")
    print("CPU seconds (time.process_time), rounds interleaved serQ, SimPy, ...")
    serq_round(1000), simpy_round(1000)  # untimed warm-up: imports and first-call costs
    ratios = []
    for k in range(ROUNDS):
        s_dt, (s_mean, s_n) = serq_round()
        p_dt, (p_mean, p_n) = simpy_round()
        r = (s_n / s_dt) / (p_n / p_dt)
        ratios.append(r)
        print(f"round {k + 1}: serQ {s_dt:6.2f} s ({s_n / s_dt:9,.0f}/s, mean response {s_mean:.3f})   "
              f"SimPy {p_dt:6.2f} s ({p_n / p_dt:9,.0f}/s, mean response {p_mean:.3f})   ratio {r:.2f}x",
              flush=True)
        for name, m in (("serQ", s_mean), ("SimPy", p_mean)):
            # 200k customers at rho 0.8: the mean is within a few percent of the theory
            if abs(m - theory) > 0.1 * theory:
                print(f"  WARNING: {name}'s mean response {m:.3f} is off the theory {theory:.3f}")
    print()
    print(f"command: .venv/bin/python bench/mm1.py   (MM1_CUSTOMERS={N} MM1_ROUNDS={ROUNDS})")
    print("| what | serQ / SimPy, median of rounds (min, max) | target |")
    print("| --- | --- | --- |")
    med = statistics.median(ratios)
    print(f"| M/M/1 FIFO, {N:,} customers, CPU time | {spread(ratios)} | >= {TARGET:g}x: "
          f"{verdict(med, TARGET)} |")


if __name__ == "__main__":
    main()
