// A page served on another loopback port (another origin) uses agentd's API
// only when agentd allows its origin (http.cors.allowed_origins).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { startAgentd, randomToken } from '../lib/agentd.mjs';
import { launch } from '../lib/browser.mjs';

const fixtures = new URL('../fixtures/crossorigin/', import.meta.url);
const token = randomToken();
let pageServer;
let pageOrigin;
let allowed;    // agentd allowing the page's origin
let disallowed; // agentd without CORS
let browser;
let page;

before(async () => {
  pageServer = createServer((req, res) => {
    const name = req.url === '/' ? 'index.html' : req.url.slice(1);
    if (!['index.html', 'client.js'].includes(name)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'Content-Type': name.endsWith('.js') ? 'text/javascript' : 'text/html' });
    res.end(readFileSync(new URL(name, fixtures)));
  });
  await new Promise((r) => pageServer.listen(0, '127.0.0.1', r));
  pageOrigin = `http://127.0.0.1:${pageServer.address().port}`;
  const common = `auth: {tokens: [{token: ${token}, tenant: web}]}\nproviders: [{name: sim, kind: simulated, token_delay_ms: 5}]\n`;
  [allowed, disallowed] = await Promise.all([
    startAgentd(`${common}http: {cors: {allowed_origins: ['${pageOrigin}']}}\n`),
    startAgentd(common),
  ]);
  browser = await launch();
  page = await browser.newPage();
  await page.goto(`${pageOrigin}/`);
  await page.waitForSelector('body[data-ready=yes]');
});

after(async () => {
  await browser?.close();
  await Promise.all([allowed?.stop(), disallowed?.stop()]);
  await new Promise((r) => (pageServer ? pageServer.close(r) : r()));
});

test('CORS on: POST + EventSource (with a stream ticket) runs a prompt with its retry timeline', async () => {
  const out = await page.evaluate(([base, tok]) => window.client.postThenEventSource(base, tok, 'hello [[faults: 503,ok]]')
    .then((r) => ({ ok: true, started: r.started, types: r.events.map((e) => e.type), seqs: r.events.map((e) => e.seq), end: r.events.at(-1).ev }))
    .catch((e) => ({ ok: false, error: String(e) })), [allowed.base, token]);
  assert.ok(out.ok, out.error);
  assert.equal(out.started.afterSeq, '0');
  const types = out.types.filter((t) => t !== 'message_update');
  assert.deepEqual(types, ['agent_start', 'message_start', 'message_end', 'agent_end', 'auto_retry_start',
    'agent_start', 'message_start', 'message_end', 'auto_retry_end', 'agent_end', 'prompt_end']);
  assert.deepEqual(out.seqs, out.seqs.map((_, i) => i + 1), 'every event once, in order');
  assert.equal(out.end.promptEnd.outcome, 'completed');
});

test('CORS on: fetch-streaming the POST', async () => {
  const out = await page.evaluate(([base, tok]) => window.client.fetchStreaming(base, tok, 'hi [[faults: 529,ok]]')
    .then((r) => ({ ok: true, types: r.events.map((e) => e.type) }))
    .catch((e) => ({ ok: false, error: String(e) })), [allowed.base, token]);
  assert.ok(out.ok, out.error);
  assert.ok(out.types.includes('auto_retry_start') && out.types.includes('auto_retry_end'), out.types.join(','));
  assert.equal(out.types.at(-1), 'prompt_end');
});

test('CORS off: the browser refuses the cross-origin calls', async () => {
  for (const fn of ['postThenEventSource', 'fetchStreaming']) {
    const out = await page.evaluate(([base, tok, f]) => window.client[f](base, tok, 'hello')
      .then(() => ({ ok: true }))
      .catch((e) => ({ ok: false, error: String(e) })), [disallowed.base, token, fn]);
    assert.equal(out.ok, false, `${fn} succeeded without CORS`);
    assert.match(out.error, /TypeError: Failed to fetch/);
  }
  // The server was never reached with the preflighted POST: no session exists.
  const res = await fetch(`${disallowed.base}/v1/sessions`, { headers: { Authorization: `Bearer ${token}` } });
  assert.deepEqual((await res.json()).sessions, []);
});
