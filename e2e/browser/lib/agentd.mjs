// Test harness: build agentd, start it on loopback ports, stop it.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

export const repoRoot = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

let built = process.env.AGENTD_BIN || '';

// agentdBinary builds ./cmd/agentd once per process (or uses $AGENTD_BIN).
export function agentdBinary() {
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), 'agentd-bin-'));
    built = join(dir, 'agentd');
    execFileSync('go', ['build', '-o', built, './cmd/agentd'], { cwd: repoRoot, stdio: 'inherit' });
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  return built;
}

export function randomToken() {
  return `tok-${randomBytes(18).toString('hex')}`;
}

// startAgentd runs `agentd serve` with the YAML config (listen addresses are
// set to loopback port 0), reads the bound HTTP address from its log and
// waits for /readyz. It returns {base, stop, logs}.
export async function startAgentd(yaml, { readyTimeoutMs = 20000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-e2e-'));
  const cfg = join(dir, 'agentd.yaml');
  writeFileSync(cfg, `listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n${yaml}`);
  const proc = spawn(agentdBinary(), ['serve', '--config', cfg, '--log-format', 'json'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const logs = [];
  let httpAddr = '';
  let exited = null;
  proc.on('exit', (code, signal) => { exited = { code, signal }; });
  let buf = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      logs.push(line);
      try {
        const rec = JSON.parse(line);
        if (rec.msg === 'agentd serving' && rec.http) httpAddr = rec.http;
      } catch { /* not JSON */ }
    }
  });
  const stop = async () => {
    if (exited) return;
    const done = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10000);
    await done;
    clearTimeout(timer);
    rmSync(dir, { recursive: true, force: true });
  };

  // Wait for the address, then for /readyz, within a bounded deadline.
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (exited) throw new Error(`agentd exited (${JSON.stringify(exited)}):\n${logs.join('\n')}${buf}`);
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`agentd not ready within ${readyTimeoutMs} ms:\n${logs.join('\n')}`);
    }
    if (httpAddr) {
      try {
        const res = await fetch(`http://${httpAddr}/readyz`);
        if (res.ok) break;
      } catch { /* not listening yet */ }
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { base: `http://${httpAddr}`, addr: httpAddr, stop, logs };
}
