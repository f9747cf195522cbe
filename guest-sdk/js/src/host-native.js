// The engine's `subs:agent/host` imports outside a component: there are
// none. Native code (tests) uses a RecordingHost; the component build
// resolves `#host` to `host-component.js` instead (the `subs-component`
// condition).

export function log(_level, _message) {
  throw new Error('subs:agent/host is only there inside a component: use a RecordingHost natively');
}

export function emitDelta(_delta) {
  throw new Error('subs:agent/host is only there inside a component: use a RecordingHost natively');
}
