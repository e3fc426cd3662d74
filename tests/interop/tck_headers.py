"""A pytest plugin that gives every httpx client of the A2A TCK the headers in A2A_AUTH_HEADERS.

The TCK's 1.0-dev line has no way to authenticate to the system under test; the older line read
the same variable itself. Load it with `-p tck_headers` and this directory on PYTHONPATH. A
header the TCK sets itself, on the client or on a request, still wins.
"""

import json
import os

import httpx

_EXTRA = json.loads(os.environ.get("A2A_AUTH_HEADERS") or "{}")


def _with_extra(cls):
    init = cls.__init__

    def __init__(self, *args, headers=None, **kwargs):
        merged = httpx.Headers(_EXTRA)
        merged.update(httpx.Headers(headers or {}))
        init(self, *args, headers=merged, **kwargs)

    cls.__init__ = __init__


if _EXTRA:
    _with_extra(httpx.Client)
    _with_extra(httpx.AsyncClient)
