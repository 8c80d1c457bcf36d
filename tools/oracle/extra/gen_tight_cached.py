import json, os, sys, random
sys.path.insert(0, os.getcwd())
import drive
rng = random.Random(6060)
n_ok = 0
for i in range(40):
    bs = 16
    nb = rng.randint(12, 30)
    usable = (nb - 1) * bs
    nreq = rng.randint(3, 8)
    seqs = rng.randint(2, 8)
    budget = max(rng.choice([16, 32, 64, 128, 256]), seqs)
    thr = rng.choice([0, 16, 32, 64])
    reqs = []
    for j in range(nreq):
        p = rng.randint(1, min(250, usable // 2))
        o = rng.randint(1, min(80, usable - p - bs))
        reqs.append({"id": f"R{j}", "arrival_step": rng.randint(0, 30), "prompt_len": p, "max_tokens": o})
    reqs.sort(key=lambda r: (r["arrival_step"], int(r["id"][1:])))
    s = {"name": f"tight_{i:02d}", "description": "tight", "config": drive.cfg(block_size=bs, num_gpu_blocks=nb,
         max_num_seqs=seqs, max_num_batched_tokens=budget, long_prefill_token_threshold=thr, max_model_len=usable, enable_prefix_caching=True),
         "requests": reqs}
    try:
        res = drive.run_scenario(s)
    except Exception as e:
        print("skip", i, e); continue
    with open(f"OUT_DIR/{s['name']}.json", "w") as f:
        json.dump(res, f)
    n_ok += 1
print("ok", n_ok)
