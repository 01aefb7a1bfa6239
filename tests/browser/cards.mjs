// Card gallery (driven by web/tests/pwa_cards.rs): opens the PWA in Debian's
// headless Chromium against a silas-web server whose scripted backend pushes
// one card of every type, enters the access token on the token screen, walks
// the onboarding, then answers every card through the UI and screenshots
// each at 375 px.
//   SILAS_GALLERY_TOKEN=… SILAS_GALLERY_SECRET=… node tests/browser/cards.mjs <base-url> <screenshot-dir>
// The Rust side asserts the client frames; this side asserts what the page
// shows, that no request leaves the server's origin, that the token is never
// in a URL, that the secret is only ever POSTed to /secrets/{ref_id} and
// never sent on the socket, and that the console stays clean.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [base, shots] = process.argv.slice(2);
const TOKEN = process.env.SILAS_GALLERY_TOKEN;
const SECRET = process.env.SILAS_GALLERY_SECRET;
if (!base || !shots || !TOKEN || !SECRET) {
  console.error('usage: SILAS_GALLERY_TOKEN=… SILAS_GALLERY_SECRET=… cards.mjs <base-url> <screenshot-dir>');
  process.exit(2);
}
const origin = new URL(base).origin;
const executablePath = process.env.SILAS_CHROMIUM || '/usr/bin/chromium';
const profile = mkdtempSync(join(tmpdir(), 'silas-cards-'));
const consoleErrors = [];
const violations = [];
const secretPosts = [];
let step = 'launch';
let browser;
let page;

const check = (cond, what) => { if (!cond) throw new Error(what); };

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
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.origin !== origin && !(u.protocol === 'ws:' && u.host === new URL(origin).host)) violations.push('request to another host: ' + r.url());
    if (r.url().includes(TOKEN)) violations.push('token in a URL: ' + r.url());
    const body = r.postData() || '';
    if (body.includes(SECRET)) {
      if (r.method() === 'POST' && u.pathname === '/secrets/ref-notion') secretPosts.push(r.url());
      else violations.push('secret sent to ' + r.method() + ' ' + r.url());
    }
  });
  page.on('websocket', (ws) => {
    const u = new URL(ws.url());
    if (u.host !== new URL(origin).host) violations.push('socket to another host: ' + ws.url());
    ws.on('framesent', ({ payload }) => {
      const text = String(payload);
      if (text.includes(SECRET)) violations.push('secret on the socket: ' + text);
      if (text.includes(TOKEN) && !text.startsWith('{"type":"auth"')) violations.push('token outside the auth frame: ' + text);
    });
  });

  const shot = (name) => page.screenshot({ path: join(shots, name) });
  const card = page.locator('#review-active .card');
  const action = (id) => card.locator('.card-actions [data-action="' + id + '"]');
  async function activeCard(key, kind, risk) {
    await page.locator('#review-active .card[data-key="' + key + '"]').waitFor({ timeout: 5000 });
    check((await card.getAttribute('data-kind')) === kind, key + ': kind ' + (await card.getAttribute('data-kind')));
    check((await card.getAttribute('data-risk')) === risk, key + ': risk ' + (await card.getAttribute('data-risk')) + ', wanted ' + risk);
    // Card contract: recommended first, destructive last; every button labelled.
    const classes = await card.locator('.card-actions > button').evaluateAll((bs) => bs.map((b) => b.className));
    check(classes.length > 0 && /btn-primary/.test(classes[0]), key + ': first action is not the recommended one: ' + classes);
    const firstDestructive = classes.findIndex((c) => /btn-destructive/.test(c));
    check(firstDestructive === -1 || classes.slice(firstDestructive).every((c) => /btn-destructive/.test(c)), key + ': destructive action not last: ' + classes);
    // Details: expanded for high/irreversible, collapsed otherwise.
    const details = card.locator('details.card-details');
    if (await details.count()) {
      const open = await details.evaluate((d) => d.open);
      check(open === (risk === 'high' || risk === 'irreversible'), key + ': details open=' + open + ' at ' + risk);
    }
  }
  async function gone(key) {
    await page.locator('#review-active .card[data-key="' + key + '"]').waitFor({ state: 'detached', timeout: 5000 });
  }
  async function slideByKeyboard() {
    const range = card.locator('input.slide-range');
    await range.waitFor({ timeout: 3000 });
    check(await range.evaluate((r) => r === document.activeElement), 'the slider did not take focus');
    await page.keyboard.press('ArrowRight');
    check((await range.inputValue()) === '25', 'ArrowRight did not move the slider');
    await page.keyboard.press('End');
  }
  async function slideByPointer() {
    const range = card.locator('input.slide-range');
    await range.waitFor({ timeout: 3000 });
    const box = await range.boundingBox();
    const y = box.y + box.height / 2;
    // Let go half way: it springs back and nothing is sent.
    await page.mouse.move(box.x + 20, y);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width / 2, y, { steps: 6 });
    await page.mouse.up();
    check((await range.inputValue()) === '0', 'a half slide did not spring back: ' + (await range.inputValue()));
    await page.mouse.move(box.x + 20, y);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width + 10, y, { steps: 10 });
    await page.mouse.up();
  }

  step = 'open the page';
  const resp = await page.goto(base + '/', { waitUntil: 'load' });
  check(resp && resp.status() === 200, 'GET / answered ' + (resp && resp.status()));

  step = 'token screen';
  await page.locator('#auth-screen:not([hidden])').waitFor({ timeout: 10000 });
  await shot('00-token.png');
  await page.getByLabel('Access token', { exact: true }).fill('wrong-token');
  await page.getByRole('button', { name: 'Connect' }).click();
  await page.locator('#auth-error:not([hidden])').waitFor({ timeout: 10000 });
  await page.getByLabel('Access token', { exact: true }).fill(TOKEN);
  await page.getByRole('button', { name: 'Connect' }).click();
  await page.waitForSelector('#conn[data-state="connected"]', { timeout: 10000 });
  check(await page.locator('#auth-screen').isHidden(), 'token screen still shown after auth_ok');
  // A device credential: kept across tabs and restarts (revocable).
  check((await page.evaluate(() => window.localStorage.getItem('silas.token'))) === TOKEN, 'token not kept on this device');

  step = 'onboarding';
  await page.getByRole('heading', { name: 'I’m Silas. Let’s get you set up.' }).waitFor({ timeout: 5000 });
  await page.getByRole('button', { name: 'Get Started' }).click();
  await page.locator('#onboard-model.is-offline').waitFor({ timeout: 5000 });
  const modelText = await page.locator('#onboard-model').textContent();
  check(/Offline model/.test(modelText) && /not an LLM/.test(modelText), 'offline label: ' + modelText);
  await shot('01-onboarding.png');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByRole('button', { name: 'Start using Silas' }).click();
  await page.locator('.msg-silas', { hasText: 'I’m ready. Tell me what to connect first' }).waitFor({ timeout: 3000 });
  await page.locator('#model-badge:not([hidden])', { hasText: 'Offline model' }).waitFor({ timeout: 3000 });

  step = 'queue fills, badge counts, density cue';
  await page.locator('#review-badge', { hasText: '14' }).waitFor({ timeout: 10000 });
  check(await page.locator('#review-badge.is-elevated').count() === 1, 'badge not elevated with 7 medium+ cards queued');
  await page.locator('#tab-review').click();
  await page.locator('#cue-dense:not([hidden])').waitFor({ timeout: 3000 });
  const dense = await page.locator('#cue-dense-text').textContent();
  check(/^8 decisions at medium risk or higher/.test(dense), 'density cue: ' + dense);
  check((await page.locator('#up-next .up-next-item').count()) === 13, 'up-next should list 13');
  const firstNext = page.locator('#up-next .up-next-item').first();
  check(/Gate/.test(await firstNext.textContent()) || /through/.test(await firstNext.textContent()), 'up next #2: ' + (await firstNext.textContent()));
  check((await firstNext.locator('.risk').textContent()) === 'Medium risk', 'up next lacks a risk badge');
  await shot('02-queue.png');
  await page.getByRole('button', { name: 'Got it' }).click();

  step = 'plan approval: tap + confirm chip (medium)';
  await activeCard('plan-1', 'approval_request', 'medium');
  check(/2 checks/.test(await card.locator('.card-facts').textContent()), 'plan card lacks its checks');
  check(/\$0\.50/.test(await card.locator('.card-facts').textContent()), 'plan card lacks its budget');
  const planFacts = await card.locator('.card-facts').textContent();
  check(/standing for 30 days from your answer, covering at most 100 fix tasks/.test(planFacts) && /in Europe\/Vienna time/.test(planFacts), 'goal card lacks its approval terms: ' + planFacts);
  const planBody = await card.locator('.card-body').textContent();
  check(planBody.includes('\\u{202e}txt.seton') && !planBody.includes('\u202e'), 'bidi override not made visible: ' + JSON.stringify(planBody));
  await shot('03-approval_request.png');
  await action('approve').click();
  await card.locator('[data-confirm="confirm"]').click();
  await gone('plan-1');

  step = 'gate approval: block';
  await activeCard('gate-1', 'gate_approval', 'medium');
  await shot('04-gate_approval.png');
  await action('block').click();
  await gone('gate-1');

  step = 'decision: free text + chip';
  await activeCard('dec-1', 'decision', 'low');
  await card.getByLabel('In your own words (optional)').fill('Monday mornings, please');
  await shot('05-decision.png');
  await action('weekly').click();
  await gone('dec-1');

  step = 'draft review: edit, then confirm';
  await activeCard('draft-1', 'draft_review', 'medium');
  await shot('06-draft_review.png');
  await action('edit').click();
  await card.getByLabel('Your version').fill('Hi Ana, Thursday at 10 works. Best, Sam');
  await action('send-edit').click();
  await card.locator('[data-confirm="confirm"]').click();
  await gone('draft-1');

  step = 'batch review: anomaly unchecked, edit selection';
  await activeCard('batch-1', 'batch_review', 'medium');
  const odd = card.locator('.batch-item.is-anomaly');
  check((await odd.count()) === 1 && /invoice/.test(await odd.textContent()), 'the invoice is not flagged');
  check(!(await odd.locator('input').isChecked()), 'flagged item is checked by default');
  check((await action('approve').textContent()).startsWith('Archive 3 selected'), 'default selection label: ' + (await action('approve').textContent()));
  await shot('07-batch_review.png');
  await card.getByLabel(/Product news/).uncheck();
  check((await action('approve').textContent()).startsWith('Archive 2 selected'), 'label after uncheck: ' + (await action('approve').textContent()));
  await action('approve').click();
  await card.locator('[data-confirm="confirm"]').click();
  await gone('batch-1');

  step = 'suggestion: not now';
  await activeCard('sug-1', 'suggestion', 'low');
  await shot('08-suggestion.png');
  await action('defer').click();
  await gone('sug-1');

  step = 'autonomy threshold (high): slide by keyboard';
  await activeCard('auto-1', 'autonomy_threshold_review', 'high');
  check(/10 → 20/.test(await card.locator('.deltas').textContent()), 'delta not shown');
  check(/50 decisions observed/.test(await card.locator('.card-affected').textContent()), 'evidence not shown');
  await shot('09-autonomy_threshold_review.png');
  await action('approve').click();
  await slideByKeyboard();
  await gone('auto-1');

  step = 'checkpoint: continue';
  await activeCard('cp-1', 'checkpoint', 'low');
  await shot('10-checkpoint.png');
  await action('continue').click();
  await gone('cp-1');

  step = 'secure input: POST, never the socket';
  await activeCard('secret:ref-notion', 'secure_input_request', 'none');
  const secretField = card.getByLabel('Notion integration token');
  check((await secretField.getAttribute('type')) === 'password', 'secret field is not a password field');
  check((await secretField.getAttribute('placeholder')) === 'ntn_...', 'input hint missing');
  await secretField.fill(SECRET);
  await shot('11-secure_input_request.png');
  const posted = page.waitForResponse((r) => r.url().endsWith('/secrets/ref-notion') && r.request().method() === 'POST');
  await action('store').click();
  const res = await posted;
  check(res.status() === 200, 'POST /secrets answered ' + res.status());
  check((await res.request().headerValue('authorization')) === 'Bearer ' + TOKEN, 'secret POST lacks the bearer token');
  await gone('secret:ref-notion');
  check(secretPosts.length === 1, 'secret POSTs: ' + secretPosts.length);
  check(await page.evaluate((s) => ![...document.querySelectorAll('input')].some((i) => i.value === s), SECRET), 'secret left in a field');

  step = 'connection setup: device code';
  await activeCard('setup-1', 'connection_setup_step', 'low');
  check((await card.locator('.user-code').textContent()) === 'F7K-2QP', 'user code missing');
  check(/Code expires in 1[45]:/.test(await card.locator('.countdown').textContent()), 'countdown missing');
  await shot('12-connection_setup_step.png');
  await action('done').click();
  await gone('setup-1');

  step = 'permission escalation (high): slide by pointer';
  await activeCard('perm-1', 'permission_escalation', 'high');
  check(/calendar\.write/.test(await card.locator('.perm-new').textContent()), 'new permission not highlighted');
  await shot('13-permission_escalation.png');
  await action('approve').click();
  await slideByPointer();
  await gone('perm-1');

  step = 'connection failure: recovery chip, skip last';
  await activeCard('fail-1', 'connection_failure', 'low');
  const labels = await card.locator('.card-actions > button').evaluateAll((bs) => bs.map((b) => b.dataset.action));
  check(labels.join(',') === 'request_admin_approval,use_personal_account,skip', 'chips: ' + labels);
  await shot('14-connection_failure.png');
  await action('request_admin_approval').click();
  await gone('fail-1');

  step = 'irreversible batch: slide + final confirm';
  await activeCard('batch-2', 'batch_review', 'irreversible');
  check((await card.locator('.risk').textContent()) === 'Irreversible', 'irreversible badge');
  await action('approve').click();
  await slideByKeyboard();
  await card.locator('[data-confirm="final"]').waitFor({ timeout: 3000 });
  await shot('15-batch_review-irreversible.png');
  await card.locator('[data-confirm="final"]').click();
  await gone('batch-2');

  step = 'apply changes: file list, diff, tap + confirm';
  await activeCard('apply-1', 'apply_changes', 'medium');
  check(/clock\.py/.test(await card.locator('.change-files').textContent()), 'changed file not listed');
  check(/\+1 −1/.test(await card.locator('.card-facts').textContent()), 'line counts missing');
  check(/the checks ran without these edits/.test(await card.locator('.card-warning').textContent()), 'protected-edit note missing');
  await card.locator('summary').click();
  check(/\+    return hour - offset/.test(await card.locator('.change-diff').textContent()), 'diff not shown');
  await shot('16-apply_changes.png');
  await action('apply').click();
  await card.locator('[data-confirm="confirm"]').click();
  await gone('apply-1');
  await page.locator('#review-empty').waitFor({ timeout: 3000 });
  check(await page.locator('#review-badge').isHidden(), 'badge still shown with an empty queue');
  const fastCue = await page.locator('#cue-fast:not([hidden])').count();

  step = 'result card with undo in the stream';
  await page.locator('#tab-stream').click();
  const result = page.locator('.msg-result[data-work-item-id="w-archive"]');
  await result.waitFor({ timeout: 3000 });
  check(/Verified: 1\/1 checks passed/.test(await result.textContent()), 'result lacks verification');
  const undo = result.getByRole('button', { name: /^Undo: Archived 2 newsletters/ });
  await undo.waitFor({ timeout: 3000 });
  check(/[45]:\d\d left/.test(await undo.textContent()), 'undo countdown: ' + (await undo.textContent()));
  await result.scrollIntoViewIfNeeded();
  await shot('17-result-undo.png');
  await undo.click();
  await result.locator('.undo-note', { hasText: 'Undo requested.' }).waitFor({ timeout: 3000 });

  step = 'activity timeline';
  await page.locator('#tab-activity').click();
  const events = await page.locator('#timeline .event').count();
  check(events >= 15, 'activity has ' + events + ' entries');
  await page.locator('#timeline .event', { hasText: 'You stored a secret' }).waitFor({ timeout: 2000 });
  const audit = await page.locator('#timeline .event-audit').evaluateAll((ls) => ls.map((l) => l.dataset.seq + ':' + l.dataset.kind));
  check(audit.join(',') === '9:system,8:work,7:security', 'audit narrative (newest first, de-duplicated): ' + audit);
  check(!(await page.locator('#timeline').textContent()).includes(SECRET), 'secret in the activity timeline');

  step = 'desktop split with the activity slide-over';
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.waitForTimeout(400); // the slide-over animation
  check(await page.locator('#stream').isVisible() && await page.locator('#review').isVisible(), 'desktop does not show stream and review side by side');
  check(await page.locator('#activity').isVisible(), 'activity slide-over closed');
  await shot('18-desktop.png');
  await page.getByRole('button', { name: 'Close' }).click();
  check(await page.locator('#activity').isHidden(), 'activity slide-over did not close');

  await page.waitForTimeout(300); // let the last socket frame flush
  step = 'no console errors, no foreign requests';
  if (consoleErrors.length) throw new Error(consoleErrors.join('\n'));
  if (violations.length) throw new Error(violations.join('\n'));
  console.log('card gallery ok: 14 cards answered, fast-decision cue ' + (fastCue ? 'shown' : 'not triggered'));
} catch (e) {
  console.error('card gallery failed at step "' + step + '": ' + (e && e.message ? e.message : e));
  if (page) {
    try { await page.screenshot({ path: join(shots, 'failure.png') }); } catch (_) { /* best effort */ }
  }
  if (consoleErrors.length) console.error('page console errors:\n' + consoleErrors.join('\n'));
  if (violations.length) console.error('violations:\n' + violations.join('\n'));
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
}
