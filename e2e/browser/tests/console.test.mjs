// The web console (/console/) in headless Chromium against a real agentd
// with auth and the simulated provider.
//
// UPDATE_SCREENSHOTS=1 writes the README's screenshots to docs/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startAgentd, randomToken, repoRoot } from '../lib/agentd.mjs';
import { launch, tcpProxy } from '../lib/browser.mjs';

const token = randomToken();
const shotDir = process.env.UPDATE_SCREENSHOTS ? join(repoRoot, 'docs') : mkdtempSync(join(tmpdir(), 'agentd-shots-'));
let agentd;
let browser;
let page;
let blockedCredential = 'sim-primary'; // the one the usage limit blocks (test 3)

const config = `
auth: {tokens: [{token: ${token}, tenant: web}]}
providers:
  - name: sim
    kind: simulated
    token_delay_ms: 40
    # countdown: test 2's model, so that the cooldown its 429 leaves does
    # not move test 3's new session off sim/echo (new prompts skip a
    # cooling model).
    models: [echo, backup, countdown]
    credentials:
      - {id: sim-primary, api_key: sk-sim-0000000000000000000000}
      - {id: sim-secondary, api_key: sk-sim-1111111111111111111111, banked_resets: 2}
retry: {fallback_chains: {chat: [sim/backup]}}  # role chat; the default role has no fallback
`;

before(async () => {
  agentd = await startAgentd(config);
  browser = await launch();
  page = await browser.newPage();
});

after(async () => {
  await browser?.close();
  await agentd?.stop();
  if (!process.env.UPDATE_SCREENSHOTS) rmSync(shotDir, { recursive: true, force: true });
});

async function pasteToken(p) {
  await p.fill('#token', token);
  await p.click('#token-form button[type=submit]');
}

async function shoot(p, name) {
  await p.screenshot({ path: join(shotDir, `console-${name}.png`) });
}

async function createSession(p, { model = 'sim/echo', role = '' } = {}) {
  await p.goto(`${p.url().split('#')[0]}#/sessions`);
  await p.fill('#new-session input[name=model]', model);
  await p.fill('#new-session input[name=role]', role);
  await p.click('#new-session button[type=submit]');
  await p.waitForURL(/#\/sessions\/ses_/);
  await p.waitForSelector('#conn.live, #session-status .status-idle');
  return decodeURIComponent(p.url().split('#/sessions/')[1]);
}

async function send(p, text) {
  await p.fill('#prompt-text', text);
  await p.click('#send');
}

test('the console loads, asks for a token, and keeps it in memory only', async () => {
  await page.goto(`${agentd.base}/console`);
  await page.waitForSelector('#sessions');
  await page.waitForSelector('#auth-state:has-text("token needed")');
  assert.match(await page.textContent('#notice'), /bearer token/);
  assert.equal(await page.isVisible('#token'), true, 'no token box where auth asks for a token');
  await pasteToken(page);
  await page.waitForSelector('#auth-state:has-text("token ok")');
  await page.waitForSelector('#sessions td:has-text("No sessions yet")');
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  assert.ok(!stored.includes(token), 'the token is stored');
  assert.equal(await page.inputValue('#token'), '', 'the token stays in the input');
});

test('a fault script shows the retry countdown; Cancel ends the retry', async () => {
  const id = await createSession(page, { model: 'sim/countdown' });
  assert.equal(await page.isVisible('#abort'), false, 'Abort shows on an idle session');
  await send(page, 'hello [[faults: 429:retry-after=30,ok]]');
  const retry = page.locator('.entry[data-type=auto_retry_start]');
  await retry.waitFor();
  assert.match(await retry.locator('.title').textContent(), /Retry 1\/10 in 30 s/);
  assert.match(await retry.textContent(), /429 rate_limit_error/);
  const countdown = retry.locator('.countdown');
  await page.waitForFunction(() => /retrying in (29|28|27) s/.test(document.querySelector('.entry[data-type=auto_retry_start] .countdown')?.textContent || ''));
  const first = await countdown.textContent();
  await page.waitForFunction((before) => document.querySelector('.entry[data-type=auto_retry_start] .countdown').textContent !== before, first);
  assert.match(await page.textContent('#session-status'), /retrying/);
  assert.equal(await page.isVisible('#abort'), true, 'no Abort while the prompt waits to retry');
  await page.waitForSelector('.bubble.assistant.failed .error:has-text("429")');
  await shoot(page, 'retry');

  await retry.locator('button.cancel-retry').click();
  const end = page.locator('.entry[data-type=auto_retry_end]');
  await end.waitFor();
  assert.match(await end.textContent(), /Retry ended.*Retry cancelled/s);
  await page.waitForSelector('.entry[data-type=prompt_end]');
  assert.equal(await countdown.textContent(), 'cancelled');
  assert.equal(await retry.locator('button').count(), 0, 'the Cancel button is gone');
  const s = await (await fetch(`${agentd.base}/v1/sessions/${id}`, { headers: { Authorization: `Bearer ${token}` } })).json();
  assert.equal(s.status, 'idle');
  assert.equal(s.isRetrying, false);
});

test('the answer streams; credential switches, fallbacks and model changes show on the timeline', async () => {
  await createSession(page, { role: 'chat' });
  // A usage limit switches to the sibling credential; an overload then
  // falls back to the chat role's next model.
  await send(page, 'one two three four five six seven eight [[faults: usage,529,ok]]');
  // The answer arrives word by word (40 ms a word).
  await page.waitForSelector('.bubble.assistant.streaming .text:has-text("echo: one")');
  await page.waitForSelector('.entry[data-type=prompt_end]');
  assert.equal(await page.locator('.bubble.assistant:not(.failed) .text').last().textContent(),
    'echo: one two three four five six seven eight');
  for (const type of ['credential_switched', 'retry_fallback_applied', 'model_change', 'retry_fallback_succeeded', 'auto_retry_end']) {
    await page.locator(`.entry[data-type=${type}]`).waitFor();
  }
  assert.equal(await page.locator('.entry[data-type=auto_retry_start]').count(), 2);
  const sw = (await page.textContent('.entry[data-type=credential_switched]')).match(/on sim(sim-\w+) → (sim-\w+)/);
  assert.ok(sw && sw[1] !== sw[2], 'credential switch shown');
  blockedCredential = sw[1];
  assert.match(await page.textContent('.entry[data-type=model_change]'), /sim\/echo → sim\/backup/);
  assert.match(await page.textContent('.entry[data-type=auto_retry_end]'), /Recovered/);
  assert.equal(await page.textContent('#session-model'), 'sim/backup');
  await shoot(page, 'session');
});

test('the stream resumes after a dropped connection: no event lost or repeated', async () => {
  // The console is loaded through a TCP proxy that drops every connection
  // mid-prompt; the browser's EventSource reconnects with Last-Event-ID.
  const proxy = await tcpProxy(agentd.addr);
  const p = await browser.newPage();
  try {
    await p.goto(`${proxy.base}/console/`);
    await pasteToken(p);
    await createSession(p);
    await send(p, 'alpha beta gamma delta epsilon zeta eta theta iota kappa [[faults: 503:retry-after=1,ok]]');
    await p.locator('.entry[data-type=auto_retry_start]').waitFor();
    const before = await p.evaluate(() => window.agentdConsole.stream());
    proxy.dropAll();
    // Events go on while the page is disconnected (the retry fires after 1 s).
    await p.waitForSelector('#conn.reconnecting');
    await p.waitForSelector('.entry[data-type=prompt_end]', { timeout: 20000 });
    const after = await p.evaluate(() => window.agentdConsole.stream());
    assert.equal(after.connections, 1, 'the browser reconnected by itself');
    assert.deepEqual(after.received, after.received.map((_, i) => i + 1), `seqs ${after.received}`);
    assert.ok(after.received.length > before.received.length + 5);
    const last = before.received.at(-1);
    assert.match(proxy.sent(), new RegExp(`GET /v1/sessions/[^ ]+/events\\?[^ ]+ HTTP/1.1\\r\\n(?:[^\\r\\n]+\\r\\n)*last-event-id: (${last}|${last + 1}|${last + 2})\\r\\n`, 'i'));
    assert.equal(await p.locator('.bubble.assistant:not(.failed) .text').last().textContent(),
      'echo: alpha beta gamma delta epsilon zeta eta theta iota kappa');

    // The console's own resume (a fresh ticket, afterSeq) repeats nothing either.
    await send(p, 'one more time [[faults: 500:retry-after=1,ok]]');
    await p.locator('.entry[data-type=auto_retry_start] >> nth=1').waitFor();
    await p.evaluate(() => window.agentdConsole.reconnect());
    await p.locator('.entry[data-type=prompt_end] >> nth=1').waitFor();
    const again = await p.evaluate(() => window.agentdConsole.stream());
    assert.equal(again.connections, 2);
    assert.deepEqual(again.received, again.received.map((_, i) => i + 1));
  } finally {
    await p.close();
    await proxy.close();
  }
});

test('sessions list and credentials page', async () => {
  await page.goto(`${agentd.base}/console/#/sessions`);
  await page.waitForSelector('#sessions tbody tr:nth-child(3)');
  assert.equal(await page.locator('#sessions tbody tr').count(), 3);
  assert.match(await page.textContent('#sessions tbody'), /sim\/backup \(primary sim\/echo\)/);
  await shoot(page, 'sessions');

  // A credential added through the API shows next to the configured ones.
  const res = await fetch(`${agentd.base}/v1/credentials`, {
    method: 'POST', headers: { Authorization: `Bearer ${token}` },
    body: JSON.stringify({ provider: 'sim', id: 'sim-api', secret: 'sk-sim-2222222222222222222222' }),
  });
  assert.equal(res.status, 200);
  await page.click('[data-nav=credentials]');
  await page.waitForSelector('#credentials tr[data-credential=sim-api]');
  const rows = await page.locator('#credentials tbody tr').allTextContents();
  assert.equal(rows.length, 3);
  // The usage limit of the earlier prompt blocked a credential.
  const blocked = await page.textContent(`#credentials tr[data-credential=${blockedCredential}]`);
  assert.match(blocked, /blocked/);
  assert.match(blocked, /\(in (29|30) min/);
  assert.match(blocked, /insufficient_quota/);
  assert.match(rows.join('\n'), /sim-api\s*sim\s*available/);
  assert.match(rows.join('\n'), /sim-api.*api/);
  await shoot(page, 'credentials');
});

test('a session view with a wrong token says so', async () => {
  const p = await browser.newPage();
  try {
    await p.goto(`${agentd.base}/console/#/credentials`);
    await p.fill('#token', 'not-the-token-at-all');
    await p.click('#token-form button[type=submit]');
    await p.waitForSelector('#auth-state:has-text("token refused")');
    assert.match(await p.textContent('#notice'), /invalid bearer token/);
  } finally {
    await p.close();
  }
});
