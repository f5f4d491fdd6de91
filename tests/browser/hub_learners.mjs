#!/usr/bin/env node
// Learners in a real workshop hub, in headless Chromium (driven by tests/test_workshop_hub.py, which starts the
// hub; see tests/browser/README.md). Each learner, in their own browser context (own cookies):
//   1. logs in on the hub's login page (any name, the room password) and waits for the hub to spawn their server
//      and open lab 00 in their JupyterLab (the room's default URL);
//   2. runs lab 00 from the top like a learner, cell by cell (Ctrl+Enter), up to its second check, skipping only
//      the 8 x 512 perplexity cell (CPU time the checks do not need), typing their answers into the exercise cells:
//        learner 1: both exercises right;
//        learner 2: the fp16 bytes first counted with 4 bytes per parameter (the float32 size), then fixed;
//        learner 3: leaves the stubs and runs the checks untouched ("not done yet").
// Then the instructor logs in with the admin password and opens the progress board (/services/progress/): the
// table as text, and the page with its heatmap (screenshot); learner 1 is refused the board.
//
// Usage: node tests/browser/hub_learners.mjs   (everything through the environment)
//   HUB_URL (http://127.0.0.1:PORT), HUB_LEARNERS (ana,bo,cy), HUB_PASSWORD, HUB_ADMIN_PASSWORD,
//   HUB_LAB (the lab 00 .ipynb the learners get, read to find its cells), HUB_OUT (screenshots + result.json),
//   CHROMIUM (default /usr/bin/chromium), NODE_PATH (a node_modules holding playwright-core), HUB_TIMEOUT_S (600).
// Prints one JSON line (also written to HUB_OUT/result.json). Exit 0 when every step ran (the test judges the
// outcome), 1 when a step failed (the message says which learner and step), 2 on a usage error.

import fs from 'node:fs';
import path from 'node:path';
import { loadChromium, sleep, waitForSteadyIdle } from './jupyterlab.mjs';

const chromium = loadChromium();
const env = process.env;
const HUB = (env.HUB_URL || '').replace(/\/$/, '');
const LEARNERS = (env.HUB_LEARNERS || '').split(',').filter(Boolean);
const OUT = env.HUB_OUT || '/tmp/vramlab-hub';
const TIMEOUT_MS = 1000 * Number(env.HUB_TIMEOUT_S || 600);
if (!HUB || LEARNERS.length < 3 || !env.HUB_PASSWORD || !env.HUB_ADMIN_PASSWORD || !env.HUB_LAB) {
  console.error('hub_learners.mjs: set HUB_URL, HUB_LEARNERS (3 names, comma-separated), HUB_PASSWORD, HUB_ADMIN_PASSWORD and HUB_LAB');
  process.exit(2);
}
fs.mkdirSync(OUT, { recursive: true });
const t0 = Date.now();
const log = (who, msg) => console.error(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${who}: ${msg}`);

// ---------- what to run, read from the lab itself ----------
const cells = JSON.parse(fs.readFileSync(env.HUB_LAB, 'utf8')).cells.map((c) => ({
  type: c.cell_type, source: Array.isArray(c.source) ? c.source.join('') : c.source,
}));
const find = (re) => {
  const i = cells.findIndex((c) => c.type === 'code' && re.test(c.source));
  if (i < 0) throw new Error(`${env.HUB_LAB} has no code cell matching ${re}: update hub_learners.mjs with the lab`);
  return i;
};
const PREDICTION = find(/^predicted_fp32_mib = None/m);
const FP16 = find(/^fp16_bytes = None/m);
const LOAD = find(/load_smollm2\(/);
const RUN = cells.map((c, i) => i).filter((i) => cells[i].type === 'code' && i <= FP16 && !/perplexity\(/.test(cells[i].source));
const answer = (i, line) => cells[i].source.replace(/^(predicted_fp32_mib|fp16_bytes) = None.*$/m, line);
// Each learner's edits: cell index -> list of sources to run in turn (one run per entry).
const FP16_RIGHT = 'fp16_bytes = sum(p.numel() for p in model.parameters()) * 2';
const FP16_AS_FP32 = 'fp16_bytes = sum(p.numel() for p in model.parameters()) * 4';
const PLANS = [
  { [PREDICTION]: [answer(PREDICTION, 'predicted_fp32_mib = 500')], [FP16]: [answer(FP16, FP16_RIGHT)] },
  { [PREDICTION]: [answer(PREDICTION, 'predicted_fp32_mib = 300')], [FP16]: [answer(FP16, FP16_AS_FP32), answer(FP16, FP16_RIGHT)] },
  {},
];

// ---------- one learner ----------
async function login(context, name, password, next) {
  const page = await context.newPage();
  await page.goto(`${HUB}/hub/login${next ? `?next=${encodeURIComponent(next)}` : ''}`, { timeout: 60000 });
  await page.fill('#username_input', name);
  await page.fill('#password_input', password);
  await page.click('#login_submit');
  return page;
}

const promptOf = (cell) => cell.locator('.jp-InputArea-prompt').first();

async function runCell(page, who, index, source) {
  const cell = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell').nth(index);
  await cell.scrollIntoViewIfNeeded();
  const before = (await promptOf(cell).textContent()) || '';
  if (source !== undefined) {
    await cell.locator('.cm-content').first().click();
    await page.keyboard.press('Control+A');
    await page.keyboard.insertText(source);
  } else {
    await promptOf(cell).click();
  }
  await page.keyboard.press('Control+Enter');
  const started = Date.now();
  const deadline = started + 240000;
  let pressed = 1;
  for (;;) {
    const now = ((await promptOf(cell).textContent()) || '').trim();
    if (/^\[[0-9]+\]:$/.test(now) && now !== before.trim()) break;
    if (Date.now() > deadline) throw new Error(`cell ${index} did not finish in 240 s (prompt ${now})`);
    // Dropped (prompt unchanged, not queued, kernel idle after 15 s): run it once more.
    const status = await page.locator('.jp-Notebook-ExecutionIndicator').first().getAttribute('data-status').catch(() => null);
    if (pressed < 2 && now === before.trim() && status === 'idle' && Date.now() - started > 15000) {
      pressed += 1;
      log(who, `cell ${index} did not start within 15 s; running it again`);
      await promptOf(cell).click();
      await page.keyboard.press('Control+Enter');
    }
    await sleep(250);
  }
  const text = (await cell.locator('.jp-OutputArea-output').allInnerTexts()).join('\n');
  if (/Traceback|Error:/.test(text) && !/^(PASS|FAIL) /m.test(text)) throw new Error(`cell ${index} raised: ${text.slice(0, 600)}`);
  log(who, `cell ${index} ${source !== undefined ? '(edited) ' : ''}ran: ${text.split('\n').filter(Boolean).slice(-1)[0] || '(no output)'}`.slice(0, 220));
  return text;
}

async function learner(browser, name, plan) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const result = { name, checks: [], load: '' };
  try {
    const page = await login(context, name, env.HUB_PASSWORD);
    log(name, 'logged in; waiting for the hub to spawn the server and open lab 00');
    await page.waitForURL(new RegExp(`/user/${name}/lab`), { timeout: 300000 });
    result.url = new URL(page.url()).pathname;
    await page.locator('.jp-NotebookPanel .jp-Cell').nth(FP16).waitFor({ state: 'attached', timeout: 120000 });
    // A cell run while a fresh kernel starts is lost; after 120 s go on anyway (runCell retries once and then
    // fails with the cell's prompt).
    await waitForSteadyIdle(page, 120000).catch(() => {});
    for (const i of RUN) {
      const runs = plan[i] || [undefined];
      for (const source of runs) {
        const text = await runCell(page, name, i, source);
        if (i === LOAD) result.load = text;
        // A check line wraps at spaces in a kernel (continuation lines indented 4 spaces): join it back.
        if (i === PREDICTION || i === FP16) result.checks.push(...text.replace(/\n {4}(?=\S)/g, ' ').split('\n').filter((l) => /^(PASS|FAIL) /.test(l)));
      }
    }
    await page.screenshot({ path: path.join(OUT, `learner_${name}.png`), fullPage: false });
  } catch (err) {
    await context.pages()[0]?.screenshot({ path: path.join(OUT, `learner_${name}-error.png`) }).catch(() => {});
    throw new Error(`${name}: ${err.message}`);
  } finally {
    await context.close();
  }
  return result;
}

async function board(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    const page = await login(context, 'instructor', env.HUB_ADMIN_PASSWORD, '/services/progress/');
    await page.waitForURL(/\/services\/progress\/?$/, { timeout: 60000 });
    await page.locator('.js-plotly-plot').first().waitFor({ timeout: 60000 });
    const html = { status: 200, refresh: await page.locator('meta[http-equiv="refresh"]').count() };
    await page.screenshot({ path: path.join(OUT, 'board.png'), fullPage: true });
    const res = await page.goto(`${HUB}/services/progress/?format=text`);
    return { html, status: res.status(), text: await page.locator('body').innerText() };
  } finally {
    await context.close();
  }
}

async function refused(browser, name) {
  const context = await browser.newContext();
  try {
    const page = await login(context, name, env.HUB_PASSWORD, '/hub/home');
    await page.waitForURL(/\/hub\/home/, { timeout: 60000 });
    const res = await page.goto(`${HUB}/services/progress/?format=text`);
    return { url: new URL(page.url()).pathname, status: res.status(), text: (await page.locator('body').innerText()).slice(0, 300) };
  } finally {
    await context.close();
  }
}

const browser = await chromium.launch({ executablePath: env.CHROMIUM || '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage'] });
const watchdog = setTimeout(() => { console.error(`hub_learners.mjs: gave up after ${TIMEOUT_MS / 1000} s`); process.exit(1); }, TIMEOUT_MS);
let status = 0;
const out = { learners: [], board: null, refused: null, cells: { run: RUN, prediction: PREDICTION, fp16: FP16, load: LOAD } };
try {
  // All three at once, as in a room: the hub spawns three servers and three kernels load the model together.
  out.learners = await Promise.all(LEARNERS.slice(0, 3).map((name, i) => learner(browser, name, PLANS[i])));
  out.board = await board(browser);
  out.refused = await refused(browser, LEARNERS[0]);
} catch (err) {
  console.error(`hub_learners.mjs: ${err.message}`);
  out.error = err.message;
  status = 1;
} finally {
  clearTimeout(watchdog);
  await browser.close();
}
out.seconds = Math.round((Date.now() - t0) / 1000);
fs.writeFileSync(path.join(OUT, 'result.json'), JSON.stringify(out, null, 1));
console.log(JSON.stringify(out));
process.exit(status);
