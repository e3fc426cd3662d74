"""A scripted OpenAI Chat Completions provider on 127.0.0.1 for tests/interop/tck.sh.

Every request is answered after DELAY seconds with one assistant message that repeats the last
user text, so a task the door runs stays working for that long (long enough for a client to see
it working, cancel it, or subscribe to it). It prints its port on stdout, then serves until
killed. Standard library only.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY = float(sys.argv[1]) if len(sys.argv) > 1 else 1.2


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        last = ""
        for message in body.get("messages") or []:
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                last = message["content"]
        time.sleep(DELAY)
        reply = {
            "id": "chatcmpl-tck",
            "object": "chat.completion",
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "answer: " + last[:200]},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        out = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
