/**
 * approver-ts: the approver agent in TypeScript.
 *
 * The model may call `lookup_order`; `refund`, which runs only once a
 * person approved the call (the SDK asks with an interrupt; a denial reaches
 * the model as the call's error, and the tool never runs) and counts the
 * refunds in the agent state; and `summarizer`, another agent, as a tool
 * (the engine runs it as a child session and its reply is the call's
 * result). Everything else (calling the model, recording replies, ending
 * turns) is the engine's.
 */

import { Agent, ToolRouter, exportAgent, s } from '@subs/sdk';
import type { Context, DecisionRequest, DecisionResponse } from '@subs/sdk';

/** The model used when the engine proposes none. */
export const DEFAULT_MODEL = 'subs/offline';

/** The agent's state, kept by the engine with the session. */
export interface State {
  /** How many refunds ran in this session. */
  refunds: number;
}

const router = new ToolRouter<State>()
  .tool(
    { name: 'lookup_order', description: 'Looks an order up.', input: s.object({ order_id: s.string() }) },
    ({ order_id }) => ({ order_id, status: 'shipped' }),
  )
  .tool(
    {
      name: 'refund',
      description: 'Refunds an amount of an order.',
      input: s.object({ order_id: s.string(), amount: s.integer({ minimum: 1 }) }),
      needsApproval: true,
    },
    ({ order_id, amount }, ctx) => {
      ctx.state = { ...ctx.state, refunds: (ctx.state?.refunds ?? 0) + 1 };
      ctx.info(`refunded ${amount} on ${order_id}`);
      return { refunded: amount, refunds: ctx.state.refunds };
    },
  )
  .subAgent('summarizer', 'Summarizes a text.');

/** The agent: its tools and sub-agent, and its config at the session's start. */
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
