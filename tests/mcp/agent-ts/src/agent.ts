/**
 * A TypeScript agent (the JavaScript SDK's types, built as a component of
 * the `agent-json` world) that uses the MCP server `demo`: at the
 * session's start it names the server in its config's `mcp`, so the
 * engine offers the server's tools to the model as `demo__<tool>`; every
 * other step takes the engine's proposal, which carries the model's calls
 * of those tools and their results like any other tool's.
 */

import { Agent, exportAgent } from '@subs/sdk';
import type { Context, DecisionRequest, DecisionResponse, McpServerUse } from '@subs/sdk';

/** The MCP servers the agent uses: all of `demo`'s tools. */
export const SERVERS: McpServerUse[] = [{ server: 'demo' }];

/** Takes the engine's proposals; names the MCP servers at the session's start. */
export class UsesMcp extends Agent {
  override decide(request: DecisionRequest, _cx: Context): DecisionResponse {
    const decision = request.proposed;
    if (request.trigger.type === 'session.start' && decision.agent) {
      return { ...decision, agent: { ...decision.agent, mcp: SERVERS } };
    }
    return decision;
  }
}

export const decide = exportAgent(new UsesMcp());
