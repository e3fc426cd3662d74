#!/usr/bin/env python3
"""Continues an input-required task of a real `mur` door with the official A2A Python SDK client
(a2a-sdk 1.x), and reproduces the A2A TCK's `test_message_send_continue_task`.

Usage: a2a_ask_check.py URL TOKEN

URL is a door whose capsule asks its caller the task text as its question
(docs/reference/door.md#asking) and answers with the answer it is given; TOKEN is its operator
token. The Rust test `a2a::the_official_sdk_continues_a_task_that_asks` starts the door and runs
this.

The TCK (a2aproject/a2a-tck) is not installable here: it is not published on PyPI. Its case
`test_message_send_continue_task` (tests/mandatory/protocol/test_message_send_method.py, A2A v1.0)
is reproduced step by step in `tck_continue_task` below, over the same JSON-RPC binding the TCK's
client speaks.

Exit status: 0 when every check passed, 1 when one failed (with a traceback), 3 when the `a2a`
module cannot be imported (`.ci/run` installs it: python3 -m pip install 'a2a-sdk==1.3.0').
"""

import asyncio
import sys
import uuid

try:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import (
        CancelTaskRequest,
        GetTaskRequest,
        ListTasksRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        TaskState,
    )
    from a2a.utils.errors import UnsupportedOperationError
except ImportError as e:
    print(
        f"the official A2A Python SDK is not importable ({e}); .ci/run installs it with "
        "`python3 -m pip install 'a2a-sdk==1.3.0'`",
        file=sys.stderr,
    )
    sys.exit(3)

PASSED = []
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


def check(name, ok, detail=""):
    if not ok:
        raise AssertionError(f"{name}: {detail}")
    PASSED.append(name)
    print(f"ok {name}")


def message(text, task=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        m.task_id = task.id
        m.context_id = task.context_id
    return m


async def client(url, token, streaming):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return await create_client(url, client_config=ClientConfig(streaming=streaming, httpx_client=http))


def kinds(events):
    return [e.WhichOneof("payload") for e in events]


def asks(status, question):
    return (
        status.state == INPUT_REQUIRED
        and status.message.role == Role.ROLE_AGENT
        and [p.text for p in status.message.parts] == [question]
    )


async def sdk_checks(url, token):
    plain = await client(url, token, False)
    streaming = await client(url, token, True)

    # A blocking SendMessage returns once the task asks: INPUT_REQUIRED, the question as its
    # status message (role agent).
    t = [e async for e in plain.send_message(SendMessageRequest(message=message("which colour?")))][0].task
    check("a blocking send returns at INPUT_REQUIRED", t.status.state == INPUT_REQUIRED, t)
    check("the question is the status message", asks(t.status, "which colour?"), t.status)
    g = await plain.get_task(GetTaskRequest(id=t.id))
    check("get_task shows the question", asks(g.status, "which colour?"), g)
    listed = await plain.list_tasks(ListTasksRequest(status=INPUT_REQUIRED))
    check("list_tasks by INPUT_REQUIRED", [x.id for x in listed.tasks] == [t.id], listed)

    # The answer: a message carrying the task's id and context, and the task ends with it.
    done = [e async for e in plain.send_message(SendMessageRequest(message=message("blue", t)))][0].task
    check("the continued task is the same task", done.id == t.id and done.context_id == t.context_id, done)
    check("the continued task completes", done.status.state == TaskState.TASK_STATE_COMPLETED, done)
    check("the answer reached the capsule", done.artifacts[0].parts[0].text == "blue", done)
    h = await plain.get_task(GetTaskRequest(id=t.id))
    said = [(m.role, m.parts[0].text) for m in h.history]
    check(
        "history: task, question, answer, end",
        said
        == [
            (Role.ROLE_USER, "which colour?"),
            (Role.ROLE_AGENT, "which colour?"),
            (Role.ROLE_USER, "blue"),
            (Role.ROLE_AGENT, "blue"),
        ],
        said,
    )

    # A message to the ended task is refused (A2A v1.0 §3.1.1).
    try:
        [e async for e in plain.send_message(SendMessageRequest(message=message("again", t)))]
        check("a message to a completed task", False, "accepted")
    except UnsupportedOperationError:
        check("a message to a completed task is UnsupportedOperationError", True)

    # Streaming: the stream ends at the question, and the streamed answer follows the task to
    # its end.
    events = [e async for e in streaming.send_message(SendMessageRequest(message=message("which size?")))]
    k = kinds(events)
    check("the stream opens with the task", k[0] == "task", k)
    last = events[-1].status_update
    check("the stream closes at INPUT_REQUIRED", k[-1] == "status_update" and asks(last.status, "which size?"), events)
    asking = await plain.get_task(GetTaskRequest(id=last.task_id))
    events = [e async for e in streaming.send_message(SendMessageRequest(message=message("large", asking)))]
    k = kinds(events)
    check("the streamed answer opens WORKING", k[0] == "task" and events[0].task.status.state == TaskState.TASK_STATE_WORKING, events)
    check("the streamed answer ends artifact then status", k[-2:] == ["artifact_update", "status_update"], k)
    check("the streamed answer is the answer", events[-2].artifact_update.artifact.parts[0].text == "large", events[-2])
    check("the streamed task completes", events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, events[-1])

    # CancelTask while the task waits for its answer.
    t = [e async for e in plain.send_message(SendMessageRequest(message=message("which shape?")))][0].task
    check("a third question is asked", t.status.state == INPUT_REQUIRED, t)
    canceled = await plain.cancel_task(CancelTaskRequest(id=t.id))
    check("cancel_task while asking", canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled)
    try:
        [e async for e in plain.send_message(SendMessageRequest(message=message("round", t)))]
        check("an answer to a canceled task", False, "accepted")
    except UnsupportedOperationError:
        check("an answer to a canceled task is UnsupportedOperationError", True)

    for c in (plain, streaming):
        await c.close()


async def tck_continue_task(url, token):
    """test_message_send_continue_task of the A2A TCK (A2A v1.0), step by step: SendMessage with
    the TCK's `valid_text_message_params`, the task id from its reply, then a SendMessage whose
    message carries only that taskId (no contextId), which must succeed with the same task in a
    state of {SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED}, or a Message from the agent."""
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0", "Content-Type": "application/json"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:

        async def send(params):
            body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "SendMessage", "params": params}
            r = await http.post(url, json=body)
            check("tck: HTTP 200", r.status_code == 200, r.text)
            reply = r.json()
            check("tck: a JSON-RPC success", "result" in reply and "error" not in reply and reply["id"] == body["id"], reply)
            return reply["result"]

        first = await send(
            {
                "message": {
                    "messageId": f"test-message-{uuid.uuid4()}",
                    "role": "ROLE_USER",
                    "parts": [{"text": "Hello from TCK"}],
                }
            }
        )
        task_id = first.get("task", {}).get("id")
        check("tck: the first reply names its task", task_id is not None, first)
        check("tck: the task waits for input", first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", first)
        result = await send(
            {
                "message": {
                    "taskId": task_id,
                    "messageId": f"test-continuation-{uuid.uuid4()}",
                    "role": "ROLE_USER",
                    "parts": [{"text": "Follow-up message for the existing task"}],
                }
            }
        )
        if "task" in result:
            check("tck: the continuation is the same task", result["task"]["id"] == task_id, result)
            check(
                "tck: the continued task's state",
                result["task"]["status"]["state"]
                in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED"},
                result,
            )
        else:
            check("tck: a message from the agent", result.get("message", {}).get("role") == "ROLE_AGENT", result)
        # Beyond the TCK: mur's continuation completes with the follow-up as the answer.
        check(
            "the continuation carried the follow-up",
            result["task"]["artifacts"][0]["parts"][0]["text"] == "Follow-up message for the existing task",
            result,
        )


async def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    await sdk_checks(argv[1], argv[2])
    await tck_continue_task(argv[1], argv[2])
    print(f"a2a-sdk asking interop: {len(PASSED)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv)))
