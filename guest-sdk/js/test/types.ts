// Not run: `npm run typecheck` (tsc --strict, target es2022, no extra lib)
// checks that a TypeScript agent written against the SDK's types compiles
// (esbuild strips the types at build), that tool arguments get the types
// their schemas say, and that the `@ts-expect-error` lines, each a
// mistake, are reported (tsc fails on an expect-error with no error).
import {
  Agent, Context, DecideError, DecisionRequest, DecisionResponse, FromSchema, Json, RecordingHost, Tool, ToolRouter,
  exportAgent, requestFor, s, tool, toolError, toolResult, withAction,
  ToolContext, approval, approvalResumed, delegate, toolExecute, interruptWith, replaceActions, spawn,
  Message, MessageTree, Messages, messagesOf, ClientView, DraftMessage,
} from '@subs/sdk';
import { fromWit, toWit, types } from '@subs/sdk/wit';

// `Equal<A, B>` is true only when A and B are the same type.
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(): T | void {}

// ---- arguments from a schema literal --------------------------------------------------------

const order = tool(
  {
    name: 'lookup_order',
    input: {
      type: 'object',
      properties: {
        order_id: { type: 'string', description: 'The order' },
        amount: { type: 'number', minimum: 0 },
        count: { type: 'integer' },
        express: { type: 'boolean' },
        tags: { type: 'array', items: { type: 'string' } },
        status: { type: 'string', enum: ['open', 'shipped'] },
        note: { type: ['string', 'null'] },
        coupon: { type: 'string', nullable: true },
        address: {
          type: 'object',
          properties: { city: { type: 'string' }, zip: { type: 'string' } },
          required: ['city'],
        },
        extra: { type: 'object', additionalProperties: { type: 'number' } },
        anything: {},
        either: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
      },
      required: ['order_id', 'amount', 'tags', 'status', 'note', 'address'],
      additionalProperties: false,
    },
  },
  (args) => {
    expectType<
      Equal<
        typeof args,
        {
          order_id: string;
          amount: number;
          tags: string[];
          status: 'open' | 'shipped';
          note: string | null;
          address: { city: string; zip?: string };
          count?: number;
          express?: boolean;
          coupon?: string | null;
          extra?: { [key: string]: number };
          anything?: unknown;
          either?: string | number;
        }
      >
    >();
    const city: string = args.address.city;
    // @ts-expect-error: `zip` is not required, so it may be undefined.
    const zip: string = args.address.zip;
    // @ts-expect-error: a property the schema does not declare.
    void args.orderId;
    // @ts-expect-error: `status` is one of its enum's values.
    const status: 'cancelled' = args.status;
    // @ts-expect-error: an integer is a number, not a string.
    args.count?.toUpperCase();
    return { city, zip, status };
  },
);

// `as const` schemas and a top-level array.
const listInput = { type: 'array', items: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } } as const;
expectType<Equal<FromSchema<typeof listInput>, { n: number }[]>>();

// What falls back to `unknown`: no type, a widened type, unknown keywords.
expectType<Equal<FromSchema<{ $ref: '#/defs/a' }>, unknown>>();
expectType<Equal<FromSchema<{ type: string }>, unknown>>();
expectType<Equal<FromSchema<{ [key: string]: Json }>, unknown>>();
expectType<Equal<FromSchema<{ type: 'object' }>, { [key: string]: unknown }>>();
expectType<Equal<FromSchema<{ type: 'array' }>, unknown[]>>();
expectType<Equal<FromSchema<{ const: 'v1' }>, 'v1'>>();

// ---- arguments from the `s` builders ---------------------------------------------------------

const add = tool(
  {
    name: 'add',
    description: 'Adds two numbers.',
    input: s.object({ a: s.number('The first addend'), b: s.number(), note: s.optional(s.string()) }),
    output: s.object({ sum: s.number() }),
  },
  ({ a, b, note }, call) => {
    expectType<Equal<typeof a, number>>();
    expectType<Equal<typeof note, string | undefined>>();
    // @ts-expect-error: `note` is optional.
    note.length;
    return { sum: a + b, call: call.id };
  },
);

const schedule = s.object(
  {
    when: s.enum(['now', 'later']),
    days: s.array(s.integer({ minimum: 0 }), 'Days of the week'),
    flags: s.optional(s.object({ loud: s.boolean() })),
  },
  { description: 'A schedule' },
);
expectType<
  Equal<FromSchema<typeof schedule>, { when: 'now' | 'later'; days: number[]; flags?: { loud: boolean } }>
>();
expectType<Equal<typeof schedule.description, 'A schedule'>>();

// @ts-expect-error: a required property is missing from what the tool is called with.
add.run({ a: 1 }, new ToolContext(toolExecute('add', '{}')));
add.run({ a: 1, b: 2 }, new ToolContext(toolExecute('add', '{}')));

// A tool without `input` takes no arguments: any object, as far as its types go.
tool({ name: 'ping' }, (args) => {
  expectType<Equal<typeof args, { [key: string]: unknown }>>();
  return 'pong';
});

// The arguments' type given instead of inferred.
const typed = tool<{ a: number; b: number }>(
  { name: 'add2', input: s.object({ a: s.number(), b: s.number() }) },
  ({ a, b }) => a + b,
);
expectType<Equal<typeof typed, Tool<{ a: number; b: number }>>>();

// A `run` annotated with a type the schema does not give is refused.
tool(
  { name: 'half', input: s.object({ x: s.number() }) },
  // @ts-expect-error: the schema says `x` is a number.
  (args: { x: string }) => args.x,
);
// One that accepts more than the schema gives is fine.
tool({ name: 'half2', input: s.object({ x: s.number() }) }, (args: { x: number | string }) => args.x);

// The router's `tool()` infers the same way.
new ToolRouter().tool({ name: 'neg', input: s.object({ x: s.number() }) }, ({ x }) => {
  expectType<Equal<typeof x, number>>();
  // @ts-expect-error: `x` is a number.
  return x.trim();
});

// ---- an agent with typed state ---------------------------------------------------------------

interface Counts {
  turns: number;
  refunds: string[];
}

class Typed extends Agent<Counts> {
  router = new ToolRouter([add, order, typed]);

  override decide(request: DecisionRequest<Counts>, cx: Context): DecisionResponse<Counts> {
    cx.info(`trigger ${request.trigger.type}`);
    const counts: Counts = request.state ?? { turns: 0, refunds: [] };
    // @ts-expect-error: the state is null before the agent first writes it.
    const turns: number = request.state.turns;
    void turns;
    if (request.trigger.type === 'tool.execute') {
      return { ...request.proposed, actions: [this.router.execute(request.trigger)] };
    }
    if (request.trigger.type === 'client.action') {
      throw DecideError.retryable('not yet');
    }
    if (request.trigger.type === 'session.start') {
      // @ts-expect-error: the state must be a Counts.
      return { ...request.proposed, state: { turns: 'one' } };
    }
    return withAction({ ...request.proposed, state: { ...counts, turns: counts.turns + 1 } }, toolResult(null));
  }
}

export const decide = exportAgent(new Typed());

const host = new RecordingHost();
const decision: DecisionResponse<Counts> = host.decide(new Typed(), requestFor<Counts>({ type: 'session.start' }));
// An untyped agent's state is any JSON.
const plain: DecisionResponse = host.decide(new (class extends Agent {})(), requestFor({ type: 'session.start' }));
const json: Json | undefined = plain.state;
const logs: Array<[string, string]> = host.logs;
const results = [toolResult({ sum: 3 }), toolError('no', { retryable: true })];
const wire = toWit(types.DecisionResponse, decision);
const back: DecisionResponse = fromWit(types.DecisionResponse, wire);
void json;
void logs;
void results;
void back;

// ---- approvals, typed state in tools, delegation ---------------------------------------------

interface Refunds { refunds: number }

const refunds = new ToolRouter<Refunds>()
  .tool(
    {
      name: 'refund',
      input: s.object({ order_id: s.string(), amount: s.number() }),
      needsApproval: ({ amount }) => {
        expectType<Equal<typeof amount, number>>();
        return amount > 10;
      },
    },
    ({ order_id }, ctx) => {
      expectType<Equal<typeof ctx.state, Refunds | null>>();
      ctx.state = { refunds: (ctx.state?.refunds ?? 0) + 1 };
      ctx.info(`refund ${order_id} for ${ctx.identity.id ?? 'anyone'} (${ctx.callId})`);
      // @ts-expect-error: the state is a Refunds.
      ctx.state = { refund: 1 };
      return 'refunded';
    },
  )
  .tool({ name: 'wipe', needsApproval: true }, () => null)
  .subAgent('summarizer', 'Summarizes a text');

// @ts-expect-error: needsApproval is a boolean or a function of the arguments.
tool({ name: 'x', needsApproval: 'yes' }, () => null);

class Approver extends Agent<Refunds> {
  decide(request: DecisionRequest<Refunds>, cx: Context): DecisionResponse<Refunds> {
    if (request.trigger.type === 'client.messages' && messageAsks(request)) {
      return delegate(replaceActions(request.proposed, []), request, 'summarizer', 'Summarize the order.');
    }
    return refunds.handle(request, cx);
  }
}
function messageAsks(request: DecisionRequest<Refunds>): boolean {
  return request.messages.length > 3;
}
const approved: DecisionResponse = new RecordingHost().decide(new Approver() as unknown as Agent, approvalResumed('c1', 'refund', { approved: true }));
const asked = approval('c1', 'refund', { order_id: 'A1' });
expectType<Equal<typeof asked.payload.call_id, string>>();
withAction({}, interruptWith('pick', 'choose a colour', { options: ['red'] }));
withAction({}, spawn('child', 'summarizer', 'call-1'));
void approved;

// ---- the branch, read on demand ----------------------------------------------------------------

function newest(request: DecisionRequest): string | undefined {
  const messages = messagesOf(request);
  expectType<Equal<typeof messages, Messages>>();
  expectType<Equal<ReturnType<typeof messages.last>, Message[]>>();
  expectType<Equal<ReturnType<typeof messages.after>, Message[] | null>>();
  expectType<Equal<ReturnType<typeof messages.position>, number | null>>();
  expectType<Equal<typeof messages.tree, MessageTree>>();
  const all: Message[] = messages;
  // @ts-expect-error: last takes how many messages, a number.
  messages.last('1');
  return (messages.at(-1) ?? all[0])?.id;
}
void newest;

// `request.messages` is that Messages already, typed as agent code gets it
// (read on demand in a component, held from JSON and in tests): no cast,
// no messagesOf.
class Recent extends Agent {
  override decide(request: DecisionRequest, _cx: Context): DecisionResponse {
    expectType<Equal<typeof request.messages, Messages>>();
    const recent: Message[] = request.messages.last(3);
    const after: Message[] | null = request.messages.after('m1');
    const at: number | null = request.messages.position('m1');
    const tree: MessageTree = request.messages.tree;
    const read: boolean = request.messages.isRead;
    // @ts-expect-error: last takes how many messages, a number.
    request.messages.last('3');
    void [after, at, tree, read];
    return recent.length ? {} : { actions: [{ type: 'done' }] };
  }
}
// A request as JSON gives it (`messages` an array) is what the test helpers
// take; the request they hand the agent has a Messages.
const fromJson = requestFor({ type: 'session.start' }, { messages: [{ id: 'm1', role: 'user', content: 'hi' }] });
expectType<Equal<typeof fromJson.messages, Messages>>();
void new RecordingHost().decide(new Recent(), { ...fromJson, messages: [] });

// A `client.messages` trigger's view: a ClientView of drafts (read on demand
// in a component, held from JSON and in tests), an array to code that wants
// one; a request as JSON gives it a plain array.
class NewMessages extends Agent {
  override decide(request: DecisionRequest, _cx: Context): DecisionResponse {
    const trigger = request.trigger;
    if (trigger.type !== 'client.messages') return {};
    expectType<Equal<typeof trigger.messages, ClientView>>();
    const fresh: DraftMessage[] = trigger.messages.slice(trigger.new_from);
    const newest: DraftMessage | undefined = trigger.messages.at(-1);
    const read: boolean = trigger.messages.isRead;
    // @ts-expect-error: a view has no tree of its own.
    void trigger.messages.tree;
    // @ts-expect-error: a draft's id may be absent.
    const id: string = trigger.messages[0].id;
    void [newest, read, id];
    return { state: fresh.length };
  }
}
void new RecordingHost().decide(
  new NewMessages(),
  requestFor({ type: 'client.messages', messages: [{ role: 'user', content: 'hi' }], new_from: 0, client: {} }),
);
