#!/usr/bin/env python3
"""Validates agent cards against the A2A v1.0 AgentCard JSON Schema.

Usage: a2a_card_check.py SCHEMA CARD.json...

SCHEMA is tests/interop/a2a_agent_card.schema.json (its `$comment` says where it comes from).
Each CARD is one card as a door served it. The Rust test `a2a::every_card_a_door_serves_is_a_valid_a2a_card`
writes them and runs this.

Exit status: 0 when every card is valid, 1 when one is not (each error printed), 3 when the
`jsonschema` module cannot be imported.
"""

import json
import sys

try:
    import jsonschema
except ImportError as e:
    print(f"jsonschema is not importable ({e})", file=sys.stderr)
    sys.exit(3)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            card = json.load(f)
        errors = sorted(validator.iter_errors(card), key=lambda e: list(e.absolute_path))
        for e in errors:
            where = "/".join(str(p) for p in e.absolute_path) or "(card)"
            print(f"{path}: {where}: {e.message}")
        if errors:
            bad += 1
        else:
            print(f"ok {path}")
    print(f"{len(argv) - 2 - bad} of {len(argv) - 2} cards valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
