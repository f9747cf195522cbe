import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DecideError, ToolRouter, requestFor, s, tool, toolError, toolExecute, toolResult } from '../src/index.js';

const router = () =>
  new ToolRouter([
    tool(
      { name: 'add', description: 'adds', input: s.object({ a: s.number(), b: s.number() }) },
      ({ a, b }) => ({ sum: a + b }),
    ),
    tool({ name: 'who' }, (_args, call) => ({ id: call.id, attempt: call.attempt })),
    tool({ name: 'fail' }, () => {
      throw new Error('it broke');
    }),
  ]);

test('valid input runs the tool', () => {
  assert.deepEqual(router().execute(toolExecute('add', '{"a": 1, "b": 2.5}')), toolResult({ sum: 3.5 }));
});

test('tools can see the call', () => {
  const call = toolExecute('who', '{}', { id: 'c7', attempt: 2 });
  assert.deepEqual(router().execute(call), toolResult({ id: 'c7', attempt: 2 }));
});

test('exceptions become tool errors, decide errors fail the decision', () => {
  assert.deepEqual(router().execute(toolExecute('fail', '{}')), toolError('it broke'));
  const strict = new ToolRouter().tool({ name: 'strict' }, () => {
    throw DecideError.retryable('the service is down');
  });
  assert.throws(() => strict.execute(toolExecute('strict', '{}')), DecideError);
  const odd = new ToolRouter().tool({ name: 'odd' }, () => {
    throw 'a string';
  });
  assert.deepEqual(odd.execute(toolExecute('odd', '{}')), toolError('a string'));
});

test('arguments of the wrong shape name the field', () => {
  const action = router().execute(toolExecute('add', '{"a": 1, "b": "2"}'));
  assert.deepEqual(action, toolError('invalid arguments for `add`: b: invalid type: string "2", expected f64'));
  assert.equal(action.retryable, undefined);
  assert.deepEqual(router().execute(toolExecute('add', '{"a": 1}')), toolError('invalid arguments for `add`: missing field `b`'));
  const list = new ToolRouter().tool({ name: 'l', input: s.object({ xs: s.array(s.integer()) }) }, () => null);
  assert.deepEqual(
    list.execute(toolExecute('l', '{"xs": [1, 2.5]}')),
    toolError('invalid arguments for `l`: xs[1]: invalid type: floating point `2.5`, expected i64'),
  );
});

test('invalid and malformed input never reach the tool', () => {
  const call = toolExecute('add', '{"a": 1, "b": 2}');
  call.input = { status: 'invalid', value: { a: 1, b: 2 }, error: 'additional property `c`' };
  assert.deepEqual(router().execute(call), toolError('invalid arguments for `add`: additional property `c`'));
  assert.deepEqual(
    router().execute(toolExecute('add', '[]')),
    toolError('malformed arguments for `add`: the arguments are not a JSON object'),
  );
  assert.match(router().execute(toolExecute('add', '{')).error, /^malformed arguments for `add`: /);
});

test('unknown tools are named with the known ones', () => {
  assert.deepEqual(router().execute(toolExecute('mul', '{}')), toolError('unknown tool `mul`: this agent runs `add`, `who`, `fail`'));
  assert.deepEqual(new ToolRouter().execute(toolExecute('mul', '{}')), toolError('unknown tool `mul`: this agent runs no tools'));
});

test('tools are listed in order', () => {
  const r = router();
  assert.deepEqual(r.tools().map((t) => t.name), ['add', 'who', 'fail']);
  assert.equal(r.get('add').description, 'adds');
  assert.ok(r.handles('who'));
  assert.ok(!r.handles('mul'));
});

test('decide answers only tool.execute', () => {
  const r = router();
  assert.equal(r.decide(requestFor({ type: 'session.start' })), undefined);
  const decision = r.decide(requestFor(toolExecute('fail', '{}')));
  assert.deepEqual(decision.actions, [toolError('it broke')]);
});

test('duplicate names are refused', () => {
  assert.throws(() => router().tool({ name: 'add' }, () => null), /the tool `add` was added to the ToolRouter twice/);
});

test('results that are not JSON are tool errors', () => {
  const r = new ToolRouter().tool({ name: 'nan' }, () => Number.NaN).tool({ name: 'nothing' }, () => undefined);
  assert.deepEqual(r.execute(toolExecute('nan', '{}')), toolError('the result of `nan` is not JSON: NaN is not a JSON number'));
  assert.deepEqual(r.execute(toolExecute('nothing', '{}')), toolResult(null));
});

test('schemas are written in the order a hand-written one is', () => {
  assert.equal(
    JSON.stringify(s.object({ a: s.number('The first addend'), n: s.integer({ minimum: 0 }), note: s.optional(s.string()) })),
    '{"type":"object","properties":{"a":{"type":"number","description":"The first addend"},' +
      '"n":{"type":"integer","minimum":0},"note":{"type":"string"}},"required":["a","n"],"additionalProperties":false}',
  );
  assert.equal(JSON.stringify(s.object({})), '{"type":"object","properties":{},"additionalProperties":false}');
  assert.deepEqual(s.array(s.enum(['x', 'y'])), { type: 'array', items: { type: 'string', enum: ['x', 'y'] } });
  assert.deepEqual(s.boolean('on?'), { type: 'boolean', description: 'on?' });
});
