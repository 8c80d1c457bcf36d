import json, os, sys
sys.path.insert(0, os.getcwd())
import drive
scns = drive.random_scenarios(n=60, seed=777)
for s in scns:
    s["name"] = s["name"].replace("08_random", "new_random")
    res = drive.run_scenario(s)
    with open(f"/tmp/newres/{s['name']}.json", "w") as f:
        json.dump(res, f)
print("ok", len(scns))
