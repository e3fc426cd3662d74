#!/usr/bin/env python3
"""Drives real `mur` doors with the official A2A Python SDK client (a2a-sdk 1.x).

Usage: a2a_sdk_check.py ECHO_URL ECHO_TOKEN HELD_URL HELD_TOKEN

ECHO is a door whose capsule answers every task with its own text; HELD is a door whose capsule
never answers, so its tasks stay live until cancelled. Both authenticate with the operator token
given. The Rust test `door::official_a2a_sdk_client_interoperates` starts both doors and runs this.

Exit status: 0 when every check passed, 1 when one failed (with a traceback), 3 when the `a2a`
module cannot be imported (`.ci/run` installs it: python3 -m pip install 'a2a-sdk==1.3.0').
"""

import asyncio
import sys
import uuid

try:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.client.errors import A2AClientError
    from a2a.types.a2a_pb2 import (
        CancelTaskRequest,
        GetExtendedAgentCardRequest,
        GetTaskRequest,
        ListTasksRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        SubscribeToTaskRequest,
        TaskState,
    )
    from a2a.utils.errors import (
        TaskNotCancelableError,
        TaskNotFoundError,
        UnsupportedOperationError,
    )
except ImportError as e:
    print(
        f"the official A2A Python SDK is not importable ({e}); .ci/run installs it with "
        "`python3 -m pip install 'a2a-sdk==1.3.0'`",
        file=sys.stderr,
    )
    sys.exit(3)

CAPSULE_EXTENSION = "#murmur-capsule-v1"
PASSED = []


def check(name, ok, detail=""):
    if not ok:
        raise AssertionError(f"{name}: {detail}")
    PASSED.append(name)
    print(f"ok {name}")


def message(text):
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])


def request(text, immediately=False):
    req = SendMessageRequest(message=message(text))
    if immediately:
        req.configuration.return_immediately = True
    return req


async def client(url, token, streaming):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    return await create_client(url, client_config=ClientConfig(streaming=streaming, httpx_client=http))


def kinds(events):
    return [e.WhichOneof("payload") for e in events]


async def wait_state(c, task_id, state):
    for _ in range(300):
        t = await c.get_task(GetTaskRequest(id=task_id))
        if t.status.state == state:
            return t
        await asyncio.sleep(0.02)
    raise AssertionError(f"{task_id} never reached {TaskState.Name(state)}")


async def echo_checks(url, token):
    streaming = await client(url, token, True)
    plain = await client(url, token, False)

    # SendStreamingMessage: the task as created, its answer, then its terminal status.
    events = [e async for e in streaming.send_message(request("hello"))]
    k = kinds(events)
    check("stream opens with the task", k[0] == "task", k)
    check("stream opens SUBMITTED", events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED, events[0])
    check("stream ends artifact then status", k[-2:] == ["artifact_update", "status_update"], k)
    answer = events[-2].artifact_update.artifact.parts[0].text
    check("streamed answer is the text", answer == "hello", answer)
    last = events[-1].status_update
    check("stream ends COMPLETED", last.status.state == TaskState.TASK_STATE_COMPLETED, last)
    streamed_id = events[0].task.id
    check("task ids are tsk_", streamed_id.startswith("tsk_") and last.task_id == streamed_id, streamed_id)

    # SendMessage, blocking: the completed task with its response artifact.
    got = [e async for e in plain.send_message(request("again"))]
    t = got[0].task
    check("blocking send completes", t.status.state == TaskState.TASK_STATE_COMPLETED, t)
    check("blocking send answers", t.artifacts[0].parts[0].text == "again", t)
    check("context minted", t.context_id.startswith("ctx_"), t.context_id)

    # GetTask.
    g = await plain.get_task(GetTaskRequest(id=streamed_id))
    check("get_task", g.id == streamed_id and g.status.state == TaskState.TASK_STATE_COMPLETED, g)
    check("get_task timestamp", g.status.HasField("timestamp"), g)
    try:
        await plain.get_task(GetTaskRequest(id="tsk_00000000000000000000000000000000"))
        check("unknown task", False, "found")
    except TaskNotFoundError:
        check("unknown task is TaskNotFoundError", True)

    # ListTasks with paging: newest first, so page two holds the streamed (older) task.
    p1 = await plain.list_tasks(ListTasksRequest(page_size=1))
    check("list total", p1.total_size == 2 and len(p1.tasks) == 1, p1)
    check("list newest first", p1.tasks[0].id == t.id, p1)
    check("list next page token", p1.next_page_token != "", p1)
    check("list omits artifacts by default", len(p1.tasks[0].artifacts) == 0, p1)
    p2 = await plain.list_tasks(ListTasksRequest(page_size=1, page_token=p1.next_page_token, include_artifacts=True))
    check("list page two", [x.id for x in p2.tasks] == [streamed_id], p2)
    check("list page two is the last", p2.next_page_token == "", p2)
    check("list includes artifacts", p2.tasks[0].artifacts[0].parts[0].text == "hello", p2)

    # History (A2A v1.0 §4.1.1 Task.history, §3.2.4 History Length Semantics): the caller's
    # message and the answer; history_length keeps the newest, 0 none.
    h = await plain.get_task(GetTaskRequest(id=t.id))
    said = [(m.role, m.parts[0].text) for m in h.history]
    check("history holds the message and the answer", said == [(Role.ROLE_USER, "again"), (Role.ROLE_AGENT, "again")], h)
    check("history messages name their task", all(m.task_id == t.id and m.context_id == t.context_id for m in h.history), h)
    h1 = await plain.get_task(GetTaskRequest(id=t.id, history_length=1))
    check("history_length keeps the newest", [m.role for m in h1.history] == [Role.ROLE_AGENT], h1)
    h0 = await plain.get_task(GetTaskRequest(id=t.id, history_length=0))
    check("history_length 0 returns none", len(h0.history) == 0, h0)

    # Contexts (§3.4.2): a second message naming the context, and no task, starts a new task
    # there; ListTasks filters by context; a message naming a completed task is refused (§3.1.1).
    follow = message("follow-up")
    follow.context_id = t.context_id
    f = [e async for e in plain.send_message(SendMessageRequest(message=follow))][0].task
    check("a second message continues the context", f.context_id == t.context_id and f.id != t.id, f)
    check("the follow-up completes", f.status.state == TaskState.TASK_STATE_COMPLETED, f)
    by_ctx = await plain.list_tasks(ListTasksRequest(context_id=t.context_id))
    check("list by context", by_ctx.total_size == 2 and [x.id for x in by_ctx.tasks] == [f.id, t.id], by_ctx)
    more = message("more")
    more.task_id = t.id
    try:
        [e async for e in plain.send_message(SendMessageRequest(message=more))]
        check("message to a completed task", False, "accepted")
    except UnsupportedOperationError:
        check("a message to a completed task is UnsupportedOperationError", True)

    # CancelTask of a terminal task, SubscribeToTask of a terminal task.
    try:
        await plain.cancel_task(CancelTaskRequest(id=streamed_id))
        check("cancel completed", False, "succeeded")
    except TaskNotCancelableError:
        check("cancel of a completed task is TaskNotCancelableError", True)
    try:
        [e async for e in streaming.subscribe(SubscribeToTaskRequest(id=streamed_id))]
        check("subscribe completed", False, "succeeded")
    except UnsupportedOperationError:
        check("subscribe to a completed task is UnsupportedOperationError", True)

    # The extended card carries the capsule extension; the public one does not.
    public = [x.uri for x in plain._card.capabilities.extensions]
    check("public card hides the capsule extension", not any(u.endswith(CAPSULE_EXTENSION) for u in public), public)
    card = await plain.get_extended_agent_card(GetExtendedAgentCardRequest())
    uris = [x.uri for x in card.capabilities.extensions]
    check("extended card", any(u.endswith(CAPSULE_EXTENSION) for u in uris), uris)

    # Without a token the door refuses with 401.
    anonymous = await client(url, None, False)
    try:
        await anonymous.get_task(GetTaskRequest(id=streamed_id))
        check("no token", False, "served")
    except A2AClientError as e:
        check("no token is HTTP 401", "401" in str(e), str(e))

    for c in (streaming, plain, anonymous):
        await c.close()


async def held_checks(url, token):
    streaming = await client(url, token, True)
    plain = await client(url, token, False)

    # returnImmediately: the reply is the admitted task; it then runs (and never answers).
    first = [e async for e in plain.send_message(request("hold", immediately=True))]
    held = first[0].task
    check("return_immediately answers SUBMITTED", held.status.state == TaskState.TASK_STATE_SUBMITTED, held)
    await wait_state(plain, held.id, TaskState.TASK_STATE_WORKING)
    check("held task is WORKING", True)

    # SubscribeToTask on the live task; CancelTask from another client ends the stream.
    sub = streaming.subscribe(SubscribeToTaskRequest(id=held.id))
    opening = await sub.__anext__()
    check("subscribe opens with the task", opening.WhichOneof("payload") == "task", opening)
    check("subscribe shows WORKING", opening.task.status.state == TaskState.TASK_STATE_WORKING, opening)
    canceled = await plain.cancel_task(CancelTaskRequest(id=held.id))
    check("cancel_task", canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled)
    rest = [e async for e in sub]
    check("subscription ends CANCELED", rest and rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED, rest)

    # A queued task (behind a running one) is cancelled too, and shows so in ListTasks.
    running = [e async for e in plain.send_message(request("one", immediately=True))][0].task
    queued = [e async for e in plain.send_message(request("two", immediately=True))][0].task
    await wait_state(plain, running.id, TaskState.TASK_STATE_WORKING)
    q = await plain.get_task(GetTaskRequest(id=queued.id))
    check("queued task waits SUBMITTED", q.status.state == TaskState.TASK_STATE_SUBMITTED, q)
    await plain.cancel_task(CancelTaskRequest(id=queued.id))
    await plain.cancel_task(CancelTaskRequest(id=running.id))
    done = await plain.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED))
    check("list by state", done.total_size == 3, done)

    for c in (streaming, plain):
        await c.close()


async def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    await echo_checks(argv[1], argv[2])
    await held_checks(argv[3], argv[4])
    print(f"a2a-sdk interop: {len(PASSED)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv)))
