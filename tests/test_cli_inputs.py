"""The command line's first hour (issue 29): `serq --version`, help text on every option of every
command, and `serq inputs FILE`, a program's inputs and their defaults."""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import tomllib

import pytest

from serq import api, cli

from helpers import MINIMAL, cli_main as main, serq

HERE = os.path.dirname(__file__)
ROOT = os.path.abspath(os.path.join(HERE, ".."))
VLLM = os.path.join(ROOT, "examples", "multi-turn", "vllm.sq")
VERSION = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["version"]


def test_version_prints_the_packages_version():
    r = serq("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"serq {VERSION}\n", "")


def test_version_falls_back_to_pyproject_when_not_installed(monkeypatch):
    import importlib.metadata as md

    def missing(name):
        raise md.PackageNotFoundError(name)
    monkeypatch.setattr(md, "version", missing)
    assert cli.version() == VERSION


def test_every_option_of_every_command_has_help():
    """Each command's parser built as `serq COMMAND` builds it (the experiments' options come from
    their modules, loaded for their own command only): every argument has help, every option
    that takes a value a METAVAR."""
    commands = cli._parser().commands
    assert {"run", "check", "inputs", "ir", "sweep", "plot", "calibrate", "verify"} <= set(commands)
    seen = 0
    for name in commands:
        parser = cli._parser(name)
        assert all(a.help for a in parser._actions if not isinstance(a, argparse._SubParsersAction)), name
        for a in parser.commands[name]._actions:
            what = f"serq {name} {'/'.join(a.option_strings) or a.dest}"
            assert a.help and a.help.strip(), f"{what} has no help"
            if a.option_strings and a.nargs != 0 and not a.choices:
                assert a.metavar, f"{what} has no METAVAR"
            seen += 1
    assert seen > 60


def test_the_settings_help_says_what_they_are(capsys):
    with pytest.raises(SystemExit):
        cli._parser("run").parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--horizon T", "--warmup W", "--seed S", "--arrivals N"):
        assert flag in text
    assert "nothing is measured" in text and "nonnegative integer (default 1)" in text


def test_inputs_lists_each_input_and_its_default_in_the_programs_order(tmp_path, capsys):
    code, out, err = main(capsys, "inputs", VLLM)
    assert code == 0 and err == ""
    assert out == ("rate       0.2\n"
                   "blocks     4096\n"
                   "bs         16\n"
                   "max_seqs   256\n"
                   "B          2048\n"
                   "chunk_cap  inf\n"
                   "caching    1\n"
                   "a          4e-05\n"
                   "omega      0.003\n"
                   "beta       1e-07\n"
                   "c0         0.001\n")
    code, out, _ = main(capsys, "inputs", VLLM, "--json")
    assert code == 0
    got = json.loads(out)
    assert got == {"inputs": {"rate": 0.2, "blocks": 4096, "bs": 16, "max_seqs": 256, "B": 2048,
                              "chunk_cap": "Infinity", "caching": 1, "a": 0.00004, "omega": 0.003,
                              "beta": 0.0000001, "c0": 0.001}}
    assert list(got["inputs"]) == ["rate", "blocks", "bs", "max_seqs", "B", "chunk_cap", "caching", "a", "omega",
                                   "beta", "c0"]
    # the object is an instance file: its defaults run as the program's own
    inst = tmp_path / "defaults.json"
    inst.write_text(out)
    assert api.load(VLLM) == api.load(VLLM, api.parse_instance(str(inst))["inputs"])


def test_a_program_without_inputs(tmp_path, capsys):
    f = tmp_path / "plain.sq"
    f.write_text(MINIMAL)
    code, out, err = main(capsys, "inputs", str(f))
    assert (code, out, err) == (0, "", f"{f}: the program declares no input\n")
    code, out, _ = main(capsys, "inputs", str(f), "--json")
    assert code == 0 and json.loads(out) == {"inputs": {}}


def test_a_default_computed_from_another_and_one_of_inf(tmp_path, capsys):
    f = tmp_path / "d.sq"
    f.write_text('use "std/args";\nfn main() {\n  let n = args.number("n", 4);\n  let cap = args.number("cap", inf);\n'
                 '  let half = args.number("half", n / 2);\n  stage s : fifo;\n'
                 "  workload { arrive poisson(1); }\n  server { run s (cost(s, half)); }\n}\n")
    code, out, err = main(capsys, "inputs", str(f))
    assert code == 0, err
    assert out == "n     4\ncap   inf\nhalf  2\n"
    code, out, _ = main(capsys, "inputs", str(f), "--json")
    assert json.loads(out) == {"inputs": {"n": 4, "cap": "Infinity", "half": 2}}
    # strict JSON, and an instance file as printed: "Infinity" reads back as the default, inf
    inst = tmp_path / "d.json"
    inst.write_text(out)
    assert api.parse_instance(str(inst))["inputs"] == {"n": 4, "cap": math.inf, "half": 2}
    code, _, err = main(capsys, "check", str(f), "--instance", str(inst))
    assert code == 0, err
    assert api.load(str(f)) == api.load(str(f), api.parse_instance(str(inst))["inputs"])


EXAMPLES = sorted([q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"), recursive=True) if os.sep + "lib" + os.sep not in q])


def test_every_examples_inputs_json_is_accepted_back_by_instance(tmp_path, capsys):
    """What `serq inputs FILE --json` prints is an instance file as it is: `--instance` takes it
    unchanged, and it supplies each input its default (an infinite one included: none of the
    examples' has one, the program above does)."""
    assert len(EXAMPLES) > 20
    for f in EXAMPLES:
        code, out, err = main(capsys, "inputs", f, "--json")
        assert code == 0, (f, err)
        inst = tmp_path / (os.path.basename(f) + ".json")
        inst.write_text(out)
        printed = {k: float(v) for k, v in json.loads(out)["inputs"].items()}  # "Infinity" is float's too
        assert api.parse_instance(str(inst))["inputs"] == printed, f
        code, _, err = main(capsys, "check", f, "--instance", str(inst))
        assert code == 0, (f, err)


@pytest.mark.parametrize("value, got", [
    ('"Infinity"', math.inf), ('"-Infinity"', -math.inf), ('"inf"', math.inf), ('"-inf"', -math.inf),
    ("1e400", math.inf), ("3", 3),
])
def test_an_instance_file_takes_infinity_as_serq_ir_writes_it(value, got, tmp_path):
    inst = tmp_path / "i.json"
    inst.write_text('{"inputs": {"cap": %s}}' % value)
    assert api.parse_instance(str(inst))["inputs"] == {"cap": got}


@pytest.mark.parametrize("value, says", [
    ('"NaN"', '`inputs` maps input names to numbers (an infinite one as "Infinity" or "-Infinity"), not "NaN" for cap'),
    ('"fast"', 'not "fast" for cap'),
    ('"3"', 'not "3" for cap'),
    ("true", "not true for cap"),
    ("NaN", "input cap is NaN"),
])
def test_an_instance_file_refuses_what_is_not_a_number(value, says, tmp_path, capsys):
    inst = tmp_path / "i.json"
    inst.write_text('{"inputs": {"cap": %s}}' % value)
    code, out, err = main(capsys, "check", VLLM, "--instance", str(inst))
    assert code == 2 and out == "" and says in err, err


def test_a_program_error_is_its_diagnostic(tmp_path, capsys):
    f = tmp_path / "broken.sq"
    f.write_text('use "std/args";\nfn main() {\n  let r = args.number("r", 1);\n  stage svc : fifo;\n'
                 "  workload { arrive poisson(r); }\n  server {\n    run svc (cost(svc, promt));\n  }\n}\n")
    code, out, err = main(capsys, "inputs", str(f))
    assert code == 1 and out == ""
    assert err.splitlines()[0] == f"{f}:7:24: error[L070]: unknown name `promt`"
    code, out, err = main(capsys, "inputs", str(tmp_path / "missing.sq"))
    assert code == 1 and "error[P006]" in err


@pytest.mark.parametrize("args, says", [
    (["inputs"], "the following arguments are required: file"),
    (["inputs", "IR"], "is an IR, its inputs resolved already"),
    (["inputs", VLLM, "--set", "rate=1"], "unrecognized arguments: --set rate=1"),
])
def test_inputs_usage_errors(args, says, tmp_path, capsys):
    ir = tmp_path / "p.json"
    ir.write_text(api.load(VLLM).model_dump_json())
    args = [str(ir) if a == "IR" else a for a in args]
    code, out, err = main(capsys, *args)
    assert code == 2 and out == "" and says in err, err
