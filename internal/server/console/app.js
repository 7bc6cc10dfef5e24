// The agentd web console: sessions, a live retry timeline, credentials.
// Plain ES modules, no build step; served by agentd at /console/.

import { api, APIError, EventFollower, hasToken, onAuthMode, setToken } from './api.js';

// ---- small DOM helpers ----------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel, root = document) => root.querySelector(sel);
const view = () => $('#view');

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString([], { hour12: false });
}

function fmtDateTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleString([], { hour12: false });
}

function fmtDuration(ms) {
  if (ms < 0) ms = 0;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 120) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

let noticeTimer = 0;
function notice(msg, kind = 'error') {
  const el = $('#notice');
  el.textContent = msg;
  el.className = `notice ${kind}`;
  el.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, kind === 'error' ? 10000 : 4000);
}

function clearNotice() {
  clearTimeout(noticeTimer);
  $('#notice').hidden = true;
}

function authOK() {
  if (!hasToken()) return;
  if ($('#auth-state').textContent !== 'token ok') clearNotice();
  setAuthState('token ok', 'ok');
}

function problem(e) {
  if (e instanceof APIError && e.status === 401) {
    setAuthState(hasToken() ? 'token refused' : 'token needed', 'bad');
    notice(`${e.message} — paste a token above.`);
    $('#token').focus();
    return;
  }
  notice(e.message || String(e));
}

// ---- token ------------------------------------------------------------------

function setAuthState(text, kind = '') {
  const el = $('#auth-state');
  el.textContent = text;
  el.className = `pill ${kind}`;
}

// The token box shows only where the server asks for a token: with auth
// off (or in local mode) there is nothing to paste.
function showAuthMode(mode) {
  const off = mode === 'off';
  $('#token').hidden = off;
  $('#use-token').hidden = off;
  if (off) {
    $('#forget-token').hidden = true;
    setAuthState('auth off', 'muted');
  }
}

function initToken() {
  onAuthMode(showAuthMode);
  $('#token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = $('#token');
    setToken(input.value);
    input.value = '';
    clearNotice();
    $('#forget-token').hidden = !hasToken();
    setAuthState(hasToken() ? 'token set' : '', hasToken() ? 'ok' : '');
    route();
  });
  $('#forget-token').addEventListener('click', () => {
    setToken('');
    $('#forget-token').hidden = true;
    setAuthState('');
    route();
  });
}

// ---- router -------------------------------------------------------------------

let cleanup = () => {};

function route() {
  cleanup();
  cleanup = () => {};
  const hash = location.hash || '#/sessions';
  const m = hash.match(/^#\/sessions\/([^/]+)$/);
  let name = 'sessions';
  if (m) cleanup = showSession(decodeURIComponent(m[1])) || cleanup;
  else if (hash === '#/credentials') { name = 'credentials'; cleanup = showCredentials() || cleanup; }
  else cleanup = showSessions() || cleanup;
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', a.dataset.nav === name);
  }
}

// ---- sessions list ------------------------------------------------------------

const knownModels = new Set(['sim/echo', 'sim/backup']);

function statusPill(status) {
  return h('span', { class: `pill status-${status || 'unknown'}` }, status || '?');
}

function showSessions() {
  const tbody = h('tbody', {}, h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'Loading…')));
  const models = h('datalist', { id: 'models' });
  const form = h('form', { class: 'row', id: 'new-session' },
    h('label', {}, 'Model', h('input', { name: 'model', value: 'sim/echo', list: 'models', required: true, spellcheck: 'false' })),
    h('label', {}, 'Role', h('input', { name: 'role', placeholder: 'default', spellcheck: 'false', title: 'selects the fallback chain' })),
    h('label', { class: 'grow' }, 'System prompt', h('input', { name: 'systemPrompt', placeholder: 'optional' })),
    h('button', { type: 'submit' }, 'Create session'),
    models);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const fd = new FormData(form);
    try {
      const s = await api.createSession({ model: fd.get('model').trim(), role: fd.get('role').trim(), systemPrompt: fd.get('systemPrompt') });
      location.hash = `#/sessions/${encodeURIComponent(s.id)}`;
    } catch (err) { problem(err); }
  });
  view().replaceChildren(h('section', { class: 'panel' },
    h('div', { class: 'panel-head' }, h('h1', {}, 'Sessions'),
      h('button', { class: 'ghost', onclick: () => load() }, 'Refresh')),
    form,
    h('table', { class: 'list', id: 'sessions' },
      h('thead', {}, h('tr', {}, ['Session', 'Model', 'Status', 'Events', 'Messages', 'Created'].map((c) => h('th', {}, c)))),
      tbody)));

  async function load() {
    let sessions;
    try {
      sessions = await api.listSessions();
    } catch (e) {
      tbody.replaceChildren(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, e.message)));
      problem(e);
      return;
    }
    authOK();
    for (const s of sessions) { knownModels.add(s.model); knownModels.add(s.primaryModel); }
    models.replaceChildren(...[...knownModels].filter(Boolean).sort().map((m) => h('option', { value: m })));
    if (sessions.length === 0) {
      tbody.replaceChildren(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'No sessions yet: create one above.')));
      return;
    }
    tbody.replaceChildren(...sessions.reverse().map((s) => {
      const href = `#/sessions/${encodeURIComponent(s.id)}`;
      return h('tr', { onclick: () => { location.hash = href; } },
        h('td', {}, h('a', { href, class: 'mono' }, s.id)),
        h('td', {}, s.model, s.model !== s.primaryModel ? h('span', { class: 'muted' }, ` (primary ${s.primaryModel})`) : ''),
        h('td', {}, statusPill(s.status)),
        h('td', { class: 'num' }, s.lastSeq),
        h('td', { class: 'num' }, s.messageCount),
        h('td', {}, fmtDateTime(s.createTime)));
    }));
  }
  load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}

// ---- one session --------------------------------------------------------------

function showSession(id) {
  const state = {
    id,
    turns: new Map(),     // promptId -> turn
    userTexts: new Map(), // promptId -> the user's text
    retry: null,          // the pending retry: {entry, deadline, button, promptId}
    status: '',
    follower: null,
    closed: false,
  };
  const transcript = h('div', { class: 'transcript', id: 'transcript' },
    h('p', { class: 'muted empty' }, 'No prompt yet. Try a fault script: hello [[faults: 529,429:retry-after=2,ok]]'));
  const timeline = h('ol', { class: 'timeline', id: 'timeline' });
  const status = h('span', { id: 'session-status' });
  const model = h('span', { class: 'pill', id: 'session-model' }, '…');
  const conn = h('span', { class: 'pill conn', id: 'conn' }, 'connecting');
  const autoRetry = h('input', { type: 'checkbox', id: 'auto-retry' });
  const textarea = h('textarea', { name: 'text', rows: 3, id: 'prompt-text',
    placeholder: 'Message… fault scripts make retries happen: hello [[faults: 529,429:retry-after=2,ok]]' });
  const send = h('button', { type: 'submit', id: 'send' }, 'Send');
  const form = h('form', { class: 'composer', id: 'prompt-form' }, textarea, send);
  // Abort stops a running prompt: shown only while one runs.
  const abort = h('button', { class: 'danger ghost', id: 'abort', hidden: true, onclick: () => act(() => api.abort(id)) }, 'Abort');

  view().replaceChildren(
    h('div', { class: 'session-head' },
      h('a', { href: '#/sessions', class: 'back' }, '← Sessions'),
      h('h1', { class: 'mono' }, id),
      model, status, conn,
      h('label', { class: 'toggle' }, autoRetry, 'auto-retry'),
      abort),
    h('div', { class: 'cols' },
      h('section', { class: 'panel chat' }, transcript, form),
      h('aside', { class: 'panel side' },
        h('h2', {}, 'Retry timeline'),
        timeline)));

  function setStatus(s) {
    state.status = s;
    status.replaceChildren(statusPill(s));
    send.disabled = s === 'streaming' || s === 'retrying';
    abort.hidden = !send.disabled;
  }

  async function act(fn) {
    try { await fn(); } catch (e) { problem(e); }
  }

  autoRetry.addEventListener('change', () => act(async () => {
    const r = await api.setAutoRetry(id, autoRetry.checked);
    autoRetry.checked = r.enabled;
  }));

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = textarea.value;
    if (!text.trim()) return;
    send.disabled = true;
    try {
      const r = await api.startPrompt(id, text);
      state.userTexts.set(r.promptId, text);
      const t = state.turns.get(r.promptId);
      if (t) t.user.textContent = text;
      textarea.value = '';
    } catch (err) {
      problem(err);
      send.disabled = false;
    }
  });
  textarea.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });

  // ---- transcript ----
  function turnFor(promptId) {
    let t = state.turns.get(promptId);
    if (t) return t;
    $('.empty', transcript)?.remove();
    const user = h('div', { class: 'bubble user' }, state.userTexts.get(promptId) ?? '…');
    const el = h('div', { class: 'turn', dataset: { prompt: promptId } }, user);
    transcript.append(el);
    t = { el, user, attempt: null, footer: null };
    state.turns.set(promptId, t);
    if (!state.userTexts.has(promptId)) loadUserTexts();
    return t;
  }

  let loadingTexts = null;
  function loadUserTexts() {
    if (loadingTexts) return;
    loadingTexts = api.listMessages(id).then((r) => {
      for (const m of r.messages || []) {
        if (m.role === 'user' && m.promptId && !state.userTexts.has(m.promptId)) {
          state.userTexts.set(m.promptId, (m.content || []).map((c) => c.text).join(''));
        }
      }
      for (const [pid, t] of state.turns) {
        if (state.userTexts.has(pid)) t.user.textContent = state.userTexts.get(pid);
      }
    }).catch(() => {}).finally(() => { loadingTexts = null; });
  }

  function scrollDown(el) {
    const near = el.scrollHeight - el.scrollTop - el.clientHeight < 120;
    if (near) el.scrollTop = el.scrollHeight;
  }

  // ---- timeline ----
  function addEntry(ev, kind, title, detail, extra) {
    const li = h('li', { class: `entry ${kind}`, dataset: { type: ev.type, seq: ev.seq } },
      h('span', { class: 'time' }, fmtTime(ev.time)),
      h('div', { class: 'what' },
        h('div', { class: 'title' }, title),
        detail ? h('div', { class: 'detail', title: detail }, detail) : null,
        extra));
    timeline.append(li);
    timeline.parentElement.scrollTop = timeline.parentElement.scrollHeight;
    return li;
  }

  function endPendingRetry(outcome) {
    const r = state.retry;
    if (!r) return;
    state.retry = null;
    r.button.remove();
    r.countdown.textContent = outcome;
    r.entry.classList.remove('pending');
  }

  function tick() {
    const r = state.retry;
    if (!r) return;
    const left = r.deadline - Date.now();
    r.countdown.textContent = left > 0 ? `retrying in ${fmtDuration(left)}` : 'retrying now…';
  }
  const ticker = setInterval(tick, 100);

  function onEvent(ev) {
    const pid = ev.promptId;
    switch (ev.type) {
      case 'agent_start': {
        const t = turnFor(pid);
        if (state.retry && state.retry.promptId === pid) endPendingRetry('retried');
        if (!t.started) {
          t.started = true;
          addEntry(ev, 'start', 'Prompt started', pid).querySelector('.detail').classList.add('mono');
        }
        setStatus(state.retry ? 'retrying' : 'streaming');
        break;
      }
      case 'message_start': {
        if (ev.messageStart.role !== 'assistant') break;
        const t = turnFor(pid);
        if (state.retry && state.retry.promptId === pid) endPendingRetry('retried');
        const text = h('div', { class: 'text' });
        const el = h('div', { class: 'bubble assistant streaming' },
          h('div', { class: 'meta' }, ev.messageStart.model,
            ev.messageStart.credentialId ? ` · ${ev.messageStart.credentialId}` : ''), text);
        t.el.append(el);
        t.attempt = { el, text, thinking: null };
        scrollDown(transcript);
        break;
      }
      case 'message_update': {
        const a = state.turns.get(pid)?.attempt;
        if (!a) break;
        const u = ev.messageUpdate;
        if (u.thinkingDelta) {
          if (!a.thinking) { a.thinking = h('div', { class: 'thinking' }); a.text.before(a.thinking); }
          a.thinking.append(u.thinkingDelta);
        }
        if (u.textDelta) a.text.append(u.textDelta);
        scrollDown(transcript);
        break;
      }
      case 'message_end': {
        const me = ev.messageEnd;
        const t = turnFor(pid);
        const a = t.attempt;
        if (a) {
          a.el.classList.remove('streaming');
          if (!a.text.textContent && me.text) a.text.textContent = me.text;
          if (me.stopReason === 'error' || me.stopReason === 'aborted') {
            a.el.classList.add('failed');
            a.el.append(h('div', { class: 'error' }, me.errorMessage || me.stopReason,
              me.errorClass ? h('span', { class: 'tag' }, me.errorClass) : null));
          }
          t.attempt = null;
        }
        if (me.stopReason === 'error') {
          addEntry(ev, 'fail', `Call failed on ${me.model}`, me.errorMessage,
            me.errorClass ? h('span', { class: 'tag' }, me.errorClass) : null);
        } else if (me.stopDetails && me.stopDetails.type) {
          addEntry(ev, 'fail', `Stopped: ${me.stopDetails.type}`, me.errorMessage);
        }
        break;
      }
      case 'tool_call': {
        const tc = ev.toolCall;
        turnFor(pid).el.append(h('div', { class: 'bubble tool' },
          h('div', { class: 'meta' }, `tool call ${tc.callId}`),
          h('code', {}, `${tc.name}(${JSON.stringify(tc.input)})`),
          h('div', { class: 'muted' }, 'Waiting for the client to submit the result (SubmitToolResults).')));
        addEntry(ev, 'info', `Tool call: ${tc.name}`, tc.callId);
        break;
      }
      case 'auto_retry_start': {
        const r = ev.autoRetryStart;
        const delay = Number(r.delayMs);
        const countdown = h('span', { class: 'countdown' });
        const button = h('button', { class: 'small cancel-retry', type: 'button' }, 'Cancel');
        const sources = { estimate: 'backoff', provider: "provider's hint", sibling: 'until a credential frees up', switch: 'switch', stale_replay: 'stale replay' };
        const entry = addEntry(ev, 'retry pending', `Retry ${r.attempt}/${r.maxAttempts} in ${fmtDuration(delay)}`,
          r.errorMessage,
          h('div', { class: 'retry-row' },
            h('span', { class: 'tag' }, r.errorClass), h('span', { class: 'tag' }, sources[r.delaySource] || r.delaySource),
            countdown, button));
        endPendingRetry('superseded');
        const started = Date.parse(ev.time);
        state.retry = { entry, countdown, button, promptId: pid,
          deadline: (Number.isNaN(started) ? Date.now() : started) + delay };
        button.addEventListener('click', async () => {
          button.disabled = true;
          button.textContent = 'Cancelling…';
          try { await api.abortRetry(id); } catch (e) { problem(e); button.disabled = false; button.textContent = 'Cancel'; }
        });
        tick();
        setStatus('retrying');
        break;
      }
      case 'auto_retry_end': {
        const r = ev.autoRetryEnd;
        endPendingRetry(r.success ? 'retried' : (r.finalError === 'Retry cancelled' ? 'cancelled' : 'ended'));
        if (r.success) addEntry(ev, 'ok', `Recovered after ${r.attempt} ${r.attempt === 1 ? 'retry' : 'retries'}`);
        else addEntry(ev, 'fail', 'Retry ended', r.finalError || 'failed', h('span', { class: 'tag' }, `attempt ${r.attempt}`));
        break;
      }
      case 'retry_fallback_applied': {
        const f = ev.retryFallbackApplied;
        addEntry(ev, 'switch', `Fallback: ${f.from} → ${f.to}`, `role ${f.role}`);
        break;
      }
      case 'retry_fallback_succeeded': {
        const f = ev.retryFallbackSucceeded;
        addEntry(ev, 'ok', `Fallback ${f.model} answered`, `role ${f.role}`);
        break;
      }
      case 'model_change': {
        const c = ev.modelChange;
        model.textContent = c.to;
        addEntry(ev, 'switch', `Model: ${c.from} → ${c.to}`, c.reason);
        break;
      }
      case 'credential_switched': {
        const c = ev.credentialSwitched;
        addEntry(ev, 'switch', `Credential switched on ${c.provider}`, `${c.from} → ${c.to}`);
        break;
      }
      case 'context_overflow':
        addEntry(ev, 'fail', 'Context overflow (not retried)', ev.contextOverflow.errorMessage);
        break;
      case 'prompt_end': {
        const p = ev.promptEnd;
        endPendingRetry('ended');
        const t = turnFor(pid);
        t.el.append(h('div', { class: `turn-end ${p.outcome}` }, `prompt ${p.outcome}`, p.error ? `: ${p.error}` : ''));
        addEntry(ev, p.outcome === 'completed' ? 'ok end' : 'fail end', `Prompt ${p.outcome}`, p.error);
        setStatus('idle');
        scrollDown(transcript);
        break;
      }
      default:
        break;
    }
  }

  const connLabels = { connecting: 'connecting', live: 'live', reconnecting: 'reconnecting', offline: 'offline' };
  async function open() {
    try {
      const s = await api.getSession(id);
      if (state.closed) return;
      authOK();
      model.textContent = s.model;
      autoRetry.checked = s.autoRetryEnabled;
      setStatus(s.status);
      loadUserTexts();
    } catch (e) {
      problem(e);
      conn.textContent = 'offline';
      return;
    }
    state.follower = new EventFollower(id, {
      onEvent,
      onStatus: (st, why) => {
        conn.textContent = connLabels[st] || st;
        conn.className = `pill conn ${st}`;
        conn.title = why || '';
      },
      onProblem: problem,
    });
    state.follower.start(0);
  }
  open();

  debugState.session = state;
  return () => {
    state.closed = true;
    clearInterval(ticker);
    state.follower?.close();
    if (debugState.session === state) debugState.session = null;
  };
}

// ---- credentials --------------------------------------------------------------

function showCredentials() {
  const tbody = h('tbody', {}, h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'Loading…')));
  view().replaceChildren(h('section', { class: 'panel' },
    h('div', { class: 'panel-head' }, h('h1', {}, 'Credentials'),
      h('button', { class: 'ghost', onclick: () => load() }, 'Refresh')),
    h('p', { class: 'muted' }, 'Provider credentials and their state. Secrets are write-only: agentd never returns them.'),
    h('table', { class: 'list', id: 'credentials' },
      h('thead', {}, h('tr', {}, ['Credential', 'Provider', 'Status', 'Blocked until', 'Reason', 'Banked resets', 'Source'].map((c) => h('th', {}, c)))),
      tbody)));
  let creds = [];
  function render() {
    if (creds.length === 0) {
      tbody.replaceChildren(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No credentials configured.')));
      return;
    }
    tbody.replaceChildren(...creds.map((c) => {
      const until = c.blockedUntil ? Date.parse(c.blockedUntil) : NaN;
      return h('tr', { dataset: { credential: c.id } },
        h('td', { class: 'mono' }, c.id),
        h('td', {}, c.provider),
        h('td', {}, h('span', { class: `pill cred-${c.status}` }, c.status)),
        h('td', {}, Number.isNaN(until) ? '—' : [fmtDateTime(c.blockedUntil), h('span', { class: 'muted' }, ` (in ${fmtDuration(until - Date.now())})`)]),
        h('td', { class: 'reason', title: c.blockReason || '' }, h('div', {}, c.blockReason || '—')),
        h('td', { class: 'num' }, c.bankedResets),
        h('td', {}, c.source));
    }));
  }
  async function load() {
    try {
      creds = (await api.listCredentials()).credentials || [];
      authOK();
      render();
    } catch (e) {
      tbody.replaceChildren(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, e.message)));
      problem(e);
    }
  }
  load();
  const timer = setInterval(load, 5000);
  const ticker = setInterval(render, 1000);
  return () => { clearInterval(timer); clearInterval(ticker); };
}

// ---- diagnostics (read by the browser tests) -----------------------------------

const debugState = { session: null };
window.agentdConsole = {
  // The open session's stream: every seq as it arrived (duplicates would
  // show), the last delivered seq, and how many EventSources it opened.
  stream() {
    const f = debugState.session?.follower;
    return f ? { sessionId: f.sessionId, received: [...f.received], lastSeq: f.lastSeq, connections: f.connections } : null;
  },
  // Drop the stream and resume with a fresh ticket from the last seq.
  reconnect() { debugState.session?.follower?.reconnect(); },
};

initToken();
window.addEventListener('hashchange', route);
route();
