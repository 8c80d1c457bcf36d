"""The cost presets (issue 29, item 4): examples/presets/*.json, vllm.sq's `a`, `omega`, `beta`, `c0`
fitted by `serq calibrate` to the measured iterations in examples/data/ (docs/calibrate.md,
*Presets*). Every preset runs vllm.sq; refitting its data gives it back; the errors the docs state
are the ones computed here; the data's README names a source and a licence for every file."""
from __future__ import annotations

import csv
import glob
import json
import math
import os
import re

import pytest

from serq import api
from serq.cli import main

np = pytest.importorskip("numpy")
pytest.importorskip("scipy")

from serq.exp import calibrate as C  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")
DATA = os.path.join(ROOT, "examples", "data")
PRESETS = os.path.join(ROOT, "examples", "presets")
DOC = os.path.join(ROOT, "docs", "calibrate.md")
NAMES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(PRESETS, "*.json")))
FITTED = ["a", "omega", "beta", "c0"]


def data_of(name: str) -> str:
    return os.path.join(DATA, f"splitwise_{name}.csv")


def preset(name: str) -> dict:
    return api.parse_instance(os.path.join(PRESETS, f"{name}.json"))


def rows_of(name: str) -> list[dict]:
    with open(data_of(name), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def iteration_mape(name: str) -> dict[str, float]:
    """MAPE (%) of the preset's predicted iteration time against every measured row of its data,
    and against its prefill rows and its decode rows alone."""
    cost = C.cost_model(VLLM, {}, None)
    cols, t, _ = C.read_measured(data_of(name), cost)
    pred = cost.predict(preset(name)["inputs"], cols, len(t))
    phase = np.array([r["phase"] for r in rows_of(name)])
    err = np.abs(pred - t) / t * 100
    return {"all": float(err.mean()), "prefill": float(err[phase == "prefill"].mean()),
            "decode": float(err[phase == "decode"].mean())}


# vllm.sq's workload draws, in order: the init's ~uniform(0, 800) (K = 200 + it), the turn's
# ~uniform(20, 300) (n), ~exp(150) (o = 1 + it) and ~bernoulli(0.8) (another turn); the prompt is K + n
N_DRAW = 20
B_CAP, CHUNK_CAP = 2048, 512   # vllm.sq's token budget B and chunk_cap's default


def simulable(b: int, p: int) -> bool:
    """A run vllm.sq's engine schedules as the source ran it: every prompt whole in one prefill
    iteration (b * p within the token budget; with several requests, each within chunk_cap), and a
    prompt its workload can make (200 + K + n, with n = 20)."""
    return p >= 200 + N_DRAW and b * p <= B_CAP and (b == 1 or p <= CHUNK_CAP)


def request_mape(name: str) -> dict:
    """serQ's TTFT and end-to-end latency, vllm.sq with the preset, against the source's: for every
    kept run whose configuration serQ can simulate, `batch_size` sessions arriving together at 0,
    each one turn of `prompt_size` prompt tokens and `token_size` output tokens. TTFT is compared
    with the run's prompt_time, the response with its e2e_time; MAPE (%) over the runs."""
    prog = api.load(VLLM, preset(name)["inputs"])
    runs = {}
    for r in rows_of(name):
        if r["phase"] != "prefill":
            continue
        b, p, t = int(r["batch_size"]), int(r["prompt_size"]), int(r["token_size"])
        if simulable(b, p):
            runs.setdefault((b, p, t), []).append((float(r["ms"]) / 1000, float(r["e2e_ms"]) / 1000))
    ttft, e2e = [], []
    for (b, p, t), measured in sorted(runs.items()):
        draws = [p - 200 - N_DRAW, N_DRAW, t - 1, 0]
        rep = api.run(prog, workload={"sessions": [{"arrival": 0, "draws": list(draws)} for _ in range(b)]})
        assert rep["sessions"]["completed"] == b
        sim_ttft, sim_e2e = rep["client"]["ttft"]["mean"], rep["client"]["response"]["mean"]
        for m_ttft, m_e2e in measured:
            ttft.append(abs(sim_ttft - m_ttft) / m_ttft * 100)
            e2e.append(abs(sim_e2e - m_e2e) / m_e2e * 100)
    return {"runs": len(ttft), "configs": len(runs), "ttft": sum(ttft) / len(ttft), "e2e": sum(e2e) / len(e2e)}


def stated() -> dict[str, list[list[str]]]:
    """The Presets tables of docs/calibrate.md: preset name -> its rows' cells, table by table (the
    constants and errors, then the predictions)."""
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    out: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z0-9.-]+_[a-z0-9]+_tp\d+)` \|(.*)\|\s*$", line)
        if m:
            out.setdefault(m.group(1), []).append([c.strip() for c in m.group(2).split("|")])
    return out


def const(v: float) -> str:
    """A fitted constant as the docs write it: 3 significant digits, 0 for one at its bound of 0."""
    return "0" if abs(v) < 1e-12 else f"{v:.3g}"


# what the second table states: an iteration's predicted time (ms) for these batches
PREDICTED = [("decode, 1 request, 1,024 KV", 1, 1024), ("decode, 32 requests, 1,024 KV each", 32, 32 * 1024),
             ("prefill, 2,048 tokens", 2048, 0)]


def pct(x: float) -> str:
    return f"{x:.3g}%"


# ------------------------------------------------------------------ the tests

def test_every_preset_has_its_data_and_every_data_file_its_preset():
    assert NAMES, "no preset in examples/presets"
    csvs = sorted(os.path.basename(p)[len("splitwise_"):-4] for p in glob.glob(os.path.join(DATA, "splitwise_*.csv")))
    assert csvs == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_preset_loads_and_runs_vllm(name, capsys):
    inst = preset(name)
    assert sorted(inst) == ["inputs"] and sorted(inst["inputs"]) == sorted(FITTED)
    assert main(["run", VLLM, "--instance", os.path.join(PRESETS, f"{name}.json"), "--horizon", "200", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["sessions"]["completed"] > 0 and rep["client"]["ttft"]["count"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_refitting_the_data_gives_the_preset(name):
    """As `serq calibrate examples/multi-turn/vllm.sq --measured DATA -o PRESET` fits (the default
    --holdout 0.2, --seed 1): the fit is deterministic, so the values agree to within a thousandth
    of their standard errors (a different optimum would be off by many)."""
    cost = C.cost_model(VLLM, {}, None)
    assert cost.fittable == FITTED
    cols, t, _ = C.read_measured(data_of(name), cost)
    held = C.held_back(len(t), 0.2, 1)
    f = C.fit(cost, cols, t, FITTED, {x: (0.0, math.inf) for x in FITTED}, held)
    want = preset(name)["inputs"]
    for x, v, se in zip(FITTED, f.value, f.se):
        tol = max(1e-9 * abs(want[x]), 1e-3 * se) if math.isfinite(se) else 1e-6 * abs(want[x])
        assert abs(float(v) - want[x]) <= tol, (x, float(v), want[x], float(se))


@pytest.mark.parametrize("name", NAMES)
def test_the_iteration_mape_the_docs_state_is_the_one_computed(name):
    cells = stated()[name][0]
    m = iteration_mape(name)
    # | preset | model | GPUs | iterations | a | omega | beta | c0 | MAPE all | prefill | decode | TTFT | E2E |
    assert cells[7:10] == [pct(m["all"]), pct(m["prefill"]), pct(m["decode"])]


@pytest.mark.parametrize("name", NAMES)
def test_the_request_mape_the_docs_state_is_the_one_computed(name):
    cells = stated()[name][0]
    m = request_mape(name)
    assert cells[10:12] == [pct(m["ttft"]), pct(m["e2e"])]
    assert cells[2] == f"{len(rows_of(name))}"


@pytest.mark.parametrize("name", NAMES)
def test_the_docs_state_the_preset_constants_and_predictions(name):
    table, predicted = stated()[name]
    inst = preset(name)["inputs"]
    assert table[3:7] == [const(inst[x]) for x in FITTED]
    cost = C.cost_model(VLLM, {}, None)
    cols = {"tokens": np.array([float(t) for _, t, _ in PREDICTED]),
            "kv_decode": np.array([float(k) for _, _, k in PREDICTED]), "kv_prefill": np.zeros(len(PREDICTED))}
    ms = cost.predict(inst, cols, len(PREDICTED)) * 1000
    assert predicted == [f"{v:.3g}" for v in ms]


@pytest.mark.parametrize("name", NAMES)
def test_each_row_is_its_source_run_transformed_as_the_readme_says(name):
    """Recomputed from the source's own columns kept in the file (examples/data/splitwise_iterations.py)."""
    rows = rows_of(name)
    runs = {}
    for r in rows:
        runs.setdefault(r["source_line"], []).append(r)
    for line, rs in runs.items():
        *pre, dec = rs
        b, p, t = int(dec["batch_size"]), int(dec["prompt_size"]), int(dec["token_size"])
        # the prompt phase is an iteration of vllm.sq's only within its token budget
        assert [r["phase"] for r in rs] == (["prefill"] if b * p <= 2048 else []) + ["decode"], line
        assert int(dec["tokens"]) == b and float(dec["kv_decode"]) == b * (p + (t - 2) / 2)
        assert float(dec["kv_prefill"]) == 0
        for r in pre:
            assert int(r["tokens"]) == b * p and float(r["kv_decode"]) == 0 == float(r["kv_prefill"])
        for r in rs:
            assert float(r["time"]) == float(r["ms"]) / 1000
            assert (r["batch_size"], r["prompt_size"], r["token_size"], r["e2e_ms"]) == \
                (dec["batch_size"], dec["prompt_size"], dec["token_size"], dec["e2e_ms"])
        # a run is kept when it is self-consistent; its prompt time is in e2e_ms with the decode times
        e2e, tt = float(dec["e2e_ms"]), float(dec["ms"])
        if pre:
            pt = float(pre[0]["ms"])
            assert abs(pt + (t - 1) * tt - e2e) <= 0.015 * e2e, line
        else:
            assert e2e > (t - 1) * tt, line


def test_the_data_readme_names_a_source_and_a_licence_for_every_csv():
    """Every measured file its source at a commit and its licence; the trace samples, each in a row,
    are written for serQ (their section says so)."""
    with open(os.path.join(DATA, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    samples = {"azure_code_2023.csv", "azure_conv_2024.csv", "burstgpt.csv", "mooncake.jsonl", "sharegpt.json"}
    for f in samples:
        assert any(f"`{f}`" in ln and ln.startswith("|") for ln in text.splitlines()), f
    assert "Their values are invented, written for serQ" in text
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(DATA, "*.csv")) if os.path.basename(p) not in samples)
    assert files
    for f in files:
        lines = [ln for ln in text.splitlines() if f"`{f}`" in ln and ln.startswith("|")]
        assert lines, f"{f} has no row in examples/data/README.md"
        row = lines[0]
        assert re.search(r"https://github\.com/\S+/blob/[0-9a-f]{40}/\S+", row), f"{f}: no source URL at a commit"
        assert re.search(r"\bMIT\b", row), f"{f}: no licence"
    assert "Permission is hereby granted, free of charge" in text   # the source's licence notice, as MIT asks
