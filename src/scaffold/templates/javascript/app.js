// @NAME@: a mur capsule written in JavaScript. `mur build` turns this module into capsule.wasm
// with componentize-js, against the runtime's WIT world, and packs it.
//
// `run` takes one task and returns the answer; a fresh instance runs each task. When the roster
// lets this member call others, it hands the task to each of them with call-member and answers
// with their answers, one line each; otherwise it answers "<member> handled: <task>".
// To fail a task, throw { tag: 'error', val: 'why' }.

import { start, awaitAll } from 'murmur:capsule/call-member@0.1.0';
import { memberName } from 'murmur:capsule/identity@0.1.0';
import { getEnvironment } from 'wasi:cli/environment@0.2.12';

// The members this one may call: MURMUR_FORMATION_PEERS is `name=url name=url`.
function callees() {
  const peers = getEnvironment().find(([key]) => key === 'MURMUR_FORMATION_PEERS');
  return peers ? peers[1].split(' ').filter((p) => p).map((p) => p.split('=')[0]) : [];
}

export function run(task) {
  const me = memberName() ?? '@NAME@';
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
