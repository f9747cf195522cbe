declare module 'subs:agent/types@0.1.0' {
  /**
   * A JSON document as text: every `unknown` of the protocol.
   */
  export type Json = string;
  /**
   * Who wrote a message.
   * # Variants
   * 
   * ## `"system"`
   * 
   * ## `"user"`
   * 
   * ## `"assistant"`
   * 
   * ## `"tool"`
   */
  export type Role = 'system' | 'user' | 'assistant' | 'tool';
  /**
   * Where a call runs.
   * # Variants
   * 
   * ## `"server"`
   * 
   * ## `"worker"`
   * 
   * ## `"client"`
   */
  export type Handler = 'server' | 'worker' | 'client';
  /**
   * Where an LLM call runs.
   * # Variants
   * 
   * ## `"server"`
   * 
   * ## `"worker"`
   */
  export type LlmHandler = 'server' | 'worker';
  /**
   * Where a tool runs.
   * # Variants
   * 
   * ## `"worker"`
   * 
   * ## `"client"`
   */
  export type ToolHandler = 'worker' | 'client';
  /**
   * A provider's native wire format.
   * # Variants
   * 
   * ## `"openai"`
   * 
   * ## `"anthropic"`
   */
  export type LlmFormat = 'openai' | 'anthropic';
  /**
   * How hard a reasoning model thinks.
   * # Variants
   * 
   * ## `"xhigh"`
   * 
   * ## `"high"`
   * 
   * ## `"medium"`
   * 
   * ## `"low"`
   * 
   * ## `"minimal"`
   * 
   * ## `"none"`
   */
  export type ReasoningEffort = 'xhigh' | 'high' | 'medium' | 'low' | 'minimal' | 'none';
  /**
   * Why a call failed.
   * # Variants
   * 
   * ## `"provider-error"`
   * 
   * ## `"rate-limited"`
   * 
   * ## `"refused"`
   * 
   * ## `"budget-exceeded"`
   * 
   * ## `"deadline-exceeded"`
   */
  export type ErrorCode = 'provider-error' | 'rate-limited' | 'refused' | 'budget-exceeded' | 'deadline-exceeded';
  /**
   * What kind of work a call is.
   * # Variants
   * 
   * ## `"tool-call"`
   * 
   * ## `"llm-call"`
   * 
   * ## `"sub-agent"`
   */
  export type CallKind = 'tool-call' | 'llm-call' | 'sub-agent';
  /**
   * Where a call is in its lifecycle.
   * # Variants
   * 
   * ## `"pending"`
   * 
   * ## `"completed"`
   * 
   * ## `"failed"`
   * 
   * ## `"retry-scheduled"`
   * 
   * ## `"queued"`
   */
  export type CallStatus = 'pending' | 'completed' | 'failed' | 'retry-scheduled' | 'queued';
  /**
   * ---- messages ----------------------------------------------------
   * `{ url }`.
   */
  export interface UrlRef {
    url: string,
  }
  /**
   * An inline file.
   */
  export interface FileData {
    filename: string,
    fileData: string,
  }
  /**
   * Inline audio.
   */
  export interface AudioData {
    data: string,
    format: string,
  }
  /**
   * One typed part of a message's content.
   */
  export type ContentPart = ContentPartText | ContentPartImageUrl | ContentPartFile | ContentPartInputAudio | ContentPartVideoUrl;
  export interface ContentPartText {
    tag: 'text',
    val: string,
  }
  export interface ContentPartImageUrl {
    tag: 'image-url',
    val: UrlRef,
  }
  export interface ContentPartFile {
    tag: 'file',
    val: FileData,
  }
  export interface ContentPartInputAudio {
    tag: 'input-audio',
    val: AudioData,
  }
  export interface ContentPartVideoUrl {
    tag: 'video-url',
    val: UrlRef,
  }
  /**
   * A message body: text, or typed parts.
   */
  export type Content = ContentText | ContentParts;
  export interface ContentText {
    tag: 'text',
    val: string,
  }
  export interface ContentParts {
    tag: 'parts',
    val: Array<ContentPart>,
  }
  /**
   * The tool and arguments of a tool call.
   */
  export interface FunctionCall {
    name: string,
    arguments: string,
  }
  /**
   * A model's request to call a tool. `kind` is the wire's `type`.
   */
  export interface ToolCall {
    id: string,
    kind: string,
    'function': FunctionCall,
  }
  /**
   * A recorded message.
   */
  export interface Message {
    id: string,
    role: Role,
    content?: Content,
    toolCalls?: Array<ToolCall>,
    toolCallId?: string,
    name?: string,
  }
  /**
   * A message not yet recorded: the id is optional.
   */
  export interface DraftMessage {
    id?: string,
    role: Role,
    content?: Content,
    toolCalls?: Array<ToolCall>,
    toolCallId?: string,
    name?: string,
  }
  /**
   * Where a tree node's message is. Most of a tree is the active path,
   * which the request's `messages` already carries, so such a node names
   * its index there (`active`) rather than carrying a second copy;
   * other nodes carry their message.
   */
  export type TreeMessage = TreeMessageActive | TreeMessageOther;
  export interface TreeMessageActive {
    tag: 'active',
    val: number,
  }
  export interface TreeMessageOther {
    tag: 'other',
    val: Message,
  }
  /**
   * A tree node's parent: none (a root), an earlier node by its index
   * in `nodes` (the id of that node's message), or an id no earlier node
   * has.
   */
  export type TreeParent = TreeParentRoot | TreeParentNode | TreeParentId;
  export interface TreeParentRoot {
    tag: 'root',
  }
  export interface TreeParentNode {
    tag: 'node',
    val: number,
  }
  export interface TreeParentId {
    tag: 'id',
    val: string,
  }
  /**
   * One message of a tree, with its parent.
   */
  export interface TreeNode {
    message: TreeMessage,
    parent: TreeParent,
  }
  /**
   * A session's messages as a tree; `head-id` ends the active path.
   */
  export interface MessageTree {
    nodes: Array<TreeNode>,
    headId?: string,
  }
  /**
   * ---- agent config --------------------------------------------------
   * How a call or delivery is retried.
   */
  export interface RetryPolicy {
    timeoutSecs?: number,
    maxRetries: number,
    backoffBaseSecs: number,
    backoffMaxSecs: number,
  }
  /**
   * A tool the model may call; `input` and `output` are JSON Schemas.
   */
  export interface AgentTool {
    name: string,
    description?: string,
    input?: Json,
    output?: Json,
    handler?: ToolHandler,
  }
  /**
   * An agent this one may delegate to.
   */
  export interface SubAgent {
    id: string,
    description?: string,
  }
  /**
   * One of the tenant's MCP servers an agent uses; no `tools`: all of
   * them.
   */
  export interface McpServerUse {
    server: string,
    tools?: Array<string>,
  }
  /**
   * What an agent is.
   */
  export interface AgentConfig {
    model: string,
    system?: string,
    stream?: boolean,
    handler?: LlmHandler,
    format?: LlmFormat,
    retry?: RetryPolicy,
    tools?: Array<AgentTool>,
    subAgents?: Array<SubAgent>,
    mcp?: Array<McpServerUse>,
  }
  /**
   * ---- LLM -------------------------------------------------------------
   * A tool as the model sees it.
   */
  export interface LlmTool {
    name: string,
    description: string,
    input?: Json,
    output?: Json,
  }
  /**
   * Reasoning settings.
   */
  export interface ReasoningConfig {
    effort?: ReasoningEffort,
    maxTokens?: number,
    exclude?: boolean,
    enabled?: boolean,
  }
  /**
   * A provider-neutral LLM request.
   */
  export interface LlmRequest {
    model: string,
    messages: Array<DraftMessage>,
    tools?: Array<LlmTool>,
    temperature?: number,
    maxCompletionTokens?: number,
    reasoning?: ReasoningConfig,
  }
  /**
   * A provider-neutral LLM reply.
   */
  export interface LlmResponse {
    model: string,
    content?: string,
    toolCalls?: Array<ToolCall>,
    finishReason?: string,
    usage?: Json,
    cost?: string,
    images?: Array<UrlRef>,
  }
  /**
   * The request of an `llm.execute`: an `llm-request`, or JSON in a
   * provider's native format (or any request the typed form cannot hold
   * exactly).
   */
  export type LlmRequestBody = LlmRequestBodyStandard | LlmRequestBodyNative;
  export interface LlmRequestBodyStandard {
    tag: 'standard',
    val: LlmRequest,
  }
  export interface LlmRequestBodyNative {
    tag: 'native',
    val: Json,
  }
  /**
   * The response of an `llm.result`: an `llm-response`, or the
   * provider-native JSON.
   */
  export type LlmResponseBody = LlmResponseBodyStandard | LlmResponseBodyNative;
  export interface LlmResponseBodyStandard {
    tag: 'standard',
    val: LlmResponse,
  }
  export interface LlmResponseBodyNative {
    tag: 'native',
    val: Json,
  }
  /**
   * A piece of a streamed tool call.
   */
  export interface ToolCallDelta {
    id: string,
    name?: string,
    arguments?: string,
  }
  /**
   * A piece of a streamed LLM reply.
   */
  export interface StreamDelta {
    text?: string,
    reasoning?: string,
    toolCalls?: Array<ToolCallDelta>,
    finishReason?: string,
  }
  /**
   * Arguments that parsed but do not conform.
   */
  export interface InvalidInput {
    value: Json,
    error: string,
  }
  /**
   * ---- triggers ----------------------------------------------------
   * The engine's validation of tool arguments against the input schema.
   */
  export type ToolInput = ToolInputValid | ToolInputInvalid | ToolInputMalformed;
  export interface ToolInputValid {
    tag: 'valid',
    val: Json,
  }
  export interface ToolInputInvalid {
    tag: 'invalid',
    val: InvalidInput,
  }
  /**
   * Not a JSON object; the parser's message.
   */
  export interface ToolInputMalformed {
    tag: 'malformed',
    val: string,
  }
  /**
   * What a client adds to a `client.messages` input.
   */
  export interface ClientContext {
    tools?: Array<AgentTool>,
    context?: Array<Json>,
    state?: Json,
    forwardedProps?: Json,
  }
  /**
   * `client.messages`.
   */
  export interface ClientMessagesTrigger {
    messages: Array<DraftMessage>,
    newFrom: number,
    client: ClientContext,
  }
  /**
   * `client.action`.
   */
  export interface ClientActionTrigger {
    name: string,
    args?: Json,
  }
  /**
   * `tool.execute`.
   */
  export interface ToolExecute {
    id: string,
    name: string,
    arguments: string,
    input: ToolInput,
    attempt: number,
    deadline?: string,
  }
  /**
   * `tool.finished`.
   */
  export interface ToolFinished {
    id: string,
    ok: boolean,
    name: string,
    result?: string,
    error?: string,
  }
  /**
   * `llm.execute`.
   */
  export interface LlmExecute {
    id: string,
    request: LlmRequestBody,
    format?: LlmFormat,
    stream: boolean,
    attempt: number,
    deadline?: string,
  }
  /**
   * `llm.finished`.
   */
  export interface LlmFinished {
    id: string,
    ok: boolean,
    message?: DraftMessage,
    truncated: boolean,
    usage?: Json,
    cost?: string,
    error?: string,
    code?: ErrorCode,
    detail?: Json,
  }
  /**
   * `sub_agent.finished`.
   */
  export interface SubAgentFinished {
    id: string,
    ok: boolean,
    sessionId: string,
    agentId: string,
    result?: string,
    error?: string,
  }
  /**
   * `interrupt.resumed`.
   */
  export interface InterruptResumed {
    interruptId: string,
    payload?: Json,
  }
  /**
   * Why the engine asks for a decision.
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
   * ---- actions -----------------------------------------------------
   * `llm.call`.
   */
  export interface LlmCall {
    id?: string,
    model?: string,
    messages?: Array<DraftMessage>,
    tools?: Array<LlmTool>,
    temperature?: number,
    maxCompletionTokens?: number,
    reasoning?: ReasoningConfig,
    stream?: boolean,
    retry?: RetryPolicy,
    handler?: LlmHandler,
  }
  /**
   * `tool.call`.
   */
  export interface ToolCallAction {
    id?: string,
    name: string,
    arguments: Json,
    handler?: ToolHandler,
    retry?: RetryPolicy,
  }
  /**
   * `tool.result`.
   */
  export interface ToolResult {
    id?: string,
    attempt?: number,
    result: Json,
  }
  /**
   * `tool.error` and `llm.error`.
   */
  export interface CallError {
    id?: string,
    attempt?: number,
    error: string,
    retryable?: boolean,
    code?: ErrorCode,
    detail?: Json,
  }
  /**
   * `llm.result`.
   */
  export interface LlmResult {
    id?: string,
    attempt?: number,
    response: LlmResponseBody,
  }
  /**
   * `sub_agent.spawn`.
   */
  export interface SubAgentSpawn {
    sessionId: string,
    agentId: string,
    toolCallId: string,
    retry?: RetryPolicy,
  }
  /**
   * `message.send`.
   */
  export interface MessageSend {
    sessionId: string,
    message: DraftMessage,
  }
  /**
   * `interrupt`; `resume-schema` is a JSON Schema the resume payload
   * must satisfy.
   */
  export interface Interrupt {
    interruptId?: string,
    reason: string,
    payload?: Json,
    resumeSchema?: Json,
  }
  /**
   * `done`.
   */
  export interface Done {
    data?: Json,
  }
  /**
   * What the engine should do next.
   */
  export type Action = ActionLlmCall | ActionToolCall | ActionToolResult | ActionToolError | ActionLlmResult | ActionLlmError | ActionSubAgentSpawn | ActionMessageSend | ActionInterrupt | ActionDone;
  export interface ActionLlmCall {
    tag: 'llm-call',
    val: LlmCall,
  }
  export interface ActionToolCall {
    tag: 'tool-call',
    val: ToolCallAction,
  }
  export interface ActionToolResult {
    tag: 'tool-result',
    val: ToolResult,
  }
  export interface ActionToolError {
    tag: 'tool-error',
    val: CallError,
  }
  export interface ActionLlmResult {
    tag: 'llm-result',
    val: LlmResult,
  }
  export interface ActionLlmError {
    tag: 'llm-error',
    val: CallError,
  }
  export interface ActionSubAgentSpawn {
    tag: 'sub-agent-spawn',
    val: SubAgentSpawn,
  }
  export interface ActionMessageSend {
    tag: 'message-send',
    val: MessageSend,
  }
  export interface ActionInterrupt {
    tag: 'interrupt',
    val: Interrupt,
  }
  export interface ActionDone {
    tag: 'done',
    val: Done,
  }
  /**
   * ---- the decision exchange -----------------------------------------
   * The session's owner, without the tenant.
   */
  export interface WorkerIdentity {
    id?: string,
    metadata?: Array<[string, string]>,
  }
  /**
   * A call the engine tracks.
   */
  export interface Call {
    id: string,
    kind: CallKind,
    status: CallStatus,
    attempt: number,
    deadline?: string,
    anchor?: string,
    name?: string,
    arguments?: string,
    handler?: Handler,
    stream?: boolean,
    agentId?: string,
    sessionId?: string,
  }
  /**
   * A decision: messages to record, actions, new state and config.
   */
  export interface DecisionResponse {
    messages?: Array<DraftMessage>,
    actions?: Array<Action>,
    state?: Json,
    agent?: AgentConfig,
  }
  /**
   * What the engine asks.
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
    messages: Array<Message>,
    messageTree: MessageTree,
    ancestry: Array<string>,
    attempts: number,
    deadline?: string,
    turnId?: string,
  }
  /**
   * A decision the agent could not make. The delivery fails; the engine
   * retries it per the agent's retry policy unless `retryable` is false.
   */
  export interface DecideError {
    message: string,
    retryable: boolean,
  }
  /**
   * ---- client inputs (for completeness: clients post these as JSON) ---
   * `client.message`.
   */
  export interface ClientMessageInput {
    agentId: string,
    turnId?: string,
    message: DraftMessage,
    stream?: boolean,
  }
  /**
   * `client.messages`.
   */
  export interface ClientMessagesInput {
    agentId: string,
    turnId?: string,
    messages: Array<DraftMessage>,
    stream?: boolean,
    client?: ClientContext,
  }
  /**
   * `client.action`.
   */
  export interface ClientActionInput {
    agentId: string,
    turnId?: string,
    name: string,
    args?: Json,
  }
  /**
   * `interrupt.resume`.
   */
  export interface InterruptResumeInput {
    interruptId: string,
    payload?: Json,
  }
  /**
   * `tool.result` from a client.
   */
  export interface ToolResultInput {
    id: string,
    attempt?: number,
    result?: Json,
  }
  /**
   * `tool.error` from a client.
   */
  export interface ToolErrorInput {
    id: string,
    error: string,
    retryable: boolean,
    attempt?: number,
  }
  /**
   * What a client sends a session.
   */
  export type ClientInput = ClientInputClientMessage | ClientInputClientMessages | ClientInputClientAction | ClientInputInterruptResume | ClientInputToolResult | ClientInputToolError;
  export interface ClientInputClientMessage {
    tag: 'client-message',
    val: ClientMessageInput,
  }
  export interface ClientInputClientMessages {
    tag: 'client-messages',
    val: ClientMessagesInput,
  }
  export interface ClientInputClientAction {
    tag: 'client-action',
    val: ClientActionInput,
  }
  export interface ClientInputInterruptResume {
    tag: 'interrupt-resume',
    val: InterruptResumeInput,
  }
  export interface ClientInputToolResult {
    tag: 'tool-result',
    val: ToolResultInput,
  }
  export interface ClientInputToolError {
    tag: 'tool-error',
    val: ToolErrorInput,
  }
}
