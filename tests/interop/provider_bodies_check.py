"""Checks request bodies the runtime sent against the providers' own request types.

Usage: provider_bodies_check.py BODIES.json

BODIES.json is a list of {"provider": "openai" | "openai-compatible" | "anthropic", "body": {...}}:
every request body a scripted provider received. Each is validated with pydantic against the
official SDKs' types: `openai`'s CompletionCreateParamsNonStreaming and `anthropic`'s
MessageCreateParamsNonStreaming, or their `...Streaming` twins for a body with `"stream": true`. The SDKs declare their TypedDicts open; the APIs refuse fields
they do not know, so every TypedDict is closed here (extra keys forbidden). Iterables are walked,
because pydantic validates an `Iterable[...]` field lazily, only when it is iterated.

Beyond the types, the fields the provider's current API asks for are checked: `openai` sends
`max_completion_tokens` and no `max_tokens` (deprecated, and refused by reasoning models);
`openai-compatible` sends `max_tokens`. Finally the validator is shown to bite: a corrupted copy
of every body must be refused. Prints one line per body; exits 1 on the first problem.
"""

import json
import sys
import typing

from pydantic import TypeAdapter, ValidationError
from typing_extensions import is_typeddict

import anthropic
import openai
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming, MessageCreateParamsStreaming
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

_closed = set()


def close(t):
    """Forbids extra keys in every TypedDict reachable from `t`."""
    if id(t) in _closed:
        return
    _closed.add(id(t))
    if is_typeddict(t):
        own = t.__dict__.get("__pydantic_config__") or {}
        t.__pydantic_config__ = {**own, "extra": "forbid", "arbitrary_types_allowed": True}
        for hint in typing.get_type_hints(t, include_extras=True).values():
            close(hint)
        return
    for arg in typing.get_args(t):
        close(arg)


for t in (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
):
    close(t)
ADAPTERS = {
    "openai": TypeAdapter(CompletionCreateParamsNonStreaming),
    "openai-compatible": TypeAdapter(CompletionCreateParamsNonStreaming),
    "anthropic": TypeAdapter(MessageCreateParamsNonStreaming),
}
STREAMING = {
    "openai": TypeAdapter(CompletionCreateParamsStreaming),
    "openai-compatible": TypeAdapter(CompletionCreateParamsStreaming),
    "anthropic": TypeAdapter(MessageCreateParamsStreaming),
}


def walk(v):
    """Turns every lazily validated iterable into a list, so its elements get validated."""
    if isinstance(v, dict):
        return {k: walk(x) for k, x in v.items()}
    if isinstance(v, (str, bytes, int, float, bool)) or v is None:
        return v
    try:
        return [walk(x) for x in v]
    except TypeError:
        return v


def problems(provider, body):
    """What is wrong with `body` for `provider`; empty when nothing is."""
    adapters = STREAMING if body.get("stream") is True else ADAPTERS
    try:
        walk(adapters[provider].validate_python(body))
    except ValidationError as e:
        return [str(e)]
    found = []
    if provider == "openai":
        if "max_tokens" in body:
            found.append("openai: max_tokens is deprecated and refused by reasoning models")
        if "max_completion_tokens" not in body:
            found.append("openai: no max_completion_tokens")
    if provider == "openai-compatible" and "max_tokens" not in body:
        found.append("openai-compatible: no max_tokens")
    if provider == "anthropic" and "max_tokens" not in body:
        found.append("anthropic: no max_tokens")
    if body.get("stream") is True and provider != "anthropic":
        if body.get("stream_options", {}).get("include_usage") is not True:
            found.append(f"{provider}: a streamed request without stream_options.include_usage has no usage")
    return found


def corrupted(provider, body):
    """Copies of `body` the provider must refuse."""
    bad_role = json.loads(json.dumps(body))
    bad_role["messages"][-1]["role"] = "bogus"
    extra = json.loads(json.dumps(body))
    extra["no_such_field"] = 1
    out = [("a message with role 'bogus'", bad_role), ("an unknown top-level field", extra)]
    if body.get("stream") is True:
        bad_stream = json.loads(json.dumps(body))
        bad_stream["stream"] = "yes"
        out.append(("stream: 'yes'", bad_stream))
    return out


def main():
    with open(sys.argv[1]) as f:
        entries = json.load(f)
    if not entries:
        print("no bodies to check")
        return 1
    print(f"openai {openai.__version__}, anthropic {anthropic.__version__}")
    for i, entry in enumerate(entries):
        provider, body = entry["provider"], entry["body"]
        found = problems(provider, body)
        if found:
            print(f"body {i} ({provider}) is refused:\n" + "\n".join(found))
            print(json.dumps(body, indent=1)[:4000])
            return 1
        for what, bad in corrupted(provider, body):
            if not problems(provider, bad):
                print(f"body {i} ({provider}): {what} was accepted; the check does not bite")
                return 1
        roles = [m.get("role") for m in body["messages"]]
        streamed = " streamed" if body.get("stream") is True else ""
        print(f"body {i} ({provider}){streamed} ok: {len(roles)} messages {roles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
