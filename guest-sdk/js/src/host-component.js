// The engine's `subs:agent/host` imports, inside a component (the bundler
// picks this file under the `subs-component` condition and leaves the
// `subs:` import for componentize-js to bind).
export { log, emitDelta } from 'subs:agent/host@0.1.0';
