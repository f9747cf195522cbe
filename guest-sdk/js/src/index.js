// Write subs agents in JavaScript or TypeScript, as WebAssembly components
// (componentize-js).
//
//     import { Agent, exportAgent } from '@subs/sdk';
//
//     class Passthrough extends Agent {}   // takes the engine's proposal: a complete chat agent
//
//     export const decide = exportAgent(new Passthrough());
//
// Layout: protocol.js (builders of protocol values, which are their JSON),
// wit.js (the one mapping between the protocol and the WIT types),
// agent.js (Agent, Context, DecideError, Level), branch.js (Messages:
// the request's branch, read on demand in a component), tools.js (tool, s,
// ToolRouter, ToolContext: approvals, sub-agents as tools), testing.js
// (RecordingHost, toolExecute, approvalResumed), component.js
// (exportAgent). Nothing but component.js knows about WebAssembly, and it
// reaches the engine's imports through `#host`, which is a stub natively:
// agents are unit tested with plain `node --test`.

export { Agent, Context, DecideError, Level } from './agent.js';
export { BranchError, heldMessages, lazyMessages, messagesOf } from './branch.js';
export { exportAgent, decideJson, decideWit } from './component.js';
export {
  DraftMessage,
  approval,
  approvalAnswerSchema,
  delegate,
  done,
  doneWith,
  interrupt,
  interruptWith,
  jsNumber,
  llmCall,
  llmError,
  llmResult,
  messageSend,
  messageText,
  replaceActions,
  requestFor,
  spawn,
  subAgentSpawn,
  toJson,
  toolCall,
  toolError,
  toolResult,
  withAction,
  withMessage,
} from './protocol.js';
export { RecordingHost, approvalResumed, toolExecute } from './testing.js';
export { APPROVALS_STATE_KEY, ToolContext, ToolRouter, check, s, tool } from './tools.js';
export { ProtocolError } from './wit.js';
