/**
 * {{name}}: a subs agent.
 *
 * The model may call two tools: `lookup_order`, which counts the lookups in
 * the agent state, and `refund`, which runs only once a person approved the
 * call (the SDK asks with an interrupt; a denial reaches the model as the
 * call's error, and the tool never runs). Everything else (calling the
 * model, recording replies, ending turns) is the engine's.
 */

import { Agent, ToolRouter, exportAgent, s } from '@subs/sdk';
import type { Context, DecisionRequest, DecisionResponse } from '@subs/sdk';

/** The model used when the engine proposes none. */
export const DEFAULT_MODEL = 'subs/offline';

/** The agent's state, kept by the engine with the session. */
export interface State {
  /** How many orders were looked up in this session. */
  lookups: number;
}

const router = new ToolRouter<State>()
  .tool(
    {
      name: 'lookup_order',
      description: 'Looks an order up by its id.',
      input: s.object({ order_id: s.string() }),
    },
    ({ order_id }, ctx) => {
      ctx.state = { ...ctx.state, lookups: (ctx.state?.lookups ?? 0) + 1 };
      return { order_id, status: 'shipped' };
    },
  )
  .tool(
    {
      name: 'refund',
      description: 'Refunds an amount of an order.',
      input: s.object({ order_id: s.string(), amount: s.number() }),
      needsApproval: true,
    },
    ({ order_id, amount }, ctx) => {
      ctx.info(`refunded ${amount} on ${order_id}`);
      return { refunded: amount, order_id };
    },
  );

/** The agent: its tools, and its config at the session's start. */
export class App extends Agent<State> {
  override decide(request: DecisionRequest<State>, cx: Context): DecisionResponse<State> {
    if (request.trigger.type === 'session.start') {
      const model = request.proposed.agent?.model ?? DEFAULT_MODEL;
      const config = { model, system: 'You help customers with their orders.' };
      return { ...request.proposed, agent: router.configure(config) };
    }
    return router.handle(request, cx);
  }
}

export const decide = exportAgent(new App());
