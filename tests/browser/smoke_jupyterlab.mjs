#!/usr/bin/env node
// Browser smoke test for the vramlab notebooks in a real JupyterLab (manual / optional, not run by pytest).
//
// It drives headless Chromium like a learner: opens a notebook in an already running JupyterLab,
// clears all outputs (Edit menu), runs all cells (Run menu > Run All Cells), waits until the kernel
// is idle and no cell is queued, then checks:
//   * every code cell was executed (Run All stops at the first exception);
//   * no cell shows an error output (Python traceback) and no error dialog is open;
//   * at least SMOKE_MIN_PLOTLY plotly figures rendered (.js-plotly-plot; needs jupyterlab-plotly);
//   * at least SMOKE_MIN_WIDGETS ipywidgets rendered (.jupyter-widgets) and none shows
//     "Error displaying widget";
//   * optionally (SMOKE_DROPDOWN=<label>) changing that ipywidgets Dropdown redraws the widget output.
// It saves a full-notebook screenshot per notebook and prints the PASS/FAIL lines of the exercise checks.
//
// Usage (see tests/browser/README.md):
//   NODE_PATH=/tmp/pw/node_modules node tests/browser/smoke_jupyterlab.mjs \
//       --url 'http://127.0.0.1:8899/lab?token=TOKEN' notebooks/00_start_here.ipynb [more.ipynb ...]
// Environment (all optional): JUPYTER_URL (instead of --url), CHROMIUM (default /usr/bin/chromium),
//   SMOKE_OUT (screenshot folder, default /tmp/vramlab-smoke), SMOKE_TIMEOUT_S (per notebook run, default 600),
//   SMOKE_MIN_PLOTLY (default 1), SMOKE_MIN_WIDGETS (default 1), SMOKE_DROPDOWN (a Dropdown label, e.g. "model"),
//   SMOKE_ALLOW_FAIL_LINES=auto|1|0 ("FAIL ..." lines of the exercise checks; auto, the default: a failure
//   for notebooks/, accepted for labs/ where the exercises are unsolved on purpose, as long as each FAIL
//   line says what it expected and what it got), SMOKE_ALLOW_AUTOSAVE=1 (see below),
//   SMOKE_KEEP_KERNEL=1 (do not shut the kernel down afterwards).
//
// The script never saves a notebook. JupyterLab autosaves every 2 minutes by default, which would write
// the fresh outputs into the repository's notebooks, so the script refuses to run when the server's
// autosave setting is on, unless SMOKE_ALLOW_AUTOSAVE=1. Start the server with autosave off (README).
//
// Exit status: 0 all notebooks passed, 1 a check failed, 2 usage or set-up error.

import fs from 'node:fs';
import path from 'node:path';
import { clickMenu, loadChromium, sleep, waitForState, waitForSteadyIdle, runAllAgainIfDropped } from './jupyterlab.mjs';

const chromium = loadChromium();

// ---------- arguments ----------
const argv = process.argv.slice(2);
let url = process.env.JUPYTER_URL || '';
const notebooks = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--url') url = argv[++i];
  else if (argv[i].startsWith('--url=')) url = argv[i].slice(6);
  else if (argv[i] === '-h' || argv[i] === '--help') {
    console.log('usage: smoke_jupyterlab.mjs --url http://127.0.0.1:8899/lab?token=T notebook.ipynb [...]');
    process.exit(0);
  } else notebooks.push(argv[i]);
}
if (!url || notebooks.length === 0) {
  console.error('usage: smoke_jupyterlab.mjs --url http://127.0.0.1:8899/lab?token=T notebook.ipynb [...] (or JUPYTER_URL)');
  process.exit(2);
}
const parsed = new URL(url);
const token = parsed.searchParams.get('token') || process.env.JUPYTER_TOKEN || '';
// base URL of the server: everything before /lab (or the whole path if /lab is absent)
const basePath = parsed.pathname.replace(/\/lab(\/.*)?$/, '').replace(/\/$/, '');
const base = `${parsed.protocol}//${parsed.host}${basePath}`;
const tokenQuery = token ? `token=${encodeURIComponent(token)}` : '';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const OUT = process.env.SMOKE_OUT || '/tmp/vramlab-smoke';
const TIMEOUT_S = Number(process.env.SMOKE_TIMEOUT_S || 600);
// 'auto' (default): what the notebook itself promises, read from the .ipynb file (see expectations()).
const MIN_PLOTLY = process.env.SMOKE_MIN_PLOTLY ?? 'auto';
const MIN_WIDGETS = process.env.SMOKE_MIN_WIDGETS ?? 'auto';
const ROOT = process.env.SMOKE_ROOT || process.cwd(); // the server's root folder on disk (notebook paths are relative to it)
const DROPDOWN = process.env.SMOKE_DROPDOWN || '';
// "FAIL ..." lines printed by the exercise checks: a failure for the complete lessons (notebooks/), expected
// in the learner versions (labs/, exercises unsolved), where each must still say what it expected and got.
// SMOKE_ALLOW_FAIL_LINES: auto (default: allowed for paths under labs/), 1 (always allowed), 0 (never).
const ALLOW_FAIL_MODE = process.env.SMOKE_ALLOW_FAIL_LINES || 'auto';
const allowFailLines = (nbPath) => ALLOW_FAIL_MODE === '1' || (ALLOW_FAIL_MODE === 'auto' && /(^|\/)labs\//.test(nbPath));
fs.mkdirSync(OUT, { recursive: true });

const log = (...a) => console.log(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

async function api(method, p, body) {
  const sep = p.includes('?') ? '&' : '?';
  const res = await fetch(`${base}${p}${tokenQuery ? sep + tokenQuery : ''}`, {
    method,
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `token ${token}` } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!res.ok && res.status !== 204) throw new Error(`${method} ${p}: HTTP ${res.status}`);
  return res.status === 204 ? null : res.json();
}

// ---------- what a notebook should render ----------
// Plotly figures: as many as the complete lesson (notebooks/<same name>) has stored as plotly outputs, so a
// lab (no stored outputs) must render every figure its lesson shows. Widgets: at least one when a code cell
// uses ipywidgets or a progress bar (tqdm / progress=True); none demanded otherwise.
function expectations(nbPath) {
  const read = (p) => { try { return JSON.parse(fs.readFileSync(path.join(ROOT, p), 'utf8')); } catch { return null; } };
  const nb = read(nbPath);
  const lesson = read(nbPath.replace(/(^|\/)labs\//, '$1notebooks/')) || nb;
  const code = (n) => (n?.cells || []).filter((c) => c.cell_type === 'code');
  const src = (c) => (Array.isArray(c.source) ? c.source.join('') : c.source || '');
  let plotly = 0;
  for (const c of code(lesson)) for (const o of c.outputs || []) if (o.data && o.data['application/vnd.plotly.v1+json']) plotly++;
  const widgetRe = /ipywidgets|\bwidgets\.|progress\s*=\s*True|tqdm/;
  const widgets = code(nb).some((c) => widgetRe.test(src(c))) ? 1 : 0;
  return {
    plotly: MIN_PLOTLY === 'auto' ? plotly : Number(MIN_PLOTLY),
    widgets: MIN_WIDGETS === 'auto' ? widgets : Number(MIN_WIDGETS),
  };
}

// ---------- in-page helpers (run in the browser) ----------
function pageState() {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return { panel: false };
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const prompts = cells.map((c) => (c.querySelector('.jp-InputArea-prompt')?.textContent || '').trim());
  return {
    panel: true,
    kernel: indicator ? indicator.getAttribute('data-status') : null,
    statusText: document.querySelector('#jp-main-statusbar')?.innerText?.replace(/\s+/g, ' ') || '',
    prompts,
    dialog: document.querySelector('.jp-Dialog')?.innerText || null,
    // tqdm progress bars made with leave=False close themselves when done, so widgets are also
    // counted while the notebook runs
    widgets: panel.querySelectorAll('.jupyter-widgets:not(.widget-output)').length,
    progressBars: panel.querySelectorAll('.widget-hprogress, .widget-progress').length,
  };
}

function collectResults() {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const errors = [];
  const stderr = [];
  const checkLines = [];
  const tracebackRe = /Traceback \(most recent call last\)|^-{40,}\s*$|^\w+(Error|Exception)(:|\s{2,})/m;
  cells.forEach((cell, i) => {
    const prompt = (cell.querySelector('.jp-InputArea-prompt')?.textContent || '').trim();
    const source = (cell.querySelector('.jp-InputArea-editor .cm-content')?.textContent || '').split('\n').find((l) => l.trim()) || '';
    for (const out of cell.querySelectorAll('.jp-OutputArea-output')) {
      const mime = out.getAttribute('data-mime-type') || '';
      // textContent, not innerText: JupyterLab 4 skips rendering off-screen cells (content-visibility),
      // and innerText of a skipped cell is empty.
      const text = out.textContent || '';
      if (mime === 'application/vnd.jupyter.stderr') {
        // JupyterLab renders error outputs (tracebacks) with the stderr mimetype; tell them apart by content.
        if (tracebackRe.test(text)) {
          errors.push({ cell: i, prompt, source, text: text.slice(-1500) });
        } else {
          stderr.push({ cell: i, prompt, source, text: text.slice(0, 400) });
        }
      }
      for (const line of text.split('\n')) {
        if (/^(PASS|FAIL)\b/.test(line.trim())) checkLines.push({ cell: i, prompt, line: line.trim() });
      }
    }
  });
  const widgetErrors = [...panel.querySelectorAll('.jp-OutputArea-output')]
    .map((o) => o.textContent || '')
    .filter((t) => /Error displaying widget|Error rendering output item|Loading widget\.\.\./.test(t))
    .map((t) => t.slice(0, 300));
  const noRenderer = [...panel.querySelectorAll('.jp-OutputArea-output')]
    .map((o) => o.textContent || '')
    .filter((t) => /No renderer could be found|application\/vnd\.plotly\.v1\+json/.test(t))
    .map((t) => t.slice(0, 300));
  return {
    codeCells: cells.length,
    notExecuted: cells
      .map((c, i) => ({ i, p: (c.querySelector('.jp-InputArea-prompt')?.textContent || '').trim() }))
      .filter((x) => !/^\[\d+\]:$/.test(x.p)),
    plotly: panel.querySelectorAll('.js-plotly-plot').length,
    plotlyEmpty: [...panel.querySelectorAll('.js-plotly-plot')].filter((p) => !p.querySelector('.main-svg')).length,
    widgets: panel.querySelectorAll('.jupyter-widgets:not(.widget-output)').length,
    progressBars: panel.querySelectorAll('.widget-hprogress, .widget-progress, progress').length,
    dropdowns: panel.querySelectorAll('.widget-dropdown select').length,
    sliders: panel.querySelectorAll('.widget-slider, .widget-hslider').length,
    errors,
    stderr,
    checkLines,
    widgetErrors,
    noRenderer,
  };
}

// ---------- browser ----------
const waitFor = (page, pred, what, timeoutMs, intervalMs = 1000) =>
  waitForState(page, pageState, pred, what, timeoutMs, intervalMs, 600);


async function fullNotebookScreenshot(page, file) {
  // JupyterLab scrolls inside the notebook, so a "full page" screenshot is only the viewport. Grow the
  // viewport to the notebook's height, screenshot, and restore it.
  const vp = page.viewportSize();
  const extra = await page.evaluate(() => {
    const scroller = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
    return scroller ? scroller.scrollHeight - scroller.clientHeight : 0;
  });
  const height = Math.min(vp.height + Math.max(0, extra) + 40, 30000);
  await page.setViewportSize({ width: vp.width, height });
  await sleep(2500); // relayout, plotly resize
  await page.screenshot({ path: file, fullPage: true });
  await page.setViewportSize(vp);
  await sleep(500);
}

async function checkDropdown(page, label, shotBase) {
  // Change the ipywidgets Dropdown whose label is `label` and wait for the widget output to change.
  const dd = page.locator('.widget-dropdown', { has: page.locator('label', { hasText: new RegExp(`^${label}$`) }) }).first();
  if ((await dd.count()) === 0) return { ok: true, skipped: true, msg: `no Dropdown labelled "${label}" here (skipped)` };
  const select = dd.locator('select');
  await dd.scrollIntoViewIfNeeded();
  const options = await select.locator('option').allTextContents();
  const current = await select.inputValue();
  const currentText = await select.locator(`option[value="${current}"]`).textContent().catch(() => null);
  const target = options.find((o) => o !== currentText) ?? null;
  if (target === null) return { ok: false, msg: 'dropdown has a single option' };
  // The output widget in the same cell
  const cell = page.locator('.jp-CodeCell', { has: dd });
  const outputText = async () => (await cell.locator('.widget-output .jp-RenderedText').allTextContents().catch(() => [])).join('\n');
  const before = await outputText();
  await select.selectOption({ label: target });
  const t0 = Date.now();
  let after = before;
  while (Date.now() - t0 < 60000) {
    await sleep(1000);
    after = await outputText();
    const st = await page.evaluate(pageState);
    if (after && after !== before && st.kernel === 'idle') break;
  }
  await cell.screenshot({ path: `${shotBase}-dropdown.png` }).catch(() => {});
  const plotsInOutput = await cell.locator('.widget-output .js-plotly-plot').count();
  const changed = after !== before && after.length > 0;
  return {
    ok: changed,
    msg: `"${label}": ${currentText} -> ${target}; output ${changed ? 'redrew' : 'did NOT change'}` +
      ` (${plotsInOutput} plotly figure(s) in the widget output); first line now: ${JSON.stringify(after.split('\n').find((l) => /\S/.test(l)) || '')}`,
    screenshot: `${shotBase}-dropdown.png`,
  };
}

async function runNotebook(browser, nbPath) {
  const name = nbPath.replace(/[^A-Za-z0-9_.-]+/g, '_').replace(/\.ipynb$/, '');
  const shotBase = path.join(OUT, name);
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text().slice(0, 300)); });
  const failures = [];
  const notes = [];
  const workspace = `smoke-${Date.now()}`;
  // JupyterLab creates a checkpoint (.ipynb_checkpoints/<name>-checkpoint.ipynb) when it opens a notebook
  // that has none; remember which existed so that only the ones made by this run are removed afterwards.
  const apiPath = nbPath.split('/').map(encodeURIComponent).join('/');
  const checkpointsBefore = new Set((await api('GET', `/api/contents/${apiPath}/checkpoints`).catch(() => [])).map((c) => c.id));
  const nbUrl = `${base}/lab/workspaces/${workspace}/tree/${nbPath.split('/').map(encodeURIComponent).join('/')}?reset${tokenQuery ? '&' + tokenQuery : ''}`;
  log(`${nbPath}: opening ${nbUrl.replace(/token=[^&]+/, 'token=***')}`);
  await page.goto(nbUrl, { waitUntil: 'domcontentloaded', timeout: 120000 });
  await page.locator('.jp-NotebookPanel .jp-Cell').first().waitFor({ timeout: 120000 });
  await waitForSteadyIdle(page);   // a Run All clicked while a fresh kernel starts is lost
  // Close the left sidebar for a wider screenshot.
  if (await page.locator('#jp-left-stack:not(.lm-mod-hidden)').count()) {
    await page.keyboard.press('Control+b').catch(() => {});
  }
  await clickMenu(page, 'Edit', 'editmenu:clear-all'); // Edit > Clear Outputs of All Cells
  await sleep(500);
  const t0 = Date.now();
  log(`${nbPath}: Run > Run All Cells`);
  // On a freshly started, busy server the first Run All can be lost while the kernel connects (CI saw lab 00's
  // kernel busy for a moment, then idle with no cell run). So a cell must have started: a "[*]" or numbered
  // prompt, never a busy kernel alone; `nudge` clicks Run All again when none has after 15 s (3 tries in all).
  await clickMenu(page, 'Run', 'runmenu:run-all'); // Run > Run All Cells
  const nudge = runAllAgainIfDropped(page, log, nbPath, 3, 15000);
  // Then wait until a cell ran and the kernel is idle with nothing queued, three checks in a row.
  let stable = 0;
  let lastLog = 0;
  let maxWidgets = 0;
  let maxProgress = 0;
  let progressShot = null;
  await waitFor(page, (s) => {
    if (s.dialog) return true;
    maxWidgets = Math.max(maxWidgets, s.widgets || 0);
    if ((s.progressBars || 0) > maxProgress && !progressShot) {
      progressShot = `${shotBase}-progress.png`;
      const bar = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .widget-hprogress, .jp-NotebookPanel:not(.lm-mod-hidden) .widget-progress').first();
      bar.scrollIntoViewIfNeeded({ timeout: 2000 })
        .then(() => page.screenshot({ path: progressShot }))
        .then(() => log(`${nbPath}: progress bar seen while running, screenshot ${progressShot}`))
        .catch(() => {});
    }
    maxProgress = Math.max(maxProgress, s.progressBars || 0);
    nudge(s);
    const ran = s.prompts.some((p) => /^\[\d+\]:$/.test(p));
    const done = ran && s.kernel === 'idle' && !s.prompts.some((p) => p === '[*]:');
    stable = done ? stable + 1 : 0;
    if (Date.now() - lastLog > 15000) {
      lastLog = Date.now();
      const ran = s.prompts.filter((p) => /^\[\d+\]:$/.test(p)).length;
      log(`${nbPath}: kernel ${s.kernel}, ${ran}/${s.prompts.length} code cells done`);
    }
    return stable >= 3;
  }, 'Run All to finish', TIMEOUT_S * 1000, 1000);
  const runSeconds = (Date.now() - t0) / 1000;
  await sleep(3000); // let late widget/plotly renders settle
  const state = await page.evaluate(pageState);
  if (state.dialog) failures.push(`dialog open: ${state.dialog.slice(0, 300)}`);
  const r = await page.evaluate(collectResults);

  log(`${nbPath}: finished in ${runSeconds.toFixed(0)} s; ${r.codeCells} code cells, ${r.plotly} plotly figure(s), ` +
      `${r.widgets} widget element(s) at the end (${r.progressBars} progress bar(s), ${r.dropdowns} dropdown(s), ${r.sliders} slider(s)); ` +
      `while running: up to ${maxWidgets} widget element(s), ${maxProgress} progress bar(s)`);
  r.widgets = Math.max(r.widgets, maxWidgets);
  if (r.notExecuted.length) failures.push(`${r.notExecuted.length} code cell(s) not executed: ${r.notExecuted.map((x) => `#${x.i} ${x.p || '(no prompt)'}`).join(', ')}`);
  for (const e of r.errors) failures.push(`error output in code cell #${e.cell} ${e.prompt} (${e.source.slice(0, 80)}):\n${e.text}`);
  for (const e of r.stderr) notes.push(`stderr in code cell #${e.cell} ${e.prompt}: ${e.text.replace(/\s+/g, ' ').slice(0, 200)}`);
  const want = expectations(nbPath);
  log(`${nbPath}: expects >= ${want.plotly} plotly figure(s), >= ${want.widgets} widget(s)`);
  if (r.plotly < want.plotly) failures.push(`expected >= ${want.plotly} plotly figure(s) (.js-plotly-plot), found ${r.plotly}`);
  if (r.plotlyEmpty) failures.push(`${r.plotlyEmpty} plotly container(s) without a drawn SVG`);
  if (r.widgets < want.widgets) failures.push(`expected >= ${want.widgets} ipywidget(s) (.jupyter-widgets), found ${r.widgets}`);
  for (const w of r.widgetErrors) failures.push(`widget did not render: ${w}`);
  for (const w of r.noRenderer) failures.push(`output without a renderer: ${w}`);
  for (const c of r.checkLines) {
    log(`${nbPath}: check in code cell #${c.cell} ${c.prompt} ${c.line}`);
    if (c.line.startsWith('FAIL')) {
      if (!allowFailLines(nbPath)) failures.push(`exercise check failed in code cell #${c.cell}: ${c.line}`);
      else if (!/expected/.test(c.line) || !/\bgot\b/.test(c.line)) failures.push(`FAIL line without "expected ... got ...": ${c.line}`);
    }
  }

  if (DROPDOWN && r.dropdowns > 0) {
    const d = await checkDropdown(page, DROPDOWN, shotBase);
    log(`${nbPath}: dropdown ${d.msg}`);
    if (!d.ok) failures.push(`dropdown interaction: ${d.msg}`);
  }

  await page.evaluate(() => {
    const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
    if (s) s.scrollTop = 0;
  });
  const shot = `${shotBase}.png`;
  await fullNotebookScreenshot(page, shot);
  log(`${nbPath}: screenshot ${shot}`);
  for (const n of notes) log(`${nbPath}: note: ${n}`);
  const relevantConsole = consoleErrors.filter((e) => !/favicon|Failed to load resource: net::ERR|fetch.*news|jupyter\.org/i.test(e));
  for (const e of relevantConsole.slice(0, 10)) log(`${nbPath}: browser console error: ${e}`);

  if (!process.env.SMOKE_KEEP_KERNEL) {
    try {
      const sessions = await api('GET', '/api/sessions');
      for (const s of sessions.filter((s) => s.path === nbPath)) await api('DELETE', `/api/sessions/${s.id}`);
    } catch (e) {
      log(`${nbPath}: could not shut the kernel down: ${e.message}`);
    }
  }
  await context.close(); // closes the tab without saving
  // Clean up what this run left on the server: its workspace and the checkpoints it created.
  await api('DELETE', `/lab/api/workspaces/${workspace}`).catch(() => {});
  try {
    for (const c of await api('GET', `/api/contents/${apiPath}/checkpoints`)) {
      if (!checkpointsBefore.has(c.id)) await api('DELETE', `/api/contents/${apiPath}/checkpoints/${c.id}`);
    }
  } catch (e) {
    log(`${nbPath}: could not remove the checkpoint this run created: ${e.message}`);
  }
  return { nbPath, failures, shot, runSeconds };
}

// ---------- main ----------
let settings;
try {
  settings = await api('GET', '/lab/api/settings/@jupyterlab/docmanager-extension:plugin');
} catch (e) {
  console.error(`cannot reach JupyterLab at ${base}: ${e.message}`);
  process.exit(2);
}
if (settings?.settings?.autosave !== false && process.env.SMOKE_ALLOW_AUTOSAVE !== '1') {
  console.error('JupyterLab autosave is on: running all cells would write outputs into the notebooks.\n' +
    'Start the server with JUPYTERLAB_SETTINGS_DIR pointing at a folder with ' +
    '@jupyterlab/docmanager-extension/plugin.jupyterlab-settings = {"autosave": false} (see README), ' +
    'or set SMOKE_ALLOW_AUTOSAVE=1 to run anyway.');
  process.exit(2);
}

// chromium.launch() always starts from a fresh temporary --user-data-dir (Playwright creates and removes it).
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = 0;
try {
  for (const nb of notebooks) {
    let res;
    try {
      res = await runNotebook(browser, nb);
    } catch (e) {
      res = { nbPath: nb, failures: [`could not complete: ${e.message}`], shot: null };
    }
    if (res.failures.length) {
      failed++;
      console.log(`FAIL ${nb}`);
      for (const f of res.failures) console.log(`  - ${f.replace(/\n/g, '\n    ')}`);
    } else {
      console.log(`PASS ${nb} (${res.runSeconds.toFixed(0)} s, screenshot ${res.shot})`);
    }
  }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
