"""The README is a first screen (issue 48, item 5): at most 60 lines, every file it links present,
and its one-line replay of a public trace runs as written."""
import os
import re
import shlex

from serq.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _text():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        return fh.read()


def test_the_readme_fits_a_first_screen():
    assert len(_text().splitlines()) <= 60


def test_every_file_the_readme_links_is_there():
    for target in re.findall(r"\]\(([^)#]+)\)", _text()):
        assert os.path.exists(os.path.join(ROOT, target)), target


def test_the_readmes_trace_replay_runs(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    line = next(m for m in re.findall(r"`(\.venv/bin/serq run [^`]*--trace[^`]*)`", _text()))
    argv = shlex.split(line)[1:]
    assert main([*argv, "--quiet"]) == 0
    assert "sessions: 24 arrived, 24 completed" in capsys.readouterr().out
