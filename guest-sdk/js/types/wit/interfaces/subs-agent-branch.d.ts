/// <reference path="./subs-agent-types.d.ts" />
declare module 'subs:agent/branch@0.2.0' {
  export type Json = import('subs:agent/types@0.1.0').Json;
  export type Message = import('subs:agent/types@0.1.0').Message;
  export type DraftMessage = import('subs:agent/types@0.1.0').DraftMessage;
  export type MessageTree = import('subs:agent/types@0.1.0').MessageTree;
  export type WorkerIdentity = import('subs:agent/types@0.1.0').WorkerIdentity;
  export type DecisionResponse = import('subs:agent/types@0.1.0').DecisionResponse;
  export type AgentConfig = import('subs:agent/types@0.1.0').AgentConfig;
  export type Call = import('subs:agent/types@0.1.0').Call;
  export type ClientContext = import('subs:agent/types@0.1.0').ClientContext;
  export type ClientActionTrigger = import('subs:agent/types@0.1.0').ClientActionTrigger;
  export type ToolExecute = import('subs:agent/types@0.1.0').ToolExecute;
  export type ToolFinished = import('subs:agent/types@0.1.0').ToolFinished;
  export type LlmExecute = import('subs:agent/types@0.1.0').LlmExecute;
  export type LlmFinished = import('subs:agent/types@0.1.0').LlmFinished;
  export type SubAgentFinished = import('subs:agent/types@0.1.0').SubAgentFinished;
  export type InterruptResumed = import('subs:agent/types@0.1.0').InterruptResumed;
  /**
   * `client.messages` without the part of the client's view the branch
   * already holds: the view is the first `shared` messages of the
   * decision's active path (read through `messages`), then `rest`.
   * `new-from` indexes the whole view, as in `0.1.0`.
   */
  export interface ClientMessagesTrigger {
    shared: number,
    rest: Array<DraftMessage>,
    newFrom: number,
    client: ClientContext,
  }
  /**
   * Why the engine asks for a decision: `0.1.0`'s triggers, with
   * `client.messages` sharing its view's leading messages with the
   * branch.
   */
  export type Trigger = TriggerSessionStart | TriggerClientMessages | TriggerClientAction | TriggerToolExecute | TriggerToolFinished | TriggerLlmExecute | TriggerLlmFinished | TriggerSubAgentFinished | TriggerInterruptResumed;
  export interface TriggerSessionStart {
    tag: 'session-start',
  }
  export interface TriggerClientMessages {
    tag: 'client-messages',
    val: ClientMessagesTrigger,
  }
  export interface TriggerClientAction {
    tag: 'client-action',
    val: ClientActionTrigger,
  }
  export interface TriggerToolExecute {
    tag: 'tool-execute',
    val: ToolExecute,
  }
  export interface TriggerToolFinished {
    tag: 'tool-finished',
    val: ToolFinished,
  }
  export interface TriggerLlmExecute {
    tag: 'llm-execute',
    val: LlmExecute,
  }
  export interface TriggerLlmFinished {
    tag: 'llm-finished',
    val: LlmFinished,
  }
  export interface TriggerSubAgentFinished {
    tag: 'sub-agent-finished',
    val: SubAgentFinished,
  }
  export interface TriggerInterruptResumed {
    tag: 'interrupt-resumed',
    val: InterruptResumed,
  }
  /**
   * What the engine asks an agent, without the branch: the fields of
   * `0.1.0`'s `decision-request` less `messages` and `message-tree`,
   * with this version's `trigger`.
   */
  export interface DecisionRequest {
    sessionId: string,
    decisionId: string,
    agentId: string,
    identity: WorkerIdentity,
    trigger: Trigger,
    proposed: DecisionResponse,
    state: Json,
    agent?: AgentConfig,
    calls: Array<Call>,
    pendingCalls: number,
    ancestry: Array<string>,
    attempts: number,
    deadline?: string,
    turnId?: string,
  }
  
  export class Messages implements Disposable {
    /**
     * This type does not have a public constructor.
     */
    private constructor();
    /**
    * How many messages the active path has.
    */
    len(): number;
    /**
    * The message at `index`; none past the end.
    */
    get(index: number): Message | undefined;
    /**
    * The messages from `start` up to, not including, `end`.
    */
    range(start: number, end: number): Array<Message>;
    /**
    * The last `n` messages (all of them when there are fewer).
    */
    last(n: number): Array<Message>;
    /**
    * The messages after the one whose id is `id`; none when no
    * message of the active path has that id.
    */
    after(id: string): Array<Message> | undefined;
    /**
    * The index of the message whose id is `id` on the active path.
    */
    position(id: string): number | undefined;
    /**
    * Every message of the session (edits fork the tree), with the
    * head of the active path.
    */
    tree(): MessageTree;
    /**
    * `range` as the protocol's JSON text: an array of messages. For
    * agents of `agent-json`.
    */
    rangeJson(start: number, end: number): Json;
    /**
    * `after` as the protocol's JSON text; none when no message of
    * the active path has that id.
    */
    afterJson(id: string): Json | undefined;
    /**
    * `tree` as the protocol's JSON text (`{ "nodes": …, "head_id": … }`).
    */
    treeJson(): Json;
    [Symbol.dispose](): void;
  }
}
