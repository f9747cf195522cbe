// The protocol <-> WIT mapping (src/wit.js). The WIT types are jco's, in types/wit/.
/// <reference path="../types/wit/interfaces/subs-agent-types.d.ts" />
import type { DecisionRequestJson, DecisionResponse } from './index.js';
import type * as wire from './protocol.generated.js';

export { ProtocolError } from './index.js';

/** A description of one protocol type (a record, union, enum, ...), by name in `types`. */
export interface WitType { readonly kind: string }

export declare const types: Readonly<Record<string, WitType>>;
export declare function toWit(type: WitType, value: unknown): any;
export declare function fromWit(type: WitType, value: any): any;
export declare function conforms(type: WitType, value: unknown): boolean;
export declare function jsonText(value: unknown): string;
export declare function jsonValue(text: string): unknown;
export declare function unexpected(value: unknown): string;
export declare function requestFromWit(request: import('subs:agent/types@0.1.0').DecisionRequest): DecisionRequestJson;
export declare function responseToWit(decision: DecisionResponse): import('subs:agent/types@0.1.0').DecisionResponse;
/**
 * A `client.messages` trigger comes as the `agent-json` world's JSON has it:
 * `shared`, and the rest of the view as `messages`.
 */
export declare function branchRequestFromWit(
  request: import('./index.js').BranchDecisionRequest,
): Omit<DecisionRequestJson, 'messages' | 'message_tree' | 'trigger'> & {
  trigger: Exclude<wire.Trigger, wire.ClientMessages> | (wire.ClientMessages & { shared: number });
};
export declare function messageTreeFromWit(
  tree: import('subs:agent/types@0.1.0').MessageTree,
  messages: readonly import('./index.js').Message[],
): import('./index.js').MessageTree;
