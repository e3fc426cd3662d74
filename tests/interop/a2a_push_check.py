#!/usr/bin/env python3
"""Push notifications of a real `mur` door with the official A2A Python SDK client (a2a-sdk 1.x):
A2A v1.0 §3.1.7–3.1.10 and SendMessage's `configuration.taskPushNotificationConfig`.

Usage: a2a_push_check.py URL TOKEN WEBHOOK

URL is a door whose capsule answers each task with its text; TOKEN is its operator token;
WEBHOOK is a URL the calling test listens on. The Rust test `push::the_official_python_client_*`
starts both, runs this, and then checks what the webhook received. The last stdout line is
`task <id>`, the task whose updates went to WEBHOOK.

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
        AuthenticationInfo,
        DeleteTaskPushNotificationConfigRequest,
        GetTaskPushNotificationConfigRequest,
        ListTaskPushNotificationConfigsRequest,
        Message,
        Part,
        Role,
        SendMessageConfiguration,
        SendMessageRequest,
        TaskPushNotificationConfig,
        TaskState,
    )
    from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
except ImportError as e:
    print(f"the official A2A Python SDK is not importable ({e})", file=sys.stderr)
    sys.exit(3)

# Where no webhook may be: a metadata address, plain http to a name, a link-local address.
REFUSED = ["http://169.254.169.254/", "http://example.com/hook", "http://[fe80::1]/"]


def check(name, ok, detail=""):
    if not ok:
        raise AssertionError(f"{name}: {detail}")
    print(f"ok {name}")


async def main(url, token, webhook):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    client = await create_client(url, client_config=ClientConfig(streaming=False, httpx_client=http))
    check("the card says push notifications are served", client._card.capabilities.push_notifications)

    config = TaskPushNotificationConfig(
        id="py-1",
        url=webhook,
        token="py-token",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="py-credentials"),
    )
    request = SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="push me")]),
        configuration=SendMessageConfiguration(task_push_notification_config=config),
    )
    task = None
    async for event in client.send_message(request):
        task = event.task
    check("the task completes", task.status.state == TaskState.TASK_STATE_COMPLETED, str(task))

    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id="py-1")
    )
    check(
        "the config given with the message is the task's",
        (got.task_id, got.id, got.url, got.token, got.authentication.scheme) == (task.id, "py-1", webhook, "py-token", "Bearer"),
        str(got),
    )

    # One more, created on the task, to a port nobody serves; it is listed and deleted again.
    other = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="py-2", url="http://127.0.0.1:9/nobody")
    )
    check("a created config is answered as stored", (other.task_id, other.id) == (task.id, "py-2"), str(other))
    listed = await client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
    check("both configs are listed", sorted(c.id for c in listed.configs) == ["py-1", "py-2"], str(listed))
    await client.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="py-2"))
    listed = await client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task.id))
    check("a deleted config is gone", [c.id for c in listed.configs] == ["py-1"], str(listed))
    try:
        await client.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task.id, id="py-2"))
        check("a deleted config is not found", False, "it was answered")
    except TaskNotFoundError:
        check("a deleted config is not found", True)

    for bad in REFUSED:
        try:
            await client.create_task_push_notification_config(TaskPushNotificationConfig(task_id=task.id, url=bad))
            check(f"{bad} is refused", False, "it was stored")
        except InvalidParamsError:
            check(f"{bad} is refused", True)
    try:
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id="tsk_00000000000000000000000000000000", url=webhook)
        )
        check("an unknown task has no configs", False, "it was stored")
    except TaskNotFoundError:
        check("an unknown task has no configs", True)

    await http.aclose()
    print("checks passed")
    print(f"task {task.id}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
