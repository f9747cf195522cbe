// Not run: `npm run typecheck` checks that a TypeScript agent written
// against the SDK's types compiles (esbuild strips the types at build).
import {
  Agent, Context, DecideError, DecisionRequest, DecisionResponse, RecordingHost, ToolRouter, exportAgent,
  requestFor, s, tool, toolError, toolResult,
} from '@subs/sdk';
import { fromWit, toWit, types } from '@subs/sdk/wit';

const add = tool<{ a: number; b: number }>(
  {
    name: 'add',
    description: 'Adds two numbers.',
    input: s.object({ a: s.number('The first addend'), b: s.number(), note: s.optional(s.string()) }),
    output: s.object({ sum: s.number() }),
  },
  ({ a, b }, call) => ({ sum: a + b, call: call.id }),
);

class Typed extends Agent {
  router = new ToolRouter([add]);

  override decide(request: DecisionRequest, cx: Context): DecisionResponse {
    cx.info(`trigger ${request.trigger.type}`);
    if (request.trigger.type === 'tool.execute') {
      return { ...request.proposed, actions: [this.router.execute(request.trigger)] };
    }
    if (request.trigger.type === 'client.action') {
      throw DecideError.retryable('not yet');
    }
    return request.proposed;
  }
}

export const decide = exportAgent(new Typed());

const host = new RecordingHost();
const decision: DecisionResponse = host.decide(new Typed(), requestFor({ type: 'session.start' }));
const logs: Array<[string, string]> = host.logs;
const results = [toolResult({ sum: 3 }), toolError('no', { retryable: true })];
const wire = toWit(types.DecisionResponse, decision);
const back: DecisionResponse = fromWit(types.DecisionResponse, wire);
void logs;
void results;
void back;
