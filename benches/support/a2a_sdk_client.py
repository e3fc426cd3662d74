"""The official A2A Python SDK's client timing SendMessage, for benches/remote.rs.

Discovers the agent at each URL once (`create_client`, its card), makes WARMUP untimed calls,
then times CALLS calls one after the other, each a blocking SendMessage from the call to its
completed task (non-streaming client). With two URLs the calls alternate between them, the
first of each pair taking turns, so the machine's load falls on both alike: each line of
SAMPLES_FILE is then one pair, `<µs to URL> <µs to URL2>`; with one URL, one call's µs a line.
Prints `calls=N p50_us=…` for each URL on stdout.

Usage: python a2a_sdk_client.py URL CALLS WARMUP SAMPLES_FILE [URL2]; the bearers come by
environment (A2A_BENCH_TOKEN for URL, A2A_BENCH_TOKEN2 for URL2), never argv.
"""

import asyncio
import os
import sys
import time
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState


def percentile(sorted_samples, p):
    """The nearest-rank percentile, as the bench computes its own."""
    rank = max(1, -(-len(sorted_samples) * p // 100))
    return sorted_samples[int(rank) - 1]


async def call(client):
    request = SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="ping")])
    )
    last = None
    async for event in client.send_message(request):
        last = event
    task = last.task if last is not None and last.HasField("task") else None
    if task is None or task.status.state != TaskState.TASK_STATE_COMPLETED:
        raise SystemExit(f"SendMessage answered {last!r}")


async def timed(client):
    t = time.perf_counter_ns()
    await call(client)
    return (time.perf_counter_ns() - t) / 1000


async def main():
    url, calls, warmup, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    urls = [(url, os.environ.get("A2A_BENCH_TOKEN"))]
    if len(sys.argv) > 5:
        urls.append((sys.argv[5], os.environ.get("A2A_BENCH_TOKEN2")))
    https = [
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=30)
        for _, token in urls
    ]
    clients = [
        await create_client(u, client_config=ClientConfig(streaming=False, httpx_client=h))
        for (u, _), h in zip(urls, https)
    ]
    for _ in range(warmup):
        for c in clients:
            await call(c)
    rows = []
    for i in range(calls):
        order = list(range(len(clients)))
        if i % 2:
            order.reverse()
        row = [0.0] * len(clients)
        for k in order:
            row[k] = await timed(clients[k])
        rows.append(row)
    for h in https:
        await h.aclose()
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(" ".join(f"{s:.1f}" for s in row) for row in rows))
    for k, (u, _) in enumerate(urls):
        samples = sorted(row[k] for row in rows)
        print(f"{u} calls={calls} p50_us={percentile(samples, 50):.0f}")


asyncio.run(main())
