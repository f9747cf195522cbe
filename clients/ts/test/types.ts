// Type-level tests of the declarations (run by `tsc -p tsconfig.json`):
// what a typed caller writes compiles, and its mistakes do not.

import {
  ApiError,
  BadRequestError,
  Client,
  AdminClient,
  userMessage,
  type ClientInput,
  type InputAccepted,
  type StreamEventFrame,
  type SessionView,
  type ToolProgress,
  type Agent,
} from '../src/index.js';

async function typed(): Promise<void> {
  const subs = new Client('http://127.0.0.1:8080', { key: 'subs_x', maxReconnects: 3 });
  const accepted: InputAccepted = await subs.sendMessage('chat', 'tools', 'hi', { turnId: 't1' });
  const turn: string | undefined = accepted.turn_id;
  void turn;
  for await (const event of subs.streamMessage('chat', 'tools', 'hi')) {
    const e: StreamEventFrame = event;
    const id: number | undefined = e.id;
    void id;
  }
  // A frame's `event` names the type of its `data`.
  for await (const frame of subs.events('chat', { after: 3 })) {
    if (frame.event === 'tool.progress') {
      const progress: ToolProgress = frame.data;
      const call: string = frame.data.id;
      const done: number = frame.data.progress;
      const total: number | null = frame.data.total;
      const message: string | null = frame.data.message;
      void [progress, call, done, total, message];
      // @ts-expect-error not a field of tool.progress
      void frame.data.percent;
      // @ts-expect-error `total` may be null
      const sure: number = frame.data.total;
      void sure;
    } else if (frame.event === 'turn.done') {
      const turn: string = frame.data.turn_id;
      void turn;
    }
    // @ts-expect-error not every frame has a progress
    void frame.data.progress;
  }
  const input: ClientInput = { type: 'tool.result', id: 'call-1', result: { ok: true } };
  await subs.send('chat', input, { identity: { id: 'user-1' } });
  const view: SessionView = await subs.getSession('chat');
  const status: 'idle' | 'running' | 'waiting' = view.status;
  void status;
  for await (const summary of subs.listSessions({ status: 'waiting', agent: 'tools' })) {
    const at: number = summary.updated_ms;
    void at;
  }
  for await (const step of subs.decisions('chat', { limit: 10 })) {
    const seq: number = step.seq;
    void seq;
  }
  const agent: Agent = await subs.uploadAgent('tools', new Uint8Array([0, 97, 115, 109]), { activate: false });
  void agent.versions[0]?.active;
  await subs.resume('chat', 'approval', { approved: true });
  const token = await subs.endUserToken('user-1', { ttlSecs: 60 });
  void new Client('http://127.0.0.1:8080', { key: token.token });
  const admin = new AdminClient('http://127.0.0.1:8080', { key: 'subs_admin_x' });
  const made = await admin.createKey('acme', { name: 'ci' });
  void made.key;
  void userMessage('tools', [{ type: 'text', text: 'hi' }]);
  try {
    await subs.cancel('chat');
  } catch (e) {
    if (e instanceof BadRequestError) {
      const field: string | undefined = e.field;
      const code: string = e.code;
      void [field, code];
    }
    if (e instanceof ApiError) void e.status;
  }

  // @ts-expect-error an input type the protocol does not have
  await subs.send('chat', { type: 'client.mesage', agent_id: 'tools' });
  // @ts-expect-error only inputs that start a turn stream
  subs.stream('chat', { type: 'interrupt.resume', interrupt_id: 'x' });
  // @ts-expect-error a status the listing does not filter by
  subs.listSessions({ status: 'done' });
  // @ts-expect-error the admin client needs its key
  void new AdminClient('http://127.0.0.1:8080', {});
}
void typed;
