// Drives Debian's headless Chromium (playwright-core, no bundled browser)
// through the whole loop against a running silas daemon: first-run
// onboarding (with the offline-model label), a chat message, the plan card
// in Review answered on its risk ladder, the result card in the Stream and
// the Activity entry, at 375×812 and 1280×800. Fails on any console error
// and on any request to a host other than the daemon.
// It enters through the pairing link `silas start` printed (issue #12):
// the code must leave the address bar and become a stored device token.
//   node tests/browser/flow.mjs <base-url> <screenshot-dir> <pairing-link>
// Exit 0 on success; otherwise prints the failing step and exits 1.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, shots, pairLink] = process.argv.slice(2);
if (!base || !shots || !pairLink) {
  console.error('usage: flow.mjs <base-url> <screenshot-dir> <pairing-link>');
  process.exit(2);
}
const executablePath = process.env.SILAS_CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'silas-chromium-'));
const consoleErrors = [];
const foreign = [];
const daemon = new URL(base);
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
  page.on('request', (r) => { if (new URL(r.url()).host !== daemon.host) foreign.push(r.method() + ' ' + r.url()); });
  page.on('websocket', (ws) => { if (new URL(ws.url()).host !== daemon.host) foreign.push('WS ' + ws.url()); });

  // A connection that dies right after a message leaves (before its
  // `accepted`): the app must send it again, and the daemon answer it once.
  await page.addInitScript(() => {
    const original = WebSocket.prototype.send;
    let cut = false;
    window.__sockets = [];
    window.__secretSends = 0;
    WebSocket.prototype.send = function (data) {
      if (!window.__sockets.includes(this)) window.__sockets.push(this);
      if (typeof data === 'string' && data.includes('/secret ')) window.__secretSends += 1;
      original.call(this, data);
      if (!cut && typeof data === 'string' && data.includes('cut off mid-send')) {
        cut = true;
        this.close();
      }
    };
  });

  step = 'open the pairing link';
  const resp = await page.goto(pairLink, { waitUntil: 'load' });
  if (!resp || resp.status() !== 200) throw new Error('GET / answered ' + (resp && resp.status()));
  if ((await page.evaluate(() => location.hash)) !== '') throw new Error('pairing code left in the address bar');
  await page.waitForFunction(() => !!window.localStorage.getItem('silas.token'), null, { timeout: 10000 });

  step = 'first-run onboarding';
  await page.getByRole('heading', { name: 'I’m Silas. Let’s get you set up.' }).waitFor({ timeout: 5000 });
  await page.screenshot({ path: join(shots, '0-onboarding.png') });
  await page.getByRole('button', { name: 'Get Started' }).click();
  await page.locator('#onboard-model.is-offline', { hasText: 'Offline model' }).waitFor({ timeout: 15000 });
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByRole('button', { name: 'Start using Silas' }).click();

  step = 'connection indicator shows connected';
  await page.waitForSelector('#conn[data-state="connected"]', { timeout: 15000 });
  // No API key: the header must label the offline responder.
  await page.locator('#model-badge:not([hidden])', { hasText: 'Offline model' }).waitFor({ timeout: 5000 });
  await page.screenshot({ path: join(shots, '1-connected.png') });
  if (!(await page.locator('#auth-screen').isHidden())) throw new Error('token screen shown after pairing');

  step = 'send a chat message';
  await page.getByLabel('Message to Silas').fill('create a file notes.txt containing hello');
  await page.getByRole('button', { name: 'Send message' }).click();
  await page.locator('.msg-user', { hasText: 'notes.txt' }).waitFor({ timeout: 5000 });

  step = 'the Review badge shows a pending card';
  await page.locator('#review-badge:not([hidden])').waitFor({ timeout: 30000 });

  step = 'open Review and see the plan card';
  await page.locator('#tab-review').click();
  const card = page.locator('#review-active .card[data-kind="approval_request"]');
  await card.waitFor({ timeout: 5000 });
  const body = await card.locator('.card-body').textContent();
  if (!body || !body.includes('notes.txt')) throw new Error('card body lacks the plan: ' + body);
  const checks = await card.locator('.card-facts').textContent();
  if (!/\d+ checks?/.test(checks || '')) throw new Error('card lacks verification checks: ' + checks);
  const risk = await card.getAttribute('data-risk');
  if (!['low', 'medium', 'high', 'irreversible'].includes(risk)) throw new Error('plan card has no risk level: ' + risk);
  if ((await card.locator('.risk').count()) !== 1) throw new Error('plan card lacks its risk badge');
  await page.screenshot({ path: join(shots, '2-review.png') });

  step = 'approve on the risk ladder (' + risk + ')';
  await card.locator('[data-action="approve"]').click();
  if (risk === 'high' || risk === 'irreversible') {
    const range = card.locator('input.slide-range');
    const box = await range.boundingBox();
    await page.mouse.move(box.x + 20, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width + 10, box.y + box.height / 2, { steps: 10 });
    await page.mouse.up();
  }
  if (risk === 'medium') await card.locator('[data-confirm="confirm"]').click();
  if (risk === 'irreversible') await card.locator('[data-confirm="final"]').click();
  await page.locator('#review-empty').waitFor({ timeout: 5000 });

  step = 'Activity shows done with every check passed';
  await page.locator('#tab-activity').click();
  // The UI's own note and the audit narrative's entry may both be there
  // already (the narrative can arrive first): either shows the approval.
  await page.locator('#timeline .event', { hasText: 'You approved' }).first().waitFor({ timeout: 5000 });
  const done = page.locator('.work[data-status="done"]');
  await done.waitFor({ timeout: 90000 });
  const verified = (await done.locator('.work-verified').textContent()) || '';
  const m = verified.match(/Verified: (\d+)\/(\d+) checks passed/);
  if (!m || m[1] !== m[2] || m[2] === '0') throw new Error('verification line: ' + verified);
  await page.screenshot({ path: join(shots, '3-activity.png') });

  step = 'the result card in the Stream';
  await page.locator('#tab-stream').click();
  const result = page.locator('.msg-result[data-status="done"]');
  await result.waitFor({ timeout: 5000 });
  const rtext = (await result.textContent()) || '';
  if (!rtext.includes(verified)) throw new Error('result card lacks the verification: ' + rtext);
  // The daemon sends no undo_offer yet, so no Undo button may appear.
  if ((await result.locator('.undo-btn').count()) !== 0) throw new Error('undo shown without an undo_offer');
  await result.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(shots, '3b-result.png') });

  step = 'a message whose connection died before accepted is sent again and answered once';
  const repliesBefore = await page.locator('#stream .msg-silas').count();
  await page.getByLabel('Message to Silas').fill('hello, cut off mid-send');
  await page.getByRole('button', { name: 'Send message' }).click();
  const mine = page.locator('.msg-user', { hasText: 'cut off mid-send' });
  await page.locator('.msg-user[data-delivery="accepted"]', { hasText: 'cut off mid-send' }).waitFor({ timeout: 20000 });
  await page.waitForFunction((n) => document.querySelectorAll('#stream .msg-silas').length > n, repliesBefore, { timeout: 20000 });
  await page.waitForTimeout(1500);
  if ((await mine.count()) !== 1) throw new Error('the message is shown ' + (await mine.count()) + ' times');
  const repliesAfter = await page.locator('#stream .msg-silas').count();
  if (repliesAfter !== repliesBefore + 1) throw new Error((repliesAfter - repliesBefore) + ' replies to one message');
  await page.waitForSelector('#conn[data-state="connected"]', { timeout: 15000 });

  step = 'a /secret request is sent once, not again after a reconnect';
  await page.getByLabel('Message to Silas').fill('/secret Probe token');
  await page.getByRole('button', { name: 'Send message' }).click();
  await page.waitForFunction(() => window.__secretSends === 1, null, { timeout: 5000 });
  await page.evaluate(() => window.__sockets[window.__sockets.length - 1].close());
  await page.waitForSelector('#conn:not([data-state="connected"])', { timeout: 5000 });
  await page.waitForSelector('#conn[data-state="connected"]', { timeout: 15000 });
  await page.waitForTimeout(1000);
  const secretSends = await page.evaluate(() => window.__secretSends);
  if (secretSends !== 1) throw new Error('/secret sent ' + secretSends + ' times');

  step = 'desktop split layout';
  await page.setViewportSize({ width: 1280, height: 800 });
  if (!(await page.locator('#stream').isVisible()) || !(await page.locator('#review').isVisible())) {
    throw new Error('desktop does not show stream and review side by side');
  }
  await page.screenshot({ path: join(shots, '4-desktop.png') });
  await page.locator('#tab-activity').click();
  await page.waitForTimeout(400);
  await page.locator('#activity .work[data-status="done"]').waitFor({ timeout: 5000 });
  await page.screenshot({ path: join(shots, '5-desktop-activity.png') });

  step = 'another tab reuses this device credential';
  const tab = await browser.newPage();
  tab.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  tab.on('pageerror', (e) => consoleErrors.push(String(e)));
  await tab.goto(base + '/', { waitUntil: 'load' });
  await tab.waitForSelector('#conn[data-state="connected"]', { timeout: 15000 });
  if (!(await tab.locator('#auth-screen').isHidden())) throw new Error('second tab asked for a token');

  step = 'replies the first tab showed were acknowledged: not sent to the new tab';
  const firstTabReplies = await page.locator('#stream .msg-silas').count();
  if (firstTabReplies < 1) throw new Error('the first tab showed no reply');
  await tab.waitForTimeout(1500);
  const resent = await tab.locator('#stream .msg-silas').count();
  if (resent !== 0) throw new Error(resent + ' acknowledged replies were sent again to a new tab');
  await tab.close();

  step = 'no request to any other host';
  if (foreign.length) throw new Error(foreign.join('\n'));

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
