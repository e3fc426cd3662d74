// Push notifications of a real `mur` door with the official A2A JS SDK client (@a2a-js/sdk 1.x):
// A2A v1.0 §3.1.7–3.1.10 and SendMessage's `configuration.taskPushNotificationConfig`.
//
// Usage: node a2a_push_check.mjs URL TOKEN WEBHOOK SDK_PREFIX
//
// URL is a door whose capsule answers each task with its text; TOKEN is its operator token;
// WEBHOOK is a URL the calling test listens on; SDK_PREFIX is the npm prefix holding the SDK. The
// Rust test `push::the_official_js_client_gets_every_update_at_its_webhook` starts both, runs
// this, and then checks what the webhook received. The last stdout line is `task <id>`.
//
// Exit status: 0 when every check passed, 1 when one failed.

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [url, token, webhook, prefix] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(join(prefix, "node_modules/@a2a-js/sdk/dist", p)).href);
const { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } = await sdk("client/index.js");
const { Role, TaskState } = await sdk("index.js");

// Where no webhook may be: a metadata address, plain http to a name, a link-local address.
const REFUSED = ["http://169.254.169.254/", "http://example.com/hook", "http://[fe80::1]/"];

function check(name, ok, detail = "") {
  if (!ok) {
    throw new Error(`${name}: ${detail}`);
  }
  console.log(`ok ${name}`);
}

async function refused(name, call, errorName) {
  try {
    await call();
  } catch (e) {
    check(name, e.name === errorName, `${e.name}: ${e.message}`);
    return;
  }
  check(name, false, "it was answered");
}

const authFetch = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
  }),
);
const client = await factory.createFromUrl(url);

const config = {
  tenant: "",
  id: "js-1",
  taskId: "",
  url: webhook,
  token: "js-token",
  authentication: { scheme: "Bearer", credentials: "js-credentials" },
};
const result = await client.sendMessage({
  tenant: "",
  message: {
    messageId: crypto.randomUUID(),
    contextId: "",
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: "push me too" }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: { acceptedOutputModes: [], taskPushNotificationConfig: config, returnImmediately: false },
  metadata: undefined,
});
const task = result.task ?? result.payload?.value ?? result;
check("the task completes", task.status?.state === TaskState.TASK_STATE_COMPLETED, JSON.stringify(result));

const got = await client.getTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: "js-1" });
check(
  "the config given with the message is the task's",
  got.taskId === task.id && got.id === "js-1" && got.url === webhook && got.token === "js-token",
  JSON.stringify(got),
);
const other = await client.createTaskPushNotificationConfig({
  tenant: "",
  id: "js-2",
  taskId: task.id,
  url: "http://127.0.0.1:9/nobody",
  token: "",
  authentication: undefined,
});
check("a created config is answered as stored", other.id === "js-2", JSON.stringify(other));
let listed = await client.listTaskPushNotificationConfig({ tenant: "", taskId: task.id, pageSize: 0, pageToken: "" });
check(
  "both configs are listed",
  JSON.stringify(listed.configs.map((c) => c.id).sort()) === '["js-1","js-2"]',
  JSON.stringify(listed),
);
await client.deleteTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: "js-2" });
listed = await client.listTaskPushNotificationConfig({ tenant: "", taskId: task.id, pageSize: 0, pageToken: "" });
check("a deleted config is gone", JSON.stringify(listed.configs.map((c) => c.id)) === '["js-1"]', JSON.stringify(listed));

for (const bad of REFUSED) {
  await refused(
    `${bad} is refused`,
    () =>
      client.createTaskPushNotificationConfig({
        tenant: "",
        id: "",
        taskId: task.id,
        url: bad,
        token: "",
        authentication: undefined,
      }),
    "RequestMalformedError",
  );
}
await refused(
  "an unknown task has no configs",
  () => client.getTaskPushNotificationConfig({ tenant: "", taskId: "tsk_00000000000000000000000000000000", id: "x" }),
  "TaskNotFoundError",
);

console.log("checks passed");
console.log(`task ${task.id}`);
