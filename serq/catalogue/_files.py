"""Finding and reading the catalogue's JSON files, with errors a user can act on."""
from __future__ import annotations

import json
import os
from pathlib import Path

from serq.catalogue import CatalogueError


def names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.json"))


def resolve(name_or_path: str | os.PathLike, folder: Path, kind: str, default_file: str | None = None) -> Path:
    """A shipped entry by name (case-insensitive), else a file the user names (a directory: its
    `default_file`)."""
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    bare = path.suffix != ".json" and os.sep not in text and "/" not in text
    shipped = folder / f"{text.lower()}.json"
    if bare and shipped.is_file():  # a shipped name wins over a file of that name in the working directory
        return shipped
    if bare and not path.exists():
        raise CatalogueError(f"unknown {kind} '{text}'; known {kind}s: {', '.join(names(folder))} "
                             f"(or give the path of a JSON file)")
    if path.is_dir() and default_file:
        path = path / default_file
    if not path.is_file():
        raise CatalogueError(f"no such {kind} file: {path}")
    return path


def read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogueError(f"cannot read {path}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CatalogueError(f"{path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise CatalogueError(f"{path} is JSON but not an object ({{...}}): it holds a {type(data).__name__}")
    return data
