// The protocol <-> WIT mapping (src/wit.js). The WIT types are jco's, in types/wit/.
/// <reference path="../types/wit/interfaces/subs-agent-types.d.ts" />
import type { DecisionRequest, DecisionResponse } from './index.js';

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
export declare function requestFromWit(request: import('subs:agent/types@0.1.0').DecisionRequest): DecisionRequest;
export declare function responseToWit(decision: DecisionResponse): import('subs:agent/types@0.1.0').DecisionResponse;
export declare function branchRequestFromWit(
  request: Omit<import('subs:agent/types@0.1.0').DecisionRequest, 'messages' | 'messageTree'>,
): Omit<DecisionRequest, 'messages' | 'message_tree'>;
export declare function messageTreeFromWit(
  tree: import('subs:agent/types@0.1.0').MessageTree,
  messages: readonly import('./index.js').Message[],
): import('./index.js').MessageTree;
