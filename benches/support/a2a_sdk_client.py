"""The official A2A Python SDK's client timing SendMessage, for benches/remote.rs.

Discovers the agent at URL once (`create_client`, its card), makes WARMUP untimed calls, then
times CALLS calls one after the other, each a blocking SendMessage from the call to its completed
task (non-streaming client). Prints `calls=N p50_us=… p99_us=…` on stdout; with a fourth
argument, also writes every call's time in µs there, one per line, so the bench can pool rounds.

Usage: python a2a_sdk_client.py URL CALLS WARMUP [SAMPLES_FILE]; the bearer comes by environment
(A2A_BENCH_TOKEN), never argv.
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


async def main():
    url, calls, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = sys.argv[4] if len(sys.argv) > 4 else None
    token = os.environ.get("A2A_BENCH_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        client = await create_client(url, client_config=ClientConfig(streaming=False, httpx_client=http))
        for _ in range(warmup):
            await call(client)
        samples = []
        for _ in range(calls):
            t = time.perf_counter_ns()
            await call(client)
            samples.append((time.perf_counter_ns() - t) / 1000)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write("\n".join(f"{s:.1f}" for s in samples))
    samples.sort()
    print(f"calls={calls} p50_us={percentile(samples, 50):.0f} p99_us={percentile(samples, 99):.0f}")


asyncio.run(main())
