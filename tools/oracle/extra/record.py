"""Record the extra scenarios from vLLM 0.33.0's real scheduler, through the shared driver.

    cd ../shared/oracle/vllm && bash setup.sh
    .venv/bin/python /path/to/tools/oracle/extra/record.py /path/to/tools/oracle/extra

Writes results/NAME.json (the per-step trace left out) and, for the multi-turn families,
scenarios/NAME.json. One generator per family of scenarios, each with its own seed."""
from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.getcwd())
import drive  # noqa: E402  (the shared driver, run from its folder)

BS = 16
TOK = 7  # the token the fake model runner samples


def tight(name, seed, n, prefix_caching):
    """Single-turn requests on 12-30 blocks: many preemptions."""
    rng = random.Random(seed)
    for i in range(n):
        nb = rng.randint(12, 30)
        usable = (nb - 1) * BS
        nreq = rng.randint(3, 8)
        seqs = rng.randint(2, 8)
        budget = max(rng.choice([16, 32, 64, 128, 256]), seqs)
        thr = rng.choice([0, 16, 32, 64])
        reqs = []
        for j in range(nreq):
            p = rng.randint(1, min(250, usable // 2))
            o = rng.randint(1, min(80, usable - p - BS))
            reqs.append({"id": f"R{j}", "arrival_step": rng.randint(0, 30), "prompt_len": p, "max_tokens": o})
        reqs.sort(key=lambda r: (r["arrival_step"], int(r["id"][1:])))
        cfg = dict(block_size=BS, num_gpu_blocks=nb, max_num_seqs=seqs, max_num_batched_tokens=budget,
                   long_prefill_token_threshold=thr, max_model_len=usable)
        if prefix_caching:
            cfg["enable_prefix_caching"] = True
        yield {"name": f"{name}_{i:02d}", "description": name, "config": drive.cfg(**cfg), "requests": reqs}


def prefix(name, seed, n, blocks, sessions, outs, fits, arrivals):
    """Multi-turn sessions: turn k+1's prompt is turn k's, its output and new tokens."""
    rng = random.Random(seed)
    for i in range(n):
        nb = rng.choice(blocks)
        usable = (nb - 1) * BS
        reqs = []
        for s in range(rng.randint(*sessions)):
            prompt = [rng.randint(100, 999) for _ in range(rng.randint(10, 60))]
            prompt[0] = 100 + s * 7 + i  # distinct first tokens across sessions
            prev = None
            for t in range(rng.randint(1, 3)):
                out = rng.randint(*outs)
                if len(prompt) + out + BS > fits(usable):
                    break
                r = {"id": f"s{s}t{t}", "prompt_token_ids": list(prompt), "max_tokens": out}
                if prev is None:
                    r["arrival_step"] = rng.randint(*arrivals)
                else:
                    r["arrive_after"] = {"request_id": prev, "delay_steps": rng.randint(1, 5)}
                reqs.append(r)
                prev = r["id"]
                prompt = prompt + [TOK] * out + [rng.randint(100, 999) for _ in range(rng.randint(1, 40))]
        cfg = drive.cfg(block_size=BS, num_gpu_blocks=nb, max_num_seqs=rng.randint(2, 6),
                        max_num_batched_tokens=rng.choice([32, 64, 128]), long_prefill_token_threshold=0,
                        enable_prefix_caching=True, max_model_len=usable)
        yield {"name": f"{name}_{i:02d}", "description": name, "config": cfg, "requests": reqs}


def random_like_08(n=60, seed=777):
    """The driver's own random scenarios, another seed."""
    for s in drive.random_scenarios(n=n, seed=seed):
        s["name"] = s["name"].replace("08_random", "new_random")
        yield s


FAMILIES = [
    (random_like_08(), False),
    (tight("tight", 4242, 60, False), False),
    (tight("tight_cached", 6060, 40, True), False),
    (prefix("prefix", 31337, 30, [16, 24, 40, 64], (2, 4), (1, 20), lambda u: u // 2, (0, 8)), True),
    (prefix("prefix_tight", 9090, 30, [12, 14, 16, 20], (3, 6), (10, 60), lambda u: u - 2 * BS, (0, 2)), True),
]


def main(out: str):
    for gen, keep_scenario in FAMILIES:
        for scn in gen:
            try:
                res = drive.run_scenario(scn)
            except Exception as exc:  # a scenario vLLM refuses is left out, and said so
                print("skip", scn["name"], exc)
                continue
            res.pop("trace", None)
            with open(os.path.join(out, "results", scn["name"] + ".json"), "w") as fh:
                json.dump(res, fh, indent=1)
            if keep_scenario:
                with open(os.path.join(out, "scenarios", scn["name"] + ".json"), "w") as fh:
                    json.dump(scn, fh, indent=1)
            print(scn["name"])


if __name__ == "__main__":
    main(sys.argv[1])
