"""The official MCP Python SDK's client timing `tools/call` of `add`, for benches/tools.rs.

Connects once (`streamable_http_client` with the SDK's own `create_mcp_http_client`), in the
protocol MCP_BENCH_PROTOCOL names: `2026-07-28` (the default) through the SDK's `Client` in its
default `mode="auto"` (`server/discover`, then stateless requests, each carrying its version in
`_meta`), checked to have settled on 2026-07-28; `2025-11-25` through `ClientSession.initialize`
(the handshake and a session). Then it makes WARMUP untimed calls and times CALLS calls one
after the other, each from `call_tool` to its checked result. Prints `protocol=… calls=N
p50_us=… p99_us=…` on stdout; with a fourth argument, also writes every call's time in µs there,
one per line, so the bench can pool rounds.

Usage: python mcp_sdk_client.py URL CALLS WARMUP [SAMPLES_FILE]; the bearer comes by environment
(MCP_BENCH_KEY), never argv.
"""

import asyncio
import os
import sys
import time

from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def percentile(sorted_samples, p):
    """The nearest-rank percentile, as the bench computes its own."""
    rank = max(1, -(-len(sorted_samples) * p // 100))
    return sorted_samples[int(rank) - 1]


async def call(client):
    result = await client.call_tool("add", {"a": 2, "b": 3})
    if result.is_error or result.content[0].text != "5":
        raise SystemExit(f"add(2, 3) answered {result!r}")


async def timed(client, calls, warmup):
    for _ in range(warmup):
        await call(client)
    samples = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        await call(client)
        samples.append((time.perf_counter_ns() - started) / 1000)
    return samples


async def main():
    url, calls, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = sys.argv[4] if len(sys.argv) > 4 else None
    protocol = os.environ.get("MCP_BENCH_PROTOCOL", "2026-07-28")
    headers = {"Authorization": "Bearer " + os.environ["MCP_BENCH_KEY"]}
    async with create_mcp_http_client(headers=headers) as http:
        if protocol == "2025-11-25":
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    spoken = session.protocol_version
                    samples = await timed(session, calls, warmup)
        else:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                spoken = client.protocol_version
                if spoken != protocol:
                    raise SystemExit(f"the SDK client settled on {spoken}, not {protocol}")
                samples = await timed(client, calls, warmup)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write("".join(f"{s:.1f}\n" for s in samples))
    samples.sort()
    print(
        f"protocol={spoken} calls={len(samples)} p50_us={percentile(samples, 50):.0f} "
        f"p99_us={percentile(samples, 99):.0f}"
    )


asyncio.run(main())
