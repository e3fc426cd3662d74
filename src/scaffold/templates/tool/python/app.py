"""@NAME@: a tool for a mur model capsule, written in Python. `mur build` turns this file into
tool.wasm with componentize-py, against the runtime's tool world, and packs it with the capsule.

The model sees the name, description and input schema `describe` returns, and calls the tool
with a JSON object matching the schema; a fresh instance runs each call. This one counts the
words of `text`. To report a failure to the model, raise Err("why"): the task goes on.
"""

import json

import wit_world
from componentize_py_types import Err

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The text whose words are counted."}},
    "required": ["text"],
}


class WitWorld(wit_world.WitWorld):
    def describe(self) -> wit_world.Descriptor:
        return wit_world.Descriptor(
            name="@NAME@",
            description="Counts the words of a text: the number of whitespace-separated words in `text`.",
            input_schema=json.dumps(SCHEMA),
        )

    def call(self, input: str) -> str:
        try:
            args = json.loads(input)
        except ValueError as e:
            raise Err(f"the input is not JSON: {e}")
        text = args.get("text") if isinstance(args, dict) else None
        if not isinstance(text, str):
            raise Err("`text` must be a string")
        return str(len(text.split()))
