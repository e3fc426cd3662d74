"""An A2A v1.0 agent served by the official A2A Python SDK (a2a-sdk 1.3.0), for tests/it/remote.rs:
the remote agent a remote capsule forwards its tasks to.

Serves JSON-RPC at / and its card at /.well-known/agent-card.json on 127.0.0.1, at a port of its
own choosing, and prints that port on stdout. With $A2A_TEST_KEY set, the card declares an HTTP
bearer scheme and every JSON-RPC request must carry `Authorization: Bearer $A2A_TEST_KEY`, else
401. Each JSON-RPC request's method, Authorization and traceparent headers, each task's text and
each cancel are appended to $A2A_TEST_LOG, one line each (`method <m>`, `auth <value>`,
`traceparent <value>`, `peer <client port>`, `task <text>`, `cancel <task id>`), so a test can
check what reached it, and over which connection.

What a task's text asks for: `ask: <question>` asks and completes with `answered: <answer>`;
`chunks: a b c` streams one artifact in those chunks; `hang` works until cancelled; `fail` fails;
`leak: failed` fails and `leak: rejected` rejects with a status quoting the bearer it was sent, and
`leak: error` is answered a JSON-RPC error quoting the request's Authorization header (an agent
that echoes its key); anything else completes with `remote says: <text>`.

Environment: A2A_TEST_LOG (required), A2A_TEST_KEY, A2A_TEST_STREAMING=0 declares no streaming.
"""

import asyncio
import json
import os
import socket

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import new_task, new_text_message
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)

LOG = os.environ["A2A_TEST_LOG"]
KEY = os.environ.get("A2A_TEST_KEY")
STREAMING = os.environ.get("A2A_TEST_STREAMING", "1") != "0"


def log(line):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Far(AgentExecutor):
    async def execute(self, context, event_queue):
        text = context.get_user_input()
        log("task " + text)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is not None:
            # A continuation: the answer to the question this task asked.
            await updater.add_artifact([Part(text="answered: " + text)], name="response")
            await updater.complete()
            return
        await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED))
        await updater.start_work()
        if text.startswith("ask: "):
            question = new_text_message(text[len("ask: "):], role=Role.ROLE_AGENT)
            await updater.requires_input(question)
            return
        if text.startswith("chunks: "):
            artifact_id = "answer"
            for i, chunk in enumerate(text[len("chunks: "):].split(" ")):
                await updater.add_artifact([Part(text=chunk)], artifact_id=artifact_id, append=i > 0)
                await asyncio.sleep(0.05)
            await updater.complete()
            return
        if text == "hang":
            await asyncio.sleep(3600)
            return
        if text == "fail":
            await updater.failed(new_text_message("the far agent always fails this", role=Role.ROLE_AGENT))
            return
        if text == "leak: failed":
            await updater.failed(new_text_message("bad credential: Bearer " + str(KEY), role=Role.ROLE_AGENT))
            return
        if text == "leak: rejected":
            await updater.reject(new_text_message("not for Bearer " + str(KEY), role=Role.ROLE_AGENT))
            return
        await updater.add_artifact([Part(text="remote says: " + text)], name="response")
        await updater.complete()

    async def cancel(self, context, event_queue):
        log("cancel " + str(context.task_id))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def serve():
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and without it each reply (head and body written apart) waits ~40 ms on a keep-alive
    # connection for the client's delayed ACK. uvicorn binding its own socket gets this right.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="far",
        description="An agent someone else runs.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=STREAMING),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="far", name="far", description="Answers from afar.", tags=["test"])],
    )
    if KEY:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    handler = DefaultRequestHandler(agent_executor=Far(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))

    async def gate(scope, receive, send):
        """Logs what reached the agent, and refuses a JSON-RPC request without the bearer."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            log("method " + str(json.loads(body).get("method")))
        except ValueError:
            log("method ?")
        log("auth " + headers.get("authorization", "-"))
        if scope.get("client"):
            log("peer " + str(scope["client"][1]))
        if "traceparent" in headers:
            log("traceparent " + headers["traceparent"])
        if KEY and headers.get("authorization") != "Bearer " + KEY:
            return await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
        if b'"leak: error"' in body:
            echoed = {
                "jsonrpc": "2.0",
                "id": json.loads(body).get("id"),
                "error": {"code": -32603, "message": "cannot serve Authorization: " + headers.get("authorization", "-")},
            }
            return await JSONResponse(echoed)(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    # Listening before the port is printed: a client may connect at once (uvicorn accepts later).
    sock.listen(128)
    print(port, flush=True)
    uvicorn.Server(uvicorn.Config(gate, log_level="warning")).run(sockets=[sock])


serve()
