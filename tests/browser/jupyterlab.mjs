// What both browser tests (smoke_jupyterlab.mjs, vram_widget.mjs) need from playwright-core and JupyterLab:
// Chromium, a sleep, JupyterLab's main menus, and polling the page until a state is reached.

import { createRequire } from 'node:module';

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
