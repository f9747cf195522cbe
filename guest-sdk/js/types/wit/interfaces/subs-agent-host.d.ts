/// <reference path="./subs-agent-types.d.ts" />
declare module 'subs:agent/host@0.1.0' {
  /**
   * Writes a line to the engine's logs, tagged with the tenant, agent and
   * session of the decision being made.
   */
  export function log(level: Level, message: string): void;
  /**
   * Streams a piece of the reply while the agent answers an
   * `llm.execute` trigger whose `stream` is true. Clients receive it as
   * an `llm.token.delta` event right away; the final `llm.result` still
   * carries the whole reply. Fails when the decision being made is not
   * for such a trigger.
   */
  export function emitDelta(delta: StreamDelta): void;
  export type StreamDelta = import('subs:agent/types@0.1.0').StreamDelta;
  /**
   * How much a log line matters.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
