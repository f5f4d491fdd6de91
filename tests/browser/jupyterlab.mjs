// What the browser tests (smoke_jupyterlab.mjs, vram_widget.mjs, replay_widget.mjs, hub_learners.mjs) need from
// playwright-core and JupyterLab: Chromium, a sleep, JupyterLab's main menus, polling the page until a state is reached,
// a kernel that stays idle, a dropped Run All clicked again, and a throw-away JupyterLab server.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(import.meta.url);

/** playwright-core's `chromium` (found through NODE_PATH), or exit 2 with one sentence saying how to get it. */
export function loadChromium() {
  try {
    return require('playwright-core').chromium;
  } catch (err) {
    console.error('playwright-core not found: `npm i playwright-core` in some folder and set NODE_PATH=<folder>/node_modules');
    process.exit(2);
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Click a main-menu command; `command` is its id (JupyterLab 4: editmenu:clear-all, runmenu:run-all). */
export async function clickMenu(page, menuLabel, command) {
  await page.locator('.lm-MenuBar-itemLabel', { hasText: new RegExp(`^${menuLabel}$`) }).first().click();
  const item = page.locator(`.lm-Menu li[data-command="${command}"]`).first();
  await item.waitFor({ state: 'visible', timeout: 10000 });
  await item.click();
}

/** Wait until the open notebook's kernel has said "idle" for `steadyMs` in a row (polled every 500 ms). A fresh
 *  session can say "idle" for a moment before "initializing", and a Run All or a cell run clicked then is lost
 *  (CI lost lab 00's Run All that way). Throws after `timeoutMs` with the last status seen. */
export async function waitForSteadyIdle(page, timeoutMs = 180000, steadyMs = 2000) {
  const indicator = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator').first();
  const t0 = Date.now();
  let idleSince = null;
  let status = null;
  while (Date.now() - t0 < timeoutMs) {
    status = await indicator.getAttribute('data-status', { timeout: 1000 }).catch(() => null);
    idleSince = status === 'idle' ? (idleSince ?? Date.now()) : null;
    if (idleSince !== null && Date.now() - idleSince >= steadyMs) return;
    await sleep(500);
  }
  throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for the kernel to start ` +
    `(idle for ${steadyMs / 1000} s in a row); last status: ${status}`);
}

/** A freshly started, busy server can drop Run All (the kernel stays idle and no cell starts). Returns
 *  `nudge(state)`, to call from a waitForState predicate right after clicking Run All: once `afterMs` pass
 *  with no cell started it clicks Run > Run All Cells again, at most `maxTries` tries in all. `state` needs
 *  `panel`, `kernel` and `prompts` (the cells' "[n]:" prompts). */
export function runAllAgainIfDropped(page, log, what, maxTries = 3, afterMs = 30000) {
  let tries = 1;
  let askedAt = Date.now();
  return (s) => {
    if (s.panel && s.kernel === 'idle' && s.prompts.every((p) => p === '[ ]:' || p === '')
        && Date.now() - askedAt > afterMs && tries < maxTries) {
      tries += 1;
      askedAt = Date.now();
      log(`${what}: no cell started within ${afterMs / 1000} s; Run > Run All Cells again (try ${tries})`);
      clickMenu(page, 'Run', 'runmenu:run-all').catch((e) => log(`Run All: ${e.message}`));
    }
  };
}

/** Evaluate `pageState` in the page every `intervalMs` until `pred(state)`; return that state, or throw
 *  after `timeoutMs` with the last state (its first `detailChars` characters) in the message. */
export async function waitForState(page, pageState, pred, what, timeoutMs, intervalMs, detailChars) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < timeoutMs) {
    last = await page.evaluate(pageState);
    if (pred(last)) return last;
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for ${what}; last state: ${JSON.stringify(last).slice(0, detailChars)}`);
}

/** Start a token-protected headless JupyterLab rooted at `repo` whose kernels import vramlab from `repo`/src,
 *  with throw-away user settings (`settings`: {"docmanager-extension/plugin": '{"autosave": false}', ...});
 *  its log goes to `out`/jupyterlab.log. Returns { api(method, path), waitForServer(), stopServer(), serverLog }:
 *  stopServer() ends the server (SIGTERM, then SIGKILL after 5 s) and removes the settings folder. */
export function startJupyterLab({ jupyter, repo, port, token, out, settings }) {
  const base = `http://127.0.0.1:${port}`;
  const api = async (method, p) => {
    const res = await fetch(`${base}${p}`, { method, headers: { Authorization: `token ${token}` } });
    if (!res.ok && res.status !== 204) throw new Error(`${method} ${p}: HTTP ${res.status}`);
    return res.status === 204 ? null : res.json();
  };
  const settingsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vramlab-lab-settings-'));
  for (const [plugin, text] of Object.entries(settings)) {
    const file = path.join(settingsDir, `@jupyterlab/${plugin}.jupyterlab-settings`);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
  }
  const args = ['lab', '--no-browser', `--port=${port}`, '--ServerApp.port_retries=0', '--ServerApp.ip=127.0.0.1',
    `--ServerApp.token=${token}`, `--ServerApp.root_dir=${repo}`];
  if (process.getuid && process.getuid() === 0) args.push('--allow-root');
  const env = { ...process.env, JUPYTERLAB_SETTINGS_DIR: settingsDir, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS || '1',
    PYTHONPATH: [path.join(repo, 'src'), process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  const serverLog = path.join(out, 'jupyterlab.log');
  const server = spawn(jupyter, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const logStream = fs.createWriteStream(serverLog);
  server.stdout.pipe(logStream);
  server.stderr.pipe(logStream);
  let exited = false;
  server.on('exit', () => { exited = true; });
  server.on('error', (e) => { console.error(`cannot start ${jupyter}: ${e.message}`); exited = true; });

  async function stopServer() {
    if (!exited) {
      server.kill('SIGTERM');
      for (let i = 0; i < 50 && !exited; i++) await sleep(100);
      if (!exited) server.kill('SIGKILL');
    }
    fs.rmSync(settingsDir, { recursive: true, force: true });
  }

  async function waitForServer() {
    const t0 = Date.now();
    while (Date.now() - t0 < 90000) {
      if (exited) throw new Error(`JupyterLab exited at start (port ${port} in use?); see ${serverLog}`);
      try {
        await api('GET', '/api/status');
        return;
      } catch { await sleep(500); }
    }
    throw new Error(`JupyterLab did not answer on ${base} within 90 s; see ${serverLog}`);
  }

  return { api, waitForServer, stopServer, serverLog };
}
