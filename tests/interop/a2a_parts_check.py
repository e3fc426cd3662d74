#!/usr/bin/env python3
"""Drives a real `mur` door with the official A2A Python SDK client (a2a-sdk 1.x): parts beyond
text, the card's security scheme, and streaming methods refused before their stream starts.

Usage: a2a_parts_check.py URL TOKEN

URL is an authenticating door whose capsule answers every task with its own task text (the echo
actor) and whose manifest declares `exports.input_modes: [image/png]`; TOKEN is its operator
token. The Rust test `a2a::the_official_sdk_sends_parts_and_reads_refused_streams` starts it and
runs this.

Exit status: 0 when every check passed, 1 when one failed (with a traceback), 3 when the `a2a`
module cannot be imported.
"""

import asyncio
import base64
import json
import sys
import uuid

try:
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.types.a2a_pb2 import (
        Message,
        Part,
        Role,
        SendMessageRequest,
        SubscribeToTaskRequest,
        TaskState,
    )
    from a2a.utils.errors import (
        ContentTypeNotSupportedError,
        TaskNotFoundError,
        UnsupportedOperationError,
    )
    from google.protobuf import json_format, struct_pb2
except ImportError as e:
    print(f"the official A2A Python SDK is not importable ({e})", file=sys.stderr)
    sys.exit(3)

PASSED = []


def check(name, ok, detail=""):
    if not ok:
        raise AssertionError(f"{name}: {detail}")
    PASSED.append(name)
    print(f"ok {name}")


def request(*parts):
    return SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=list(parts))
    )


def data_part(value):
    v = struct_pb2.Value()
    json_format.ParseDict(value, v)
    return Part(data=v)


async def client(url, token, streaming):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return await create_client(url, client_config=ClientConfig(streaming=streaming, httpx_client=http))


async def expect_error(name, error_type, stream):
    try:
        events = [e async for e in stream]
        check(name, False, f"no error; events {events}")
    except error_type:
        check(name, True)


async def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, token = argv[1], argv[2]

    # A2A v1.0 §4.4.1 AgentCard securitySchemes/securityRequirements: a standard client learns
    # from the public card, before it has any token, that the door takes an HTTP bearer token.
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    scheme = card.security_schemes["bearer"]
    check("the card names an HTTP bearer scheme", scheme.http_auth_security_scheme.scheme == "Bearer", card)
    reqs = [list(r.schemes.keys()) for r in card.security_requirements]
    check("the card requires it", reqs == [["bearer"]], reqs)
    check("the card has skills", len(card.skills) >= 1, card.skills)
    modes = list(card.default_input_modes)
    check("the card lists what it accepts", modes == ["text/plain", "application/json", "image/png"], modes)

    plain = await client(url, token, False)
    streaming = await client(url, token, True)

    # A2A v1.0 §4.1.6 Part: a data part reaches the capsule as a fenced JSON block after the text.
    data = {"numbers": [1, 2, 3], "op": "sum", "note": "a\nb"}
    got = [e async for e in plain.send_message(request(Part(text="add these"), data_part(data)))]
    t = got[0].task
    check("a data part is accepted", t.status.state == TaskState.TASK_STATE_COMPLETED, t)
    answer = t.artifacts[0].parts[0].text
    # The block is one line of compact JSON (protobuf's Value carries numbers as doubles, so it
    # is compared as JSON, not as text).
    head, _, rest = answer.partition("\n```json\n")
    block, _, tail = rest.partition("\n```")
    check("the text part comes first", head == "add these", answer)
    check("the data part is one fenced line", "\n" not in block and tail == "", answer)
    check("the capsule saw the data as fenced JSON", json.loads(block) == data, block)

    # A declared file media type is accepted; the bytes arrive base64 in a fence.
    raw = Part(raw=b"\x89PNG", media_type="image/png", filename="dot.png")
    got = [e async for e in plain.send_message(request(raw))]
    answer = got[0].task.artifacts[0].parts[0].text
    b64 = base64.b64encode(b"\x89PNG").decode()
    check("a declared file part is framed", answer == f"```image/png;base64 dot.png\n{b64}\n```", answer)

    # A2A v1.0 §3.1.1/§3.1.2: an undeclared media type is ContentTypeNotSupportedError, for
    # SendMessage and, before any stream starts, for SendStreamingMessage.
    pdf = Part(url="https://example.invalid/a.pdf", media_type="application/pdf")
    try:
        [e async for e in plain.send_message(request(pdf))]
        check("an undeclared file part", False, "accepted")
    except ContentTypeNotSupportedError:
        check("an undeclared file part is ContentTypeNotSupportedError", True)
    await expect_error(
        "a refused SendStreamingMessage is ContentTypeNotSupportedError",
        ContentTypeNotSupportedError,
        streaming.send_message(request(pdf)),
    )

    # SubscribeToTask refused before its stream starts: unknown task, terminal task.
    await expect_error(
        "a refused SubscribeToTask of an unknown task is TaskNotFoundError",
        TaskNotFoundError,
        streaming.subscribe(SubscribeToTaskRequest(id="tsk_00000000000000000000000000000000")),
    )
    await expect_error(
        "a refused SubscribeToTask of a completed task is UnsupportedOperationError",
        UnsupportedOperationError,
        streaming.subscribe(SubscribeToTaskRequest(id=t.id)),
    )

    for c in (plain, streaming):
        await c.close()
    print(f"a2a-sdk parts interop: {len(PASSED)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv)))
