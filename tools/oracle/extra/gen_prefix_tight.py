import json, os, sys, random
sys.path.insert(0, os.getcwd())
import drive
rng = random.Random(9090)
tok = 7
n_ok = 0
for i in range(30):
    bs = 16
    nb = rng.choice([12, 14, 16, 20])
    usable = (nb - 1) * bs
    sessions = rng.randint(3, 6)
    reqs = []
    base = 100 + i * 10
    for s in range(sessions):
        prompt = [rng.randint(100, 999) for _ in range(rng.randint(10, 60))]
        prompt[0] = 100 + s * 7 + i  # distinct first tokens across sessions
        prev = None
        for t in range(rng.randint(1, 3)):
            out = rng.randint(10, 60)
            if len(prompt) + out + bs > usable - 2 * bs:
                break
            r = {"id": f"s{s}t{t}", "prompt_token_ids": list(prompt), "max_tokens": out}
            if prev is None:
                r["arrival_step"] = rng.randint(0, 2)
            else:
                r["arrive_after"] = {"request_id": prev, "delay_steps": rng.randint(1, 5)}
            reqs.append(r)
            prev = r["id"]
            prompt = prompt + [tok] * out + [rng.randint(100, 999) for _ in range(rng.randint(1, 40))]
    s = {"name": f"prefix_{i:02d}", "description": "prefix", "config": drive.cfg(block_size=bs, num_gpu_blocks=nb,
         max_num_seqs=rng.randint(2, 6), max_num_batched_tokens=rng.choice([32, 64, 128]),
         long_prefill_token_threshold=0, enable_prefix_caching=True, max_model_len=usable), "requests": reqs}
    try:
        res = drive.run_scenario(s)
    except Exception as e:
        print("skip", i, e); continue
    with open(f"OUT_DIR/{s['name']}.json", "w") as f:
        json.dump(res, f)
    with open(f"OUT_DIR/{s['name']}.scenario.json", "w") as f:
        json.dump(s, f)
    n_ok += 1
print("ok", n_ok)
