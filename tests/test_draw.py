"""`serq draw`: every example draws a well-formed, deterministic SVG naming every pool, stage and
engine of its IR, with one box for each hold and run of its path and no two boxes overlapping;
odd and mutated programs draw or get their diagnostic, never a traceback (docs/reference/cli.md)."""
from __future__ import annotations

import glob
import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import fuzzgen
from fuzzrun import apply_ir
from serq import api
from serq.cli import main
from serq.diagnostics import SerqError
from serq.draw import svg
from serq.draw.svg import STYLE, text_width
from serq.draw.text import Source, reading, src
from serq.ir import model as I
from serq.link.rules import walk

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# found when the suite is collected, so programs added under examples/ are drawn too
EXAMPLES = sorted(os.path.relpath(p, ROOT) for p in [q for q in glob.glob(os.path.join(ROOT, "examples", "**", "*.sq"),
                                                           recursive=True) if os.sep + "lib" + os.sep not in q])
NS = "{http://www.w3.org/2000/svg}"


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def serq(capsys, monkeypatch):
    """The command line in this process (a process each costs a second): its status and output."""
    monkeypatch.chdir(ROOT)

    def run(*args):
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return Result(code, out, err)
    return run


def texts(root) -> list[str]:
    return [t.text or "" for t in root.iter(NS + "text")]


def rects(root) -> list[tuple[float, float, float, float]]:
    """Every box but the cards behind a family's front box (they overlap it on purpose)."""
    out = []
    for r in root.iter(NS + "rect"):
        if r.get("class") != "card":
            x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
            out.append((x, y, x + w, y + h))
    return out


def crosses(a, b) -> bool:
    """Two rectangles that overlap without one holding the other."""
    inside = lambda p, q: p[0] >= q[0] - 0.01 and p[1] >= q[1] - 0.01 and p[2] <= q[2] + 0.01 and p[3] <= q[3] + 0.01
    apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
    return not (apart or inside(a, b) or inside(b, a))


def text_boxes(root):
    for t in root.iter(NS + "text"):
        size = float(t.get("font-size"))
        x, base = float(t.get("x")), float(t.get("y"))
        w = text_width(t.text or "", size)  # the drawer's own per-character estimate
        x0 = x - w if t.get("text-anchor") == "end" else x - w / 2 if t.get("text-anchor") == "middle" else x
        yield t.text, (x0, base - 0.8 * size, x0 + w, base + 0.2 * size)


def path_statements(prog: I.Program):
    w = prog.workload
    return list(walk(prog.server + (w.session or [])))


@pytest.mark.parametrize("path", EXAMPLES)
def test_every_example_draws_each_part_and_each_step_of_its_path(path):
    prog = api.load(os.path.join(ROOT, path))
    out = svg(prog, os.path.basename(path))
    assert out == svg(api.load(os.path.join(ROOT, path)), os.path.basename(path))  # the same bytes
    root = ET.fromstring(out)
    assert root.tag == NS + "svg" and float(root.get("width")) > 0 and float(root.get("height")) > 0
    words = texts(root)
    for name in [p.name for p in prog.pools] + [s.name for s in prog.stages]:
        assert name in words, f"{path}: {name} is not drawn"
    # every engine is on a device, drawn as the box around the engine and the memory pools it
    # computes in (the IR keeps no device names); a family's is drawn once, as a stack
    engines = [s for s in prog.stages if isinstance(s.kind, I.Step)]
    assert words.count("device") == len(engines)
    for p in prog.pools:
        if p.memory is not None:
            assert f"the memory {p.memory} computes in" in words
    stmts = path_statements(prog)
    holds = [s for s in stmts if isinstance(s, I.Hold)]
    runs = [s for s in stmts if isinstance(s, I.Run)]
    assert len([w for w in words if w.startswith("hold ")]) == len(holds)
    steps = [w for w in words if re.match(r"(prefill|decode) on |run |transfer$|wait on ", w)]
    assert len(steps) == len(runs)
    forks = [s for s in stmts if isinstance(s, I.Fork)]
    assert len([w for w in words if re.match(r"leg \d+$", w)]) == len(forks)
    assert words.count("join") == len([s for s in stmts if isinstance(s, I.Join)])
    assert_laid_out(root, path)


def assert_laid_out(root, what: str):
    """No two boxes overlap unless one holds the other, and no text crosses a box's edge."""
    boxes = rects(root)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not crosses(a, b), f"{what}: boxes {a} and {b} overlap"
    for s, t in text_boxes(root):
        for b in boxes:
            assert not crosses(t, b), f"{what}: the text {s!r} crosses the box {b}"


def holder(t, boxes):
    """The innermost box around a text's start, or None (a band's title, a link's label)."""
    x0, y0, _, y1 = t
    around = [b for b in boxes if b[0] <= x0 + 0.5 and b[1] <= y0 + 0.5 and y1 - 0.5 <= b[3] and x0 + 0.5 <= b[2]]
    return min(around, key=lambda b: (b[2] - b[0]) * (b[3] - b[1]), default=None)


@pytest.mark.parametrize("path", EXAMPLES)
def test_every_label_fits_its_box_unclipped(path):
    """Each text's width as the drawer estimates it, character by character, ends inside the box
    that holds it, and no text is cut short with an ellipsis (a long line wraps instead)."""
    root = ET.fromstring(svg(api.load(os.path.join(ROOT, path)), os.path.basename(path)))
    boxes = rects(root)
    width = float(root.get("width"))
    for s, t in text_boxes(root):
        assert "…" not in s, f"{path}: {s!r} is clipped"
        assert t[2] <= width, f"{path}: {s!r} passes the picture's edge"
        box = holder(t, boxes)
        if box is not None and box != (0.0, 0.0, width, float(root.get("height"))):
            assert t[2] <= box[2] - 2, f"{path}: {s!r} ({t[2] - t[0]:.0f} wide) passes its box {box}"


def all_text(root) -> str:
    """The picture's words in order, one space between texts: a wrapped line reads whole again."""
    return " ".join(texts(root))


def test_expressions_print_as_the_source_wrote_them():
    prog = api.load(os.path.join(ROOT, "examples/multi-turn/vllm.sq"), {"chunk_cap": 512})
    words = all_text(ET.fromstring(svg(prog)))
    for want in ("a prefill's chunk ≤ running.count + waiting.count > 1 ? chunk_cap : inf",
                 "where chunk_cap = 512, c0 = 0.001",     # the constants the engine reads, with their numbers
                 "cap blocks * bs = 65536", "cap max_seqs = 256", "poisson, Lambda = 0.2 /s",
                 "kv: min(known, reused + budget_left(vllm))",   # the engine's `at admission` names
                 "at admission: known = max(kept, computed + 1)", "run tool ~exp(Z)"):
        assert want in words, want
    for ir in ("? 512 : 0", "Nres", "Queued", "0.001 + max(0.003"):  # the IR's folded and inner forms
        assert ir not in words, ir
    # a queue's member, and the choice among members, as the program names them
    words = all_text(ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/multi-turn/routing.sq")))))
    assert "hold R[r].reqs, R[r].kv" in words and "R.reqs[r]" not in words
    chunk = prog.stages[0].kind.chunk
    with reading(Source(prog)):
        assert src(chunk) == "running.count + waiting.count > 1 ? chunk_cap : inf"
    # without the source (an IR file, text that cannot be read): the IR, in the language's names
    assert src(chunk) == "running.count + waiting.count > 1 ? 512 : 0"
    bare = all_text(ET.fromstring(svg(prog, sources=[None])))
    assert "cap 65536" in bare and "running.count + waiting.count > 1 ? 512 : 0" in bare


def test_a_delay_stage_is_drawn_as_the_delay_the_report_calls_it():
    """`stage thinking : delay;` links to ps(present): the picture names it a delay, as `serq run`'s
    report does (its `kind`), not a ps stage; a ps stage stays one."""
    words = texts(ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/multi-turn/closed.sq")))))
    i = words.index("thinking")
    assert words[i + 1] == "delay, each job its own time (no wait)", words[i:i + 3]
    assert not [w for w in words if w.startswith("ps,")], words
    words = texts(ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/multi-turn/vllm.sq")))))
    assert words[words.index("tool") + 1] == "delay, each job its own time (no wait)"  # the think time of a tool call
    words = texts(ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/single-turn/ps.sq")))))
    assert "ps, rate 1 shared" in words


def test_a_def_inlined_prints_its_argument_not_its_parameter(tmp_path):
    """A def's body keeps its own location where it is inlined: its text names the parameter, so
    the picture writes the expression from its parts (the argument, the let's name) instead."""
    f = tmp_path / "d.sq"
    f.write_text("""fn main() {
  let k = 3;
  def f(x) { x * 2 + k }
  stage s : fifo;
  workload { arrive poisson(1); turn { Size u = 1 + floor(~uniform(0, 3)); } }
  server { run s (cost(s, f(u + 1) + 1)); run s (cost(s, f(u))); }
}
""")
    prog = api.load(str(f))
    with reading(Source(prog)):
        assert [src(r.work) for r in prog.server] == ["(u + 1) * 2 + k + 1", "u * 2 + k"]
        assert src(prog.workload.turn[0].e) == "1 + floor(~uniform(0, 3))"
    words = texts(ET.fromstring(svg(prog)))
    assert "u * 2 + k" in words and "x * 2 + k" not in words


def test_routing_draws_its_gateway_its_replicas_and_its_policies(serq, tmp_path):
    """routing.sq's gateway `gw` picks one of four replicas by a policy the input `policy` selects:
    the gateway is a node of the path and of the deployment, each replica is drawn behind it, and
    the policy the inputs choose is named, with the others the program can take."""
    path = os.path.join(ROOT, "examples/multi-turn/routing.sq")
    root = ET.fromstring(svg(api.load(path)))
    words = texts(root)
    assert words.count("gateway gw") == 2  # on the path and in the deployment
    fill = STYLE["gateway"][0]
    gateways = [r for r in root.iter(NS + "rect") if r.get("fill") == fill and r.get("class") != "card"]
    assert len(gateways) == 2 + 1  # the two nodes and the legend's swatch
    for n in range(4):
        assert f"R[{n}]" in words  # each replica behind the gateway
    assert "sends each request to one R[r]: prefix affinity (policy = 4)" in all_text(root)
    assert "policy = 4 (chosen): prefix affinity" in words and "key -cachedin(R[r].kv)" in words
    for other in ("policy = 0: random", "policy = 1: round robin", "policy = 2: least outstanding",
                  "policy = 3: least KV used"):
        assert other in words, other
    assert "ties: least outstanding (holders(R[r].reqs) + queued(R[r].reqs)), then r" in all_text(root)
    # the inputs choose another
    r = serq("draw", "examples/multi-turn/routing.sq", "-o", "-", "--set", "policy=1")
    words = texts(ET.fromstring(r.stdout))
    assert "policy = 1 (chosen): round robin" in words and "any other policy: prefix affinity" in words
    # the disaggregated program's gateway routes to two families
    root = ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/pd-disaggregation/llmd_nixl_pull.sq"))))
    words = texts(root)
    assert words.count("gateway gw") == 2 and {"P[0]", "P[1]", "D[0]", "D[1]"} <= set(words)
    assert "key shortest queue (queued(P[p].reqs))" in words and "key fewest running (holders(D[d].reqs))" in words


def test_a_choose_without_its_source_still_routes():
    """Without the source there is no gateway's name: the choose that picks a member is the node."""
    prog = api.load(os.path.join(ROOT, "examples/multi-turn/routing.sq"))
    root = ET.fromstring(svg(prog, sources=[None]))
    words = texts(root)
    assert "gateway gw" not in words and words.count("route: choose r") == 2
    assert "choose r in 4: the R[r] with the least key" in words
    assert "policy = 4" not in all_text(root)  # the condition is `4 == 0` by then: no input's name
    assert_laid_out(root, "routing without source")


def test_the_disaggregation_picture_names_its_link_and_its_families():
    prog = api.load(os.path.join(ROOT, "examples/pd-disaggregation/llmd_nixl_pull.sq"))
    words = texts(ET.fromstring(svg(prog)))
    assert "link: a transfer crosses P.nic and D.nic at once, concurrent transfers share by maxmin" in words
    assert "queue P" in words and "queue D" in words and words.count("×2") == 2
    # the source's names, with the numbers they fold to
    assert "cap blocksP * bs = 32000" in words and "block bs = 16 (2000 blocks)" in words
    assert "then lease P[p].kv for inf" in words and "choose p in NP: the P[p] with the least key" in words


def test_the_path_reads_left_to_right():
    """Each step's box starts right of the one before it on the path (vllm.sq: request, prefill,
    decode, response)."""
    root = ET.fromstring(svg(api.load(os.path.join(ROOT, "examples/multi-turn/vllm.sq"))))
    xs: dict[str, float] = {}
    for t in root.iter(NS + "text"):  # a word's first box
        xs.setdefault(t.text, float(t.get("x")))
    order = ["request", "hold reqs, kv", "prefill on vllm", "decode on vllm", "response"]
    assert [xs[w] for w in order] == sorted(xs[w] for w in order)
    assert xs["arrivals"] < xs["turn"] < xs["while more"] < xs["run tool"] < xs["session ends"]


ODD = {
    "no stages, a pool only": """fn main() {
  pool m { cap 4; }
  workload { arrive poisson(1); turn { Size u = 1 + floor(~uniform(0, 3)); } }
  server { hold m (cost(m, u)) { } }
}""",
    "no arrivals, branches and loops": """fn main() {
  stage s : fifo;
  stage z : delay;
  workload { arrive none; turn { Size n = 1; } session { loop { turn; } } }
  server {
    branch with (0.5) { run s (cost(s, 1)); } else { }
    branch (n > 1) { } else { run z (cost(z, 2)); }
    set m = n;
    while (m > 5) { set m = m - 1; run z (cost(z, 1)); }
    fork { run s (cost(s, 1)); }
    run z (cost(z, 1));
    join;
    end;
  }
}""",
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_programs_draw(name):
    assert_laid_out(ET.fromstring(svg(api.load_text(ODD[name], f"{name}.sq"))), name)


def test_every_program_of_the_test_data_that_links_draws():
    drawn = 0
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "**", "*.sq"), recursive=True)):
        if os.sep + "errors" + os.sep in p:
            continue
        try:
            prog = api.load(p)
        except SerqError:
            continue
        assert_laid_out(ET.fromstring(svg(prog)), p)
        drawn += 1
    assert drawn >= 20


FUZZ = settings(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate], max_examples=100,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(case=fuzzgen.strategy(fuzzgen.SUITE, "ir"))
def test_mutated_programs_and_ir_files_draw_or_get_a_diagnostic(case, tmp_path_factory):
    """Programs with other numbers, and IR files with values changed, deleted or duplicated (the fuzz
    cases of tests/fuzzgen.py): whatever loads draws, an SVG that parses."""
    d = tmp_path_factory.mktemp("case")
    for name, text in case.get("files", {}).items():
        (d / name).write_text(text)
    (d / "case.sq").write_text(case["program"])
    try:
        prog = api.load(str(d / "case.sq"))
    except SerqError:
        return
    ET.fromstring(svg(prog))
    (d / "case.json").write_text(json.dumps(apply_ir(json.loads(prog.model_dump_json()), case["ir"])))
    try:
        mutated = api.load(str(d / "case.json"))
    except SerqError:
        return
    ET.fromstring(svg(mutated))


# ------------------------------------------------------------------------------------- the command


def test_draw_writes_beside_the_program_by_default(serq, tmp_path):
    src = tmp_path / "mg1.sq"
    src.write_text(open(os.path.join(ROOT, "examples/single-turn/mg1.sq")).read())
    r = serq("draw", str(src))
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.strip() == f"{src}: drew {tmp_path / 'mg1.svg'}"
    assert (tmp_path / "mg1.svg").read_text() == svg(api.load(str(src)), "mg1.sq")


def test_draw_to_a_file_and_to_stdout_with_inputs(serq, tmp_path):
    mg1 = "examples/single-turn/mg1.sq"
    out = tmp_path / "m.svg"
    r = serq("draw", mg1, "-o", str(out), "--set", "lambda=0.5")
    assert r.returncode == 0
    assert "poisson, lambda = 0.5 /s" in texts(ET.fromstring(out.read_text()))
    inst = tmp_path / "i.json"
    inst.write_text('{"inputs": {"lambda": 0.25}}')
    r = serq("draw", mg1, "-o", "-", "--instance", str(inst), "--", "mean=2")
    assert r.returncode == 0 and r.stderr == ""
    words = texts(ET.fromstring(r.stdout))
    assert "poisson, lambda = 0.25 /s" in words and "mg1.sq" in words


def test_a_program_error_is_the_diagnostic_serq_check_gives(serq, tmp_path):
    f = tmp_path / "broken.sq"
    f.write_text("fn main() {\n  stage svc : fifo;\n  workload { arrive poisson(1); }\n"
                 "  server { run svc (cost(svc, promt)); }\n}\n")
    r, c = serq("draw", str(f)), serq("check", str(f))
    assert r.returncode == 1 and c.returncode == 1
    assert r.stderr == c.stderr and "error[L070]" in r.stderr and "^" in r.stderr
    assert not (tmp_path / "broken.svg").exists()


@pytest.mark.parametrize("args", [["--bogus"], ["-o"], ["--set", "nope=1"], ["--", "--x"]])
def test_usage_errors_exit_2(serq, args):
    r = serq("draw", "examples/single-turn/mg1.sq", *args)
    assert r.returncode == 2 and r.stderr.startswith(("usage:", "serq: error:")), r.stderr


def test_an_output_that_cannot_be_written_is_exit_1(serq):
    """As in every command (docs/reference/cli.md, *Exit status*; issue 50, item 4): an I/O error."""
    r = serq("draw", "examples/single-turn/mg1.sq", "-o", "/nonexistent/dir/x.svg")
    assert r.returncode == 1 and r.stderr == "serq: error: cannot write /nonexistent/dir/x.svg: No such file or directory\n"


def test_claims_refuses_an_unknown_flag_as_a_usage_error(serq):
    """Every subcommand's bad flag is a usage error (claims had no entry in the parser's table)."""
    r = serq("claims", "examples/single-turn/mg1.sq", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
