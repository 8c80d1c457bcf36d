"""serq import (docs/import.md): each sample of examples/data converts into a serQ trace whose
arrivals start at 0 and never go back and whose token counts are the input's; Mooncake's shared
prefixes against a count by hand; the window, --limit and --scale; every malformed input a
diagnostic (exit 1) and every bad option a usage error (exit 2), never a traceback; and the
output written whole or not at all (serq/_write.py)."""
from __future__ import annotations

import csv
import inspect
import json
import math
import os
import random
import re
from decimal import Decimal
from pathlib import Path

import pytest

from helpers import cli_main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "data"
COLUMNS = ["session", "turn", "arrival", "new", "out", "think", "stream", "parent", "common"]
SAMPLES = {"azure_code_2023.csv": "azure", "azure_conv_2024.csv": "azure", "burstgpt.csv": "burstgpt",
           "mooncake.jsonl": "mooncake", "sharegpt.json": "sharegpt"}


def run(capsys, *args):
    return cli_main(capsys, "import", *map(str, args))


def convert(capsys, tmp_path, fmt, src, *opts):
    out = tmp_path / "out.csv"
    rc, _, err = run(capsys, fmt, src, "-o", out, *opts)
    assert rc == 0, err
    assert err.startswith("serq import: ") and err.count("\n") == 1, err
    with open(out, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == COLUMNS
    return [dict(zip(COLUMNS, r)) for r in rows[1:]], err


def sessions(rows):
    """[(arrival, [(new, out, think), ...], (stream, parent, common))] in file order."""
    out = []
    for r in rows:
        if r["turn"] == "0":
            out.append((float(r["arrival"]), [], (int(r["stream"]), int(r["parent"]), int(r["common"]))))
        else:
            assert r["arrival"] == ""  # a later turn leaves it empty
        assert int(r["turn"]) == len(out[-1][1]) and int(r["session"]) == len(out)
        out[-1][1].append((int(r["new"]), int(r["out"]), float(r["think"])))
    return out


def check_arrivals(rows):
    arr = [float(r["arrival"]) for r in rows if r["turn"] == "0"]
    assert arr[0] == 0.0 and rows[0]["arrival"] == "0"
    assert all(a <= b for a, b in zip(arr, arr[1:]))
    # to the microsecond, no trailing noise
    assert all(re.fullmatch(r"0|[1-9]\d*(\.\d{0,5}[1-9])?|0\.\d{0,5}[1-9]", r["arrival"]) for r in rows
               if r["turn"] == "0"), [r["arrival"] for r in rows]
    return arr


def loads_as_trace(path):
    """The output read back by the trace loader, with arrivals where it takes them."""
    from serq.interp.trace import load_trace
    if "arrivals" in inspect.signature(load_trace).parameters:
        return load_trace(str(path), arrivals=True)
    return load_trace(str(path))


# ------------------------------------------------------------------ what each input holds, read here


def azure_seconds(stamp: str) -> Decimal:
    """A sample's TIMESTAMP (all on one day) as seconds of the day, exactly."""
    m = re.fullmatch(r"\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d)(\.\d+)?(\+00:00)?", stamp)
    h, mi, s, frac = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    return Decimal(int(h) * 3600 + int(mi) * 60 + int(s)) + Decimal("0" + frac if frac else "0")


def azure_expected(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    recs = [(azure_seconds(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]
    recs = sorted(recs, key=lambda r: r[0])  # stable
    t0 = recs[0][0]
    return [(r[0] - t0, r[1], r[2]) for r in recs if r[2] > 0]


def burst_expected(path, model=None):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    keep = [r for r in rows if int(r["Response tokens"]) > 0 and (model is None or r["Model"] == model)]
    t0 = float(keep[0]["Timestamp"])
    return [(float(r["Timestamp"]) - t0, int(r["Request tokens"]), int(r["Response tokens"])) for r in keep]


def tokens(text, per=4):
    return math.ceil(len(text.encode("utf-8")) / per)


# ------------------------------------------------------------------ each sample converts


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_converts_into_a_trace_that_replays(capsys, tmp_path, name):
    rows, err = convert(capsys, tmp_path, SAMPLES[name], DATA / name)
    check_arrivals(rows)
    assert all(int(r["out"]) >= 1 and int(r["new"]) >= 0 for r in rows)
    assert f"-> {tmp_path / 'out.csv'}" in err
    sess = loads_as_trace(tmp_path / "out.csv")
    assert len(sess) == len(sessions(rows))


@pytest.mark.parametrize("name", ["azure_code_2023.csv", "azure_conv_2024.csv"])
def test_azure_times_and_tokens_are_the_input_s(capsys, tmp_path, name):
    rows, err = convert(capsys, tmp_path, "azure", DATA / name)
    want = azure_expected(DATA / name)
    got = sessions(rows)
    assert [(s[1][0][0], s[1][0][1]) for s in got] == [(w[1], w[2]) for w in want]
    for (a, _, content), (t, _, _) in zip(got, want):
        assert abs(Decimal(repr(a)) - t) <= Decimal("0.0000005")
        assert content == (0, 0, 0)  # the trace says nothing of content
    assert f"{len(want)} sessions ({len(want)} turns) from azure trace" in err


def test_azure_rows_out_of_order_are_sorted(capsys, tmp_path):
    # lines 22 and 23 of the 2024 sample are out of order (06.864046 before 06.739240)
    rows, err = convert(capsys, tmp_path, "azure", DATA / "azure_conv_2024.csv")
    assert [(r["new"], r["out"]) for r in rows[20:22]] == [("331", "320"), ("2228", "116")]
    assert [r["arrival"] for r in rows[:3]] == ["0", "0.6598", "0.702246"]
    assert rows[11]["arrival"] == "4"  # line 13, `2024-05-12 00:00:04+00:00`: no fraction
    assert "rows sorted by time" in err


def test_azure_timestamps_of_both_years_and_zones(capsys, tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2024-05-12 00:00:00.5+00:00,10,1\n"      # 00:00:00.5 UTC
                   "2024-05-12T02:00:00.75+02:00,11,2\n"     # 00:00:00.75 UTC
                   "2024-05-11 20:00:01-04:00,12,3\n"        # 00:00:01 UTC
                   "2024-05-12 00:00:01.00000095Z,13,4\n")   # nanoseconds kept, printed to the microsecond
    rows, _ = convert(capsys, tmp_path, "azure", src)
    assert [r["arrival"] for r in rows] == ["0", "0.25", "0.5", "0.500001"]


def test_burstgpt_tokens_skips_failures_and_keeps_a_model(capsys, tmp_path):
    rows, err = convert(capsys, tmp_path, "burstgpt", DATA / "burstgpt.csv")
    want = burst_expected(DATA / "burstgpt.csv")
    got = sessions(rows)
    assert [(s[0], s[1][0][0], s[1][0][1]) for s in got] == want
    assert "skipped 3 rows with 0 output tokens" in err
    rows, err = convert(capsys, tmp_path, "burstgpt", DATA / "burstgpt.csv", "--model", "GPT-4")
    want = burst_expected(DATA / "burstgpt.csv", "GPT-4")
    assert [(s[0], s[1][0][0], s[1][0][1]) for s in sessions(rows)] == want
    assert "rows of other models" in err


# Mooncake's sample by hand, block 512. A row's parent is the earlier row with the longest common
# prefix of hash ids (the first row that reached it), common = blocks x 512, at most either prompt:
#  1 [0,1,2,3] 1800             nothing earlier                               0, 0
#  2 [0,1,2,4,5] 2300           [0,1,2] as 1: 3 x 512 = 1536                  1, 1536
#  3 [0,6] 700                  [0] as 1: 512                                 1, 512
#  4 [0,1,2,7,8,9] 3072         [0,1,2] as 1 (first there)                    1, 1536
#  5 [10] 455                   its first block is no earlier row's           0, 0
#  6 [0,1,2,4,11,12,13] 3584    [0,1,2,4] as 2 (2 reached it): 4 x 512        2, 2048
#  7 [14..27] 6955              nothing                                       0, 0
#  8 [14..25,28] 6472           [14..25] as 7: 12 x 512 = 6144                7, 6144
#  9 [0] 512                    [0] as 1                                      1, 512
# 10 [0,29,30] 1030             [0]                                           1, 512
# 11 [14..26,31,32] 7400        [14..26] as 7: 13 x 512 = 6656 (< 6955)       7, 6656
# 12 [0,1,2,4,5] 2300           all of 2's: 5 x 512 = 2560, capped at 2300    2, 2300
# 13 [0,33] 915                 [0]                                           1, 512
# 14 [0,1,2,7,8,9,34,35] 3806   [0,1,2,7,8,9] as 4: 6 x 512 = 3072            4, 3072
# 15 [36,37,38] 1477            nothing                                       0, 0
# 16 [36,37,39,40] 2048         [36,37] as 15: 1024                           15, 1024
# 17 [0,41] 898                 [0]                                           1, 512
# 18 [0,1,2,4,11,12,13,...] 4836  [0,1,2,4,11,12,13] as 6: 7 x 512 = 3584     6, 3584
# 19 [0,45,46] 1053             [0]                                           1, 512
# 20 [14..27] 6955              all of 7's: 14 x 512 = 7168, capped at 6955   7, 6955
# 21 [0,1,47,...] 2651          [0,1] as 1: 1024                              1, 1024
# 22 [36,37,39,40,51,52,53] 3584  [36,37,39,40] as 16: 2048                   16, 2048
# 23 [54] 300                   nothing                                       0, 0
# 24 [0,55..77] 12159           [0]                                           1, 512
MOONCAKE = [(0, 0), (1, 1536), (1, 512), (1, 1536), (0, 0), (2, 2048), (0, 0), (7, 6144), (1, 512), (1, 512),
            (7, 6656), (2, 2300), (1, 512), (4, 3072), (0, 0), (15, 1024), (1, 512), (6, 3584), (1, 512),
            (7, 6955), (1, 1024), (16, 2048), (0, 0), (1, 512)]


def test_mooncake_prefixes_as_counted_by_hand(capsys, tmp_path):
    rows, err = convert(capsys, tmp_path, "mooncake", DATA / "mooncake.jsonl")
    got = sessions(rows)
    recs = [json.loads(x) for x in (DATA / "mooncake.jsonl").read_text().splitlines()]
    assert [(s[1][0][0], s[1][0][1]) for s in got] == [(r["input_length"], r["output_length"]) for r in recs]
    assert [s[0] for s in got] == [r["timestamp"] / 1000 for r in recs]
    assert [s[2][0] for s in got] == list(range(1, 25))  # each row a stream of its own
    assert [s[2][1:] for s in got] == MOONCAKE
    assert "24 sessions (24 turns) from mooncake trace" in err


def test_mooncake_parents_are_kept_rows_only(capsys, tmp_path):
    # from 5 s on: rows 8..24 of the sample, numbered 1..17; row 7 is gone, so row 8 (now 1) has no
    # parent and the rows after it point to the kept rows:
    #  1 (8)  0,0 | 2 (9) [0]: first now, 0,0 | 3 (10) [0] as 2 (512 fills it): 2,512
    #  4 (11) [14..25] as 1: 6144 | 5 (12) [0] as 2: 512 | 6 (13) 2,512
    #  7 (14) [0,1,2] as 5: 1536 | 8 (15) 0,0 | 9 (16) 8,1024 | 10 (17) 2,512
    # 11 (18) [0,1,2,4] as 5 (2300 >= 2048): 2048 | 12 (19) 2,512
    # 13 (20) [14..26] as 4 (row 11 made that node; row 8 stops at 12 blocks): 6656
    # 14 (21) [0,1] as 5: 1024 | 15 (22) 9,2048 | 16 (23) 0,0 | 17 (24) 2,512
    rows, err = convert(capsys, tmp_path, "mooncake", DATA / "mooncake.jsonl", "--start", "5")
    got = sessions(rows)
    assert [s[2] for s in got] == [(k, p, c) for k, (p, c) in enumerate(
        [(0, 0), (0, 0), (2, 512), (1, 6144), (2, 512), (2, 512), (5, 1536), (0, 0), (8, 1024), (2, 512),
         (5, 2048), (2, 512), (4, 6656), (5, 1024), (9, 2048), (0, 0), (2, 512)], start=1)]
    assert got[0][0] == 0 and got[1][0] == pytest.approx(7.203 - 5.999)
    assert "7 sessions outside the window" in err


def test_mooncake_a_short_prompt_gives_its_node_to_one_that_fills_it(capsys, tmp_path):
    # A's prompt (700) ends inside its second block; B (1500) fills it and takes the node over:
    #   A [0,30] 700:  nothing earlier                                   0, 0
    #   B [0,30,31] 1500: [0,30] as A: min(1024, 1500, 700)              1, 700
    #   C [0,30] 900:  [0,30] now B's: min(1024, 900, 1500)              2, 900
    #   D [0,30,31] 1600: [0,30,31] as B (made it): min(1536, 1600, 1500) 2, 1500
    #   E (output 0): skipped, nobody's parent; F [0] 100: [0] as A: min(512, 100, 700) 1, 100
    src = tmp_path / "m.jsonl"
    recs = [(0, 700, 5, [0, 30]), (1000, 1500, 5, [0, 30, 31]), (2000, 900, 5, [0, 30]),
            (3000, 1600, 5, [0, 30, 31]), (3500, 5000, 0, [0, 30, 31, 40]), (4000, 100, 5, [0])]
    src.write_text("".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                           for t, i, o, h in recs))
    rows, err = convert(capsys, tmp_path, "mooncake", src)
    assert [s[2] for s in sessions(rows)] == [(1, 0, 0), (2, 1, 700), (3, 2, 900), (4, 2, 1500), (5, 1, 100)]
    assert "skipped 1 row with 0 output tokens" in err


def test_mooncake_block_size_and_pretty_printed_records(capsys, tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text('{\n  "timestamp": 27482,\n  "input_length": 6955,\n  "output_length": 52,\n'
                   '  "hash_ids": [46, 47]\n}\n{\n  "timestamp": 30535,\n  "input_length": 6472,\n'
                   '  "output_length": 26,\n  "hash_ids": [46, 48]\n}\n')
    rows, _ = convert(capsys, tmp_path, "mooncake", src, "--block-size", "4096")
    assert [(r["arrival"], r["parent"], r["common"]) for r in rows] == [("0", "0", "0"), ("3.053", "1", "4096")]


# the sample's conversations, by hand: (human, reply) pairs; a system message is part of the first prompt
SYS = "You are a helpful assistant. Answer concisely and cite the standard library where you can."


def sharegpt_expected(per=4):
    convs = json.loads((DATA / "sharegpt.json").read_text(encoding="utf-8"))

    def v(c, i):
        return tokens(convs[c]["conversations"][i]["value"], per)

    return [
        [(v(0, 0), v(0, 1)), (v(0, 2), v(0, 3)), (v(0, 4), v(0, 5))],
        [(v(1, 0) + v(1, 1), v(1, 2)), (v(1, 3), v(1, 4))],                 # a system message first
        # conversation 3: a question without a reply: skipped; 4: its last question unanswered
        [(v(3, 0), v(3, 1))],
        [(v(4, 1), v(4, 2)), (v(4, 3), v(4, 4))],                           # its leading reply left out
        [(v(5, 0), v(5, 1)), (v(5, 2), v(5, 3))],                           # user / chatgpt, not ASCII
        [(v(6, 0) + v(6, 1), v(6, 2))],                                     # the same system message
        # conversation 8: no messages: skipped
    ]


def test_sharegpt_turns_tokens_and_system_streams(capsys, tmp_path):
    rows, err = convert(capsys, tmp_path, "sharegpt", DATA / "sharegpt.json")
    got = sessions(rows)
    assert [[(n, o) for n, o, _ in s[1]] for s in got] == sharegpt_expected()
    assert all(s[0] == 0 for s in got)  # --rate inf: all at time 0, as vLLM's client
    # each session its own stream; the two with the system prompt are its children, the prompt a
    # stream after the sessions' (6 + 1)
    assert [s[2] for s in got] == [(1, 0, 0), (2, 7, tokens(SYS)), (3, 0, 0), (4, 0, 0), (5, 0, 0),
                                   (6, 7, tokens(SYS))]
    assert "6 sessions (11 turns)" in err and "all at time 0" in err
    assert "skipped 2 conversations with no complete turn" in err
    assert "1 conversation ended at a message without its pair" in err


def test_sharegpt_rate_seed_think_and_estimate(capsys, tmp_path):
    rows, err = convert(capsys, tmp_path, "sharegpt", DATA / "sharegpt.json", "--rate", "2", "--seed", "7",
                        "--think", "3.5", "--chars-per-token", "2")
    got = sessions(rows)
    rng, t, want = random.Random(7), 0.0, [0.0]
    for _ in range(5):
        t += rng.expovariate(2)
        want.append(t)
    assert [s[0] for s in got] == pytest.approx(want, abs=1e-6)
    assert [[th for _, _, th in s[1]] for s in got] == [[0, 3.5, 3.5], [0, 3.5], [0], [0, 3.5], [0, 3.5], [0]]
    assert [[(n, o) for n, o, _ in s[1]] for s in got] == sharegpt_expected(2)
    again, _ = convert(capsys, tmp_path, "sharegpt", DATA / "sharegpt.json", "--rate", "2", "--seed", "7",
                       "--think", "3.5", "--chars-per-token", "2")
    assert again == rows  # the same seed, the same trace


def test_sharegpt_openai_messages_and_an_empty_reply(capsys, tmp_path):
    src = tmp_path / "c.json"
    src.write_text(json.dumps([{"id": "x", "messages": [{"role": "user", "content": "abcdefghi"},
                                                         {"role": "assistant", "content": ""}]}]))
    rows, _ = convert(capsys, tmp_path, "sharegpt", src)
    assert [(r["new"], r["out"]) for r in rows] == [("3", "1")]  # 9 bytes / 4 -> 3; an empty reply: 1


# ------------------------------------------------------------------ window, limit, scale


def test_window_limit_and_scale(capsys, tmp_path):
    src = DATA / "burstgpt.csv"
    full = burst_expected(src)                 # times from the first row (5 s), failures left out
    rows, err = convert(capsys, tmp_path, "burstgpt", src, "--start", "100", "--end", "200")
    inside = [w for w in full if 100 <= w[0] < 200]
    got = sessions(rows)
    assert [(s[1][0][0], s[1][0][1]) for s in got] == [(w[1], w[2]) for w in inside]
    assert [s[0] for s in got] == [w[0] - inside[0][0] for w in inside]  # from the first kept row
    assert "outside the window" in err
    rows, err = convert(capsys, tmp_path, "burstgpt", src, "--start", "100", "--end", "200", "--limit", "3")
    assert [(s[1][0][0], s[1][0][1]) for s in sessions(rows)] == [(w[1], w[2]) for w in inside[:3]]
    assert "past --limit" in err
    rows, err = convert(capsys, tmp_path, "burstgpt", src, "--scale", "2")
    assert [s[0] for s in sessions(rows)] == [w[0] / 2 for w in full]
    assert "(--scale)" in err
    rows, _ = convert(capsys, tmp_path, "burstgpt", src, "--limit", "1000")
    assert len(rows) == len(full)


def test_the_window_counts_from_the_trace_s_first_row_even_when_skipped(capsys, tmp_path):
    src = tmp_path / "b.csv"
    src.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "10,ChatGPT,5,0,5,Conversation log\n"      # a failure: the trace's first row all the same
                   "12,ChatGPT,5,7,12,Conversation log\n"
                   "13,GPT-4,5,7,12,Conversation log\n")
    rows, _ = convert(capsys, tmp_path, "burstgpt", src, "--start", "2.5", "--model", "gpt-4")
    assert [(r["arrival"], r["new"]) for r in rows] == [("0", "5")]


def test_the_summary_line(capsys, tmp_path):
    _, err = convert(capsys, tmp_path, "azure", DATA / "azure_code_2023.csv")
    assert re.fullmatch(r"serq import: 30 sessions \(30 turns\) from azure trace \S+azure_code_2023.csv over "
                        r"28\.5 s \(1\.05 sessions/s\) -> \S+out.csv\n", err), err


# ------------------------------------------------------------------ malformed input: diagnostics


AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BAD = [
    ("azure", AZURE_HEAD + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 25:15:46.6805900,374,44\n", 3, 1,
     "`TIMESTAMP` is '2023-11-16 25:15:46.6805900', not a date and time"),
    ("azure", AZURE_HEAD + "yesterday,374,44\n", 2, 1, "not a date and time"),
    ("azure", AZURE_HEAD + "2023-11-16 18:15:46.6805900,374,-4\n", 2, 33, "`GeneratedTokens` is '-4': negative"),
    ("azure", AZURE_HEAD + "2023-11-16 18:15:46.6805900,37.5,4\n", 2, 29, "`ContextTokens` is '37.5': not a whole"),
    ("azure", AZURE_HEAD + "2023-11-16 18:15:46.6805900,37,4,9\n", 2, 1, "4 field(s) where the header has 3"),
    ("azure", "", 1, 1, "the file is empty"),
    ("azure", AZURE_HEAD, 1, 1, "a header and no rows"),
    ("azure", AZURE_HEAD + "2023-11-16 18:15:46.6805900,37,0\n", 1, 1, "nothing to replay"),
    ("azure", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,1,2,3,API log\n", 1, 1,
     "no `ContextTokens` column: an Azure trace's header is TIMESTAMP,ContextTokens,GeneratedTokens"),
    ("burstgpt", AZURE_HEAD + "2023-11-16 18:15:46.6805900,374,44\n", 1, 1,
     "no `Request tokens` column: a BurstGPT trace's header is Timestamp,Model,Request tokens,Response tokens"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nsoon,ChatGPT,1,2,3,x\n", 2, 1,
     "`Timestamp` is 'soon', not a time in seconds"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,1,2.5,3,x\n", 2, 13,
     "`Response tokens` is '2.5': not a whole number"),
    ("mooncake", '{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
                 '{"timestamp": 2, "input_length": -10, "output_length": 2}\n', 2, 18,
     "`input_length` is -10: negative"),
    ("mooncake", '{"timestamp": 1, "input_length": 10, "output_length": 2.5}\n', 1, 38, "`output_length` is 2.5"),
    ("mooncake", '{"timestamp": "noon", "input_length": 10, "output_length": 2}\n', 1, 2, "`timestamp` is \"noon\""),
    ("mooncake", '{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1.5]}\n', 1, 58,
     "`hash_ids` is not a list"),
    ("mooncake", '{"timestamp": 1, "input_length": 10, "output_length": 2}\n{"timestamp": 2, "input_len\n', 2, 28,
     "not a JSON record: Invalid control character (a Mooncake trace is JSON lines"),
    ("mooncake", '{"timestamp": 1, "output_length": 2}\n', 1, 1, "the record has no `input_length`"),
    ("mooncake", '[{"conversations": []}]\n', 1, 1, "a list where a Mooncake record is an object"),
    ("mooncake", "\n\n", 1, 1, "the file is empty"),
    ("sharegpt", '[{"conversations": [{"from": "human", "value": "hi"}]},\n {"conversations": [{"from": "human", '
                 '"value": "hi"}, {"from": "robot", "value": "x"}]}]', 2, 2, "message 2 is from 'robot'"),
    ("sharegpt", '[{"conversations": []},\n {"conversations": [{"from": "human", "value": "hi"}]\n', 3, 1,
     "not JSON"),
    ("sharegpt", '[{"conversations": []},\n {"conversations": [{"from": "human", "value": 7}]}]', 2, 2,
     "message 1's `value` is not text"),
    ("sharegpt", '[{"id": "a", "turns": []}]', 1, 2, "conversation 1 (id a) has no `conversations`"),
    ("sharegpt", '{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n', 1, 1,
     "not a list: a ShareGPT file is a JSON list of conversations"),
    ("sharegpt", "[]", 1, 1, "the list of conversations is empty"),
    ("sharegpt", '[{"conversations": [{"from": "human", "value": "hi"}]}]', 1, 1, "nothing to replay"),
]


@pytest.mark.parametrize("fmt,text,line,col,msg", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_malformed_input_is_a_diagnostic(capsys, tmp_path, fmt, text, line, col, msg):
    src = tmp_path / ("in.json" if fmt == "sharegpt" else "in.jsonl" if fmt == "mooncake" else "in.csv")
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.csv"
    rc, _, err = run(capsys, fmt, src, "-o", out)
    assert rc == 1, err
    assert err.startswith(f"{src}:{line}:{col}: error[T001]: "), err
    assert msg in err, err
    assert not out.exists()


def test_another_format_s_file_says_which_it_looks_like(capsys, tmp_path):
    for fmt, name, other in (("azure", "burstgpt.csv", "burstgpt"), ("burstgpt", "azure_code_2023.csv", "azure"),
                             ("mooncake", "sharegpt.json", "sharegpt"), ("sharegpt", "mooncake.jsonl", "mooncake")):
        rc, _, err = run(capsys, fmt, DATA / name, "-o", tmp_path / "o.csv")
        assert rc == 1 and "error[T001]" in err, err
        assert "note: it looks like a" in err and f"serq import {other} " in err, err


def test_files_that_cannot_be_read(capsys, tmp_path):
    rc, _, err = run(capsys, "azure", tmp_path / "missing.csv", "-o", tmp_path / "o.csv")
    assert rc == 1 and err.startswith(f"{tmp_path / 'missing.csv'}:1:1: error[T002]: cannot read the trace"), err
    rc, _, err = run(capsys, "sharegpt", tmp_path, "-o", tmp_path / "o.csv")
    assert rc == 1 and "error[T002]" in err, err
    gz = tmp_path / "trace.csv.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x00\x00")
    rc, _, err = run(capsys, "azure", gz, "-o", tmp_path / "o.csv")
    assert rc == 1 and "error[T001]: the file is not UTF-8 text" in err and "decompress it first" in err, err


# ------------------------------------------------------------------ usage errors


USAGE = [
    (["azure", "{sample}"], "needs -o OUT.csv"),
    (["parquet", "{sample}", "-o", "{out}"], "invalid choice: 'parquet'"),
    (["azure", "{sample}", "-o", "{out}", "--limit", "0"], "--limit is a positive integer"),
    (["azure", "{sample}", "-o", "{out}", "--limit", "2.5"], "--limit is a positive integer"),
    (["azure", "{sample}", "-o", "{out}", "--scale", "0"], "--scale is a finite number > 0"),
    (["azure", "{sample}", "-o", "{out}", "--scale", "inf"], "--scale is a finite number > 0"),
    (["azure", "{sample}", "-o", "{out}", "--scale", "fast"], "--scale: 'fast' is not a number"),
    (["azure", "{sample}", "-o", "{out}", "--start", "-1"], "--start is a finite number >= 0"),
    (["azure", "{sample}", "-o", "{out}", "--start", "nan"], "--start is a finite number >= 0"),
    (["azure", "{sample}", "-o", "{out}", "--start", "10", "--end", "10"], "is not before --end"),
    (["azure", "{sample}", "-o", "{out}", "--start", "100"], "no session arrives in the window [100, inf)"),
    (["azure", "{sample}", "-o", "{out}", "--rate", "3"], "--rate applies to the sharegpt format, not azure"),
    (["azure", "{sample}", "-o", "{out}", "--model", "GPT-4"], "--model applies to the burstgpt format"),
    (["azure", "{sample}", "-o", "{out}", "--block-size", "16"], "--block-size applies to the mooncake format"),
    (["azure", "{sample}", "-o", "{out}", "--seed", "3"], "--seed applies to the sharegpt format"),
    (["burstgpt", "{burst}", "-o", "{out}", "--model", "llama"], "--model llama: no row of that model"),
    (["mooncake", "{moon}", "-o", "{out}", "--block-size", "0"], "--block-size is a positive integer"),
    (["sharegpt", "{share}", "-o", "{out}", "--rate", "0"], "--rate is a number > 0"),
    (["sharegpt", "{share}", "-o", "{out}", "--think", "-1"], "--think is a finite number >= 0"),
    (["sharegpt", "{share}", "-o", "{out}", "--chars-per-token", "0"], "--chars-per-token is a finite number > 0"),
    (["sharegpt", "{share}", "-o", "{out}", "--seed", "-1"], "--seed is a nonnegative integer"),
    (["azure", "{sample}", "-o", "{sample}"], "is the input itself"),
]


@pytest.mark.parametrize("argv,msg", USAGE, ids=[str(i) for i in range(len(USAGE))])
def test_bad_options_are_usage_errors(capsys, tmp_path, argv, msg):
    (tmp_path / "file").write_text("")
    names = {"sample": DATA / "azure_code_2023.csv", "burst": DATA / "burstgpt.csv", "moon": DATA / "mooncake.jsonl",
             "share": DATA / "sharegpt.json", "out": tmp_path / "out.csv",
             "blocked": tmp_path / "file" / "out.csv"}  # under a regular file: no directory to write in
    before = (DATA / "azure_code_2023.csv").read_bytes()
    rc, _, err = run(capsys, *[a.format(**names) for a in argv])
    assert rc == 2, err
    assert "serq: error: " in err and msg in err, err
    assert not (tmp_path / "out.csv").exists()
    assert (DATA / "azure_code_2023.csv").read_bytes() == before


# ------------------------------------------------------------------ written whole or not at all


def test_an_output_that_cannot_be_written_is_exit_1(capsys, tmp_path):
    """An I/O error (docs/reference/cli.md): exit 1, as for every command's output."""
    (tmp_path / "file").write_text("")
    rc, _, err = run(capsys, "azure", DATA / "azure_code_2023.csv", "-o", tmp_path / "file" / "out.csv")
    assert rc == 1 and "serq: error: cannot write" in err, err


def leftovers(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(capsys, tmp_path, monkeypatch, where):
    out = tmp_path / "out.csv"
    out.write_text("the old trace\n")

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, where, fail)
    rc, _, err = run(capsys, "mooncake", DATA / "mooncake.jsonl", "-o", out)
    monkeypatch.undo()
    assert rc == 1 and "cannot write" in err and "No space left on device" in err, err
    assert out.read_text() == "the old trace\n"
    assert leftovers(tmp_path) == []


def test_the_writer_whole_or_not_at_all(tmp_path):
    from serq._write import write_text
    dst = tmp_path / "x.csv"
    write_text(dst, "a\n")
    assert dst.read_text() == "a\n"
    os.chmod(dst, 0o640)
    write_text(str(dst), iter(["b\n", "c\n"]))  # chunks, written one after another
    assert dst.read_text() == "b\nc\n" and (os.stat(dst).st_mode & 0o777) == 0o640  # the mode kept

    def broken():
        yield "half of it\n"
        raise OSError(5, "Input/output error")

    from serq._write import OutputError
    with pytest.raises(OutputError):
        write_text(dst, broken())
    assert dst.read_text() == "b\nc\n"  # the old file, whole
    assert leftovers(tmp_path) == []
    new = tmp_path / "new.csv"
    with pytest.raises(OutputError):
        write_text(new, broken())
    assert not new.exists() and leftovers(tmp_path) == []
    with pytest.raises(OutputError, match="cannot write .*nowhere"):
        write_text(tmp_path / "nowhere" / "x.csv", "a\n")


def test_help_lists_the_formats_and_options(capsys):
    from serq.cli import main
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    out = capsys.readouterr().out
    for word in ("azure", "burstgpt", "mooncake", "sharegpt", "--limit", "--scale", "--block-size",
                 "--chars-per-token", "--rate", "--think"):
        assert word in out
