// The approver agent as a JavaScript component: `lookup_order`, and
// `refund`, which needs a person's approval and counts the refunds it made
// in the session state (so a state without a count proves a denied refund
// never ran); "summarize: <text>" delegates <text> to the `summarizer`
// sub-agent, which the model may also call as a tool.
// `tests/all/approval_js.rs` drives it through the server.

import { Agent, ToolRouter, delegate, exportAgent, replaceActions, s } from '../../guest-sdk/js/src/index.js';

const order = { order_id: s.string() };

const router = new ToolRouter()
  .tool({ name: 'lookup_order', input: s.object(order) }, ({ order_id }) => ({ order_id, status: 'shipped' }))
  .tool(
    { name: 'refund', input: s.object({ ...order, amount: s.integer({ minimum: 1 }) }), needsApproval: true },
    ({ order_id, amount }, ctx) => {
      const refunds = (ctx.state?.refunds ?? 0) + 1;
      ctx.state = { ...ctx.state, refunds };
      ctx.info(`refunded ${amount} on ${order_id} (call ${ctx.callId})`);
      return { refunded: amount, refunds };
    },
  )
  .subAgent('summarizer', 'Summarizes a text');

class Approver extends Agent {
  decide(request, cx) {
    const { trigger, proposed } = request;
    if (trigger.type === 'session.start') {
      const model = proposed.agent?.model ?? 'subs/offline';
      return { ...proposed, agent: router.configure({ model }) };
    }
    if (trigger.type === 'client.messages') {
      const last = trigger.messages.at(-1)?.content;
      if (typeof last === 'string' && last.startsWith('summarize: ')) {
        return delegate(replaceActions(proposed, []), request, 'summarizer', last.slice('summarize: '.length));
      }
    }
    return router.handle(request, cx);
  }
}

export const decide = exportAgent(new Approver());
