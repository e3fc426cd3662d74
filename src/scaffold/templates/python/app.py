"""@NAME@: a mur capsule written in Python. `mur build` turns this file into capsule.wasm with
componentize-py, against the runtime's WIT world, and packs it.

`run` takes one task and returns the answer; a fresh instance runs each task. This one shows
what a capsule can do:
- a task that is an http:// or https:// URL is fetched through wasi:http (the runtime checks it
  against capabilities.network.allow in murmur.yaml);
- otherwise, when the roster lets this member call others, it hands the task to each of them with
  call-member and answers with their answers, one line each;
- otherwise it answers "<member> handled: <task>".
To fail a task, raise Err(Failure_Error("why")).
"""

import asyncio
import os
from urllib.parse import urlsplit

import poll_loop  # generated with the bindings: an asyncio loop over wasi:io
import wit_world
from componentize_py_types import Err
from wit_world import Failure_Error
from wit_world.imports import call_member, identity
from wit_world.imports.types import Fields, OutgoingRequest, Scheme_Http, Scheme_Https

# The most of a response body an answer carries.
MAX_BODY = 64 * 1024


def callees() -> list[str]:
    """The members this one may call: MURMUR_FORMATION_PEERS is `name=url name=url`."""
    peers = os.environ.get("MURMUR_FORMATION_PEERS", "")
    return [p.split("=", 1)[0] for p in peers.split()]


async def get(url: str) -> str:
    parts = urlsplit(url)
    request = OutgoingRequest(Fields.from_list([]))
    request.set_scheme(Scheme_Https() if parts.scheme == "https" else Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    response = await poll_loop.send(request)
    stream = poll_loop.Stream(response.consume())
    body = b""
    while len(body) < MAX_BODY:
        chunk = await stream.next()
        if chunk is None:
            break
        body += chunk
    return f"status {response.status()}: {body[:MAX_BODY].decode('utf-8', 'replace')}"


class WitWorld(wit_world.WitWorld):
    def run(self, task: str) -> str:
        me = identity.member_name() or "@NAME@"
        if task.startswith(("http://", "https://")):
            try:
                return poll_loop.PollLoop().run_until_complete(get(task.strip()))
            except Err as e:
                raise Err(Failure_Error(f"{me} could not fetch {task}: {e.value}"))
        members = callees()
        if not members:
            return f"{me} handled: {task}"
        for member in members:
            try:
                call_member.start(member, task)
            except Err as e:
                raise Err(Failure_Error(f"{me} could not call {member}: {e.value}"))
        answers = []
        for outcome in call_member.await_all():
            status = outcome.status.name.lower().replace("_", "-")
            answers.append(f"{outcome.member} [{status}]: {outcome.output}")
        return "\n".join(answers)
