// An A2A v1.0 agent served by the official A2A JS SDK (@a2a-js/sdk 1.3.0 on express), for
// tests/it/remote.rs: a second remote agent nobody here wrote.
//
// Serves JSON-RPC at / and its card at /.well-known/agent-card.json on 127.0.0.1, at a port of
// its own choosing, and prints that port on stdout. With $A2A_TEST_KEY set, the card declares an
// HTTP bearer scheme and every JSON-RPC request must carry `Authorization: Bearer
// $A2A_TEST_KEY`, else 401. Each JSON-RPC request's method and Authorization header, each task's
// text and each cancel are appended to $A2A_TEST_LOG (`method <m>`, `auth <value>`,
// `task <text>`, `cancel <task id>`).
//
// A task's text: `chunks: a b c` streams one artifact in those chunks; `hang` works until
// cancelled; anything else completes with `js says: <text>`.

import fs from 'node:fs';
import express from 'express';
import { TaskState, Role } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const LOG = process.env.A2A_TEST_LOG;
const KEY = process.env.A2A_TEST_KEY;
const log = (line) => fs.appendFileSync(LOG, line + '\n');
const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Far {
  constructor() {
    this.cancelled = new Set();
  }

  async execute(ctx, bus) {
    const words = ctx.userMessage.parts
      .map((p) => (p.content && p.content.$case === 'text' ? p.content.value : ''))
      .join('');
    log('task ' + words);
    const ids = { taskId: ctx.taskId, contextId: ctx.contextId };
    const status = (state, final = false) =>
      AgentEvent.statusUpdate({ ...ids, status: { state, message: undefined, timestamp: undefined }, metadata: undefined, final });
    const artifact = (value, append) =>
      AgentEvent.artifactUpdate({
        ...ids,
        artifact: { artifactId: 'answer', name: 'response', description: '', parts: [text(value)], metadata: undefined, extensions: [] },
        append,
        lastChunk: false,
        metadata: undefined,
      });
    bus.publish(
      AgentEvent.task({
        id: ctx.taskId,
        contextId: ctx.contextId,
        status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined },
        artifacts: [],
        history: [ctx.userMessage],
        metadata: undefined,
      }),
    );
    bus.publish(status(TaskState.TASK_STATE_WORKING));
    if (words.startsWith('chunks: ')) {
      const chunks = words.slice('chunks: '.length).split(' ');
      for (let i = 0; i < chunks.length; i++) {
        bus.publish(artifact(chunks[i], i > 0));
        await sleep(50);
      }
    } else if (words === 'hang') {
      while (!this.cancelled.has(ctx.taskId)) {
        await sleep(20);
      }
      bus.publish(status(TaskState.TASK_STATE_CANCELED, true));
      bus.finished();
      return;
    } else {
      bus.publish(artifact('js says: ' + words, false));
    }
    bus.publish(status(TaskState.TASK_STATE_COMPLETED, true));
    bus.finished();
  }

  async cancelTask(taskId) {
    log('cancel ' + taskId);
    this.cancelled.add(taskId);
  }
}

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  const card = {
    name: 'far-js',
    description: 'An agent someone else runs, in JavaScript.',
    version: '1.0.0',
    supportedInterfaces: [{ url: `http://127.0.0.1:${port}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
    provider: undefined,
    documentationUrl: '',
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: KEY ? { bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { description: '', scheme: 'Bearer', bearerFormat: '' } } } } : {},
    securityRequirements: KEY ? [{ schemes: { bearer: { list: [] } } }] : [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'far', name: 'far', description: 'Answers from afar.', tags: ['test'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
    iconUrl: '',
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Far());
  // The card handler serves the object as given, so its security scheme is written in the JSON
  // form (the typed form above is the request handler's).
  const published = KEY ? { ...card, securitySchemes: { bearer: { httpAuthSecurityScheme: { scheme: 'Bearer' } } } } : card;
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: async () => published }));
  app.post('/', express.json({ limit: '8mb' }), (req, res, next) => {
    log('method ' + (req.body && req.body.method));
    log('auth ' + (req.headers.authorization || '-'));
    if (KEY && req.headers.authorization !== 'Bearer ' + KEY) {
      res.status(401).json({ error: 'unauthorized' });
      return;
    }
    next();
  });
  app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  process.stdout.write(port + '\n');
});
