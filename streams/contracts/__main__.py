"""Export the JSON Schema of every contract: ``python -m streams.contracts [out_dir]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from streams.slices import catalogue

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "docs" / "contracts"


def render() -> dict[str, str]:
    """{file name: JSON Schema text} for every topic's model."""
    out: dict[str, str] = {}
    for topic in catalogue():
        schema = topic.model.model_json_schema(by_alias=True, mode="serialization")
        schema["x-topic"] = topic.name
        schema["x-direction"] = topic.direction
        out[f"{topic.name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__.strip().split(": ", 1)[1], file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    target = Path(argv[0]) if argv else DEFAULT_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (target / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(catalogue())} schemas to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
