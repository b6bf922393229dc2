// The browser half of the end-to-end test (started by e2e.sh): drives VS Code (code-server) in headless
// Chromium with playwright-core and checks what a person would see. Every check runs and is reported,
// with a screenshot when it fails; checks that need an earlier one are skipped when it failed.
// Writes summary.json and screenshots to E2E_ARTIFACTS. Exit code 0 when every check passed.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const URL_ = process.env.E2E_URL;
const ARTIFACTS = process.env.E2E_ARTIFACTS;
const WORKSPACE = process.env.E2E_WORKSPACE;
const BARE_PYTHON = process.env.E2E_BARE_PYTHON;
const KERNEL = 'silu.py';
const TIMEOUT = { startup: 120_000, profile: 120_000, profiled: 45_000, optimize: 360_000, ui: 15_000 };

const results = [];
const t0 = Date.now();
const seconds = () => ((Date.now() - t0) / 1000).toFixed(1);
const log = (text) => console.error(`[e2e.mjs ${seconds()}s] ${text}`);

let page;

/** The language server's process id: the descendant of our code-server that runs `server` (or none). */
function serverPid() {
  const root = Number(process.env.E2E_CODE_SERVER_PID);
  const children = new Map();
  const commands = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) {
      continue;
    }
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(name)]);
      commands.set(Number(name), readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' '));
    } catch {
      // the process ended meanwhile
    }
  }
  const queue = [root];
  while (queue.length > 0) {
    const pid = queue.shift();
    if (pid !== root && /run_module\('server'/.test(commands.get(pid) ?? '')) {
      return pid;
    }
    queue.push(...(children.get(pid) ?? []));
  }
  return undefined;
}

async function shot(name) {
  try {
    await page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });
  } catch (error) {
    log(`screenshot ${name} failed: ${error.message}`);
  }
}

/** Runs one check; records pass/fail/skip with its time and detail. Returns whether it passed. */
async function check(name, fn, { needs = [] } = {}) {
  const missing = needs.filter((dep) => !results.find((r) => r.name === dep && r.status === 'passed'));
  if (missing.length > 0) {
    results.push({ name, status: 'skipped', detail: `needs: ${missing.join(', ')}` });
    log(`SKIP ${name} (needs ${missing.join(', ')})`);
    return false;
  }
  const started = Date.now();
  try {
    const detail = await fn();
    results.push({ name, status: 'passed', seconds: (Date.now() - started) / 1000, detail: detail ?? '' });
    log(`PASS ${name}${detail ? `: ${detail}` : ''}`);
    return true;
  } catch (error) {
    const slug = name.replace(/[^a-z0-9]+/gi, '-').toLowerCase();
    await shot(`failed-${slug}`);
    results.push({ name, status: 'failed', seconds: (Date.now() - started) / 1000, detail: String(error.message ?? error).split('\n').slice(0, 6).join(' | ') });
    log(`FAIL ${name}: ${error.message}`);
    return false;
  }
}

async function waitFor(description, probe, timeout) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await probe();
    if (last) {
      return last;
    }
    await page.waitForTimeout(250);
  }
  throw new Error(`timed out after ${timeout / 1000}s waiting for ${description}`);
}

/** The editor's visible text, one string per line (the kernel is short enough to fit). */
async function editorText() {
  return page.evaluate(() => {
    const editor = document.querySelector('.editor-instance .monaco-editor .view-lines');
    if (!editor) {
      return '';
    }
    const lines = [...editor.querySelectorAll('.view-line')]
      .map((el) => ({ top: parseFloat(el.style.top || '0'), text: el.textContent.replace(/\u00a0/g, ' ') }))
      .sort((a, b) => a.top - b.top);
    return lines.map((l) => l.text).join('\n');
  });
}

async function lensTexts() {
  return page.locator('.codelens-decoration').allInnerTexts();
}

/** Runs a command from the command palette by its title (the first title that is found). */
async function runCommand(...titles) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: TIMEOUT.ui });
  for (const title of titles) {
    await input.fill(`>${title}`);
    const row = page.locator('.quick-input-list .monaco-list-row').filter({ hasText: title }).first();
    try {
      await row.waitFor({ timeout: 5000 });
    } catch {
      continue;
    }
    await page.keyboard.press('Enter');
    return;
  }
  await page.keyboard.press('Escape');
  throw new Error(`no command titled ${titles.join(' or ')}`);
}

async function focusEditorAt(lineText) {
  const line = page.locator('.editor-instance .view-line').filter({ hasText: lineText }).first();
  await line.waitFor({ timeout: TIMEOUT.ui });
  await line.click({ position: { x: 5, y: 5 } });
  await page.keyboard.press('End');
  return line;
}

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.E2E_CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
  page = await context.newPage();
  const consoleLog = [];
  page.on('console', (message) => consoleLog.push(`[${message.type()}] ${message.text()}`));
  page.setDefaultTimeout(TIMEOUT.ui);
  let original = '';
  let optimizeSeconds = null;

  try {
    await check('workbench loads', async () => {
      await page.goto(URL_, { waitUntil: 'domcontentloaded', timeout: TIMEOUT.startup });
      await page.locator('.monaco-workbench').waitFor({ timeout: TIMEOUT.startup });
      await page.locator('.explorer-folders-view .monaco-list-row').first().waitFor({ timeout: TIMEOUT.startup });
    });

    await check('kernel opens', async () => {
      const row = page.locator('.explorer-folders-view .monaco-list-row').filter({ hasText: KERNEL }).first();
      await row.click();
      await page.locator('.editor-instance .view-line').filter({ hasText: 'def kernel' }).first().waitFor();
      original = await editorText();
      return `${original.split('\n').length} lines`;
    }, { needs: ['workbench loads'] });

    await check('code lens shows latency, % of peak, hardware and bottleneck', async () => {
      const text = await waitFor('a code lens with "% of peak"', async () => {
        const found = (await lensTexts()).find((t) => /of peak/.test(t));
        return found;
      }, TIMEOUT.profile);
      const pattern = /\d[\d.]*\s*(ms|µs|us)\s*·\s*\d[\d.]*% of peak\s*·\s*simulated trn1\s*·\s*[\w-]+-bound/;
      if (!pattern.test(text)) {
        throw new Error(`lens text "${text}" does not match ${pattern}`);
      }
      const all = (await lensTexts()).join(' | ');
      for (const action of ['Optimize', 'trn2', 'report']) {
        if (!new RegExp(action, 'i').test(all)) {
          throw new Error(`no "${action}" code lens; lenses: ${all}`);
        }
      }
      return all.replace(/\s+/g, ' ');
    }, { needs: ['kernel opens'] });

    await check('status bar shows % of peak and hardware', async () => {
      const item = page.locator('.statusbar-item').filter({ hasText: /of peak · trn1|ms · trn1/ }).first();
      await item.waitFor({ timeout: TIMEOUT.profiled });
      return (await item.innerText()).trim();
    }, { needs: ['kernel opens'] });

    await shot('editor');

    await check('diagnostic from accelopt in the Problems panel', async () => {
      await waitFor('a squiggle in the editor', async () => page.locator('.squiggly-error, .squiggly-warning, .squiggly-info, .squiggly-hint').count(), TIMEOUT.profiled);
      await page.locator('.editor-instance .view-line').first().click();
      await page.keyboard.press('Control+Shift+M');
      const rows = page.locator('.markers-panel .monaco-list-row');
      await rows.first().waitFor({ timeout: TIMEOUT.ui });
      const texts = await waitFor('a Problems row from accelopt', async () => {
        const all = await rows.allInnerTexts();
        return all.some((t) => /accelopt/i.test(t)) ? all : null;
      }, TIMEOUT.ui);
      await shot('problems');
      await runCommand('View: Hide Panel', 'View: Close Panel', 'View: Toggle Panel Visibility');
      return texts.filter((t) => /accelopt/i.test(t)).map((t) => t.replace(/\s+/g, ' ')).join(' | ');
    }, { needs: ['kernel opens'] });

    await check("hover shows the line's share of time", async () => {
      const target = page.locator('.editor-instance .view-line').filter({ hasText: 'denominator = nl.add' }).first();
      const token = target.locator('span span').filter({ hasText: 'denominator' }).first();
      const text = await waitFor('a hover with a percentage of time', async () => {
        await page.mouse.move(5, 5);
        await page.waitForTimeout(100);
        await token.hover();
        try {
          await page.locator('.monaco-hover-content').first().waitFor({ timeout: 3000 });
        } catch {
          return null;
        }
        // Only the hover provider's part (a diagnostic under the mouse shows in the same hover).
        const content = (await page.locator('.monaco-hover-content .markdown-hover').allInnerTexts()).join(' ');
        return /\d[\d.]*\s*%/.test(content) && /time/i.test(content) ? content : null;
      }, TIMEOUT.profiled);
      await shot('hover');
      await page.keyboard.press('Escape');
      return text.replace(/\s+/g, ' ').slice(0, 200);
    }, { needs: ['kernel opens'] });

    await check('Optimize shows progress and finishes', async () => {
      await page.mouse.move(5, 5);
      const lens = page.locator('.codelens-decoration a').filter({ hasText: /^Optimize/ }).first();
      await lens.click();
      const started = Date.now();
      const toast = page.locator('.notifications-toasts .notification-toast').filter({ hasText: /optimiz/i }).first();
      await toast.waitFor({ timeout: TIMEOUT.ui });
      await page.waitForTimeout(1500); // let the toast slide in and the first report arrive
      const progressText = (await toast.innerText()).replace(/\s+/g, ' ');
      await shot('optimize-progress');
      const done = await waitFor('the Optimize notification to finish', async () => {
        const finished = page.locator('.notifications-toasts .notification-toast')
          .filter({ hasText: /finished|faster|rewrite|failed|cancelled|cannot|no verified/i });
        if (await finished.count()) {
          return (await finished.first().innerText()).replace(/\s+/g, ' ');
        }
        return null;
      }, TIMEOUT.optimize);
      optimizeSeconds = (Date.now() - started) / 1000;
      await shot('optimize-done');
      if (/failed|cancelled|cannot/i.test(done)) {
        throw new Error(`Optimize ended with: ${done}`);
      }
      return `progress "${progressText.slice(0, 120)}"; done in ${optimizeSeconds.toFixed(1)} s: "${done.slice(0, 160)}"`;
    }, { needs: ['code lens shows latency, % of peak, hardware and bottleneck'] });

    await check('quick-fix menu offers the rewrite', async () => {
      // Dismiss notifications so they do not cover the editor.
      await runCommand('Notifications: Clear All Notifications').catch(() => undefined);
      const text = await waitFor('an "Apply rewrite" quick fix', async () => {
        await focusEditorAt('def kernel');
        await page.keyboard.press('Control+.');
        const rewrite = page.locator('.context-view .monaco-list-row, .action-widget .monaco-list-row').filter({ hasText: /Apply rewrite/i });
        try {
          await rewrite.first().waitFor({ state: 'visible', timeout: 4000 });
        } catch {
          await page.keyboard.press('Escape');
          return null;
        }
        return (await page.locator('.context-view .monaco-list-row, .action-widget .monaco-list-row').allInnerTexts()).join(' | ');
      }, 60_000);
      await shot('quickfix');
      return text.replace(/\s+/g, ' ');
    }, { needs: ['Optimize shows progress and finishes'] });

    await check('applying the rewrite changes the editor text', async () => {
      await page.locator('.context-view .monaco-list-row, .action-widget .monaco-list-row').filter({ hasText: /Apply rewrite/i }).first().click();
      let previewed = false;
      const changed = await waitFor('the editor text to change', async () => {
        // Edits whose change annotation needs confirmation open VS Code's Refactor Preview first, with
        // the edits unticked: tick the file, then Apply (what a person does after reading the diff).
        const preview = page.locator('.composite.refactorPreview, .bulk-edit-panel').first();
        if (!previewed && await preview.isVisible().catch(() => false)) {
          previewed = true;
          await shot('refactor-preview');
          const box = preview.locator('.monaco-checkbox, .monaco-custom-toggle').first();
          if (await box.count() && (await box.getAttribute('aria-checked')) !== 'true') {
            await box.click();
          }
          await page.locator('.part.panel a.monaco-button, .part.panel button').filter({ hasText: /^Apply$/ }).first().click();
        }
        const now = await editorText();
        return now && now !== original ? now : null;
      }, 30_000);
      await shot('applied');
      const before = new Set(original.split('\n'));
      const added = changed.split('\n').filter((l) => !before.has(l));
      return `${previewed ? 'through the Refactor Preview; ' : ''}${added.length} new line(s), e.g. "${(added[0] ?? '').trim().slice(0, 100)}"`;
    }, { needs: ['quick-fix menu offers the rewrite'] });

    await check('undo restores the original text', async () => {
      await focusEditorAt('def kernel');
      await waitFor('the original text after undo', async () => {
        await page.keyboard.press('Control+Z');
        await page.waitForTimeout(300);
        return (await editorText()) === original;
      }, 10_000);
      await shot('undone');
    }, { needs: ['applying the rewrite changes the editor text'] });

    await check('Optimize can be cancelled from its notification', async () => {
      await runCommand('Notifications: Clear All Notifications').catch(() => undefined);
      await page.mouse.move(5, 5);
      await page.locator('.codelens-decoration a').filter({ hasText: /^Optimize/ }).first().click();
      const toast = page.locator('.notifications-toasts .notification-toast').filter({ hasText: /optimizing/i }).first();
      await toast.waitFor({ timeout: TIMEOUT.ui });
      await toast.locator('a.monaco-button, button').filter({ hasText: /^Cancel$/ }).first().click();
      // Ours says "was cancelled"; the server may also say the search "stopped early".
      const outcome = await waitFor('the cancelled message', async () => {
        const texts = (await page.locator('.notifications-toasts .notification-toast').allInnerTexts()).map((t) => t.replace(/\s+/g, ' '));
        const stopped = texts.filter((t) => /was cancelled|stopped early/i.test(t));
        if (stopped.length > 0) {
          return stopped.join(' | ');
        }
        const other = texts.find((t) => /finished in|cannot|failed/i.test(t));
        if (other) {
          throw new Error(`expected a cancellation, got: ${other}`);
        }
        return null;
      }, 60_000);
      return outcome.slice(0, 240);
    }, { needs: ['Optimize shows progress and finishes'] });

    await check('report panel renders', async () => {
      await page.keyboard.press('Escape');
      await runCommand('AccelOpt: Show Report');
      const frame = await waitFor('the report webview', async () => {
        for (const f of page.frames()) {
          try {
            if (await f.locator('#root h2').count()) {
              return f;
            }
          } catch {
            // frame navigated away
          }
        }
        return null;
      }, 30_000);
      await frame.locator('#root h2').filter({ hasText: 'Summary' }).waitFor({ timeout: TIMEOUT.ui });
      await page.setViewportSize({ width: 1600, height: 1400 }); // room for the whole panel in the screenshot
      await page.waitForTimeout(800);
      const headings = await frame.locator('#root h2').allInnerTexts();
      const plot = await frame.locator('svg.plot').count();
      await page.screenshot({ path: join(ARTIFACTS, 'report.png') });
      return `sections: ${headings.join(', ')}; search plot: ${plot ? 'yes' : 'no'}`;
    }, { needs: ['workbench loads'] });

    await check('a crashed server is restarted with a notification', async () => {
      await runCommand('Notifications: Clear All Notifications').catch(() => undefined);
      const pid = serverPid();
      if (!pid) {
        throw new Error('no language server process found under code-server');
      }
      process.kill(pid, 'SIGKILL');
      const toast = page.locator('.notifications-toasts .notification-toast').filter({ hasText: /stopped unexpectedly/ }).first();
      await toast.waitFor({ timeout: 30_000 });
      const text = (await toast.innerText()).replace(/\s+/g, ' ');
      await shot('crash-restart');
      await page.locator('.explorer-folders-view .monaco-list-row').filter({ hasText: KERNEL }).first().click();
      const back = await waitFor('a new server process and the code lens again', async () => {
        const again = serverPid();
        const lens = (await lensTexts()).find((t) => /of peak/.test(t));
        return again && again !== pid && lens ? `new server pid ${again}` : null;
      }, 60_000);
      return `${text.slice(0, 140)}; ${back}`;
    }, { needs: ['code lens shows latency, % of peak, hardware and bottleneck'] });

    await check('a Python without accelopt gets a message with the install command', async () => {
      // Point the workspace at a Python that lacks the package (a bare virtual environment); the
      // extension restarts the server, finds the package missing, and says how to install it.
      await page.setViewportSize({ width: 1600, height: 1000 });
      await runCommand('Notifications: Clear All Notifications').catch(() => undefined);
      const settingsDir = join(WORKSPACE, '.vscode');
      mkdirSync(settingsDir, { recursive: true });
      writeFileSync(join(settingsDir, 'settings.json'), JSON.stringify({ 'accelopt.python': BARE_PYTHON }));
      const toast = page.locator('.notifications-toasts .notification-toast').filter({ hasText: /not installed/ }).first();
      await toast.waitFor({ timeout: 60_000 });
      const text = (await toast.innerText()).replace(/\s+/g, ' ');
      await shot('missing-accelopt');
      for (const expected of [/Install in Terminal/, /Copy Install Command/, /accelopt/]) {
        if (!expected.test(text)) {
          throw new Error(`the message "${text}" lacks ${expected}`);
        }
      }
      const status = await page.locator('.statusbar-item').filter({ hasText: 'AccelOpt' }).count();
      rmSync(settingsDir, { recursive: true, force: true });
      return `${text.slice(0, 220)}; status bar error item: ${status ? 'yes' : 'no'}`;
    }, { needs: ['kernel opens'] });
  } finally {
    const summary = {
      passed: results.filter((r) => r.status === 'passed').length,
      failed: results.filter((r) => r.status === 'failed').length,
      skipped: results.filter((r) => r.status === 'skipped').length,
      seconds: Number(seconds()),
      optimizeSeconds,
      results,
    };
    writeFileSync(join(ARTIFACTS, 'summary.json'), JSON.stringify(summary, null, 2));
    writeFileSync(join(ARTIFACTS, 'browser-console.log'), consoleLog.join('\n'));
    await browser.close();
    console.log(`e2e checks: passed ${summary.passed}, failed ${summary.failed}, skipped ${summary.skipped}`);
    process.exitCode = summary.failed + summary.skipped === 0 ? 0 : 1;
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
