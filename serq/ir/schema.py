"""The IR's JSON Schema, generated from the models (never hand-written): `python -m serq.ir.schema`."""
from __future__ import annotations

import json

from serq.ir.model import Program


def schema_text() -> str:
    return json.dumps(Program.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(schema_text(), end="")
