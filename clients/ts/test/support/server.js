// A real `subs serve` for the client's tests: the built binary (SUBS_BIN,
// default target/debug/subs of the repository), a temporary data
// directory, a config with a tenant key and an operator key, the offline
// model, and the test agents (SUBS_TOOLS_WASM, SUBS_SCENARIO_WASM; by
// default the components `cargo test` builds under target/guests).

import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { AdminClient, Client } from "../../src/index.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const GUESTS = path.join(ROOT, "target/guests/wasm32-wasip2/release");

/** What makes the offline model call the `tools` agent's `add`. */
export const ADD = 'use tool add with {"a": 1, "b": 2}';

// Settings a developer's shell may hold that would change the server.
const INHERITED = [
  "SUBS_LISTEN", "SUBS_DATA", "SUBS_STORE", "SUBS_DEFAULT_MODEL", "SUBS_CONFIG", "SUBS_SERVER",
  "SUBS_API_KEY", "SUBS_ADMIN_KEY", "SUBS_WORKER_SECRET", "RUST_LOG", "OPENAI_BASE_URL",
  "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OLLAMA_BASE_URL",
  "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

export function file(env, fallback, what) {
  const found = process.env[env] || fallback;
  if (!existsSync(found)) {
    throw new Error(`${what} not found at ${found}: build it (cargo build -p subs-cli; cargo test builds the agents) or set ${env}`);
  }
  return found;
}

export const toolsWasm = () => readFileSync(file("SUBS_TOOLS_WASM", path.join(GUESTS, "tools.wasm"), "the tools agent"));
export const scenarioWasm = () =>
  readFileSync(file("SUBS_SCENARIO_WASM", path.join(GUESTS, "test_scenario.wasm"), "the scenario agent"));

/** A running `subs serve` with tenant `acme` (`key`) and an operator key, its agents uploaded. */
export async function startServer() {
  const binary = file("SUBS_BIN", path.join(ROOT, "target/debug/subs"), "the subs binary");
  const dir = mkdtempSync(path.join(tmpdir(), "subs-client-ts-"));
  const key = `subs_${randomBytes(16).toString("hex")}`;
  const adminKey = `subs_admin_${randomBytes(16).toString("hex")}`;
  const digest = createHash("sha256").update(adminKey).digest("hex");
  const config = path.join(dir, "subs.toml");
  writeFileSync(config, `[admin]\nkey_sha256 = "${digest}"\n\n[[keys]]\ntenant = "acme"\nkey = "${key}"\n`);
  const env = { ...process.env };
  for (const name of INHERITED) delete env[name];
  env.SUBS_CACHE ??= path.join(dir, "cache");
  const child = spawn(binary, ["serve", "--listen", "127.0.0.1:0", "--data", path.join(dir, "data"), "--config", config], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    if (stderr.length < 1 << 20) stderr += chunk;
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`subs serve did not start:\n${stderr}`)), 60_000);
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      if (line.startsWith("subs listening on http://")) {
        clearTimeout(timer);
        resolve(line.slice("subs listening on ".length).trim());
      }
    });
    child.on("exit", (code) => reject(new Error(`subs serve exited (${code}):\n${stderr}`)));
  });
  const server = {
    url,
    key,
    adminKey,
    client: (options = {}) => new Client(options.url ?? url, { key: options.key ?? key }),
    admin: () => new AdminClient(url, { key: adminKey }),
    stop() {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
  const subs = server.client();
  await subs.uploadAgent("tools", toolsWasm());
  await subs.uploadAgent("scenario", scenarioWasm());
  return server;
}

/** Waits (at most 30 s) for the session to reach `status`. */
export async function settled(subs, session, status) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if ((await subs.getSession(session)).status === status) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`session ${session} never became ${status}`);
}

/**
 * A TCP proxy to the server that cuts the first event stream it carries
 * right after its `cutAfter`-th stored event (the blank line ending the
 * event with that many `id:` lines before it), closing both sides; every
 * other connection passes through whole.
 */
export async function cuttingProxy(upstream, cutAfter) {
  const { hostname, port } = new URL(upstream);
  const proxy = { cuts: 0, connections: 0, armed: true };
  const listener = net.createServer((client) => {
    proxy.connections += 1;
    const server = net.connect(Number(port), hostname);
    client.pipe(server);
    let seen = Buffer.alloc(0);
    let forwarded = 0;
    server.on("data", (data) => {
      seen = Buffer.concat([seen, data]);
      const stop = proxy.armed ? cutAt(seen, cutAfter) : undefined;
      if (stop !== undefined) {
        proxy.armed = false;
        proxy.cuts += 1;
        client.end(seen.subarray(forwarded, stop), () => client.destroy());
        server.destroy();
        return;
      }
      client.write(seen.subarray(forwarded));
      forwarded = seen.length;
    });
    server.on("end", () => client.end());
    for (const socket of [client, server]) socket.on("error", () => { client.destroy(); server.destroy(); });
  });
  await new Promise((resolve) => listener.listen(0, "127.0.0.1", resolve));
  proxy.url = `http://127.0.0.1:${listener.address().port}`;
  proxy.close = () => listener.close();
  return proxy;
}

function cutAt(seen, cutAfter) {
  if (seen.indexOf("text/event-stream") < 0) return undefined;
  let at = 0;
  for (let n = 0; n < cutAfter; n += 1) {
    at = seen.indexOf("\nid: ", at);
    if (at < 0) return undefined;
    at += 1;
  }
  const end = seen.indexOf("\n\n", at);
  return end < 0 ? undefined : end + 2;
}
