// @NAME@: a mur capsule written in JavaScript. `mur build` turns this module into capsule.wasm
// with componentize-js, against the runtime's WIT world, and packs it.
//
// `run` takes one task and returns the answer; a fresh instance runs each task. This one shows
// what a capsule can do:
// - a task that is an http:// or https:// URL is fetched through wasi:http (the runtime checks it
//   against capabilities.network.allow in murmur.yaml);
// - otherwise, when the roster lets this member call others, it hands the task to each of them
//   with call-member and answers with their answers, one line each;
// - otherwise it answers "<member> handled: <task>".
// To fail a task, throw { tag: 'error', val: 'why' }.

import { start, awaitAll } from 'murmur:capsule/call-member@0.1.0';
import { memberName } from 'murmur:capsule/identity@0.1.0';
import { getEnvironment } from 'wasi:cli/environment@0.2.12';
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest } from 'wasi:http/types@0.2.12';

// The most of a response body an answer carries.
const MAX_BODY = 64 * 1024;

// The members this one may call: MURMUR_FORMATION_PEERS is `name=url name=url`.
function callees() {
  const peers = getEnvironment().find(([key]) => key === 'MURMUR_FORMATION_PEERS');
  return peers ? peers[1].split(' ').filter((p) => p).map((p) => p.split('=')[0]) : [];
}

// GET `url` through wasi:http, waiting on its pollables (run is synchronous).
function get(url) {
  const parts = new URL(url);
  const request = new OutgoingRequest(new Fields());
  request.setScheme({ tag: parts.protocol === 'https:' ? 'HTTPS' : 'HTTP' });
  request.setAuthority(parts.host);
  request.setPathWithQuery(parts.pathname + parts.search);
  const future = handle(request, undefined);
  future.subscribe().block();
  const outcome = future.get();
  if (outcome?.tag !== 'ok' || outcome.val.tag !== 'ok') {
    throw new Error(JSON.stringify(outcome?.val?.val ?? outcome));
  }
  const response = outcome.val.val;
  const stream = response.consume().stream();
  const bytes = [];
  let size = 0;
  while (size < MAX_BODY) {
    let chunk;
    try {
      stream.subscribe().block();
      chunk = stream.read(BigInt(MAX_BODY - size));
    } catch {
      break; // the body is complete
    }
    bytes.push(chunk);
    size += chunk.length;
  }
  const body = new TextDecoder().decode(join(bytes, size));
  return `status ${response.status()}: ${body}`;
}

function join(chunks, size) {
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

export function run(task) {
  const me = memberName() ?? '@NAME@';
  if (task.startsWith('http://') || task.startsWith('https://')) {
    try {
      return get(task.trim());
    } catch (e) {
      throw { tag: 'error', val: `${me} could not fetch ${task}: ${e.payload ? JSON.stringify(e.payload) : e}` };
    }
  }
  const members = callees();
  if (members.length === 0) {
    return `${me} handled: ${task}`;
  }
  for (const member of members) {
    try {
      start(member, task);
    } catch (e) {
      throw { tag: 'error', val: `${me} could not call ${member}: ${e.payload ?? e}` };
    }
  }
  return awaitAll()
    .map((o) => `${o.member} [${o.status}]: ${o.output}`)
    .join('\n');
}
