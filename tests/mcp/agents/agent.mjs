// A JavaScript agent (the JavaScript SDK) that uses the MCP server `demo`:
// it takes the engine's proposals and names the server in its config's
// `mcp`. Served over HTTP as a worker (the SDK's native `decideJson`).
//
// Usage: node agent.mjs   (prints the port it listens on, on 127.0.0.1)
import http from 'node:http';
import { Agent, RecordingHost } from '../../../guest-sdk/js/src/index.js';

class UsesMcp extends Agent {
  decide(request) {
    const decision = request.proposed;
    if (request.trigger.type === 'session.start' && decision.agent) {
      decision.agent.mcp = [{ server: 'demo' }];
    }
    return decision;
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const decision = JSON.stringify(new RecordingHost().decideJson(new UsesMcp(), Buffer.concat(chunks).toString()));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(decision);
  });
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
