"""The command line as a user runs it: exit codes, diagnostics with a caret, never a traceback."""
from __future__ import annotations

import json
import math
import os

import pytest

from serq import api
from serq.ir import model as I

from helpers import MINIMAL, serq

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")


def test_check_ok():
    r = serq("check", VLLM)
    assert r.returncode == 0 and "ok" in r.stderr


def test_broken_program_gets_a_diagnostic(tmp_path):
    f = tmp_path / "broken.sq"
    f.write_text("fn main() {\n  stage svc : fifo;\n  workload { arrive poisson(1); }\n  server {\n"
                 "    run svc (cost(svc, promt));\n  }\n}\n")
    r = serq("check", str(f))
    assert r.returncode == 1
    first, src, caret = r.stderr.splitlines()[:3]
    assert first == f"{f}:5:24: error[L070]: unknown name `promt`"
    assert "run svc (cost(svc, promt));" in src
    assert caret.index("^") == src.index("promt") and caret.count("^") == len("promt")


def test_syntax_error_exit_1(tmp_path):
    f = tmp_path / "s.sq"
    f.write_text("fn main() { stage s : fifo }\n")
    r = serq("check", str(f))
    assert r.returncode == 1 and "error[P001]" in r.stderr and "^" in r.stderr


def test_unreadable_and_non_utf8_files(tmp_path):
    r = serq("check", str(tmp_path / "missing.sq"))
    assert r.returncode == 1 and "error[P006]" in r.stderr
    f = tmp_path / "latin1.sq"
    f.write_bytes(b"fn main() { let caf\xe9 = 1; }\n")
    r = serq("check", str(f))
    assert r.returncode == 1 and "error[P005]" in r.stderr


@pytest.mark.parametrize("args", [
    [], ["frobnicate"], ["check"], ["ir", VLLM, "--seed", "-1"], ["ir", VLLM, "--seed", "x"],
    ["ir", VLLM, "--set", "rate"], ["ir", VLLM, "--set", "nosuch=1"], ["ir", VLLM, "--horizon", "0"],
    ["ir", VLLM, "--arrivals", "2.5"], ["ir"], ["ir", VLLM, "--set", "rate=nan"], ["ir", VLLM, "--instance", "/nonexistent"],
])
def test_usage_errors_exit_2(args):
    r = serq(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "error" in r.stderr


def test_ir_prints_json_that_loads_back():
    r = serq("ir", VLLM, "--seed", "7", "--horizon", "100", "--set", "rate=0.5")
    assert r.returncode == 0, r.stderr
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.settings.seed == 7 and prog.settings.horizon == 100 and prog.settings.inputs["rate"] == 0.5
    assert prog.constants["Lambda"] == 0.5
    again = I.Program.model_validate_json(prog.model_dump_json())
    assert again == prog


@pytest.mark.parametrize("size", ["1e999", "0 - 1e400", "m", "-m"])
def test_an_infinite_number_in_an_expression_is_the_inf_node_and_loads_back(size):
    # found by tools/fuzz.py: a literal past the largest float became {"k": "num", "v": null}, which
    # does not load back; infinity is its own node (ir/model.py)
    from serq import api
    text = ("fn main() { let m = 1e400; stage s : fifo; workload { arrive poisson(1); turn { Size x = "
            + size + "; } } server { run s (cost(s, max(x, 1))); } }")
    prog = api.load_text(text, "inf.sq")
    out = prog.model_dump_json(exclude_none=True)

    def refuse(c):
        raise AssertionError(f"{c} in the IR")
    ir = json.loads(out, parse_constant=refuse)
    assert '"v":null' not in out.replace(" ", "")
    assert I.Program.model_validate_json(out) == prog
    assert '"k": "inf"' in json.dumps(ir["workload"]["turn"][0]["e"])


def test_inputs_after_double_dash_and_instance_file(tmp_path):
    r = serq("ir", VLLM, "--", "rate=0.25", "blocks=100")
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.constants["Lambda"] == 0.25 and prog.constants["blocks"] == 100
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps({"inputs": {"rate": 0.125}, "seed": 3, "warmup": 5}))
    r = serq("ir", VLLM, "--instance", str(inst))
    prog = I.Program.model_validate_json(r.stdout)
    assert prog.constants["Lambda"] == 0.125 and prog.settings.seed == 3 and prog.settings.warmup == 5
    # a --set wins over the instance file
    r = serq("ir", VLLM, "--instance", str(inst), "--set", "rate=1")
    assert I.Program.model_validate_json(r.stdout).constants["Lambda"] == 1


def test_ir_json_is_accepted_by_check(tmp_path):
    f = tmp_path / "m.sq"
    f.write_text(MINIMAL)
    r = serq("ir", str(f))
    j = tmp_path / "m.json"
    j.write_text(r.stdout)
    assert serq("check", str(j)).returncode == 0
    j.write_text('{"version": 1, "workload": {"arrive": {"k": "poisson"}}}')
    r = serq("check", str(j))
    assert r.returncode == 1 and "error[I001]" in r.stderr


def test_schema_is_generated_and_current():
    r = serq("ir", "--schema")
    with open(os.path.join(ROOT, "docs", "reference", "ir.schema.json"), encoding="utf-8") as fh:
        assert r.stdout == fh.read(), "docs/reference/ir.schema.json is stale: run `make schema`"


# ------------------------------------------------------------------ every documented form (cli.md, report.md,
# the catalogue's *The command line*), in process

# one input, `k`, seen in the report: a lone session's response is its service time k
PROG_K = """use "std/args";
fn main() {
  let k = args.number("k", 1);
  stage svc : fifo;
  workload { arrive poisson(0.01); turn { Cost w = cost(svc, k); } }
  server { run svc (w); }
}
"""


@pytest.fixture
def progk(tmp_path):
    f = tmp_path / "k.sq"
    f.write_text(PROG_K)
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps({"inputs": {"k": 4}, "seed": 5, "horizon": 3000, "warmup": 7, "arrivals": 9}))
    return str(f), str(inst)


def cli(capsys, *args):
    from serq.cli import main
    rc = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def _ir(capsys, *args):
    rc, out, err = cli(capsys, "ir", *args)
    assert rc == 0, err
    p = I.Program.model_validate_json(out)
    s = p.settings
    return p.constants["k"], (s.seed, s.horizon, s.warmup, s.arrivals)


@pytest.mark.parametrize("extra", [[], ["--set", "k=2"], ["INST"], ["--", "k=2"], ["--set", "k=2", "--", "k=3"],
                                   ["INST", "--set", "k=2", "--", "k=3"]])
def test_check_forms(capsys, progk, extra):
    f, inst = progk
    extra = [x for a in extra for x in (["--instance", inst] if a == "INST" else [a])]
    rc, out, err = cli(capsys, "check", f, *extra)
    assert rc == 0 and err == f"{f}: ok\n" and out == ""


def test_ir_forms_and_precedence(capsys, progk):
    f, inst = progk
    assert _ir(capsys, f) == (1, (1, None, 0, None))
    assert _ir(capsys, f, "--seed", "2", "--horizon", "50", "--warmup", "5", "--arrivals", "7") == (1, (2, 50, 5, 7))
    # `--` right after FILE, and after options (issue 7, item 4)
    assert _ir(capsys, f, "--", "k=3")[0] == 3
    assert _ir(capsys, f, "--seed", "2", "--", "k=0.5") == (0.5, (2, None, 0, None))
    # inputs: the instance file, then --set, then `--`; a later one wins
    assert _ir(capsys, f, "--instance", inst) == (4, (5, 3000, 7, 9))
    assert _ir(capsys, f, "--instance", inst, "--set", "k=2")[0] == 2
    assert _ir(capsys, f, "--set", "k=2", "--instance", inst, "--", "k=3")[0] == 3
    # settings: a flag wins over the instance file, a default included
    assert _ir(capsys, f, "--instance", inst, "--seed", "1", "--warmup", "0", "--horizon", "10",
               "--arrivals", "1") == (4, (1, 10, 0, 1))


def test_a_seed_is_the_integer_written(capsys, progk, tmp_path):
    # `--seed 99999999999999999999999` ran as 99999999999999991611392 (read as a float): a seed is
    # the integer written, any size; a number in float notation only below 2^53, where it is exact
    f, _ = progk
    for text, seed in (("99999999999999999999999", 99999999999999999999999), ("1e3", 1000), (" 7 ", 7),
                       ("18446744073709551617", 2 ** 64 + 1)):
        assert _ir(capsys, f, "--seed", text)[1][0] == seed
    for text in ("1e30", "9.007199254740993e15", "-2", "1.5"):
        rc, _, err = cli(capsys, "ir", f, "--seed", text)
        assert rc == 2 and "--seed" in err, (text, err)
    inst = tmp_path / "big.json"
    inst.write_text('{"seed": 123456789012345678901234567890}')
    assert _ir(capsys, f, "--instance", str(inst))[1][0] == 123456789012345678901234567890
    # two seeds that differ beyond a float's precision draw differently
    a = api.run(api.load(f), I.Settings(seed=2 ** 64 + 1, horizon=50))
    b = api.run(api.load(f), I.Settings(seed=2 ** 64 + 2, horizon=50))
    assert a["sessions"] != b["sessions"] or a["client"] != b["client"]


def test_ir_schema_form(capsys):
    rc, out, _ = cli(capsys, "ir", "--schema")
    assert rc == 0 and json.loads(out)["title"] == "Program"


def test_run_forms(capsys, progk, tmp_path):
    f, inst = progk

    def run(*args):
        rc, out, err = cli(capsys, "run", f, *args)
        assert rc == 0, err
        return json.loads(out)

    rep = run("--horizon", "3000", "--json")
    assert (rep["seed"], rep["horizon"], rep["warmup"]) == (1, 3000, 0)
    assert rep["client"]["response"]["min"] == pytest.approx(1)
    rep = run("--horizon", "3000", "--warmup", "100", "--seed", "3", "--json", "--quiet", "--", "k=3")
    assert (rep["seed"], rep["horizon"], rep["warmup"]) == (3, 3000, 100)
    assert rep["client"]["response"]["min"] == pytest.approx(3)
    rep = run("--arrivals", "6", "--set", "k=2", "--json")
    assert rep["sessions"]["arrived"] == 6 and rep["client"]["response"]["min"] == pytest.approx(2)
    rep = run("--instance", inst, "--json", "--dump", str(tmp_path / "d"), "--", "k=5")
    assert (rep["seed"], rep["horizon"], rep["warmup"], rep["sessions"]["arrived"]) == (5, 3000, 7, 9)
    assert rep["client"]["response"]["min"] == pytest.approx(5)
    rows = (tmp_path / "d" / "client_response.csv").read_text().splitlines()
    assert rows[0] == "value" and len(rows) == 1 + rep["client"]["response"]["count"]
    rc, out, err = cli(capsys, "run", f, "--horizon", "300", "--", "k=2")
    assert rc == 0 and out.startswith(f"serq run {f}: seed 1, warm-up 0, end 300")


def test_target_forms(capsys, tmp_path):
    def blocks(*args):
        rc, out, err = cli(capsys, "target", VLLM, *args)
        assert rc == 0, err
        return json.loads(out)["num_gpu_blocks"]  # the pool's blocks and vLLM's null block

    inst = tmp_path / "i.json"
    inst.write_text('{"inputs": {"blocks": 300}}')
    assert blocks() == 4097
    assert blocks("--set", "blocks=100") == 101
    assert blocks("--instance", str(inst)) == 301
    assert blocks("--set", "blocks=100", "--", "blocks=200", "rate=0.5") == 201


@pytest.mark.parametrize("args, says", [
    (["ir", "K", "k=3"], "unrecognized arguments: k=3; inputs go after --"),
    (["ir", "K", "--", "k=3", "--seed", "2"], "'--seed' after --: options go before --"),
    (["run", "K", "--quiet", "--", "k"], "an input is NAME=VALUE, not 'k'"),
    (["check", "K", "--set", "--", "k=3"], "argument --set: expected one argument"),
    (["run", "K", "--horizon", "100", "--warmup", "100"], "--warmup 100 is not before --horizon 100"),
    (["run", "K", "--horizon", "100", "--warmup", "250"], "--warmup 250 is not before --horizon 100"),
    (["ir", "K", "--instance", "INST", "--horizon", "7"], "the instance file INST: `warmup` 7 is not before --horizon 7"),
    (["run", "K", "--horizon", "100", "--warmup", "-1"], "--warmup is a nonnegative, finite time"),
    (["run", "K", "--horizon", "0"], "--horizon is a positive time"),
    (["run", "K", "--horizon", "-5"], "--horizon is a positive time"),
    (["run", "K", "--horizon", ""], "--horizon: '' is not a number"),
    (["check", ""], "a program file is required"),
])
def test_command_line_mistakes_are_usage_errors(capsys, progk, args, says):
    f, inst = progk
    args = [f if a == "K" else inst if a == "INST" else a for a in args]
    rc, out, err = cli(capsys, *args)
    says = says.replace("INST", inst)  # a setting is blamed on the instance file that gave it
    assert rc == 2 and out == "" and f"serq: error: {says}" in err, err


def test_ir_writes_non_finite_numbers_as_strings_that_read_back(tmp_path, capsys):
    # an input of inf and a constant of -inf: strict JSON has neither, and null read back as +inf
    src = tmp_path / "n.sq"
    src.write_text("use \"std/args\";\nfn main() { let m = 0 - inf; let c = args.number(\"c\", 1); "
                   "stage s : fifo; workload { arrive poisson(1); turn { Size x = m < 0 ? 1 : 2; } } "
                   "server { run s (cost(s, x)); } }")
    code, text, _ = cli(capsys, "ir", str(src), "--", "c=inf")
    assert code == 0
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert data["settings"]["inputs"]["c"] == "Infinity" and data["constants"]["m"] == "-Infinity"
    ir = tmp_path / "n.json"
    ir.write_text(text)
    from serq import api
    prog = api.load_ir(str(ir))
    assert prog.settings.inputs["c"] == float("inf") and prog.constants["m"] == float("-inf")
    assert prog == api.load(str(src), {"c": float("inf")})


def test_one_slo_grammar_with_units_for_run_and_sweep(capsys):
    """`--slo` takes a unit of time (`500ms` is 0.5 s), a bare implausible number is said to be seconds,
    `ttft.p99` is `client.ttft.p99` in both commands, and a statistic objective on `serq run` is read on
    the report (issue 48, item 3)."""
    from serq.cli import main as cli_main, parse_slo
    assert parse_slo("ttft<=500ms", ("<=",), "F") == ("ttft", "<=", 0.5)
    assert parse_slo("ttft.p99 <= 0.25s", ("<=",), "F") == ("client.ttft.p99", "<=", 0.25)
    assert parse_slo("itl<=200us", ("<=",), "F")[2] == pytest.approx(2e-4)
    assert parse_slo("throughput.requests_per_s>=10", (">=",), "F") == ("throughput.requests_per_s", ">=", 10)
    capsys.readouterr()
    assert parse_slo("tpot<=50", ("<=",), "F") == ("tpot", "<=", 50)
    assert "taken as 50 seconds (write 50ms" in capsys.readouterr().err
    assert parse_slo("ttft<=inf", ("<=",), "F")[2] == math.inf and capsys.readouterr().err == ""   # no limit
    code = cli_main(["run", VLLM, "--horizon", "30", "--quiet", "--json", "--slo", "ttft<=500ms",
                     "--slo", "ttft.p99<=10s", "--slo", "throughput.requests_per_s>=1000"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 0 and rep["slo"] == {"ttft": 0.5}
    (p99, tput) = rep["objectives"]
    assert p99["metric"] == "client.ttft.p99" and p99["value"] == rep["client"]["ttft"]["p99"] and p99["held"]
    assert tput["metric"] == "throughput.requests_per_s" and not tput["held"]
    for bad in ("ttft>=1", "client.ttft.p101<=1", "ttft<=5x"):
        assert cli_main(["run", VLLM, "--horizon", "5", "--slo", bad]) == 2


def test_a_long_run_s_bar_says_the_time_elapsed_and_left(capsys):
    """On a terminal, after 2 s, `serq run` draws its progress with the time elapsed and, at the pace so
    far, the time left (issue 48, item 6); piped, a run says nothing on stderr."""
    import time
    import types
    from serq.cli import _Progress, main as cli_main
    p = _Progress(None)
    p.t0 = time.monotonic() - 12
    p(types.SimpleNamespace(arrivals_n=0, horizon=100.0, now=25.0, sessions_arrived=3, sessions_completed=0,
                            sessions_rejected=0))
    err = capsys.readouterr().err
    assert "25.0%" in err and "0:12 elapsed, 0:36 left" in err and len(err) <= 80
    assert cli_main(["run", VLLM, "--horizon", "5"]) == 0
    assert capsys.readouterr().err == ""
