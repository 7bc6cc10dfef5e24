// Headless Chromium from Debian's package (/usr/bin/chromium), driven by
// playwright-core: Playwright's own browser download is not used.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';

export const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

const args = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

// launch starts Chromium with a fresh user-data-dir; close() removes it.
export async function launch({ viewport = { width: 1280, height: 800 } } = {}) {
  const userDataDir = mkdtempSync(join(tmpdir(), 'agentd-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath,
    headless: true,
    args,
    viewport,
    deviceScaleFactor: 1,
    timeout: 30000,
  });
  context.setDefaultTimeout(15000);
  return {
    context,
    async newPage() {
      const page = await context.newPage();
      page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
      return page;
    },
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

// tcpProxy forwards a loopback port to target ("host:port") and can drop
// every connection at once, as a flaky network would. It records what the
// clients sent, to check the headers of reconnects.
export async function tcpProxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const pairs = new Set();
  let sent = '';
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    const pair = { client, upstream };
    pairs.add(pair);
    client.on('data', (d) => { if (sent.length < 1 << 20) sent += d.toString('latin1'); });
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => { pairs.delete(pair); client.destroy(); upstream.destroy(); };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    base: `http://127.0.0.1:${server.address().port}`,
    sent: () => sent,
    dropAll() {
      for (const { client, upstream } of pairs) { client.resetAndDestroy?.() ?? client.destroy(); upstream.destroy(); }
      pairs.clear();
    },
    close: () => new Promise((r) => { for (const { client, upstream } of pairs) { client.destroy(); upstream.destroy(); } server.close(r); }),
  };
}
