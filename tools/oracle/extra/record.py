"""Record the extra scenarios from vLLM 0.33.0's real scheduler, through the shared driver.

    cd ../shared/oracle/vllm && bash setup.sh
    .venv/bin/python /path/to/tools/oracle/extra/record.py /path/to/tools/oracle/extra

Writes results/NAME.json (the per-step trace left out), steps/NAME.json (the trace's fields that
`tools/vllm_oracle.py check --steps` reads, STEP_FIELDS, a list per step, one line each) and, for
the multi-turn families, scenarios/NAME.json. One generator per family of scenarios, each with its own seed; a second
argument records only the family of that name (`shared`, `shared_tight`, `shared_many`)."""
from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.getcwd())
import drive  # noqa: E402  (the shared driver, run from its folder)

BS = 16
TOK = 7  # the token the fake model runner samples
STEP_FIELDS = ["step", "scheduled", "preempted", "finished", "free_blocks_after"]


def write_steps(path: str, res: dict):
    """A result's per-step trace, its STEP_FIELDS only, one line per step."""
    rows = [json.dumps([t[k] for k in STEP_FIELDS], separators=(",", ":")) for t in res["trace"]]
    head = json.dumps({"name": res["name"], "vllm_version": res["vllm_version"], "fields": STEP_FIELDS})
    with open(path, "w") as fh:
        fh.write(head[:-1] + ', "trace": [\n' + ",\n".join(rows) + "\n]}\n")


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


def shared(name, seed, n, blocks, outs, fits, sessions=(3, 8)):
    """Prefixes shared across sessions (docs/reference/content.md): a system prompt every session's
    first prompt begins with (shorter than a block, several blocks, or not block-aligned), sessions
    that go on for turns on it, and subagents forking from a parent's context (its prompt and
    output, then a task of their own); memory from roomy to tight, where shared blocks are evicted
    and come back."""
    rng = random.Random(seed)
    for i in range(n):
        nb = rng.choice(blocks)
        usable = (nb - 1) * BS
        sys_len = rng.choice([5, 15, 32, 48, 70, 100])
        system = [rng.randint(100, 999) for _ in range(sys_len)]
        reqs = []
        for s in range(rng.randint(*sessions)):
            prompt = system + [rng.randint(100, 999) for _ in range(rng.randint(1, 40))]
            prev = None
            for t in range(rng.randint(1, 3)):
                out = rng.randint(*outs)
                if len(prompt) + out + BS > fits(usable):
                    break
                r = {"id": f"s{s}t{t}", "prompt_token_ids": list(prompt), "max_tokens": out}
                if prev is None:
                    r["arrival_step"] = rng.randint(0, 12)
                else:
                    r["arrive_after"] = {"request_id": prev, "delay_steps": rng.randint(1, 5)}
                reqs.append(r)
                if rng.random() < 0.3:  # subagents on this request's context, beside its next turn
                    ctx = prompt + [TOK] * out
                    for k in range(rng.randint(1, 3)):
                        sub = ctx + [rng.randint(100, 999) for _ in range(rng.randint(1, 30))]
                        if len(sub) + BS > fits(usable):
                            break
                        reqs.append({"id": f"s{s}t{t}a{k}", "prompt_token_ids": sub, "max_tokens": rng.randint(1, 16),
                                     "arrive_after": {"request_id": r["id"], "delay_steps": rng.randint(1, 3)}})
                prev = r["id"]
                prompt = prompt + [TOK] * out + [rng.randint(100, 999) for _ in range(rng.randint(1, 30))]
        if not reqs:
            continue
        cfg = drive.cfg(block_size=BS, num_gpu_blocks=nb, max_num_seqs=rng.randint(2, 8),
                        max_num_batched_tokens=rng.choice([32, 64, 128]), long_prefill_token_threshold=rng.choice([0, 32]),
                        enable_prefix_caching=True, max_model_len=usable)
        yield {"name": f"{name}_{i:02d}", "description": f"{name}: system prompt of {sys_len}", "config": cfg,
               "requests": reqs}


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
    (shared("shared", 1010, 40, [18, 24, 40, 64], (1, 24), lambda u: u // 2), True),
    (shared("shared_tight", 2020, 40, [12, 14, 16, 20], (8, 48), lambda u: u - 2 * BS), True),
    (shared("shared_many", 3030, 20, [24, 40, 64], (1, 16), lambda u: u // 2, sessions=(15, 30)), True),
]


def main(out: str, only=None):
    for gen, keep_scenario in FAMILIES:
        if only is not None and gen.gi_frame.f_locals.get("name", gen.__name__) != only:
            continue
        for scn in gen:
            try:
                res = drive.run_scenario(scn)
            except Exception as exc:  # a scenario vLLM refuses is left out, and said so
                print("skip", scn["name"], exc)
                continue
            os.makedirs(os.path.join(out, "steps"), exist_ok=True)
            write_steps(os.path.join(out, "steps", scn["name"] + ".json"), res)
            res.pop("trace", None)
            with open(os.path.join(out, "results", scn["name"] + ".json"), "w") as fh:
                json.dump(res, fh, indent=1)
            if keep_scenario:
                with open(os.path.join(out, "scenarios", scn["name"] + ".json"), "w") as fh:
                    json.dump(scn, fh, indent=1)
            print(scn["name"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
