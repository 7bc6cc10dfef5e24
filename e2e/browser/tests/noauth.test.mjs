// The web console against an agentd without auth: no token box, the
// Abort button only while a prompt runs, and a session deleted elsewhere
// said so (its event stream's final NOT_FOUND frame).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startAgentd } from '../lib/agentd.mjs';
import { launch } from '../lib/browser.mjs';

let agentd;
let browser;
let page;

const config = `
providers:
  - name: sim
    kind: simulated
    token_delay_ms: 40
    models: [echo]
`;

before(async () => {
  agentd = await startAgentd(config);
  browser = await launch();
  page = await browser.newPage();
});

after(async () => {
  await browser?.close();
  await agentd?.stop();
});

test('with auth off the console shows no token box', async () => {
  await page.goto(`${agentd.base}/console`);
  await page.waitForSelector('#sessions td:has-text("No sessions yet")');
  await page.waitForSelector('#auth-state:has-text("auth off")');
  assert.equal(await page.isVisible('#token'), false, 'the token input shows with auth off');
  assert.equal(await page.isVisible('#token-form button[type=submit]'), false, 'the Use token button shows with auth off');
  assert.equal(await page.isVisible('#forget-token'), false, 'the Forget button shows with auth off');
  assert.equal(await page.isVisible('#notice'), false, 'a notice shows with auth off');
});

test('Abort shows only while a prompt runs', async () => {
  await page.click('#new-session button[type=submit]');
  await page.waitForURL(/#\/sessions\/ses_/);
  await page.waitForSelector('#session-status .status-idle');
  assert.equal(await page.isVisible('#abort'), false, 'Abort shows on an idle session');
  assert.equal(await page.isVisible('#token'), false, 'the token input shows on the session page');

  await page.fill('#prompt-text', 'hold on [[faults: hang]]');
  await page.click('#send');
  await page.waitForSelector('#session-status .status-streaming');
  await page.waitForSelector('#abort', { state: 'visible' });
  await page.click('#abort');
  await page.waitForSelector('.entry[data-type=prompt_end]');
  await page.waitForSelector('#session-status .status-idle');
  await page.waitForSelector('#abort', { state: 'hidden' });
});

test('a session deleted elsewhere: the view says so and stops following', async () => {
  await page.goto(`${agentd.base}/console/#/sessions`);
  await page.click('#new-session button[type=submit]');
  await page.waitForURL(/#\/sessions\/ses_/);
  await page.waitForSelector('#session-status .status-idle');
  const id = decodeURIComponent(page.url().split('#/sessions/')[1]);
  await page.fill('#prompt-text', 'hello');
  await page.click('#send');
  await page.waitForSelector('.entry[data-type=prompt_end]');
  await page.waitForSelector('#conn.live');
  const res = await fetch(`${agentd.base}/v1/sessions/${id}`, { method: 'DELETE' });
  assert.equal(res.status, 200);
  await page.waitForSelector('#notice:has-text("was deleted")');
  await page.waitForSelector('#conn.offline');
});
