"""Write examples/replay/trace.csv: a few hundred agent-like sessions, deterministic (seed 20261130).

Each session has 1-8 turns; a turn's new prompt tokens (a tool's result or a user's message), its
output tokens, the think time before it (seconds from the previous answer; turn 0's from the
session's start, 0), and now and then a forced miss (a prompt that shares nothing with the last).
Every session is one of three agents, whose system prompt (600, 1000 or 1500 tokens, streams 1-3)
its first prompt begins with: the content columns (docs/reference/content.md) say so, the session's
stream a child of its agent's at the system prompt's length, and a forced miss a stream of its own
that shares nothing. The agents are drawn from a stream of their own, so the turns are as before."""
from __future__ import annotations

import csv
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "examples", "replay", "trace.csv")


SYSTEM = (600, 1000, 1500)  # the agents' system prompts, streams 1, 2, 3


def main(n_sessions: int = 300, seed: int = 20261130):
    rng = random.Random(seed)
    agents = random.Random(seed + 1)
    streams = len(SYSTEM)
    with open(OUT, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["session", "turn", "new", "out", "think", "forced", "stream", "parent", "common"])
        for s in range(n_sessions):
            agent = agents.randrange(len(SYSTEM))
            streams += 1
            stream, parent, common = streams, agent + 1, SYSTEM[agent]
            turns = 1 + min(7, int(rng.expovariate(1 / 2.5)))
            for t in range(turns):
                new = (300 + int(rng.expovariate(1 / 900))) if t == 0 else (20 + int(rng.expovariate(1 / 250)))
                out = 1 + int(rng.expovariate(1 / 180))
                think = 0.0 if t == 0 else round(rng.expovariate(1 / 3.0), 3)
                forced = 1 if t > 0 and rng.random() < 0.05 else 0
                if t == 0:
                    new += common
                if forced:  # a fresh prompt: a stream of its own, from here on the session's
                    streams += 1
                    stream, parent, common = streams, 0, 0
                w.writerow([f"sess{s:04d}", t, new, out, think, forced, stream, parent, common])


if __name__ == "__main__":
    main()
