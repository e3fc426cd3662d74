#!/usr/bin/env python3
"""Checks with the official A2A Python SDK client (a2a-sdk 1.x) that a model capsule's answer
streams: artifact chunks arrive before the task ends, and they make the whole answer.

Usage: a2a_stream_check.py DOOR_URL OPERATOR_TOKEN ANSWER

DOOR_URL is a door whose model capsule answers ANSWER, streamed by a scripted provider that holds
each piece back until the previous one has reached this client. After each chunk this script
prints `SEEN <text assembled so far>` (flushed): the Rust test
`streaming::the_official_a2a_sdk_client_sees_the_answer_stream_before_the_task_ends` reads those
lines and only then lets the provider send the next piece. So the chunks were seen before the
task could end: a handshake, not timing.

Exit status: 0 when every check passed, 1 when one failed (with a traceback), 3 when the `a2a`
module cannot be imported.
"""

import asyncio
import sys
import uuid

try:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import (
        GetTaskRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        TaskState,
    )
except ImportError as e:
    print(f"the official A2A Python SDK is not importable ({e})", file=sys.stderr)
    sys.exit(3)

PASSED = []


def check(name, ok, detail=""):
    if not ok:
        raise AssertionError(f"{name}: {detail}")
    PASSED.append(name)
    print(f"ok {name}", flush=True)


def apply(assembled, update):
    """One artifact update applied as a client assembles an artifact."""
    text = "".join(p.text for p in update.artifact.parts)
    return assembled + text if update.append else text


async def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, token, answer = argv[1], argv[2], argv[3]
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    c = await create_client(url, client_config=ClientConfig(streaming=True, httpx_client=http))

    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="Name three letters.")])
    stream = c.send_message(SendMessageRequest(message=msg))
    first = await stream.__anext__()
    check("stream opens with the task", first.WhichOneof("payload") == "task", first)
    task_id = first.task.id

    assembled, chunks = "", []
    async for e in stream:
        kind = e.WhichOneof("payload")
        if kind == "status_update":
            state = e.status_update.status.state
            if state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING):
                continue
            early = [x for x in chunks if not x.last_chunk]
            check("two chunks came before the task ended", len(early) >= 2, len(chunks))
            check("the task completes", state == TaskState.TASK_STATE_COMPLETED, e)
            break
        if kind == "artifact_update":
            u = e.artifact_update
            check("chunks are of the task", u.task_id == task_id, u)
            check("one artifact for the answer", u.artifact.artifact_id == "response", u)
            check("append after the first chunk", u.append == (len(chunks) > 0), u)
            assembled = apply(assembled, u)
            chunks.append(u)
            print(f"SEEN {assembled!r}", flush=True)
    check("the last chunk says so", chunks[-1].last_chunk, chunks[-1])
    check("the chunks make the whole answer", assembled == answer, assembled)

    t = await c.get_task(GetTaskRequest(id=task_id))
    check("get_task holds the whole answer", t.artifacts[0].parts[0].text == answer, t)
    await c.close()
    print(f"a2a-sdk stream: {len(PASSED)} stream checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv)))
