// The inspector's entry: hash routes to views.
//
//   #/sessions[?status=&agent=&identity=]   the sessions, a page at a time
//   #/sessions/<id>                          one session
//   #/agents, #/agents/<id>                  agents and their versions
//
// A view is a function (main element, route params) that renders into the
// element and answers a function that stops what it left running
// (timers, event streams).

import { describeCredential, forget, onCredential } from './api.js';
import { fill, notice } from './dom.js';
import { sessionsView } from './sessions.js';
import { sessionView } from './session.js';
import { agentsView, agentView } from './agents.js';

const main = document.getElementById('view');
let stop = null;

function parse() {
  const hash = location.hash.replace(/^#/, '') || '/sessions';
  const [path, query] = hash.split('?', 2);
  const parts = path.split('/').filter((p) => p !== '');
  return { parts, query: new URLSearchParams(query || '') };
}

function decode(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

function route() {
  if (stop) stop();
  stop = null;
  const { parts, query } = parse();
  const [section, id] = [parts[0], parts.length > 1 ? decode(parts.slice(1).join('/')) : null];
  for (const link of document.querySelectorAll('nav a')) {
    link.toggleAttribute('aria-current', link.getAttribute('href') === `#/${section}`);
    if (link.getAttribute('href') === `#/${section}`) link.setAttribute('aria-current', 'page');
  }
  main.replaceChildren();
  try {
    if (section === 'sessions' && id !== null) stop = sessionView(main, id);
    else if (section === 'sessions') stop = sessionsView(main, query);
    else if (section === 'agents' && id !== null) stop = agentView(main, id);
    else if (section === 'agents') stop = agentsView(main);
    else fill(main, notice(`No such page: ${location.hash}`, 'error'));
  } catch (e) {
    fill(main, notice(String(e && e.message ? e.message : e), 'error'));
  }
}

function who() {
  document.querySelector('[data-testid="who"]').textContent = describeCredential();
}

document.getElementById('change-key').addEventListener('click', () => {
  forget();
  route();
});
onCredential(() => {
  who();
});
window.addEventListener('hashchange', route);
who();
route();
