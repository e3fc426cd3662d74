// The official A2A JS SDK client (@a2a-js/sdk 1.3.0) against a real door: streaming methods
// refused before their stream starts raise the SDK's typed errors (docs/a2a.md, "Streaming
// errors"), and a stream whose events carry ids is read to its end.
//
// Usage: node a2a_js_streams_check.mjs <door base URL> <operator token>
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";
import { TaskNotFoundError, UnsupportedOperationError } from "@a2a-js/sdk/errors";

const [base, token] = process.argv.slice(2);
const withToken = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token}`);
  return fetch(url, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: withToken })],
  }),
);
const client = await factory.createFromUrl(base);
let failed = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok" : "FAILED"}: ${what}`);
  if (!ok) failed += 1;
};

/// The error a stream raises before its first event, or null.
async function refusal(stream) {
  try {
    for await (const _ of stream) {
      return null;
    }
    return null;
  } catch (e) {
    return e;
  }
}

// A task that is over, sent without the SDK's types in the way.
const sent = await withToken(base, {
  method: "POST",
  headers: { "Content-Type": "application/json", "A2A-Version": "1.0" },
  body: JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method: "SendMessage",
    params: { message: { messageId: "m1", role: "ROLE_USER", parts: [{ text: "over" }] } },
  }),
}).then((r) => r.json());
const done = sent.result.task;
check(done.status.state === "TASK_STATE_COMPLETED", `the task ended: ${done.status.state}`);

const ended = await refusal(client.resubscribeTask({ id: done.id, tenant: "" }));
check(
  ended instanceof UnsupportedOperationError,
  `resubscribeTask on a finished task raises UnsupportedOperationError: ${ended?.constructor?.name} ${ended?.message}`,
);
const unknown = await refusal(client.resubscribeTask({ id: "tsk_nope", tenant: "" }));
check(
  unknown instanceof TaskNotFoundError,
  `resubscribeTask on an unknown task raises TaskNotFoundError: ${unknown?.constructor?.name} ${unknown?.message}`,
);

// A stream whose events carry ids reads as any other: the task, then its end.
const events = [];
for await (const e of client.sendMessageStream({
  tenant: "",
  message: {
    messageId: "m2",
    contextId: "",
    taskId: "",
    role: 1,
    parts: [{ content: { $case: "text", value: "streamed" }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: undefined,
  metadata: undefined,
})) {
  events.push(e);
}
const last = events.at(-1)?.payload;
check(
  events.length >= 2 && last?.$case === "statusUpdate" && last.value.status.state === 3,
  `a streamed task reads to its completion: ${JSON.stringify(events.map((e) => e.payload?.$case))}`,
);

if (failed > 0) {
  process.exit(1);
}
console.log("checks passed");
