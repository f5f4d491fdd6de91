#!/usr/bin/env node
// Browser test for notebook 08's live VRAM widget (manual / optional, not run by pytest). One command:
//
//   NODE_PATH=/tmp/pw/node_modules node tests/browser/vram_widget.mjs [notebooks/08_watch_vram.ipynb]
//
// It starts its own headless JupyterLab (port VRAM_PORT, default 8807; autosave off through a throw-away
// settings folder; the kernel imports vramlab from this checkout's src/), opens the notebook in headless
// Chromium (playwright-core), clears the outputs and runs all cells, then:
//   * waits until the live widget (.vramlab-vram-widget) shows a drawn plotly figure;
//   * takes screenshots of the widget until two frames differ (image bytes AND the status line, whose
//     sample count moves) - the widget is updating while other cells run;
//   * waits for Run All to finish and fails on a Python traceback, "Error displaying widget", a code cell
//     that did not run, or an exercise check printing FAIL (in labs/ a FAIL line is expected, but it must
//     say what it expected and what it got);
//   * keeps the two frames and a screenshot of the widget after the run in VRAM_OUT
//     (default /tmp/vramlab-vram-widget): frame-1.png, frame-2.png, final.png, and the whole notebook
//     after the run, notebook.png.
// Then it shuts the kernel and the server down and removes the checkpoint and workspace it created.
// Environment: VRAM_PORT, VRAM_OUT, VRAM_TIMEOUT_S (whole run, default 600), CHROMIUM (default
// /usr/bin/chromium), JUPYTER (default: .venv/bin/jupyter if present, else /work/main/.venv/bin/jupyter,
// else jupyter on PATH).
// Exit status: 0 passed, 1 a check failed, 2 set-up error.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { clickMenu, loadChromium, sleep, waitForState, waitForSteadyIdle, startJupyterLab, runAllAgainIfDropped } from './jupyterlab.mjs';

const chromium = loadChromium();

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const NB = process.argv[2] || 'notebooks/08_watch_vram.ipynb';
const PORT = Number(process.env.VRAM_PORT || 8807);
const OUT = process.env.VRAM_OUT || '/tmp/vramlab-vram-widget';
const TIMEOUT_S = Number(process.env.VRAM_TIMEOUT_S || 600);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const JUPYTER = process.env.JUPYTER || [path.join(REPO, '.venv/bin/jupyter'), '/work/main/.venv/bin/jupyter']
  .find((p) => fs.existsSync(p)) || 'jupyter';
const TOKEN = crypto.randomBytes(12).toString('hex');
const BASE = `http://127.0.0.1:${PORT}`;
const log = (...a) => console.log(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

if (!fs.existsSync(path.join(REPO, NB))) {
  console.error(`no notebook ${NB} under ${REPO}`);
  process.exit(2);
}
fs.mkdirSync(OUT, { recursive: true });

// ---------- the server ----------
const { api, waitForServer, stopServer, serverLog } = startJupyterLab({
  jupyter: JUPYTER, repo: REPO, port: PORT, token: TOKEN, out: OUT,
  settings: { 'docmanager-extension/plugin': '{"autosave": false}' },
});

// ---------- in-page helpers ----------
function pageState() {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return { panel: false };
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const widget = panel.querySelector('.vramlab-vram-widget');
  return {
    panel: true,
    kernel: panel.querySelector('.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status') || null,
    prompts: cells.map((c) => (c.querySelector('.jp-InputArea-prompt')?.textContent || '').trim()),
    dialog: document.querySelector('.jp-Dialog')?.innerText || null,
    widget: !!widget,
    widgetPlot: !!widget?.querySelector('.js-plotly-plot .main-svg'),
    widgetStatus: widget?.querySelector('.widget-html-content')?.textContent || '',
    // the live/paused/stopped toggle: its label and whether it can still be clicked
    toggleText: (widget?.querySelector('.widget-toggle-button')?.textContent || '').trim(),
    toggleDisabled: !!widget?.querySelector('.widget-toggle-button')?.disabled,
  };
}

function collectProblems(isLab) {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const problems = [];
  const tracebackRe = /Traceback \(most recent call last\)|^\w+(Error|Exception):/m;
  [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')].forEach((cell, i) => {
    const prompt = (cell.querySelector('.jp-InputArea-prompt')?.textContent || '').trim();
    if (!/^\[\d+\]:$/.test(prompt)) problems.push(`code cell #${i} did not run (${prompt || 'no prompt'})`);
    for (const out of cell.querySelectorAll('.jp-OutputArea-output')) {
      const text = out.textContent || '';
      if (out.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr' && tracebackRe.test(text)) {
        problems.push(`traceback in code cell #${i}: ${text.slice(-400)}`);
      }
      if (/Error displaying widget|No renderer could be found/.test(text)) problems.push(`cell #${i}: ${text.slice(0, 200)}`);
      for (const line of text.split('\n')) {
        // labs/: the exercises are unsolved on purpose; a FAIL line must still say what it expected and got
        if (/^FAIL\b/.test(line.trim()) && (!isLab || !/expected/.test(line) || !/\bgot\b/.test(line))) {
          problems.push(`cell #${i}: ${line.trim()}`);
        }
      }
    }
  });
  return problems;
}

const waitFor = (page, pred, what, timeoutMs, intervalMs = 500) =>
  waitForState(page, pageState, pred, what, timeoutMs, intervalMs, 400);


// ---------- the test ----------
const failures = [];
let browser;
const apiPath = NB.split('/').map(encodeURIComponent).join('/');
const workspace = `vram-widget-${Date.now()}`;
let checkpointsBefore = new Set();
try {
  log(`starting JupyterLab on ${BASE} (${JUPYTER}); log: ${serverLog}`);
  await waitForServer();
  checkpointsBefore = new Set((await api('GET', `/api/contents/${apiPath}/checkpoints`).catch(() => [])).map((c) => c.id));
  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const t0 = Date.now();
  await page.goto(`${BASE}/lab/workspaces/${workspace}/tree/${apiPath}?reset&token=${TOKEN}`,
    { waitUntil: 'domcontentloaded', timeout: 120000 });
  await page.locator('.jp-NotebookPanel .jp-Cell').first().waitFor({ timeout: 120000 });
  await waitForSteadyIdle(page);   // a Run All clicked while a fresh kernel starts is lost
  await clickMenu(page, 'Edit', 'editmenu:clear-all');
  await sleep(500);
  log(`${NB}: Run > Run All Cells`);
  await clickMenu(page, 'Run', 'runmenu:run-all');

  // 1. the widget appears with a drawn figure (a dropped Run All is clicked again, 3 tries in all)
  const nudge = runAllAgainIfDropped(page, log, NB);
  await waitFor(page, (s) => {
    nudge(s);
    return s.widgetPlot || !!s.dialog;
  }, 'the live widget to draw its figure', 240000, 1000);
  const widget = page.locator('.vramlab-vram-widget').first();
  await widget.scrollIntoViewIfNeeded();
  // 2. two different frames
  const frames = [];
  const frameT0 = Date.now();
  while (Date.now() - frameT0 < 60000) {
    const png = await widget.screenshot();
    const status = (await page.evaluate(pageState)).widgetStatus;
    frames.push({ png, status, t: (Date.now() - t0) / 1000 });
    const first = frames[0];
    const last = frames[frames.length - 1];
    if (frames.length > 1 && !first.png.equals(last.png) && first.status !== last.status) break;
    await sleep(1500);
  }
  const a = frames[0];
  const b = frames[frames.length - 1];
  fs.writeFileSync(path.join(OUT, 'frame-1.png'), a.png);
  fs.writeFileSync(path.join(OUT, 'frame-2.png'), b.png);
  const moved = frames.length > 1 && !a.png.equals(b.png) && a.status !== b.status;
  log(`${NB}: frame 1 at ${a.t.toFixed(1)} s: ${a.status}`);
  log(`${NB}: frame ${frames.length} at ${b.t.toFixed(1)} s: ${b.status}`);
  if (!moved) failures.push(`the widget did not update: ${frames.length} frames over ${(b.t - a.t).toFixed(1)} s were identical`);

  // 3. the run finishes cleanly
  let stable = 0;
  await waitFor(page, (s) => {
    if (s.dialog) return true;
    stable = s.kernel === 'idle' && !s.prompts.includes('[*]:') ? stable + 1 : 0;
    return stable >= 3;
  }, 'Run All to finish', TIMEOUT_S * 1000, 1000);
  const end = await page.evaluate(pageState);
  if (end.dialog) failures.push(`dialog open: ${end.dialog.slice(0, 300)}`);
  failures.push(...(await page.evaluate(collectProblems, /(^|\/)labs\//.test(NB))));
  // 4. once the monitor has stopped, the toggle must not claim "live" and cannot be clicked
  let stopped = end;
  for (let i = 0; i < 10 && !(stopped.toggleText === 'stopped' && stopped.toggleDisabled); i++) {
    await sleep(500);
    stopped = await page.evaluate(pageState);
  }
  log(`${NB}: toggle after the run: "${stopped.toggleText}", disabled ${stopped.toggleDisabled}`);
  if (stopped.toggleText !== 'stopped' || !stopped.toggleDisabled) {
    failures.push(`after the monitor stopped the toggle reads "${stopped.toggleText}" (disabled: ${stopped.toggleDisabled}); expected "stopped", disabled`);
  }
  await widget.scrollIntoViewIfNeeded();
  await sleep(1500);
  await widget.screenshot({ path: path.join(OUT, 'final.png') });
  log(`${NB}: run finished in ${((Date.now() - t0) / 1000).toFixed(0)} s; widget after the run: ${end.widgetStatus}`);
  // the whole notebook as the learner sees it (JupyterLab scrolls inside the panel: grow the viewport)
  await page.evaluate(() => {
    const sc = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
    if (sc) sc.scrollTop = 0;
  });
  const extra = await page.evaluate(() => {
    const sc = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
    return sc ? sc.scrollHeight - sc.clientHeight : 0;
  });
  await page.setViewportSize({ width: 1400, height: Math.min(1000 + Math.max(0, extra) + 40, 30000) });
  await sleep(2500);
  await page.screenshot({ path: path.join(OUT, 'notebook.png'), fullPage: true });
  log(`${NB}: screenshots ${OUT}/frame-1.png, frame-2.png, final.png, notebook.png`);
  try {
    for (const s of (await api('GET', '/api/sessions')).filter((s) => s.path === NB)) await api('DELETE', `/api/sessions/${s.id}`);
  } catch (e) { log(`could not shut the kernel down: ${e.message}`); }
  await context.close();
} catch (e) {
  failures.push(`could not complete: ${e.message}`);
} finally {
  if (browser) await browser.close();
  await api('DELETE', `/lab/api/workspaces/${workspace}`).catch(() => {});
  try {
    for (const c of await api('GET', `/api/contents/${apiPath}/checkpoints`)) {
      if (!checkpointsBefore.has(c.id)) await api('DELETE', `/api/contents/${apiPath}/checkpoints/${c.id}`);
    }
  } catch { /* server already gone */ }
  await stopServer();
}
if (failures.length) {
  console.log(`FAIL ${NB}`);
  for (const f of failures) console.log(`  - ${f.replace(/\n/g, '\n    ')}`);
  process.exit(1);
}
console.log(`PASS ${NB}: live widget rendered and updating; screenshots in ${OUT}`);
process.exit(0);
