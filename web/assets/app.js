// Silas web app: three surfaces (Stream, Review, Activity) over one
// WebSocket speaking the typed frames of spec §8.1. Plain JS, no framework.
// Server text is only ever placed with textContent — never parsed as HTML.
//
// Map of this file:
//   token + connection   first-frame auth after a 4001, reconnect with backoff
//   onboarding           first-run welcome (§1.5), offline-model label
//   risk ladder          riskOf() — the one place a card's risk is decided
//   review queue         one active card, "up next" stack, badge, fatigue cues
//   cards                one builder per server card frame (§8.1, §8.2)
//   stream + activity    chat, post-execution result cards with undo, timeline
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  };
  // Card text shows what would otherwise steer the eye unseen: bidi
  // overrides/isolates (a command that reads backwards), marks and
  // invisible spaces become visible escapes. Joiners stay (emoji, scripts).
  const HIDDEN = /[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]/g;
  const shown = (v) => String(v).replace(HIDDEN, (c) => '\\u{' + c.codePointAt(0).toString(16) + '}');
  const str = (v) => (v === undefined || v === null ? '' : typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : JSON.stringify(v));
  const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  const arr = (v) => (Array.isArray(v) ? v : []);
  const clock = (iso) => {
    const d = iso ? new Date(iso) : new Date();
    const t = isNaN(d.getTime()) ? new Date() : d;
    return t.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  };
  const plural = (n, one, many) => n + ' ' + (n === 1 ? one : many || one + 's');
  const words = (k) => str(k).replace(/[_.]+/g, ' ').trim();
  const cap = (s) => (s ? s.charAt(0).toUpperCase() + s.slice(1) : s);
  // Only https links from the server become clickable (never javascript: etc.).
  function safeLink(url, text) {
    let u;
    try { u = new URL(str(url)); } catch (e) { return el('span', 'card-url', str(url)); }
    if (u.protocol !== 'https:') return el('span', 'card-url', str(url));
    const a = el('a', 'card-link', text || u.host);
    a.href = u.href;
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    return a;
  }
  // While a full-screen sheet (token, onboarding) is up, the app behind it
  // is inert: no focus, no clicks, hidden from screen readers.
  function syncModal() {
    const auth = !$('auth-screen').hidden;
    const onboarding = !$('onboarding').hidden;
    document.body.classList.toggle('modal-open', auth || onboarding);
    for (const sel of ['.topbar', '.tabs', '.surfaces', '.skip']) {
      const n = document.querySelector(sel);
      if (n) n.inert = auth || onboarding;
    }
    $('onboarding').inert = auth;
  }
  const local = {
    get(k) { try { return window.localStorage.getItem(k); } catch (e) { return null; } },
    set(k, v) { try { window.localStorage.setItem(k, v); } catch (e) { /* private mode */ } },
  };

  // ---- surfaces ------------------------------------------------------
  const surfaces = ['stream', 'review', 'activity'];
  const desktop = window.matchMedia('(min-width: 900px)');
  let current = 'stream';
  let lastMain = 'stream';
  function show(name) {
    current = name;
    if (name !== 'activity') lastMain = name;
    for (const s of surfaces) {
      const on = s === name;
      $(s).classList.toggle('is-active', on);
      const tab = $('tab-' + s);
      if (on) tab.setAttribute('aria-current', 'page');
      else tab.removeAttribute('aria-current');
    }
    document.body.classList.toggle('activity-open', name === 'activity');
    $('tab-activity').setAttribute('aria-expanded', String(name === 'activity'));
    if (name === 'activity') { unseenActivity = 0; setBadge('activity-badge', 0); }
    markSeen();
  }
  for (const s of surfaces) {
    $('tab-' + s).addEventListener('click', () => show(s === 'activity' && current === 'activity' ? lastMain : s));
  }
  $('activity-close').addEventListener('click', () => { show(lastMain); $('tab-activity').focus(); });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && current === 'activity' && desktop.matches) show(lastMain);
  });
  const reviewVisible = () => current === 'review' || (desktop.matches && current !== 'activity');
  desktop.addEventListener('change', markSeen);

  const badgeLabel = {
    'review-badge': ['tab-review', 'Review', ' pending'],
    'activity-badge': ['tab-activity', 'Activity', ' new'],
  };
  function setBadge(id, n) {
    const b = $(id);
    b.textContent = String(n);
    b.hidden = n <= 0;
    // The count is aria-hidden; screen readers get it in the tab's name.
    const [tab, name, what] = badgeLabel[id];
    $(tab).setAttribute('aria-label', n > 0 ? name + ', ' + n + what : name);
  }
  let unseenActivity = 0;
  function noteActivity() {
    if (current === 'activity') return;
    unseenActivity += 1;
    setBadge('activity-badge', unseenActivity);
  }

  // ---- access token --------------------------------------------------
  // The owner always authenticates (issue #12). This device's credential
  // comes from a one-time pairing link (`#pair=CODE`, printed by `silas
  // start` / `silas pair`): the code is read from the fragment, cleared
  // from the address bar, exchanged once with POST /pair for a device token.
  // The token screen stays as a fallback (paste a token). The token is kept
  // in localStorage so every tab and a browser restart reuse it: it is this
  // device's own credential, revocable with `silas devices revoke`. It
  // rides in the Sec-WebSocket-Protocol header or the first `auth` frame —
  // never in the URL — and as a Bearer header on the secure-input POST.
  const TOKEN_KEY = 'silas.token';
  let token = null;
  try { token = window.localStorage.getItem(TOKEN_KEY); } catch (e) { token = null; }
  function rememberToken(t) {
    token = t || null;
    try {
      if (token) window.localStorage.setItem(TOKEN_KEY, token);
      else window.localStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* memory only */ }
  }

  // A pairing code in the fragment, removed from the address bar and the
  // history entry at once (it is single use, but should not linger).
  function takePairingCode() {
    const m = /^#pair=([A-Za-z0-9_-]{16,128})$/.exec(location.hash || '');
    if (!location.hash.startsWith('#pair=')) return null;
    try { history.replaceState(null, '', location.pathname + location.search); } catch (e) { location.hash = ''; }
    return m ? m[1] : '';
  }

  async function pairWith(code) {
    try {
      const res = await fetch('/pair', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        credentials: 'same-origin',
        body: JSON.stringify({ code, label: (navigator.userAgent || 'browser').slice(0, 64) }),
      });
      if (!res.ok) return false;
      const body = await res.json();
      if (typeof body.token !== 'string' || !body.token) return false;
      rememberToken(body.token);
      return true;
    } catch (e) {
      return false;
    }
  }

  const AUTH_ERROR_TEXT = $('auth-error').textContent;
  function askForToken(rejected) {
    const screen = $('auth-screen');
    $('auth-error').hidden = !rejected;
    screen.hidden = false;
    syncModal();
    $('auth-token').value = '';
    $('auth-token').focus();
  }
  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('auth-token').value.trim();
    $('auth-token').value = '';
    if (!t) { $('auth-token').focus(); return; }
    rememberToken(t);
    $('auth-screen').hidden = true;
    syncModal();
    reconnectNow();
    if (!$('onboarding').hidden) focusOnboarding();
  });

  // ---- connection ----------------------------------------------------
  let ws = null;
  let attempt = 0;
  let retryTimer = null;
  let authSent = false;
  let authWaitTimer = null;

  function setConn(state, text) {
    $('conn').dataset.state = state;
    $('conn-text').textContent = text;
    $('send').disabled = state !== 'connected';
  }

  function reconnectNow() {
    const old = ws;
    ws = null;
    if (old) { try { old.close(1000); } catch (e) { /* already closed */ } }
    attempt = 0;
    connect();
  }

  function connect() {
    clearTimeout(retryTimer);
    clearTimeout(authWaitTimer);
    setConn(attempt ? 'reconnecting' : 'connecting', attempt ? 'Reconnecting…' : 'Connecting…');
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    let sock;
    // A known token rides in the Sec-WebSocket-Protocol header (§8.1's first
    // method): the server then knows the owner before any frame, which a
    // chatbot deployment needs to tell the owner from customers. A token
    // with characters a subprotocol cannot carry falls back to the first
    // `auth` frame. Never in the URL.
    let viaHeader = false;
    try {
      if (token && /^[A-Za-z0-9._~-]+$/.test(token)) {
        sock = new WebSocket(scheme + '://' + location.host + '/ws', ['silas.v1', 'bearer.' + token]);
        viaHeader = true;
      } else {
        sock = new WebSocket(scheme + '://' + location.host + '/ws', ['silas.v1']);
      }
    } catch (e) {
      scheduleRetry();
      return;
    }
    ws = sock;
    authSent = viaHeader;
    sock.addEventListener('open', () => {
      if (ws !== sock) return;
      if (viaHeader) return;
      if (token) {
        sock.send(JSON.stringify({ type: 'auth', token }));
        authSent = true;
      } else {
        // The server waits 5 s for an auth frame, then says 4001.
        // Ask sooner; submitting reconnects with the token.
        authWaitTimer = setTimeout(() => { if (ws === sock && !authed) askForToken(false); }, 1500);
      }
    });
    sock.addEventListener('message', (ev) => {
      if (ws !== sock) return;
      let frame;
      try { frame = JSON.parse(ev.data); } catch (e) { return; }
      handle(frame);
    });
    sock.addEventListener('close', (ev) => {
      if (ws !== sock) return;
      ws = null;
      authed = false;
      clearTimeout(authWaitTimer);
      if (ev.code === 4001) {
        const rejected = authSent;
        $('auth-error').textContent = AUTH_ERROR_TEXT;
        if (rejected) rememberToken(null);
        setConn('unauthorized', 'Needs access token');
        askForToken(rejected);
        return;
      }
      scheduleRetry();
    });
  }
  let authed = false;

  function scheduleRetry() {
    attempt += 1;
    // 0.5 s, 1 s, 2 s … capped at 15 s, with jitter so tabs don't stampede.
    const base = Math.min(15000, 500 * Math.pow(2, attempt - 1));
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    setConn('offline', 'Offline · retrying in ' + Math.max(1, Math.round(delay / 1000)) + ' s');
    retryTimer = setTimeout(connect, delay);
  }

  window.addEventListener('online', () => { if (!ws && $('auth-screen').hidden) { attempt = 0; connect(); } });

  // Reply ids this page has shown (oldest first, bounded): a reply the
  // daemon sends again is not shown twice.
  const SHOWN_REPLIES_KEPT = 2000;
  const shownReplies = new Set();

  function send(frame) {
    if (!ws || ws.readyState !== WebSocket.OPEN || !authed) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  // ---- onboarding (§1.5) ---------------------------------------------
  // First run only (a non-secret flag in localStorage). The provider and
  // identity steps of §1.5 are daemon configuration, not something the page
  // can change, so the flow explains what Silas is, which model answers
  // (the offline responder is labelled as such) and how the surfaces work.
  const ONBOARDED = 'silas.onboarded';
  let model = null;
  let modelKnown = false;
  function onboardingStep(n) {
    for (const s of document.querySelectorAll('.onboard-step')) s.hidden = s.dataset.step !== String(n);
    $('onboarding').setAttribute('aria-labelledby', 'onboard-h' + n);
    focusOnboarding();
  }
  function focusOnboarding() {
    if (!$('auth-screen').hidden) return;
    const step = document.querySelector('.onboard-step:not([hidden])');
    const h = step && step.querySelector('h2');
    if (h) h.focus();
  }
  function renderModelStep() {
    const p = $('onboard-model');
    if (!modelKnown) { p.textContent = 'Checking which model answers you…'; p.className = 'onboard-model'; return; }
    if (model && model.offline) {
      p.className = 'onboard-model is-offline';
      p.textContent = 'Offline model: a rule-based responder, not an LLM. ' + str(model.description) +
        ' To use an LLM, give the daemon an API key (OPENROUTER_API_KEY) and restart it.';
    } else {
      p.className = 'onboard-model is-ok';
      p.textContent = 'Your model is connected' + (model && model.description ? ': ' + str(model.description) : '.') ;
    }
  }
  function finishOnboarding() {
    local.set(ONBOARDED, '1');
    $('onboarding').hidden = true;
    syncModal();
    show('stream');
    bubble('silas', 'I\u2019m ready. Tell me what to connect first, or I\u2019ll figure it out.');
    $('composer-input').focus();
  }
  $('onboard-start').addEventListener('click', () => onboardingStep(2));
  $('onboard-next').addEventListener('click', () => onboardingStep(3));
  $('onboard-done').addEventListener('click', finishOnboarding);
  for (const b of document.querySelectorAll('.onboard-skip')) b.addEventListener('click', finishOnboarding);
  if (local.get(ONBOARDED) !== '1') {
    $('onboarding').hidden = false;
    syncModal();
    onboardingStep(1);
  }

  // ---- stream --------------------------------------------------------
  function appendToStream(node) {
    const empty = $('stream-empty');
    if (empty) empty.remove();
    $('messages').appendChild(node);
    node.scrollIntoView({ block: 'end' });
  }

  function bubble(who, text, timestamp) {
    const li = el('li', 'msg msg-' + who);
    li.appendChild(el('span', 'msg-meta', (who === 'user' ? 'You' : 'Silas') + ' · ' + clock(timestamp)));
    li.appendChild(el('p', 'msg-text', text));
    appendToStream(li);
    return li;
  }

  // One line that a slow model's progress updates in place; the reply
  // replaces it.
  let progressLine = null;
  function showProgress(text) {
    if (progressLine && progressLine.isConnected) {
      progressLine.querySelector('.msg-text').textContent = text;
      return;
    }
    progressLine = el('li', 'msg msg-system msg-progress');
    progressLine.setAttribute('aria-live', 'polite');
    progressLine.appendChild(el('p', 'msg-text', text));
    appendToStream(progressLine);
  }
  function clearProgress() {
    if (progressLine) progressLine.remove();
    progressLine = null;
  }

  function systemNote(text, action) {
    const li = el('li', 'msg msg-system');
    li.appendChild(el('p', 'msg-text', text));
    if (action) {
      const b = el('button', 'btn btn-chip', action.label);
      b.type = 'button';
      b.addEventListener('click', action.run);
      li.appendChild(b);
    }
    appendToStream(li);
  }

  // ---- outbox ----------------------------------------------------------
  // A message stays here, under its own client_id, until the daemon says
  // `accepted` (it is then durable). One sent while offline, or whose
  // connection died before `accepted` came, is sent again after the next
  // sign-in; the daemon records a client_id once, so a message that did
  // arrive is not answered twice.
  const outbox = new Map();
  function newClientId() {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b); // also on plain-http LAN addresses (randomUUID is not)
    return 'w' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }
  function outboxStatus(entry, text, state) {
    let s = entry.li.querySelector('.msg-status');
    if (!s) {
      s = el('span', 'msg-status');
      entry.li.appendChild(s);
    }
    entry.li.dataset.delivery = state;
    s.textContent = text;
  }
  function sendQueued(id) {
    const entry = outbox.get(id);
    if (!entry) return;
    if (send({ type: 'message', text: entry.text, client_id: id })) {
      outboxStatus(entry, 'Sending…', 'sending');
    } else {
      outboxStatus(entry, 'Waiting for the connection — sent when Silas is back.', 'waiting');
    }
  }
  function onAccepted(f) {
    const entry = typeof f.client_id === 'string' ? outbox.get(f.client_id) : null;
    if (!entry) return;
    outbox.delete(f.client_id);
    const s = entry.li.querySelector('.msg-status');
    if (s) s.remove();
    entry.li.dataset.delivery = 'accepted';
  }
  // A refusal (busy, rate limited) names the message by its client_id: it
  // was not recorded, and the owner decides whether to send it again.
  function onMessageRefused(f) {
    const entry = outbox.get(f.request_id);
    if (!entry) return false;
    outbox.delete(f.request_id);
    outboxStatus(entry, 'Not sent: ' + str(f.message), 'refused');
    const again = el('button', 'btn btn-chip', 'Send again');
    again.type = 'button';
    again.addEventListener('click', () => {
      again.remove();
      outbox.set(f.request_id, entry);
      sendQueued(f.request_id);
    });
    entry.li.appendChild(again);
    return true;
  }

  const input = $('composer-input');
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    // `/secret LABEL` opens a secure-input card at once and is no message
    // (nothing is recorded, no `accepted` comes): sent now or not at all,
    // never from the outbox, which would open a fresh card on every reconnect.
    if (/^\/secret(\s|$)/.test(text)) {
      if (!send({ type: 'message', text })) {
        systemNote('Not connected yet — your message is still in the box.');
        return;
      }
      bubble('user', text);
    } else {
      const id = newClientId();
      outbox.set(id, { text, li: bubble('user', text) });
      sendQueued(id);
    }
    input.value = '';
    autosize();
  });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  function autosize() {
    input.rows = Math.min(6, Math.max(1, input.value.split('\n').length));
  }
  input.addEventListener('input', autosize);

  // ---- risk ladder (§0.5.2) ------------------------------------------
  const RISKS = ['low', 'medium', 'high', 'irreversible'];
  const RISK_TEXT = { low: 'Low risk', medium: 'Medium risk', high: 'High risk', irreversible: 'Irreversible' };
  const rank = (r) => RISKS.indexOf(r);
  const validRisk = (r) => (RISKS.includes(r) ? r : null);

  // riskOf(kind, frame) — the card's risk level is the server's
  // (silas_core::risk: plan_risk for plans, card_risk for every other card,
  // §0.5.2 "determined by the approval scope and action type, not by the
  // agent"); this client never works one out. A secure-input card has none
  // (it collects a credential, not a decision). A frame without a level —
  // an older server, a bug — gets the most caution short of irreversible.
  function riskOf(kind, f) {
    if (kind === 'secure_input_request') return null;
    return validRisk(f && f.risk_level) || 'high';
  }

  // ---- review queue --------------------------------------------------
  const queue = []; // {key, kind, frame, risk, intent, seenAt}
  const answered = new Set(); // keys answered here; a resend is not shown twice
  const decisionTimes = []; // ms from seeing to deciding, medium+ cards, newest last
  const FAST_MS = 1000;
  const FAST_WINDOW = 10;
  const FAST_MIN_SAMPLES = 3;
  const DENSE_QUEUE = 5;
  let cueDismissed = '';

  function enqueue(kind, f) {
    const key = kind === 'secure_input_request' ? 'secret:' + str(f.ref_id) : str(f.request_id);
    if (!key || answered.has(key) || queue.some((q) => q.key === key)) return;
    const spec = CARDS[kind];
    const entry = { key, kind, frame: f, risk: riskOf(kind, f), seenAt: 0 };
    entry.intent = spec.intent(f, entry);
    queue.push(entry);
    renderReview();
    if (!reviewVisible()) reviewNote(entry);
  }

  // One "waiting in Review" note at the bottom of the Stream, updated in
  // place while nothing else has been said, so a burst of cards is one line.
  let waitingNote = null;
  function reviewNote(entry) {
    const list = $('messages');
    if (waitingNote && list.lastElementChild === waitingNote.li && waitingNote.n > 0) {
      waitingNote.n += 1;
      waitingNote.text.textContent = waitingNote.n + ' decisions are waiting for you in Review, starting with: ' + queue[0].intent + '.';
      return;
    }
    systemNote('Waiting for you in Review: ' + entry.intent + '.', { label: 'Open Review', run: () => show('review') });
    const li = list.lastElementChild;
    waitingNote = { li, text: li.querySelector('.msg-text'), n: 1 };
  }

  function markSeen() {
    const a = queue[0];
    if (a && !a.seenAt && reviewVisible()) a.seenAt = performance.now();
  }

  function median(xs) {
    const s = xs.slice().sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  }

  // Fatigue cues (§0.5.4): visual only — nothing here waits or blocks.
  function updateCues() {
    const heavy = queue.filter((q) => q.risk && rank(q.risk) >= 1);
    const dense = heavy.length > DENSE_QUEUE;
    const fast = decisionTimes.length >= FAST_MIN_SAMPLES && median(decisionTimes) < FAST_MS;
    const state = (dense ? 'dense' : '') + (fast ? 'fast' : '');
    $('review-badge').classList.toggle('is-elevated', dense);
    $('tab-review').classList.toggle('is-elevated', dense);
    const cue = $('fatigue-cue');
    cue.hidden = !state || state === cueDismissed;
    $('cue-dense').hidden = !dense;
    $('cue-fast').hidden = !fast;
    if (dense) {
      const by = {};
      for (const q of heavy) by[q.risk] = (by[q.risk] || 0) + 1;
      const parts = RISKS.slice(1).reverse().filter((r) => by[r]).map((r) => by[r] + ' ' + RISK_TEXT[r].toLowerCase());
      $('cue-dense-text').textContent = heavy.length + ' decisions at medium risk or higher are waiting (' + parts.join(', ') +
        '). Take them one at a time — the risky ones are marked.';
    }
  }
  $('cue-dismiss').addEventListener('click', () => {
    cueDismissed = (queue.filter((q) => q.risk && rank(q.risk) >= 1).length > DENSE_QUEUE ? 'dense' : '') +
      (decisionTimes.length >= FAST_MIN_SAMPLES && median(decisionTimes) < FAST_MS ? 'fast' : '');
    updateCues();
  });

  function renderReview() {
    const active = $('review-active');
    active.replaceChildren();
    setBadge('review-badge', queue.length);
    updateCues();
    if (!queue.length) {
      const p = el('p', 'empty', 'Nothing to review. Decisions that need you appear here, one at a time.');
      p.id = 'review-empty';
      active.appendChild(p);
      $('up-next-wrap').hidden = true;
      return;
    }
    active.appendChild(buildCard(queue[0]));
    markSeen();
    const rest = queue.slice(1);
    $('up-next-wrap').hidden = rest.length === 0;
    $('up-next-count').textContent = String(rest.length);
    const list = $('up-next');
    list.replaceChildren();
    rest.forEach((q, i) => {
      const li = el('li', 'up-next-item');
      li.dataset.kind = q.kind;
      li.appendChild(el('span', 'up-next-n', String(i + 2)));
      li.appendChild(el('span', 'up-next-text', q.intent));
      li.appendChild(riskBadge(q.risk, q.kind));
      list.appendChild(li);
    });
  }

  // Send a card's answer; on success the card leaves the queue and the
  // decision is written to Activity. Returns false (card stays) if offline.
  function respond(entry, frame, what, tone) {
    if (!send(frame)) {
      systemNote('Not connected — your decision was not sent. It stays in Review.');
      return false;
    }
    if (entry.risk && rank(entry.risk) >= 1 && entry.seenAt) {
      decisionTimes.push(performance.now() - entry.seenAt);
      while (decisionTimes.length > FAST_WINDOW) decisionTimes.shift();
    }
    answered.add(entry.key);
    const i = queue.indexOf(entry);
    if (i >= 0) queue.splice(i, 1);
    timelineEvent(what, entry.intent, tone || 'info');
    renderReview();
    const next = document.querySelector('#review-active .card .card-actions button, #review-active .card input, #review-active .empty');
    if (next && reviewVisible()) {
      if (next.classList.contains('empty')) next.tabIndex = -1;
      next.focus({ preventScroll: true });
    }
    return true;
  }

  // ---- card anatomy (§0.5.3) -----------------------------------------
  function riskBadge(risk, kind) {
    if (!risk) return el('span', 'risk risk-secret', kind === 'secure_input_request' ? 'Credential' : 'Info');
    const b = el('span', 'risk risk-' + risk, RISK_TEXT[risk]);
    return b;
  }

  let cardSeq = 0;
  function buildCard(entry) {
    const spec = CARDS[entry.kind];
    const f = entry.frame;
    const card = el('article', 'card' + (entry.risk ? ' card-' + entry.risk : ''));
    card.dataset.kind = entry.kind;
    card.dataset.risk = entry.risk || 'none';
    card.dataset.key = entry.key;
    const id = 'card-title-' + ++cardSeq;
    card.setAttribute('aria-labelledby', id);
    const head = el('header', 'card-head');
    const meta = el('div', 'card-meta');
    meta.append(el('span', 'card-kind', spec.label), riskBadge(entry.risk, entry.kind));
    const title = el('h3', 'card-title', shown(str(entry.intent)));
    title.id = id;
    title.tabIndex = -1;
    head.append(meta, title);
    card.appendChild(head);
    const rationale = spec.rationale(f, entry);
    if (rationale) card.appendChild(el('p', 'card-rationale', rationale));
    const affected = spec.affected ? spec.affected(f, entry) : '';
    if (affected) card.appendChild(el('p', 'card-affected', affected));
    const body = el('div', 'card-main');
    card.appendChild(body);
    const details = el('details', 'card-details');
    details.appendChild(el('summary', null, 'Details'));
    // High and irreversible cards show their details unasked (§0.5.3).
    details.open = !!entry.risk && rank(entry.risk) >= 2;
    const actions = el('div', 'card-actions');
    actions.setAttribute('role', 'group');
    actions.setAttribute('aria-label', 'Choices');
    const ctx = { entry, card, body, details, actions, f };
    spec.build(ctx);
    if (details.childElementCount > 1) card.insertBefore(details, null);
    card.appendChild(actions);
    return card;
  }

  function fact(dl, term, value) {
    if (value === '' || value === null || value === undefined) return;
    const d = el('div');
    d.append(el('dt', null, term), el('dd', null, shown(value)));
    dl.appendChild(d);
  }
  function facts(parent) {
    const dl = el('dl', 'card-facts');
    parent.appendChild(dl);
    return dl;
  }
  function jsonDetails(ctx, label, value) {
    if (value === undefined || value === null || (typeof value === 'object' && !Object.keys(value).length)) return;
    ctx.details.appendChild(el('p', 'details-label', label));
    ctx.details.appendChild(el('pre', 'details-json', typeof value === 'string' ? value : JSON.stringify(value, null, 2)));
  }

  // Action: {label (the consequence), run, tone: 'primary'|'alt'|'destructive',
  // gated: takes the card's risk ladder, risk: override for this button}.
  // Order is enforced: recommended first, alternatives, destructive last.
  const ORDER = { primary: 0, alt: 1, destructive: 2 };
  function setActions(ctx, list) {
    const sorted = list.slice().sort((a, b) => ORDER[a.tone || 'alt'] - ORDER[b.tone || 'alt']);
    ctx.actions.replaceChildren();
    for (const a of sorted) {
      const b = el('button', 'btn ' + (a.tone === 'primary' ? 'btn-primary' : a.tone === 'destructive' ? 'btn-ghost btn-destructive' : 'btn-secondary'));
      b.type = 'button';
      b.appendChild(el('span', 'btn-label', a.label));
      if (a.hint) {
        b.appendChild(el('span', 'btn-hint', a.hint));
      }
      b.setAttribute('aria-label', a.label + (a.hint ? ', ' + a.hint : ''));
      if (a.disabled) b.disabled = true;
      if (a.id) b.dataset.action = a.id;
      b.addEventListener('click', () => ladder(ctx, a, list));
      ctx.actions.appendChild(b);
    }
  }

  // Risk ladder: low → tap; medium → tap + confirm chip; high → tap + slide;
  // irreversible → tap + slide + a final explicit confirm. Strong local auth
  // (§0.5.2 "if available") needs an enrolled platform credential, which this
  // build does not have, so the final confirm stands in for it. Ungated
  // (safe) actions — decline, defer, skip — are always a single tap.
  function ladder(ctx, a, list) {
    const risk = a.gated ? (a.risk || ctx.entry.risk || 'low') : 'low';
    if (risk === 'low') { a.run(); return; }
    const back = () => setActions(ctx, list);
    if (risk === 'medium') { confirmChip(ctx, a, back, false); return; }
    slider(ctx, a, back, () => (risk === 'irreversible' ? confirmChip(ctx, a, back, true) : a.run()));
  }

  function confirmChip(ctx, a, back, final) {
    const row = ctx.actions;
    row.replaceChildren();
    const q = el('p', 'confirm-q', final ? 'This cannot be undone. Last check:' : 'Sure? This will:');
    const yes = el('button', 'btn ' + (final ? 'btn-danger' : 'btn-primary'), (final ? 'Permanently: ' : 'Confirm: ') + a.label);
    yes.type = 'button';
    yes.dataset.confirm = final ? 'final' : 'confirm';
    yes.addEventListener('click', () => a.run());
    const no = el('button', 'btn btn-ghost', 'Back');
    no.type = 'button';
    no.addEventListener('click', back);
    row.append(q, yes, no);
    yes.focus();
  }

  // Slide to confirm: a native range input (touch, mouse and keyboard all
  // work, and screen readers announce it as a slider). Reaching the end
  // confirms; letting go early springs back. Arrow keys move a quarter,
  // End jumps to the end.
  function slider(ctx, a, back, done) {
    const row = ctx.actions;
    row.replaceChildren();
    const wrap = el('div', 'slide');
    const id = 'slide-' + ++cardSeq;
    const label = el('label', 'slide-label', 'Slide to confirm: ' + a.label);
    label.htmlFor = id;
    const range = el('input', 'slide-range');
    range.type = 'range';
    range.id = id;
    range.min = '0';
    range.max = '100';
    range.step = '1';
    range.value = '0';
    let fired = false;
    const paint = () => {
      range.style.setProperty('--p', range.value + '%');
      range.setAttribute('aria-valuetext', range.value >= 100 ? 'Confirmed' : range.value + ' percent — slide to the end to confirm');
    };
    const check = () => {
      paint();
      if (!fired && Number(range.value) >= 100) { fired = true; wrap.classList.add('is-done'); done(); }
    };
    const release = () => { if (!fired && Number(range.value) < 100) { range.value = '0'; paint(); } };
    range.addEventListener('input', check);
    range.addEventListener('change', () => { check(); });
    range.addEventListener('pointerup', release);
    range.addEventListener('touchend', release);
    range.addEventListener('blur', release);
    range.addEventListener('keydown', (ev) => {
      let v = Number(range.value);
      if (ev.key === 'ArrowRight' || ev.key === 'ArrowUp') v = Math.min(100, v + 25);
      else if (ev.key === 'ArrowLeft' || ev.key === 'ArrowDown') v = Math.max(0, v - 25);
      else if (ev.key === 'End' || ev.key === 'PageUp') v = 100;
      else if (ev.key === 'Home' || ev.key === 'PageDown') v = 0;
      else return;
      ev.preventDefault();
      range.value = String(v);
      check();
    });
    paint();
    wrap.append(label, range);
    const no = el('button', 'btn btn-ghost', 'Back');
    no.type = 'button';
    no.addEventListener('click', back);
    row.append(wrap, no);
    range.focus();
  }

  // ---- cards ---------------------------------------------------------
  function money(n) {
    return typeof n === 'number' ? '$' + (n < 1 ? n.toFixed(2) : n.toFixed(n % 1 ? 2 : 0)) : null;
  }
  function duration(s) {
    if (typeof s !== 'number') return null;
    if (s < 90) return s + ' s';
    if (s < 5400) return Math.round(s / 60) + ' min';
    return Math.round(s / 3600) + ' h';
  }
  function budgetText(b) {
    if (!b || typeof b !== 'object') return 'Default limits';
    const parts = [];
    const c = money(b.max_cost_usd);
    if (c) parts.push('up to ' + c);
    const t = duration(b.max_wall_time_seconds);
    if (t) parts.push(t + ' max');
    if (typeof b.max_attempts === 'number') parts.push(plural(b.max_attempts, 'attempt'));
    return parts.length ? parts.join(' · ') : 'Default limits';
  }
  function expectText(e) {
    if (!e || typeof e !== 'object') return '';
    const k = Object.keys(e)[0];
    if (!k) return '';
    const v = e[k];
    return words(k) + (v === true || v === null || typeof v === 'object' ? '' : ' ' + v);
  }
  function permissionList(title, items, added) {
    const wrap = el('div', 'perm');
    wrap.appendChild(el('p', 'perm-title', title));
    const ul = el('ul', 'perm-list');
    for (const p of items) {
      const li = el('li', added && added.has(p) ? 'perm-new' : null, p);
      if (added && added.has(p)) li.appendChild(el('span', 'visually-hidden', ' (new)'));
      ul.appendChild(li);
    }
    if (!items.length) ul.appendChild(el('li', 'perm-none', 'none'));
    wrap.appendChild(ul);
    return wrap;
  }
  function optionList(v) {
    return arr(v).map((o) => (typeof o === 'string' ? { label: o, value: o } : { label: str(obj(o).label || obj(o).value), value: str(obj(o).value || obj(o).label), o: obj(o) }))
      .filter((o) => o.value);
  }
  const DESTRUCTIVE_WORDS = /^(stop|cancel|abort|no|decline|reject|skip|block|deny)\b/i;

  // Batch items that deviate from established patterns are flagged by the
  // server (`anomaly`/`flagged`/non-empty `flags`); an item whose confidence
  // is below LOW_CONFIDENCE is treated the same. Flagged items start unchecked.
  const LOW_CONFIDENCE = 0.6;
  function isAnomaly(item) {
    return item.anomaly === true || item.flagged === true || arr(item.flags).length > 0 ||
      (typeof item.confidence === 'number' && item.confidence < LOW_CONFIDENCE);
  }

  const CARDS = {
    approval_request: {
      label: 'Plan approval',
      intent: (f) => str(f.title) || 'Run a plan',
      rationale: () => 'Silas wrote this plan from your request. Nothing runs until you approve; tests Silas cannot change check the result.',
      build(ctx) {
        const f = ctx.f;
        const body = el('div', 'card-body', shown(str(f.body)));
        ctx.body.appendChild(body);
        const checks = arr(f.verify);
        const plan = obj(f.plan);
        const dl = facts(ctx.body);
        // Everything the plan hash covers that changes what runs (the
        // server's PlanView), so the owner approves what will run.
        if (f.from_scope) fact(dl, 'Asked by', 'a customer (' + str(f.from_scope) + ')');
        if (plan.kind) fact(dl, 'Kind', str(plan.kind) + (plan.standing ? ' — standing approval, every cycle' : ''));
        if (plan.workspace) {
          // The server's WorkspaceView (issue #15): name, registered path, access, apply mode.
          const w = obj(plan.workspace);
          const how = w.access === 'write' ? (w.apply === 'direct' ? 'write; applies directly' : 'write; applies after review') : 'read';
          fact(dl, 'Workspace', str(w.name) + ' (' + str(w.path || 'path not looked up') + ') — ' + how);
          if (arr(w.extra_paths).length) fact(dl, 'Also reads', arr(w.extra_paths).join(', ') + ' (read and execute only)');
          if (arr(w.protected).length) fact(dl, 'Protected', arr(w.protected).join(', '));
          if (w.allow_protected_edits === true) fact(dl, 'Protected edits', 'allowed (tests, configuration)');
          if (w.commit_message) fact(dl, 'Commit', str(w.commit_message));
        }
        if (plan.schedule) fact(dl, 'Schedule', str(plan.schedule));
        if (plan.terms) fact(dl, 'Approval', str(plan.terms));
        if (plan.follow_up_of) fact(dl, 'Continues', str(plan.follow_up_of) + (arr(plan.input_artifacts_from).length ? ' (uses ' + arr(plan.input_artifacts_from).join(', ') + ')' : ''));
        if (arr(plan.tasks).length) fact(dl, 'Tasks', arr(plan.tasks).join(', '));
        if (arr(plan.depends_on).length) fact(dl, 'Depends on', arr(plan.depends_on).join(', '));
        if (arr(plan.gates).length) fact(dl, 'Gates', arr(plan.gates).join('; '));
        if (arr(plan.access_levels).length) fact(dl, 'Access', arr(plan.access_levels).join('; '));
        if (arr(plan.escalation).length) fact(dl, 'On failure', arr(plan.escalation).join('; '));
        if (plan.on_failure) fact(dl, 'Fix tasks', str(plan.on_failure));
        if (arr(plan.skills).length) fact(dl, 'Skills', arr(plan.skills).join(', '));
        const networked = checks.filter((c) => obj(c).network === true);
        if (networked.length) fact(dl, 'Network', 'checks with network: ' + networked.map((c) => obj(c).name).join(', '));
        fact(dl, 'Budget', budgetText(f.budget));
        fact(dl, 'Verified by', checks.length ? plural(checks.length, 'check') + ': ' + checks.map((c) => obj(c).name).filter(Boolean).join(', ') : 'No checks');
        const reasons = arr(f.risk_reasons).map(str).filter(Boolean);
        if (reasons.length) {
          ctx.details.appendChild(el('p', 'details-label', 'Why this risk level'));
          const rl = el('ul', 'card-risk-reasons');
          for (const r of reasons) rl.appendChild(el('li', null, r));
          ctx.details.appendChild(rl);
        }
        const ul = el('ul', 'card-checks');
        for (const c0 of checks) {
          const c = obj(c0);
          const li = el('li', 'check');
          li.appendChild(el('span', 'check-name', c.name || 'check'));
          if (c.network === true) li.appendChild(el('span', 'check-network', 'network'));
          if (c.run) li.appendChild(el('code', 'check-run', shown(c.run)));
          const ex = expectText(c.expect);
          if (ex) li.appendChild(el('span', 'check-expect', 'expects ' + ex));
          ul.appendChild(li);
        }
        if (checks.length) { ctx.details.appendChild(el('p', 'details-label', 'Verification checks')); ctx.details.appendChild(ul); }
        const e = ctx.entry;
        setActions(ctx, [
          { id: 'approve', label: 'Approve + run', hint: checks.length ? 'then ' + plural(checks.length, 'check') : 'in the sandbox', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'approved' }, 'You approved', 'ok') &&
              systemNote('Approved: ' + e.intent + '. Follow it in Activity.', { label: 'Open Activity', run: () => show('activity') }) },
          { id: 'decline', label: 'Decline', hint: 'nothing runs', tone: 'destructive',
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'declined' }, 'You declined', 'muted') &&
              systemNote('Declined: ' + e.intent + '. Nothing will run.') },
        ]);
      },
    },

    // A verified change set for one of the owner's workspaces (issue #15):
    // the file list and the unified diff, then apply / decline; after an
    // apply the same card type offers the undo within its window.
    apply_changes: {
      label: 'Changes',
      intent: (f) => (f.phase === 'undo' ? 'Undo the changes for ' : 'Apply the changes for ') + str(f.title),
      rationale: (f) => (f.phase === 'undo'
        ? 'These changes were applied to your workspace. Undo puts every file back exactly as it was.'
        : 'Silas made these changes on a copy and the checks passed there. Nothing in your workspace changes until you apply them.'),
      build(ctx) {
        const f = ctx.f;
        const undo = f.phase === 'undo';
        const dl = facts(ctx.body);
        fact(dl, 'Workspace', str(f.workspace) + ' (' + str(f.path) + ')');
        const files = arr(f.files).map(obj);
        fact(dl, 'Changes', plural(files.length, 'file') + ', +' + (f.total_added || 0) + ' −' + (f.total_removed || 0));
        if (f.commit_message) fact(dl, 'Then commits', str(f.commit_message) + ' (locally, hooks off)');
        if (undo && f.undo_until) fact(dl, 'Undo until', str(f.undo_until));
        const ul = el('ul', 'change-files');
        for (const c of files) {
          const li = el('li', 'change-file' + (c.protected ? ' change-protected' : ''));
          li.appendChild(el('span', 'change-kind', str(c.kind)));
          li.appendChild(el('code', 'change-path', shown(str(c.path))));
          li.appendChild(el('span', 'change-lines', c.binary ? 'binary' : '+' + (c.added || 0) + ' −' + (c.removed || 0)));
          if (c.protected) li.appendChild(el('span', 'change-flag', 'defines the checks'));
          ul.appendChild(li);
        }
        ctx.body.appendChild(ul);
        if (f.protected_note) ctx.body.appendChild(el('p', 'card-warning', shown(str(f.protected_note))));
        const refused = arr(f.refused).map(str).filter(Boolean);
        if (refused.length) fact(dl, 'Not applied', refused.join('; '));
        if (!undo && f.diff) {
          ctx.details.appendChild(el('p', 'details-label', 'Diff' + (f.diff_truncated ? ' (cut; the whole diff is the task’s changes.diff)' : '')));
          ctx.details.appendChild(el('pre', 'change-diff', shown(str(f.diff))));
        }
        const e = ctx.entry;
        setActions(ctx, undo ? [
          { id: 'undo', label: 'Undo', hint: 'put every file back', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'approved' }, 'You undid the changes', 'ok') },
          { id: 'keep', label: 'Keep', hint: 'leave them applied', tone: 'destructive',
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'declined' }, 'You kept the changes', 'muted') },
        ] : [
          { id: 'apply', label: 'Apply', hint: 'to ' + str(f.path), tone: 'primary', gated: true,
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'approved' }, 'You applied the changes', 'ok') },
          { id: 'decline', label: 'Decline', hint: 'workspace untouched', tone: 'destructive',
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'declined' }, 'You declined the changes', 'muted') },
        ]);
      },
    },

    // A skill waiting for its install approval (issue #17): the validation
    // report and the content hash the approval binds; approving dry-runs
    // each script in the sandbox before the skill is installed.
    skill_install: {
      label: 'Skill',
      intent: (f) => 'Install the skill ' + str(f.skill),
      rationale: (f) => str(f.description) + ' — approving installs exactly these files (hash ' +
        str(f.content_hash).slice(0, 12) + '); any later change needs a new approval.',
      build(ctx) {
        const f = ctx.f;
        const dl = facts(ctx.body);
        fact(dl, 'Source', str(f.source));
        fact(dl, 'Content hash', str(f.content_hash));
        const scripts = arr(f.scripts).map(str).filter(Boolean);
        fact(dl, 'Scripts', scripts.length ? scripts.join(', ') : 'none');
        const net = arr(f.network).map(str).filter(Boolean);
        fact(dl, 'Network', net.length ? net.join(', ') : 'none');
        const creds = arr(f.credentials).map(str).filter(Boolean);
        if (creds.length) fact(dl, 'Credentials', creds.join(', '));
        if (f.mcp_server) fact(dl, 'MCP server', str(f.mcp_server) + ' (tools listed and bound at the dry run)');
        fact(dl, 'Report', 'valid, ' + plural(f.warnings || 0, 'warning'));
        const findings = arr(f.findings).map(str).filter(Boolean);
        if (findings.length) {
          ctx.details.appendChild(el('p', 'details-label', 'Validation report'));
          ctx.details.appendChild(el('pre', 'change-diff', shown(findings.join('\n'))));
        }
        const tr = arr(f.transformation).map(str).filter(Boolean);
        if (tr.length) {
          ctx.details.appendChild(el('p', 'details-label', 'Import changes'));
          ctx.details.appendChild(el('pre', 'change-diff', shown(tr.join('\n'))));
        }
        const e = ctx.entry;
        setActions(ctx, [
          { id: 'install', label: 'Install', hint: 'dry run, then install', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'approved' }, 'You installed the skill', 'ok') },
          { id: 'decline', label: 'Decline', hint: 'nothing is installed', tone: 'destructive',
            run: () => respond(e, { type: 'approval_response', request_id: f.request_id, verdict: 'declined' }, 'You declined the skill', 'muted') },
        ]);
      },
    },

    gate_approval: {
      label: 'Gate',
      intent: (f) => 'Let "' + words(f.gate_name) + '" through',
      rationale: (f) => (typeof f.context === 'string' && f.context) || str(obj(f.context).reason) ||
        'A policy gate stopped this turn. Approving lets it continue; blocking stops it here.',
      build(ctx) {
        const f = ctx.f;
        const dl = facts(ctx.body);
        fact(dl, 'Gate', words(f.gate_name));
        fact(dl, 'Value', str(f.value));
        if (typeof f.context !== 'string') jsonDetails(ctx, 'Context', f.context);
        const e = ctx.entry;
        setActions(ctx, [
          { id: 'approve', label: 'Approve', hint: 'continue this turn', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'gate_response', request_id: f.request_id, verdict: 'approve' }, 'You let a gate through', 'ok') },
          { id: 'block', label: 'Block', hint: 'stop here', tone: 'destructive',
            run: () => respond(e, { type: 'gate_response', request_id: f.request_id, verdict: 'block' }, 'You blocked a gate', 'muted') },
        ]);
      },
    },

    checkpoint: {
      label: 'Checkpoint',
      intent: (f) => str(f.message) || 'Checkpoint',
      rationale: () => 'Silas paused here and needs your choice to go on.',
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const opts = arr(f.options).map(str).filter(Boolean);
        setActions(ctx, opts.map((o, i) => ({
          id: o, label: cap(words(o)), tone: DESTRUCTIVE_WORDS.test(o) ? 'destructive' : i === 0 ? 'primary' : 'alt', gated: !DESTRUCTIVE_WORDS.test(o),
          run: () => respond(e, { type: 'checkpoint', request_id: f.request_id, verdict: o }, 'You chose "' + words(o) + '"'),
        })));
      },
    },

    batch_review: {
      label: 'Batch review',
      intent: (f) => {
        const b = obj(f.batch);
        return cap(words(b.action) || 'act on') + ' ' + plural(arr(b.items).length, 'item');
      },
      rationale: (f) => str(obj(f.batch).reason_summary) || 'Silas grouped these for one decision.',
      affected: (f) => {
        const items = arr(obj(f.batch).items).map(obj);
        const flagged = items.filter(isAnomaly).length;
        return plural(items.length, 'item') + (flagged ? ' · ' + flagged + ' flagged as unusual and left unchecked' : '');
      },
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const b = obj(f.batch);
        const verb = cap(words(b.action) || 'apply');
        const items = arr(b.items).map(obj);
        const fs = el('fieldset', 'batch');
        fs.appendChild(el('legend', 'visually-hidden', 'Items to ' + words(b.action)));
        const boxes = [];
        for (const it of items) {
          const odd = isAnomaly(it);
          const row = el('label', 'batch-item' + (odd ? ' is-anomaly' : ''));
          const cb = el('input');
          cb.type = 'checkbox';
          cb.checked = !odd;
          cb.value = str(it.item_id);
          const text = el('span', 'batch-text');
          text.appendChild(el('span', 'batch-title', str(it.title) || str(it.item_id)));
          const sub = [str(it.actor), str(it.reason)].filter(Boolean).join(' · ');
          if (sub) text.appendChild(el('span', 'batch-sub', sub));
          if (odd) text.appendChild(el('span', 'batch-flag', 'Unusual — check this one'));
          row.append(cb, text);
          fs.appendChild(row);
          boxes.push(cb);
        }
        ctx.body.appendChild(fs);
        if (typeof b.confidence_min === 'number') {
          const dl = facts(ctx.details);
          fact(dl, 'Lowest confidence', Math.round(b.confidence_min * 100) + '%');
          fact(dl, 'Batch', str(b.batch_id));
        }
        const refresh = () => {
          const sel = boxes.filter((c) => c.checked).map((c) => c.value);
          const all = sel.length === boxes.length;
          setActions(ctx, [
            all
              ? { id: 'approve', label: verb + ' all ' + boxes.length, tone: 'primary', gated: true,
                run: () => respond(e, { type: 'batch_review_response', request_id: f.request_id, verdict: 'approve' }, 'You approved: ' + verb + ' ' + plural(boxes.length, 'item'), 'ok') }
              : { id: 'approve', label: verb + ' ' + sel.length + ' selected', tone: 'primary', gated: true, disabled: sel.length === 0,
                run: () => respond(e, { type: 'batch_review_response', request_id: f.request_id, verdict: 'edit_selection', selected_item_ids: sel }, 'You approved: ' + verb + ' ' + sel.length + ' of ' + boxes.length, 'ok') },
            { id: 'decline', label: 'Decline', hint: 'leave all ' + boxes.length, tone: 'destructive',
              run: () => respond(e, { type: 'batch_review_response', request_id: f.request_id, verdict: 'decline' }, 'You declined a batch', 'muted') },
          ]);
        };
        for (const c of boxes) c.addEventListener('change', refresh);
        refresh();
      },
    },

    draft_review: {
      label: 'Draft review',
      intent: (f) => str(obj(f.metadata).intent) || (obj(f.metadata).recipient ? 'Send to ' + str(obj(f.metadata).recipient) : 'Send this draft'),
      rationale: (f) => str(f.context) || 'Silas drafted this for you to check before it goes out.',
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const draft = el('blockquote', 'draft', str(f.draft));
        ctx.body.appendChild(draft);
        jsonDetails(ctx, 'About this draft', f.metadata);
        const main = () => {
          ctx.body.replaceChildren(draft);
          setActions(ctx, [
            { id: 'approve', label: 'Send as written', tone: 'primary', gated: true,
              run: () => respond(e, { type: 'draft_review_response', request_id: f.request_id, verdict: 'approve' }, 'You approved a draft', 'ok') },
            { id: 'edit', label: 'Edit', hint: 'change it yourself', tone: 'alt', run: edit },
            { id: 'rephrase', label: 'Rephrase', hint: 'Silas tries again', tone: 'alt',
              run: () => respond(e, { type: 'draft_review_response', request_id: f.request_id, verdict: 'rephrase' }, 'You asked for a rephrase') },
            { id: 'reject', label: 'Reject', hint: 'nothing is sent', tone: 'destructive',
              run: () => respond(e, { type: 'draft_review_response', request_id: f.request_id, verdict: 'reject' }, 'You rejected a draft', 'muted') },
          ]);
        };
        const edit = () => {
          const id = 'draft-edit-' + ++cardSeq;
          const label = el('label', 'field-label', 'Your version');
          label.htmlFor = id;
          const ta = el('textarea', 'field');
          ta.id = id;
          ta.rows = 6;
          ta.value = str(f.draft);
          ctx.body.replaceChildren(label, ta);
          setActions(ctx, [
            { id: 'send-edit', label: 'Send my edit', tone: 'primary', gated: true,
              run: () => respond(e, { type: 'draft_review_response', request_id: f.request_id, verdict: 'edit', edited_text: ta.value }, 'You edited and approved a draft', 'ok') },
            { id: 'cancel-edit', label: 'Cancel edit', tone: 'destructive', run: main },
          ]);
          ta.focus();
        };
        main();
      },
    },

    decision: {
      label: 'Decision',
      intent: (f) => str(f.question) || 'Choose one',
      rationale: (f) => (f.allow_freetext ? 'Tap an option — or, if none fits, say it in your own words.' : 'Tap an option.'),
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const opts = optionList(f.options);
        let ta = null;
        const answer = (value, label) => {
          const free = ta ? ta.value.trim() : '';
          const frame = { type: 'decision_response', request_id: f.request_id };
          if (value !== null) frame.selected_value = value;
          if (free) frame.freetext = free;
          respond(e, frame, value !== null ? 'You chose "' + label + '"' : 'You answered in your own words');
        };
        if (f.allow_freetext) {
          const form = el('form', 'freetext');
          const id = 'free-' + ++cardSeq;
          const label = el('label', 'field-label', 'In your own words (optional)');
          label.htmlFor = id;
          ta = el('textarea', 'field');
          ta.id = id;
          ta.rows = 2;
          ta.maxLength = 4000;
          const go = el('button', 'btn btn-secondary', 'Send my answer');
          go.type = 'submit';
          form.append(label, ta, go);
          form.addEventListener('submit', (ev) => {
            ev.preventDefault();
            if (ta.value.trim()) answer(null, '');
            else ta.focus();
          });
          ctx.body.appendChild(form);
        }
        setActions(ctx, opts.map((o, i) => ({
          id: o.value, label: o.label, tone: i === 0 || (o.o && o.o.recommended) ? 'primary' : DESTRUCTIVE_WORDS.test(o.label) ? 'destructive' : 'alt',
          gated: false, run: () => answer(o.value, o.label),
        })));
      },
    },

    suggestion: {
      label: 'Suggestion',
      intent: (f) => str(obj(f.suggestion).intent) || str(obj(f.suggestion).title) || 'A suggested next step',
      rationale: (f) => str(obj(f.suggestion).rationale) || 'Silas thinks this is a good next step.',
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const s = obj(f.suggestion);
        const dl = facts(ctx.details);
        fact(dl, 'From', words(s.source));
        fact(dl, 'Prepared work item', str(s.proposed_work_item_id));
        // The lifecycle accepts do_it / not_now / dismiss and the card's own options.
        const alts = optionList(f.options).map((o) => ({ id: o.value, label: o.label, tone: 'alt', gated: true,
          run: () => respond(e, { type: 'suggestion_response', request_id: f.request_id, selected_value: o.value }, 'You picked "' + o.label + '"', 'ok') }));
        setActions(ctx, [
          { id: 'accept', label: 'Do it', hint: s.proposed_work_item_id ? 'plan goes to Review' : '', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'suggestion_response', request_id: f.request_id, selected_value: 'do_it' }, 'You accepted a suggestion', 'ok') },
          ...alts,
          { id: 'defer', label: 'Not now', hint: 'ask me later', tone: 'destructive',
            run: () => respond(e, { type: 'suggestion_response', request_id: f.request_id, selected_value: 'not_now' }, 'You deferred a suggestion', 'muted') },
        ]);
      },
    },

    autonomy_threshold_review: {
      label: 'Autonomy',
      intent: (f) => {
        const ch = arr(obj(f.proposal).changes).map(obj);
        const widen = ch.some((c) => c.direction === 'widen');
        return (widen ? 'Let Silas do more on its own' : 'Ask you more often') + (ch.length ? ' (' + plural(ch.length, 'threshold') + ')' : '');
      },
      rationale: (f) => str(obj(f.proposal).rationale) || 'Based on how often you corrected Silas recently.',
      affected: (f) => {
        const p = obj(f.proposal);
        const parts = [];
        if (typeof p.sample_size === 'number') parts.push(plural(p.sample_size, 'decision') + ' observed');
        if (typeof p.correction_rate === 'number') parts.push(Math.round(p.correction_rate * 1000) / 10 + '% corrected');
        if (p.evidence_window) parts.push(str(p.evidence_window));
        return parts.length ? 'Evidence: ' + parts.join(' · ') : '';
      },
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const ul = el('ul', 'deltas');
        for (const c0 of arr(obj(f.proposal).changes)) {
          const c = obj(c0);
          const li = el('li', 'delta delta-' + str(c.direction));
          li.appendChild(el('span', 'delta-key', words(c.key)));
          const v = el('span', 'delta-values');
          v.append(el('s', 'delta-from', str(c.current_value)), el('span', 'delta-arrow', ' → '), el('strong', 'delta-to', str(c.proposed_value)));
          li.appendChild(v);
          li.appendChild(el('span', 'delta-dir', c.direction === 'widen' ? 'more autonomy' : 'less autonomy'));
          ul.appendChild(li);
        }
        ctx.body.appendChild(ul);
        jsonDetails(ctx, 'Full proposal', f.proposal);
        setActions(ctx, [
          { id: 'approve', label: 'Approve change', tone: 'primary', gated: true,
            run: () => respond(e, { type: 'autonomy_threshold_response', request_id: f.request_id, verdict: 'approve' }, 'You approved an autonomy change', 'ok') },
          { id: 'tighten_now', label: 'Tighten now', hint: 'ask me more often', tone: 'alt',
            run: () => respond(e, { type: 'autonomy_threshold_response', request_id: f.request_id, verdict: 'tighten_now' }, 'You tightened autonomy') },
          { id: 'decline', label: 'Decline', hint: 'keep it as is', tone: 'destructive',
            run: () => respond(e, { type: 'autonomy_threshold_response', request_id: f.request_id, verdict: 'decline' }, 'You declined an autonomy change', 'muted') },
        ]);
      },
    },

    secure_input_request: {
      label: 'Secure input',
      intent: (f) => 'Enter your ' + (str(f.label) || 'secret'),
      rationale: () => 'It goes straight to this device\u2019s keyring. Silas only learns whether it was stored — never the value.',
      build(ctx) { secureForm(ctx, ctx.f, null); },
    },

    connection_setup_step: {
      label: 'Connection setup',
      intent: (f) => ({
        device_code: 'Enter a code to connect',
        browser_redirect: 'Sign in to connect',
        progress: 'Connecting…',
        completion: f.success === false ? 'Connection not completed' : 'Connection ready',
        failure: 'Connection failed',
        secure_input: 'Enter your ' + (str(obj(f.request).label) || 'secret'),
      }[f.step_type] || 'Connection setup: ' + words(f.step_type)),
      rationale: (f) => ({
        device_code: 'Open the page below, type the code, then come back and tap “I\u2019ve done it”. No password passes through Silas.',
        browser_redirect: 'Your browser opens the service\u2019s sign-in page; Silas catches the answer on this machine.',
        progress: str(f.message) || 'Silas is finishing the connection.',
        completion: str(f.summary) || '',
        failure: str(obj(f.failure).message) || 'The service refused the connection.',
        secure_input: 'It goes straight to this device\u2019s keyring. Silas only learns whether it was stored.',
      }[f.step_type] || ''),
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const step = str(f.step_type);
        const reply = (action, what, tone) => () => respond(e, { type: 'connection_setup_response', request_id: f.request_id, step_type: step, action }, what, tone);
        const cancel = { id: 'cancel', label: 'Cancel', hint: 'stop setting up', tone: 'destructive', run: reply('cancel', 'You cancelled a connection setup', 'muted') };
        const trouble = { id: 'trouble', label: 'Having trouble', tone: 'alt', run: reply('trouble', 'You asked for help connecting') };
        if (step === 'secure_input') { secureForm(ctx, obj(f.request), reply('done', 'You entered a secret', 'ok')); return; }
        if (step === 'device_code') {
          ctx.body.appendChild(el('p', 'user-code', str(f.user_code)));
          const p = el('p', 'card-linkline');
          p.append('Go to ', safeLink(f.verification_url));
          ctx.body.appendChild(p);
          if (typeof f.expires_in === 'number') ctx.body.appendChild(countdown(f.expires_in, 'Code expires in ', 'The code expired — tap “Having trouble” for a new one.'));
          setActions(ctx, [{ id: 'done', label: 'I\u2019ve done it', tone: 'primary', run: reply('done', 'You entered a connection code', 'ok') }, trouble, cancel]);
        } else if (step === 'browser_redirect') {
          const p = el('p', 'card-linkline');
          p.append('Opening your browser… If nothing happened: ', safeLink(f.auth_url, 'open the sign-in page'));
          ctx.body.appendChild(p);
          const dl = facts(ctx.details);
          fact(dl, 'Listening on', str(f.listening_on));
          setActions(ctx, [trouble, cancel]);
        } else if (step === 'progress') {
          if (typeof f.progress_pct === 'number') {
            const bar = el('progress', 'progress');
            bar.max = 100;
            bar.value = f.progress_pct;
            bar.setAttribute('aria-label', 'Connection progress');
            ctx.body.appendChild(bar);
          }
          setActions(ctx, [cancel]);
        } else if (step === 'completion') {
          const perms = arr(f.permissions_granted).map(str);
          if (perms.length) ctx.body.appendChild(permissionList('Silas can now', perms, null));
          setActions(ctx, [{ id: 'done', label: 'Done', tone: 'primary', run: reply('done', 'Connection set up', 'ok') }]);
        } else if (step === 'failure') {
          setActions(ctx, [{ id: 'retry', label: 'Try again', tone: 'primary', run: reply('retry', 'You retried a connection') }, trouble, cancel]);
        } else {
          jsonDetails(ctx, 'Step', f);
          setActions(ctx, [{ id: 'done', label: 'Continue', tone: 'primary', run: reply('done', 'You continued a connection setup') }, cancel]);
        }
      },
    },

    permission_escalation: {
      label: 'Permission',
      intent: (f) => 'Give ' + (str(f.connection_name) || 'a connection') + ' more access',
      rationale: (f) => str(f.reason) || 'Silas needs more access to finish this.',
      affected: (f) => {
        const cur = new Set(arr(f.current_permissions).map(str));
        const add = arr(f.requested_permissions).map(str).filter((p) => !cur.has(p));
        return add.length ? 'Adds: ' + add.join(', ') : '';
      },
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const cur = arr(f.current_permissions).map(str);
        const req = arr(f.requested_permissions).map(str);
        const added = new Set(req.filter((p) => !cur.includes(p)));
        const grid = el('div', 'perm-grid');
        grid.append(permissionList('Now', cur, null), permissionList('Asking for', req, added));
        ctx.body.appendChild(grid);
        const v = (verdict, what, tone) => () => respond(e, { type: 'permission_escalation_response', request_id: f.request_id, verdict }, what, tone);
        setActions(ctx, [
          { id: 'approve', label: 'Approve', hint: 'keep this access', tone: 'primary', gated: true, run: v('approve', 'You granted more access', 'ok') },
          { id: 'just_this_once', label: 'Just this once', tone: 'alt', gated: true, run: v('just_this_once', 'You granted access once') },
          { id: 'deny', label: 'Deny', hint: 'access stays as it is', tone: 'destructive', run: v('deny', 'You denied more access', 'muted') },
        ]);
      },
    },

    connection_failure: {
      label: 'Connection problem',
      intent: (f) => (str(f.service) || 'A service') + ': couldn\u2019t connect',
      rationale: (f) => str(f.message) || 'The connection failed.',
      build(ctx) {
        const f = ctx.f;
        const e = ctx.entry;
        const dl = facts(ctx.details);
        fact(dl, 'Failure', words(f.failure_type));
        const opts = arr(f.recovery_options).map(obj).filter((o) => o.action);
        const pick = (o) => () => respond(e, { type: 'connection_failure_response', request_id: f.request_id, selected_action: str(o.action) }, 'You chose "' + (str(o.label) || words(o.action)) + '"');
        const list = opts.filter((o) => o.action !== 'skip').map((o, i) => ({
          id: str(o.action), label: str(o.label) || cap(words(o.action)), hint: str(o.description), tone: i === 0 ? 'primary' : 'alt',
          gated: true, risk: validRisk(o.risk_level) || 'low', run: pick(o),
        }));
        // Always a way out (§0.5.3).
        const skip = opts.find((o) => o.action === 'skip') || { action: 'skip', label: 'Skip' };
        list.push({ id: 'skip', label: str(skip.label) || 'Skip', hint: 'don\u2019t connect now', tone: 'destructive', run: pick(skip) });
        setActions(ctx, list);
      },
    },
  };

  // The secure-input form: the value goes to POST /secrets/{ref_id} on this
  // origin (fetch, same-origin credentials, Bearer token when one is in use);
  // the socket only ever hears {ref_id, success}. The field is cleared as
  // soon as the value has been read, whatever happens next.
  function secureForm(ctx, req, after) {
    const e = ctx.entry;
    const refId = str(req.ref_id);
    const g = obj(req.guidance);
    if (g.instructions) ctx.body.appendChild(el('p', 'guidance', str(g.instructions)));
    if (g.help_url) {
      const p = el('p', 'card-linkline');
      p.append('Where to find it: ', safeLink(g.help_url));
      ctx.body.appendChild(p);
    }
    const form = el('form', 'secure-form');
    form.method = 'post';
    form.action = '/secrets/' + encodeURIComponent(refId);
    form.autocomplete = 'off';
    const id = 'secret-' + ++cardSeq;
    const label = el('label', 'field-label', str(req.label) || 'Secret');
    label.htmlFor = id;
    const field = el('input', 'field');
    field.type = 'password';
    field.id = id;
    field.name = 'value';
    field.autocomplete = 'off';
    field.spellcheck = false;
    field.required = true;
    if (req.input_hint) field.placeholder = str(req.input_hint);
    const status = el('p', 'secure-status');
    status.setAttribute('role', 'status');
    form.append(label, field, status);
    ctx.body.appendChild(form);
    const finish = (success, what, tone) => {
      if (respond(e, { type: 'secure_input_completed', ref_id: refId, success }, what, tone) && success && after) after();
    };
    const submit = async () => {
      const value = field.value;
      field.value = '';
      if (!value) { field.focus(); return; }
      status.textContent = 'Storing…';
      const headers = { 'content-type': 'application/json' };
      if (token) headers.authorization = 'Bearer ' + token;
      let res;
      try {
        res = await fetch(form.action, {
          method: 'POST', headers, body: JSON.stringify({ value }),
          credentials: 'same-origin', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer',
        });
      } catch (err) {
        status.textContent = 'Could not reach Silas — nothing was stored. Try again.';
        field.focus();
        return;
      }
      if (res.ok) { finish(true, 'You stored a secret (' + (str(req.label) || refId) + ')', 'ok'); return; }
      if (res.status === 404 || res.status === 409) {
        finish(false, res.status === 409 ? 'Secret was already stored' : 'Secret request expired', 'muted');
        return;
      }
      status.textContent = res.status === 401 ? 'Silas refused the access token — nothing was stored.' : 'Silas could not store it (' + res.status + '). Try again.';
      field.focus();
    };
    form.addEventListener('submit', (ev) => { ev.preventDefault(); submit(); });
    setActions(ctx, [
      { id: 'store', label: 'Store securely', tone: 'primary', run: () => form.requestSubmit() },
      { id: 'cancel', label: 'Cancel', hint: 'don\u2019t store anything', tone: 'destructive',
        run: () => { field.value = ''; finish(false, 'You cancelled a secret request', 'muted'); } },
    ]);
  }

  function fmtLeft(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    return Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0');
  }
  function countdown(seconds, prefix, over) {
    const p = el('p', 'countdown');
    const end = Date.now() + seconds * 1000;
    const tick = () => {
      const left = end - Date.now();
      if (left <= 0) { p.textContent = over; return; }
      p.textContent = prefix + fmtLeft(left);
      if (p.isConnected || Date.now() - started < 2000) setTimeout(tick, 1000);
    };
    const started = Date.now();
    tick();
    return p;
  }

  // ---- activity ------------------------------------------------------
  const work = new Map(); // work_item_id -> entry
  const statusText = {
    running: 'Running…',
    verification_failed: 'Verification failed',
    done: 'Done',
    failed: 'Failed',
    stuck: 'Stuck — needs you',
    blocked: 'Blocked',
  };
  const TERMINAL = ['done', 'failed', 'stuck', 'blocked', 'verification_failed'];

  function timelineAppend(li) {
    const empty = $('activity-empty');
    if (empty) empty.remove();
    $('timeline').prepend(li);
    noteActivity();
  }

  function timelineEvent(what, detail, tone, when) {
    const li = el('li', 'event event-' + (tone || 'info'));
    li.appendChild(el('span', 'event-time', clock(when)));
    const body = el('div', 'event-body');
    body.appendChild(el('p', 'event-what', what));
    if (detail) body.appendChild(el('p', 'event-detail', detail));
    li.appendChild(body);
    timelineAppend(li);
    return li;
  }

  function verificationLine(results) {
    const passed = results.filter((r) => r && r.passed === true).length;
    return { passed, total: results.length, text: 'Verified: ' + passed + '/' + results.length + ' checks passed' };
  }

  function onWorkStatus(f) {
    let entry = work.get(f.work_item_id);
    if (!entry) {
      const li = el('li', 'event work');
      li.dataset.workItemId = f.work_item_id;
      li.appendChild(el('span', 'event-time', clock()));
      const body = el('div', 'event-body');
      const head = el('p', 'event-what');
      const summary = el('p', 'event-detail');
      const verified = el('p', 'work-verified');
      verified.hidden = true;
      const checks = el('ul', 'work-checks');
      body.append(head, summary, verified, checks);
      li.appendChild(body);
      entry = { li, head, summary, verified, checks, result: null };
      work.set(f.work_item_id, entry);
      timelineAppend(li);
    } else {
      noteActivity();
    }
    const status = str(f.status);
    entry.li.dataset.status = status;
    entry.li.className = 'event work work-' + status;
    entry.head.textContent = statusText[status] || status;
    entry.summary.textContent = str(f.summary);
    const results = arr(f.verification);
    entry.checks.replaceChildren();
    if (results.length) {
      const v = verificationLine(results);
      entry.verified.hidden = false;
      entry.verified.textContent = v.text;
      entry.verified.classList.toggle('is-bad', v.passed !== v.total);
      for (const r of results) {
        const li = el('li', r && r.passed ? 'check-pass' : 'check-fail');
        li.appendChild(el('span', 'check-mark', r && r.passed ? '✓' : '✗'));
        li.appendChild(el('span', 'check-name', (r && r.name) || 'check'));
        if (r && r.reason) li.appendChild(el('span', 'check-reason', r.reason));
        // A failed check's own words (the end of its stderr or output).
        if (r && !r.passed && r.detail) li.appendChild(el('pre', 'check-detail', shown(str(r.detail))));
        entry.checks.appendChild(li);
      }
    } else {
      entry.verified.hidden = true;
    }
    if (TERMINAL.includes(status)) resultCard(f, entry);
  }

  // Post-execution card in the Stream (§8.2): outcome, verification, and —
  // only when the server sent an undo_offer for this work item — one-tap
  // Undo until the window closes (§0.5.5).
  function resultCard(f, entry) {
    const status = str(f.status);
    let r = entry.result;
    if (!r) {
      const li = el('li', 'msg msg-result');
      li.dataset.workItemId = f.work_item_id;
      const card = el('article', 'result');
      const head = el('p', 'result-head');
      const summary = el('p', 'result-summary');
      const verified = el('p', 'result-verified');
      const undo = el('div', 'result-undo');
      undo.hidden = true;
      const actions = el('div', 'result-actions');
      const open = el('button', 'btn btn-chip', 'See details');
      open.type = 'button';
      open.addEventListener('click', () => show('activity'));
      actions.appendChild(open);
      card.append(head, summary, verified, undo, actions);
      li.appendChild(card);
      r = entry.result = { li, head, summary, verified, undo };
      appendToStream(li);
    }
    r.li.dataset.status = status;
    r.head.textContent = statusText[status] || status;
    r.head.className = 'result-head result-' + status;
    r.summary.textContent = str(f.summary);
    const results = arr(f.verification);
    r.verified.hidden = !results.length;
    if (results.length) {
      const v = verificationLine(results);
      r.verified.textContent = v.text;
      r.verified.classList.toggle('is-bad', v.passed !== v.total);
    }
    if (entry.pendingUndo) { attachUndo(r, entry.pendingUndo); entry.pendingUndo = null; }
  }

  function onUndoOffer(f) {
    const entry = work.get(f.work_item_id);
    if (entry && entry.result) { attachUndo(entry.result, f); return; }
    if (entry) { entry.pendingUndo = f; return; }
    // No result card yet for this item: make one so the offer is visible.
    onWorkStatus({ work_item_id: f.work_item_id, status: 'done', summary: f.summary, verification: [] });
    attachUndo(work.get(f.work_item_id).result, f);
  }

  function attachUndo(r, f) {
    const until = new Date(str(f.expires_at)).getTime();
    if (isNaN(until) || until <= Date.now()) return;
    r.undo.hidden = false;
    r.undo.replaceChildren();
    const b = el('button', 'btn btn-secondary undo-btn');
    b.type = 'button';
    const left = el('span', 'undo-left');
    b.append(el('span', 'btn-label', 'Undo'), left);
    const note = el('p', 'undo-note');
    r.undo.append(b, note);
    let timer = null;
    const tick = () => {
      const ms = until - Date.now();
      if (ms <= 0) {
        b.remove();
        note.textContent = 'Undo window closed. To reverse this now, ask Silas for a new plan.';
        return;
      }
      left.textContent = fmtLeft(ms) + ' left';
      b.setAttribute('aria-label', 'Undo: ' + str(f.summary) + ' (' + fmtLeft(ms) + ' left)');
      timer = setTimeout(tick, 1000);
    };
    b.addEventListener('click', () => {
      if (!send({ type: 'decision_response', request_id: str(f.request_id), selected_value: 'undo' })) {
        note.textContent = 'Not connected — undo was not sent.';
        return;
      }
      clearTimeout(timer);
      b.remove();
      note.textContent = 'Undo requested.';
      timelineEvent('You asked to undo', str(f.summary), 'muted');
    });
    tick();
  }

  // The audit narrative (`activity` frames, built by the server from the
  // audit log): {initial, items: [{seq, at, kind, text}]}, oldest first.
  // `seq` orders and de-duplicates (a reconnect resends the latest items);
  // the initial backlog does not count as "new" on the tab badge.
  const seenAudit = new Set();
  const AUDIT_TONE = { work: 'ok', approval: 'ok', card: 'info', security: 'bad', system: 'muted', other: 'info' };
  function onActivity(f) {
    for (const it0 of arr(f.items)) {
      const it = obj(it0);
      const seq = typeof it.seq === 'number' ? it.seq : null;
      if (seq === null || seenAudit.has(seq) || !it.text) continue;
      seenAudit.add(seq);
      const li = el('li', 'event event-audit event-' + (AUDIT_TONE[it.kind] || 'info'));
      li.dataset.seq = String(seq);
      li.dataset.kind = str(it.kind);
      li.appendChild(el('span', 'event-time', clock(it.at)));
      const body = el('div', 'event-body');
      body.appendChild(el('p', 'event-what', str(it.text)));
      li.appendChild(body);
      const empty = $('activity-empty');
      if (empty) empty.remove();
      $('timeline').prepend(li);
      if (!f.initial) noteActivity();
    }
  }

  // The server says which model answers; the offline responder is labelled
  // plainly so it is never mistaken for an LLM.
  function showModel(m) {
    model = m || null;
    modelKnown = true;
    const badge = $('model-badge');
    const offline = !!(model && model.offline);
    badge.hidden = !offline;
    badge.title = offline ? (str(model.description) || 'Offline rule-based responder, not an LLM') : '';
    renderModelStep();
  }

  // ---- workspaces (owner only; the server refuses anyone else) -------
  function onWorkspaces(f) {
    const list = $('workspace-list');
    list.textContent = '';
    const all = arr(f.workspaces);
    if (!all.length) list.appendChild(el('li', 'empty', 'No workspaces yet.'));
    for (const w0 of all) {
      const w = obj(w0);
      const li = el('li', null, str(w.name) + ' — ' + str(w.path) + ' (' + (w.writable === true ? 'writable' : 'read-only') + ') ');
      const rm = el('button', 'btn btn-ghost', 'Remove');
      rm.type = 'button';
      rm.addEventListener('click', () => send({ type: 'workspace_remove', name: str(w.name) }));
      li.appendChild(rm);
      list.appendChild(li);
    }
  }
  $('workspaces').addEventListener('toggle', () => {
    if ($('workspaces').open) send({ type: 'workspace_list' });
  });
  $('workspace-form').addEventListener('submit', (e) => {
    e.preventDefault();
    send({
      type: 'workspace_add',
      name: $('workspace-name').value.trim(),
      path: $('workspace-path').value.trim(),
      writable: $('workspace-write').checked,
    });
  });

  function onMemories(f) {
    const list = $('memory-list');
    list.textContent = '';
    const gone = arr(f.forgotten);
    if (gone.length) systemNote('Forgotten: ' + gone.map(str).join(', ') + '.');
    const all = arr(f.memories);
    if (!all.length) list.appendChild(el('li', 'empty', 'No memories found.'));
    for (const m0 of all) {
      const m = obj(m0);
      const meta = str(m.memory_type) + ', ' + str(m.trust_level) + (str(m.taint) === 'external' ? ', from outside' : '');
      const li = el('li', null, str(m.preview) + ' (' + meta + ') ');
      const rm = el('button', 'btn btn-ghost', 'Forget');
      rm.type = 'button';
      rm.addEventListener('click', () => {
        if (window.confirm('Forget this memory everywhere? This cannot be undone.')) {
          send({ type: 'memory_forget', memory_id: str(m.memory_id) });
        }
      });
      li.appendChild(rm);
      list.appendChild(li);
    }
  }
  $('memories').addEventListener('toggle', () => {
    if ($('memories').open) send({ type: 'memory_list', query: $('memory-query').value.trim() });
  });
  $('memory-form').addEventListener('submit', (e) => {
    e.preventDefault();
    send({ type: 'memory_list', query: $('memory-query').value.trim() });
  });

  // ---- frames --------------------------------------------------------
  function handle(f) {
    const kind = f && f.type;
    if (kind && CARDS[kind]) { enqueue(kind, f); return; }
    switch (kind) {
      case 'auth_ok':
        attempt = 0;
        authed = true;
        clearTimeout(authWaitTimer);
        $('auth-screen').hidden = true;
        syncModal();
        setConn('connected', 'Connected');
        showModel(f.model);
        // Only the owner manages workspaces (the server refuses anyone else);
        // the list is asked for when the section is opened.
        $('workspaces').hidden = f.scope_id !== 'owner';
        $('memories').hidden = f.scope_id !== 'owner';
        for (const id of Array.from(outbox.keys())) sendQueued(id);
        break;
      case 'workspaces':
        onWorkspaces(f);
        break;
      case 'memories':
        onMemories(f);
        break;
      case 'message':
        // A reply carries its id: acknowledged so the daemon does not send
        // it again, and shown once — the same reply sent again after a
        // reconnect or a daemon restart is dropped here.
        if (typeof f.id === 'string') {
          send({ type: 'ack', id: f.id });
          if (shownReplies.has(f.id)) break;
          shownReplies.add(f.id);
          if (shownReplies.size > SHOWN_REPLIES_KEPT) shownReplies.delete(shownReplies.values().next().value);
        }
        clearProgress();
        bubble('silas', str(f.text), f.timestamp);
        break;
      case 'accepted':
        onAccepted(f);
        break;
      case 'progress':
        showProgress(str(f.text));
        break;
      case 'work_status':
        onWorkStatus(f);
        break;
      case 'undo_offer':
        onUndoOffer(f);
        break;
      case 'activity':
        onActivity(f);
        break;
      case 'error': {
        // A stored token sent to a server that needs none is answered like this.
        if (authSent && f.message === 'already authenticated') return;
        if (f.request_id && onMessageRefused(f)) break;
        const msg = f.message ? String(f.message) : 'unknown error';
        systemNote('Silas could not do that: ' + msg + (f.request_id ? ' (decision ' + f.request_id + ')' : ''));
        break;
      }
      default:
        if (kind) systemNote('Silas sent a "' + kind + '" this app cannot show yet. Use another channel to answer it.');
    }
  }

  // ---- start ---------------------------------------------------------
  renderModelStep();
  renderReview();
  setConn('connecting', 'Connecting…');
  const pairingCode = takePairingCode();
  if (pairingCode === null) {
    connect();
  } else {
    pairWith(pairingCode).then((ok) => {
      // A used link on an already paired device: its stored token still works.
      if (ok || token) { connect(); return; }
      $('auth-error').textContent = 'That pairing link was already used, has expired (10 minutes) or is wrong. Run `silas pair` for a new one, or paste a token.';
      setConn('unauthorized', 'Needs pairing');
      askForToken(true);
    });
  }
  if ('serviceWorker' in navigator) {
    navigator.serviceWorker.register('/sw.js').catch(() => { /* installability only */ });
  }
})();
