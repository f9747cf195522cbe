/// <reference path="./interfaces/subs-agent-branch.d.ts" />
/// <reference path="./interfaces/subs-agent-host.d.ts" />
/// <reference path="./interfaces/subs-agent-types.d.ts" />
/// <reference path="./interfaces/wasi-cli-environment.d.ts" />
/// <reference path="./interfaces/wasi-cli-exit.d.ts" />
/// <reference path="./interfaces/wasi-cli-stderr.d.ts" />
/// <reference path="./interfaces/wasi-cli-stdin.d.ts" />
/// <reference path="./interfaces/wasi-cli-stdout.d.ts" />
/// <reference path="./interfaces/wasi-cli-terminal-input.d.ts" />
/// <reference path="./interfaces/wasi-cli-terminal-output.d.ts" />
/// <reference path="./interfaces/wasi-cli-terminal-stderr.d.ts" />
/// <reference path="./interfaces/wasi-cli-terminal-stdin.d.ts" />
/// <reference path="./interfaces/wasi-cli-terminal-stdout.d.ts" />
/// <reference path="./interfaces/wasi-clocks-monotonic-clock.d.ts" />
/// <reference path="./interfaces/wasi-clocks-wall-clock.d.ts" />
/// <reference path="./interfaces/wasi-http-outgoing-handler.d.ts" />
/// <reference path="./interfaces/wasi-http-types.d.ts" />
/// <reference path="./interfaces/wasi-io-error.d.ts" />
/// <reference path="./interfaces/wasi-io-poll.d.ts" />
/// <reference path="./interfaces/wasi-io-streams.d.ts" />
/// <reference path="./interfaces/wasi-random-insecure-seed.d.ts" />
/// <reference path="./interfaces/wasi-random-random.d.ts" />
declare module 'subs:agent/agent@0.2.0' {
  export type DecisionRequest = import('subs:agent/branch@0.2.0').DecisionRequest;
  export type Messages = import('subs:agent/branch@0.2.0').Messages;
  export type DecisionResponse = import('subs:agent/types@0.1.0').DecisionResponse;
  export type DecideError = import('subs:agent/types@0.1.0').DecideError;
  export type * as SubsAgentBranch020 from 'subs:agent/branch@0.2.0'; // import subs:agent/branch@0.2.0
  export type * as SubsAgentHost010 from 'subs:agent/host@0.1.0'; // import subs:agent/host@0.1.0
  export type * as SubsAgentTypes010 from 'subs:agent/types@0.1.0'; // import subs:agent/types@0.1.0
  export type * as WasiCliEnvironment0212 from 'wasi:cli/environment@0.2.12'; // import wasi:cli/environment@0.2.12
  export type * as WasiCliExit0212 from 'wasi:cli/exit@0.2.12'; // import wasi:cli/exit@0.2.12
  export type * as WasiCliStderr0212 from 'wasi:cli/stderr@0.2.12'; // import wasi:cli/stderr@0.2.12
  export type * as WasiCliStdin0212 from 'wasi:cli/stdin@0.2.12'; // import wasi:cli/stdin@0.2.12
  export type * as WasiCliStdout0212 from 'wasi:cli/stdout@0.2.12'; // import wasi:cli/stdout@0.2.12
  export type * as WasiCliTerminalInput0212 from 'wasi:cli/terminal-input@0.2.12'; // import wasi:cli/terminal-input@0.2.12
  export type * as WasiCliTerminalOutput0212 from 'wasi:cli/terminal-output@0.2.12'; // import wasi:cli/terminal-output@0.2.12
  export type * as WasiCliTerminalStderr0212 from 'wasi:cli/terminal-stderr@0.2.12'; // import wasi:cli/terminal-stderr@0.2.12
  export type * as WasiCliTerminalStdin0212 from 'wasi:cli/terminal-stdin@0.2.12'; // import wasi:cli/terminal-stdin@0.2.12
  export type * as WasiCliTerminalStdout0212 from 'wasi:cli/terminal-stdout@0.2.12'; // import wasi:cli/terminal-stdout@0.2.12
  export type * as WasiClocksMonotonicClock0212 from 'wasi:clocks/monotonic-clock@0.2.12'; // import wasi:clocks/monotonic-clock@0.2.12
  export type * as WasiClocksWallClock0212 from 'wasi:clocks/wall-clock@0.2.12'; // import wasi:clocks/wall-clock@0.2.12
  export type * as WasiHttpOutgoingHandler0212 from 'wasi:http/outgoing-handler@0.2.12'; // import wasi:http/outgoing-handler@0.2.12
  export type * as WasiHttpTypes0212 from 'wasi:http/types@0.2.12'; // import wasi:http/types@0.2.12
  export type * as WasiIoError0212 from 'wasi:io/error@0.2.12'; // import wasi:io/error@0.2.12
  export type * as WasiIoPoll0212 from 'wasi:io/poll@0.2.12'; // import wasi:io/poll@0.2.12
  export type * as WasiIoStreams0212 from 'wasi:io/streams@0.2.12'; // import wasi:io/streams@0.2.12
  export type * as WasiRandomInsecureSeed0212 from 'wasi:random/insecure-seed@0.2.12'; // import wasi:random/insecure-seed@0.2.12
  export type * as WasiRandomRandom0212 from 'wasi:random/random@0.2.12'; // import wasi:random/random@0.2.12
  /**
  * Decides what happens next. An error fails this delivery.
  */
  export function decide(request: DecisionRequest, messages: Messages): DecisionResponse;
  export type Result<T, E> = { tag: 'ok', val: T } | { tag: 'err', val: E };
}
