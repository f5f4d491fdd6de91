#!/usr/bin/env node
// Browser test for notebook 08's dry-run replay widget (section 7, "Predict, dry-run, measure";
// vramlab.vram.widget.replay_widget). Manual / optional, not run by pytest. One command:
//
//   NODE_PATH=/tmp/pw/node_modules node tests/browser/replay_widget.mjs [notebooks/08_watch_vram.ipynb]
//
// It starts its own headless JupyterLab (port REPLAY_PORT, default 8808; autosave off and notebook windowing
// off through a throw-away settings folder; the kernel imports vramlab from this checkout's src/), opens the
// notebook in headless Chromium (playwright-core), clears the outputs and runs all cells, then:
//   * waits until the replay widget (.vramlab-replay-widget) shows a drawn plotly figure, and for Run All
//     to finish (the kernel must be idle to answer the slider);
//   * checks that the widget shows "dry run: computed on the meta device, no GPU" (visible, in the widget);
//   * screenshots the widget where it opens, at the peak (step-0.png), then moves the IntSlider to its last event (End key on
//     the focused slider handle; if that does nothing, types the step into the slider's readout; then
//     clicks the far end of the slider's track) and fails unless the screenshot bytes AND the widget's
//     event line ("event i: phase · module · op ...") both changed; keeps step-N.png;
//   * fails on a Python traceback, "Error displaying widget" or a code cell that did not run in section 7.
// Screenshots and the server log go to REPLAY_OUT (default /tmp/vramlab-replay-widget). Then it shuts the
// kernel and the server down and removes the checkpoint and workspace it created.
// Environment: REPLAY_PORT, REPLAY_OUT, REPLAY_TIMEOUT_S (Run All, default 600), CHROMIUM (default
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
const PORT = Number(process.env.REPLAY_PORT || 8808);
const OUT = process.env.REPLAY_OUT || '/tmp/vramlab-replay-widget';
const TIMEOUT_S = Number(process.env.REPLAY_TIMEOUT_S || 600);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const JUPYTER = process.env.JUPYTER || [path.join(REPO, '.venv/bin/jupyter'), '/work/main/.venv/bin/jupyter']
  .find((p) => fs.existsSync(p)) || 'jupyter';
const TOKEN = crypto.randomBytes(12).toString('hex');
const BASE = `http://127.0.0.1:${PORT}`;
// the MemoryTrace.source of a meta-device dry run (src/vramlab/vram/dryrun.py), shown in the widget's event line
const DRY_RUN_LABEL = 'dry run: computed on the meta device, no GPU';
const SECTION = /^7\.\s*Predict, dry-run, measure/;
const log = (...a) => console.log(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

if (!fs.existsSync(path.join(REPO, NB))) {
  console.error(`no notebook ${NB} under ${REPO}`);
  process.exit(2);
}
if (!fs.existsSync(CHROMIUM)) {
  console.error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium, or set CHROMIUM`);
  process.exit(2);
}
fs.mkdirSync(OUT, { recursive: true });

// ---------- the server ----------
const { api, waitForServer, stopServer, serverLog } = startJupyterLab({
  jupyter: JUPYTER, repo: REPO, port: PORT, token: TOKEN, out: OUT,
  settings: { 'docmanager-extension/plugin': '{"autosave": false}',
    'notebook-extension/tracker': '{"windowingMode": "none"}' },
});

// ---------- in-page helpers ----------
function pageState() {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return { panel: false };
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const widget = panel.querySelector('.vramlab-replay-widget');
  const label = widget?.querySelector('.widget-html-content');
  const rect = label?.getBoundingClientRect();
  return {
    panel: true,
    kernel: panel.querySelector('.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status') || null,
    prompts: cells.map((c) => (c.querySelector('.jp-InputArea-prompt')?.textContent || '').trim()),
    dialog: document.querySelector('.jp-Dialog')?.innerText || null,
    widget: !!widget,
    widgetPlot: !!widget?.querySelector('.js-plotly-plot .main-svg'),
    // the event line ("event i: phase · module · op · category ± MiB · allocated ... · source")
    label: label?.innerText || '',
    labelVisible: !!rect && rect.width > 0 && rect.height > 0 && getComputedStyle(label).visibility !== 'hidden',
    slider: widget?.querySelector('.widget-slider .widget-readout')?.textContent?.trim() || '',
    plotTitle: widget?.querySelector('.js-plotly-plot .gtitle')?.textContent || '',
  };
}

/** Problems in the section whose heading matches `sectionSrc` (up to the next heading of the same level). */
function sectionProblems(sectionSrc) {
  const sectionRe = new RegExp(sectionSrc);
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const problems = [];
  const tracebackRe = /Traceback \(most recent call last\)|^\w+(Error|Exception):/m;
  let inSection = false;
  let seen = false;
  [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].forEach((cell, i) => {
    const h2 = cell.classList.contains('jp-MarkdownCell') ? cell.querySelector('.jp-RenderedMarkdown h2') : null;
    if (h2) {
      inSection = sectionRe.test((h2.textContent || '').replace(/¶$/, '').trim());
      seen ||= inSection;
    }
    if (!inSection || !cell.classList.contains('jp-CodeCell')) return;
    const prompt = (cell.querySelector('.jp-InputArea-prompt')?.textContent || '').trim();
    if (!/^\[\d+\]:$/.test(prompt)) problems.push(`section cell #${i} did not run (${prompt || 'no prompt'})`);
    for (const out of cell.querySelectorAll('.jp-OutputArea-output')) {
      const text = out.textContent || '';
      if (out.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr' && tracebackRe.test(text)) {
        problems.push(`traceback in cell #${i}: ${text.slice(-400)}`);
      }
      if (/Error displaying widget|No renderer could be found/.test(text)) problems.push(`cell #${i}: ${text.slice(0, 200)}`);
    }
  });
  if (!seen) problems.push(`no section heading matching /${sectionSrc}/ in the notebook`);
  return problems;
}

const waitFor = (page, pred, what, timeoutMs, intervalMs = 500) =>
  waitForState(page, pageState, pred, what, timeoutMs, intervalMs, 600);

/** Wait until the event line differs from `before` and the figure is drawn again; false after `ms`. */
async function waitForStep(page, before, ms) {
  try {
    await waitFor(page, (s) => s.label && s.label !== before && s.widgetPlot, 'the replay widget to step', ms);
    await sleep(2000);   // plotly draws the new figure after the Output widget swaps it in
    return true;
  } catch { return false; }
}

// ---------- the test ----------
const failures = [];
let browser;
const apiPath = NB.split('/').map(encodeURIComponent).join('/');
const workspace = `replay-widget-${Date.now()}`;
let checkpointsBefore = new Set();
let setupError = null;
try {
  log(`starting JupyterLab on ${BASE} (${JUPYTER}); log: ${serverLog}`);
  try {
    await waitForServer();
  } catch (e) { setupError = e.message; throw e; }
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

  // 1. the replay widget appears with a drawn figure, and Run All finishes
  let stable = 0;   // Run All over (idle, nothing queued, something ran) for a few polls in a row
  const runOver = (s) => s.kernel === 'idle' && !s.prompts.includes('[*]:') && s.prompts.some((p) => /^\[\d+\]:$/.test(p));
  const nudge = runAllAgainIfDropped(page, log, NB);   // a dropped Run All is clicked again (3 tries in all)
  const first = await waitFor(page, (s) => {
    stable = runOver(s) ? stable + 1 : 0;
    nudge(s);
    return s.widgetPlot || !!s.dialog || stable >= 5;
  }, 'the replay widget to draw its figure', TIMEOUT_S * 1000, 1000);
  if (!first.widgetPlot) {
    throw new Error(first.dialog ? `dialog open: ${first.dialog.slice(0, 300)}`
      : `Run All ended without a drawn replay widget (.vramlab-replay-widget with a plotly figure; widget element ${first.widget ? 'present' : 'absent'})`);
  }
  log(`${NB}: replay widget drawn after ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  stable = 0;
  await waitFor(page, (s) => {
    if (s.dialog) return true;
    stable = s.kernel === 'idle' && !s.prompts.includes('[*]:') ? stable + 1 : 0;
    return stable >= 3;
  }, 'Run All to finish', TIMEOUT_S * 1000, 1000);
  log(`${NB}: run finished in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  const end = await page.evaluate(pageState);
  if (end.dialog) failures.push(`dialog open: ${end.dialog.slice(0, 300)}`);
  failures.push(...(await page.evaluate(sectionProblems, SECTION.source)));

  // 2. the label, and event 0
  const widget = page.locator('.vramlab-replay-widget').first();
  await widget.scrollIntoViewIfNeeded();
  await sleep(1500);
  const s0 = await page.evaluate(pageState);
  if (!s0.label.includes(DRY_RUN_LABEL)) failures.push(`the widget does not say "${DRY_RUN_LABEL}"; its line: ${s0.label.slice(0, 300)}`);
  else if (!s0.labelVisible) failures.push('the widget\'s event line (with the dry-run label) is not visible');
  const png0 = await widget.screenshot();
  fs.writeFileSync(path.join(OUT, 'step-0.png'), png0);
  log(`${NB}: step 0 (slider ${s0.slider}): ${s0.label}`);
  log(`${NB}: figure title: ${s0.plotTitle}`);

  // 3. move the slider to its last event
  const handle = widget.locator('.widget-slider .noUi-handle').first();
  let how = 'End key on the slider handle';
  await handle.focus();
  await page.keyboard.press('End');
  let moved = await waitForStep(page, s0.label, 20000);
  if (!moved) {
    how = 'typing into the slider readout';
    const max = await page.evaluate(() => document.querySelector('.vramlab-replay-widget .noUi-handle')?.getAttribute('aria-valuemax'));
    const readout = widget.locator('.widget-slider .widget-readout').first();
    await readout.click();
    await page.keyboard.press('Control+A');
    await page.keyboard.type(String(Math.floor(Number(max || 1))));
    await page.keyboard.press('Enter');
    moved = await waitForStep(page, s0.label, 20000);
  }
  if (!moved) {
    how = 'clicking the end of the slider track';
    const box = await widget.locator('.widget-slider .noUi-target').first().boundingBox();
    if (box) await page.mouse.click(box.x + box.width - 2, box.y + box.height / 2);
    moved = await waitForStep(page, s0.label, 20000);
  }
  const sN = await page.evaluate(pageState);
  const pngN = await widget.screenshot();
  fs.writeFileSync(path.join(OUT, 'step-N.png'), pngN);
  log(`${NB}: after ${how} (slider ${sN.slider}): ${sN.label}`);
  if (!moved) failures.push(`the replay widget did not step: its event line stayed "${s0.label.slice(0, 200)}"`);
  if (png0.equals(pngN)) failures.push('the widget\'s screenshot did not change after moving the slider');
  if (!sN.widgetPlot) failures.push('no plotly figure in the widget after moving the slider');
  if (!sN.label.includes(DRY_RUN_LABEL)) failures.push(`after stepping the widget no longer says "${DRY_RUN_LABEL}"`);
  failures.push(...(await page.evaluate(sectionProblems, SECTION.source)));   // e.g. a traceback from the callback
  log(`${NB}: screenshots ${OUT}/step-0.png, ${OUT}/step-N.png`);
  try {
    for (const s of (await api('GET', '/api/sessions')).filter((s) => s.path === NB)) await api('DELETE', `/api/sessions/${s.id}`);
  } catch (e) { log(`could not shut the kernel down: ${e.message}`); }
  await context.close();
} catch (e) {
  if (!setupError && /Executable doesn't exist|Failed to launch/.test(e.message)) setupError = e.message;
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
if (setupError) {
  console.log(`SETUP ERROR ${NB}: ${setupError.split('\n')[0]}`);
  process.exit(2);
}
if (failures.length) {
  console.log(`FAIL ${NB}`);
  for (const f of failures) console.log(`  - ${f.replace(/\n/g, '\n    ')}`);
  process.exit(1);
}
console.log(`PASS ${NB}: replay widget drawn, labelled as a dry run, and stepping redraws it; screenshots in ${OUT}`);
process.exit(0);
