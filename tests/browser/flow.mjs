// Drives Debian's headless Chromium (playwright-core, no bundled browser)
// through the whole loop against a running silas daemon:
//   node tests/browser/flow.mjs <base-url> <screenshot-dir>
// Exit 0 on success; otherwise prints the failing step and exits 1.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, shots] = process.argv.slice(2);
if (!base || !shots) {
  console.error('usage: flow.mjs <base-url> <screenshot-dir>');
  process.exit(2);
}
const executablePath = process.env.SILAS_CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'silas-chromium-'));
const consoleErrors = [];
let step = 'launch';
let browser;
let page;
try {
  browser = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 375, height: 812 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  page = browser.pages()[0] || (await browser.newPage());
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  step = 'open the page';
  const resp = await page.goto(base + '/', { waitUntil: 'load' });
  if (!resp || resp.status() !== 200) throw new Error('GET / answered ' + (resp && resp.status()));

  step = 'connection indicator shows connected';
  await page.waitForSelector('#conn[data-state="connected"]', { timeout: 15000 });
  // No API key: the header must label the offline responder.
  await page.locator('#model-badge:not([hidden])', { hasText: 'Offline model' }).waitFor({ timeout: 5000 });
  await page.screenshot({ path: join(shots, '1-connected.png') });

  step = 'send a chat message';
  await page.getByLabel('Message to Silas').fill('create a file notes.txt containing hello');
  await page.getByRole('button', { name: 'Send message' }).click();
  await page.locator('.msg-user', { hasText: 'notes.txt' }).waitFor({ timeout: 5000 });

  step = 'the Review badge shows a pending card';
  await page.locator('#review-badge:not([hidden])').waitFor({ timeout: 30000 });

  step = 'open Review and see the plan card';
  await page.locator('#tab-review').click();
  const card = page.locator('#review-active .card');
  await card.waitFor({ timeout: 5000 });
  const body = await card.locator('.card-body').textContent();
  if (!body || !body.includes('notes.txt')) throw new Error('card body lacks the plan: ' + body);
  const checks = await card.locator('.card-checks-summary').textContent();
  if (!/\d+ checks?/.test(checks || '')) throw new Error('card lacks verification checks: ' + checks);
  await page.screenshot({ path: join(shots, '2-review.png') });

  step = 'approve';
  await card.getByRole('button', { name: /^Approve and run/ }).click();
  await page.locator('#review-empty').waitFor({ timeout: 5000 });

  step = 'Activity shows done with every check passed';
  await page.locator('#tab-activity').click();
  const done = page.locator('.work[data-status="done"]');
  await done.waitFor({ timeout: 90000 });
  const verified = (await done.locator('.work-verified').textContent()) || '';
  const m = verified.match(/Verified: (\d+)\/(\d+) checks passed/);
  if (!m || m[1] !== m[2] || m[2] === '0') throw new Error('verification line: ' + verified);
  await page.screenshot({ path: join(shots, '3-activity.png') });

  step = 'desktop split layout';
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.getByRole('button', { name: 'Open Activity' }).first().waitFor({ state: 'attached' });
  await page.screenshot({ path: join(shots, '4-desktop.png') });

  step = 'no console errors';
  if (consoleErrors.length) throw new Error(consoleErrors.join('\n'));
  console.log('browser flow ok: ' + verified);
} catch (e) {
  console.error('browser flow failed at step "' + step + '": ' + (e && e.message ? e.message : e));
  if (page) {
    try { await page.screenshot({ path: join(shots, 'failure.png') }); } catch (_) { /* best effort */ }
  }
  if (consoleErrors.length) console.error('page console errors:\n' + consoleErrors.join('\n'));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
