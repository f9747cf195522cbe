// A subs agent with tools of its own: `add` sums two numbers, `get_time`
// tells the current time. The JavaScript twin of `examples/tools`.
//
// At `session.start` the agent declares itself: the model the engine
// proposes, a system prompt, and the two tools. When the model calls a
// tool, the engine sends `tool.execute` and the agent runs it through a
// ToolRouter. Every other trigger takes the engine's proposal, so the rest
// of the loop is the engine's.

import { Agent, ToolRouter, exportAgent, s, tool } from '@subs/sdk';

/** The model to use when the engine proposes none and the session has no config yet. */
export const DEFAULT_MODEL = 'openai/gpt-4o-mini';

/** What the model is told about its job. */
export const SYSTEM_PROMPT =
  'You are a helpful assistant. For arithmetic, call the `add` tool ' +
  'instead of computing sums yourself. For the current date or time, call `get_time`, which ' +
  'returns Unix time in milliseconds.';

/** `add`: `{"sum": a + b}`. */
export const add = tool(
  {
    name: 'add',
    description: 'Adds two numbers and returns their sum.',
    input: s.object({ a: s.number('The first addend'), b: s.number('The second addend') }),
    output: s.object({ sum: s.number() }),
  },
  ({ a, b }) => {
    // Inside a component console.log goes to the engine's logs, tagged
    // with the tenant, agent and session.
    console.log(`add(${a}, ${b})`);
    const sum = a + b;
    if (!Number.isFinite(sum)) {
      throw new Error(`${rustDisplay(a)} + ${rustDisplay(b)} is too large for a JSON number`);
    }
    return { sum };
  },
);

/** `get_time`: `{"unix_ms": …}`. */
export const getTime = tool(
  {
    name: 'get_time',
    description: 'Returns the current time as Unix time in milliseconds.',
    input: s.object({}),
    output: s.object({ unix_ms: s.integer({ minimum: 0 }) }),
  },
  () => ({ unix_ms: Date.now() }),
);

/**
 * `x` as Rust's `Display` writes it (no exponent, no `.0`), so the error
 * reads the same as the Rust agent's.
 */
export function rustDisplay(x) {
  if (Object.is(x, -0)) return '-0';
  const [, sign, int, frac = '', exp = '0'] = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(x));
  const digits = int + frac;
  const point = int.length + Number(exp);
  let text;
  if (point <= 0) text = `0.${'0'.repeat(-point)}${digits}`;
  else if (point >= digits.length) text = digits + '0'.repeat(point - digits.length);
  else text = `${digits.slice(0, point)}.${digits.slice(point)}`;
  text = text.replace(/^0+(?=\d)/, '');
  if (text.includes('.')) text = text.replace(/\.?0+$/, '');
  return sign + text;
}

/** The agent: a router with its two tools. */
export class Tools extends Agent {
  constructor() {
    super();
    this.router = new ToolRouter([add, getTime]);
  }

  /** The config the agent runs with: `model`, the prompt, the tools. */
  config(model) {
    return { model, system: SYSTEM_PROMPT, tools: this.router.tools() };
  }

  decide(request, _cx) {
    const { trigger, proposed } = request;
    switch (trigger.type) {
      case 'session.start': {
        const model = (proposed.agent ?? request.agent)?.model ?? DEFAULT_MODEL;
        return { ...proposed, agent: this.config(model) };
      }
      case 'tool.execute':
        return { ...proposed, actions: [...(proposed.actions ?? []), this.router.execute(trigger)] };
      default:
        return proposed;
    }
  }
}

export const decide = exportAgent(new Tools());
