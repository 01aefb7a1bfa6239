// Silas web app: three surfaces (Stream, Review, Activity) over one
// WebSocket speaking the typed frames of spec §8.1. Plain JS, no framework.
// Server text is only ever placed with textContent — never parsed as HTML.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  };
  const clock = (iso) => {
    const d = iso ? new Date(iso) : new Date();
    const t = isNaN(d.getTime()) ? new Date() : d;
    return t.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  };

  // ---- surfaces ------------------------------------------------------
  const surfaces = ['stream', 'review', 'activity'];
  let current = 'stream';
  function show(name) {
    current = name;
    for (const s of surfaces) {
      const on = s === name;
      $(s).classList.toggle('is-active', on);
      const tab = $('tab-' + s);
      if (on) tab.setAttribute('aria-current', 'page');
      else tab.removeAttribute('aria-current');
    }
    if (name === 'activity') setBadge('activity-badge', 0);
  }
  for (const s of surfaces) $('tab-' + s).addEventListener('click', () => show(s));

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
  $('tab-activity').addEventListener('click', () => { unseenActivity = 0; });

  // ---- connection ----------------------------------------------------
  let ws = null;
  let connected = false;
  let attempt = 0;
  let retryTimer = null;

  function setConn(state, text) {
    $('conn').dataset.state = state;
    $('conn-text').textContent = text;
    connected = state === 'connected';
    $('send').disabled = !connected;
  }

  function connect() {
    clearTimeout(retryTimer);
    setConn(attempt ? 'reconnecting' : 'connecting', attempt ? 'Reconnecting…' : 'Connecting…');
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    let sock;
    try {
      sock = new WebSocket(scheme + '://' + location.host + '/ws', ['silas.v1']);
    } catch (e) {
      scheduleRetry();
      return;
    }
    ws = sock;
    sock.addEventListener('message', (ev) => {
      let frame;
      try { frame = JSON.parse(ev.data); } catch (e) { return; }
      handle(frame);
    });
    sock.addEventListener('close', (ev) => {
      if (ws !== sock) return;
      ws = null;
      if (ev.code === 4001) {
        setConn('unauthorized', 'Not signed in');
        systemNote('This server needs an access token. Open Silas from the link the daemon printed.');
        return;
      }
      scheduleRetry();
    });
  }

  function scheduleRetry() {
    attempt += 1;
    // 0.5 s, 1 s, 2 s … capped at 15 s, with jitter so tabs don't stampede.
    const base = Math.min(15000, 500 * Math.pow(2, attempt - 1));
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    setConn('offline', 'Offline · retrying in ' + Math.max(1, Math.round(delay / 1000)) + ' s');
    retryTimer = setTimeout(connect, delay);
  }

  window.addEventListener('online', () => { if (!ws) { attempt = 0; connect(); } });

  function send(frame) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  // ---- stream --------------------------------------------------------
  function appendToStream(node) {
    const empty = $('stream-empty');
    if (empty) empty.remove();
    const list = $('messages');
    list.appendChild(node);
    node.scrollIntoView({ block: 'end' });
  }

  function bubble(who, text, timestamp) {
    const li = el('li', 'msg msg-' + who);
    li.appendChild(el('span', 'msg-meta', (who === 'user' ? 'You' : 'Silas') + ' · ' + clock(timestamp)));
    li.appendChild(el('p', 'msg-text', text));
    appendToStream(li);
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

  const input = $('composer-input');
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    if (!send({ type: 'message', text })) {
      systemNote('Not connected yet — your message is still in the box.');
      return;
    }
    bubble('user', text);
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

  // ---- review --------------------------------------------------------
  const queue = []; // approval_request frames, oldest first

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
    if (typeof b.max_attempts === 'number') parts.push(b.max_attempts + (b.max_attempts === 1 ? ' attempt' : ' attempts'));
    return parts.length ? parts.join(' · ') : 'Default limits';
  }
  function expectText(e) {
    if (!e || typeof e !== 'object') return '';
    const k = Object.keys(e)[0];
    if (!k) return '';
    const v = e[k];
    return k.replace(/_/g, ' ') + (v === true || v === null || typeof v === 'object' ? '' : ' ' + v);
  }

  function renderReview() {
    const active = $('review-active');
    active.replaceChildren();
    const pending = queue.length;
    setBadge('review-badge', pending);
    if (!pending) {
      const p = el('p', 'empty', 'Nothing to review. Plans that need your approval appear here.');
      p.id = 'review-empty';
      active.appendChild(p);
      $('up-next-wrap').hidden = true;
      return;
    }
    active.appendChild(renderCard(queue[0]));
    const rest = queue.slice(1);
    $('up-next-wrap').hidden = rest.length === 0;
    $('up-next-count').textContent = String(rest.length);
    const list = $('up-next');
    list.replaceChildren();
    rest.forEach((f, i) => {
      const li = el('li', 'up-next-item');
      li.appendChild(el('span', 'up-next-n', String(i + 2)));
      li.appendChild(el('span', 'up-next-text', f.title || 'Plan approval'));
      list.appendChild(li);
    });
  }

  function renderCard(f) {
    const node = $('card-template').content.firstElementChild.cloneNode(true);
    const titleId = 'card-title-' + String(f.request_id).replace(/[^A-Za-z0-9_-]/g, '');
    node.setAttribute('aria-labelledby', titleId);
    node.dataset.requestId = f.request_id;
    const title = node.querySelector('.card-title');
    title.id = titleId;
    title.textContent = f.title || 'Plan approval';
    node.querySelector('.card-body').textContent = f.body || '';
    node.querySelector('.card-budget').textContent = budgetText(f.budget);
    const checks = Array.isArray(f.verify) ? f.verify : [];
    node.querySelector('.card-checks-summary').textContent = checks.length
      ? checks.length + (checks.length === 1 ? ' check' : ' checks') + ': ' + checks.map((c) => c && c.name).filter(Boolean).join(', ')
      : 'No checks';
    const ul = node.querySelector('.card-checks');
    for (const c of checks) {
      const li = el('li', 'check');
      li.appendChild(el('span', 'check-name', (c && c.name) || 'check'));
      if (c && c.run) li.appendChild(el('code', 'check-run', c.run));
      const ex = expectText(c && c.expect);
      if (ex) li.appendChild(el('span', 'check-expect', 'expects ' + ex));
      ul.appendChild(li);
    }
    if (!checks.length) node.querySelector('.card-details').hidden = true;
    const approve = node.querySelector('.card-approve');
    const decline = node.querySelector('.card-decline');
    approve.setAttribute('aria-label', 'Approve and run: ' + (f.title || 'plan'));
    decline.setAttribute('aria-label', 'Decline: ' + (f.title || 'plan'));
    approve.addEventListener('click', () => answer(f, 'approved'));
    decline.addEventListener('click', () => answer(f, 'declined'));
    return node;
  }

  function answer(f, verdict) {
    if (!send({ type: 'approval_response', request_id: f.request_id, verdict })) {
      systemNote('Not connected — your decision was not sent. It stays in Review.');
      return;
    }
    const i = queue.findIndex((q) => q.request_id === f.request_id);
    if (i >= 0) queue.splice(i, 1);
    renderReview();
    const first = document.querySelector('#review-active .card-approve');
    if (first) first.focus();
    const title = f.title || 'a plan';
    timelineEvent(verdict === 'approved' ? 'You approved' : 'You declined', title, verdict === 'approved' ? 'ok' : 'muted');
    systemNote(verdict === 'approved' ? 'Approved: ' + title + '. Follow it in Activity.' : 'Declined: ' + title + '. Nothing will run.',
      verdict === 'approved' ? { label: 'Open Activity', run: () => show('activity') } : null);
  }

  function onApprovalRequest(f) {
    if (queue.some((q) => q.request_id === f.request_id)) return;
    queue.push(f);
    renderReview();
    systemNote('Silas has a plan for you to review: ' + (f.title || 'plan') + '.', { label: 'Review plan', run: () => show('review') });
  }

  // ---- activity ------------------------------------------------------
  const work = new Map(); // work_item_id -> {li, steps}
  const statusText = {
    running: 'Running…',
    verification_failed: 'Verification failed',
    done: 'Done',
    failed: 'Failed',
    stuck: 'Stuck — needs you',
    blocked: 'Blocked',
  };

  function timelineAppend(li) {
    const empty = $('activity-empty');
    if (empty) empty.remove();
    $('timeline').prepend(li);
    noteActivity();
  }

  function timelineEvent(what, detail, tone) {
    const li = el('li', 'event event-' + (tone || 'info'));
    li.appendChild(el('span', 'event-time', clock()));
    const body = el('div', 'event-body');
    body.appendChild(el('p', 'event-what', what));
    if (detail) body.appendChild(el('p', 'event-detail', detail));
    li.appendChild(body);
    timelineAppend(li);
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
      entry = { li, head, summary, verified, checks };
      work.set(f.work_item_id, entry);
      timelineAppend(li);
    } else {
      noteActivity();
    }
    const status = String(f.status || '');
    entry.li.dataset.status = status;
    entry.li.className = 'event work work-' + status;
    entry.head.textContent = statusText[status] || status;
    entry.summary.textContent = f.summary || '';
    const results = Array.isArray(f.verification) ? f.verification : [];
    entry.checks.replaceChildren();
    if (results.length) {
      const passed = results.filter((r) => r && r.passed === true).length;
      entry.verified.hidden = false;
      entry.verified.textContent = 'Verified: ' + passed + '/' + results.length + ' checks passed';
      entry.verified.classList.toggle('is-bad', passed !== results.length);
      for (const r of results) {
        const li = el('li', r && r.passed ? 'check-pass' : 'check-fail');
        li.appendChild(el('span', 'check-mark', r && r.passed ? '✓' : '✗'));
        li.appendChild(el('span', 'check-name', (r && r.name) || 'check'));
        if (r && r.reason) li.appendChild(el('span', 'check-reason', r.reason));
        entry.checks.appendChild(li);
      }
    } else {
      entry.verified.hidden = true;
    }
    if (status === 'done' || status === 'failed' || status === 'stuck' || status === 'blocked' || status === 'verification_failed') {
      const v = entry.verified.hidden ? '' : ' — ' + entry.verified.textContent;
      systemNote((statusText[status] || status) + v + '.', { label: 'See details', run: () => show('activity') });
    }
  }

  // The server says which model answers; the offline responder is labelled
  // plainly so it is never mistaken for an LLM.
  function showModel(model) {
    const badge = document.getElementById('model-badge');
    if (!badge) return;
    const offline = !!(model && model.offline);
    badge.hidden = !offline;
    badge.title = offline ? (model.description || 'Offline rule-based responder, not an LLM') : '';
  }

  // ---- frames --------------------------------------------------------
  function handle(f) {
    switch (f && f.type) {
      case 'auth_ok':
        attempt = 0;
        setConn('connected', 'Connected');
        showModel(f.model);
        break;
      case 'message':
        bubble('silas', f.text || '', f.timestamp);
        break;
      case 'approval_request':
        onApprovalRequest(f);
        break;
      case 'work_status':
        onWorkStatus(f);
        break;
      case 'error': {
        const msg = f.message ? String(f.message) : 'unknown error';
        systemNote('Silas could not do that: ' + msg + (f.request_id ? ' (decision ' + f.request_id + ')' : ''));
        break;
      }
      default:
        // A card type this version cannot show yet: say so instead of ignoring it.
        if (f && f.type) systemNote('Silas sent a "' + f.type + '" request this app cannot show yet. Use another channel to answer it.');
    }
  }

  // ---- start ---------------------------------------------------------
  setConn('connecting', 'Connecting…');
  connect();
  if ('serviceWorker' in navigator) {
    navigator.serviceWorker.register('/sw.js').catch(() => { /* installability only */ });
  }
})();
