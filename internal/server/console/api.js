// The agentd REST API as the console uses it, and a resuming event follower.
//
// The bearer token lives in this module's memory only: never in storage,
// never in a URL. EventSource cannot send it, so the follower asks for a
// short-lived stream ticket (POST …:streamTicket) and passes that instead.

let token = '';

export function setToken(t) { token = (t || '').trim(); }
export function hasToken() { return token !== ''; }

// What the server's answers tell of its auth: 'unknown' until one came,
// 'off' once a request without a token succeeded (auth is off, or local
// mode), 'on' once one was refused 401. onAuthMode's listener hears the
// first answer and every change.
let authMode = 'unknown';
let authListener = () => {};
export function onAuthMode(fn) { authListener = fn; }
function sawAuth(mode) {
  if (mode === authMode) return;
  authMode = mode;
  authListener(mode);
}

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status; // HTTP status (0: the request did not get through)
    this.code = code;     // gRPC code
  }
}

const enc = encodeURIComponent;

async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (token) headers.Authorization = `Bearer ${token}`;
  let res;
  try {
    res = await fetch(path, {
      method, headers, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new APIError(0, 14, `agentd is unreachable (${e.message})`);
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (res.status === 401) sawAuth('on');
  else if (res.ok && !token) sawAuth('off');
  if (!res.ok) {
    throw new APIError(res.status, data?.code ?? 0, data?.message || text || res.statusText);
  }
  return data;
}

export const api = {
  async listSessions() {
    const all = [];
    let pageToken = '';
    for (let i = 0; i < 10; i++) {
      const q = pageToken ? `&pageToken=${enc(pageToken)}` : '';
      const page = await call('GET', `/v1/sessions?pageSize=1000${q}`);
      all.push(...(page.sessions || []));
      pageToken = page.nextPageToken;
      if (!pageToken) break;
    }
    return all;
  },
  getSession: (id) => call('GET', `/v1/sessions/${enc(id)}`),
  createSession: (req) => call('POST', '/v1/sessions', req),
  deleteSession: (id) => call('DELETE', `/v1/sessions/${enc(id)}`),
  // Accept: application/json: returns once the prompt is accepted, with
  // {sessionId, promptId, afterSeq}; the events follow on the event stream.
  startPrompt: (id, text) => call('POST', `/v1/sessions/${enc(id)}:prompt`, { text }),
  abortRetry: (id) => call('POST', `/v1/sessions/${enc(id)}:abortRetry`, {}),
  abort: (id) => call('POST', `/v1/sessions/${enc(id)}:abort`, {}),
  setAutoRetry: (id, enabled) => call('POST', `/v1/sessions/${enc(id)}:setAutoRetry`, { enabled }),
  listMessages: (id) => call('GET', `/v1/sessions/${enc(id)}/messages?pageSize=1000`),
  streamTicket: (id) => call('POST', `/v1/sessions/${enc(id)}:streamTicket`, {}),
  listCredentials: () => call('GET', '/v1/credentials'),
};

export const EVENT_TYPES = [
  'agent_start', 'message_start', 'message_update', 'message_end', 'tool_call', 'agent_end',
  'auto_retry_start', 'auto_retry_end', 'retry_fallback_applied', 'retry_fallback_succeeded',
  'model_change', 'credential_switched', 'context_overflow', 'prompt_end',
];

// EventFollower follows a session's events with EventSource and a stream
// ticket. The browser reconnects by itself after a dropped connection,
// resuming with Last-Event-ID; when it gives up (the ticket expired, the
// server refused) the follower takes a fresh ticket and resumes from the
// last seq it delivered. Each seq is delivered once, in order.
export class EventFollower {
  constructor(sessionId, { onEvent, onStatus = () => {}, onProblem = () => {} }) {
    this.sessionId = sessionId;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.onProblem = onProblem;
    this.lastSeq = 0;
    this.received = []; // every seq as it arrived, duplicates included (diagnostics)
    this.connections = 0;
    this.es = null;
    this.timer = 0;
    this.closed = false;
    this.backoff = 500;
  }

  start(afterSeq = 0) {
    this.lastSeq = afterSeq;
    this.#open();
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    this.es?.close();
    this.es = null;
  }

  // reconnect drops the connection and opens another (fresh ticket).
  reconnect() {
    this.es?.close();
    this.es = null;
    this.#open();
  }

  async #open() {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.onStatus('connecting');
    let ticket;
    try {
      ({ ticket } = await api.streamTicket(this.sessionId));
    } catch (e) {
      this.onStatus('offline', e.message);
      if (e.status === 401 || e.status === 404) {
        this.onProblem(e);
        return; // nothing to follow without a token or a session
      }
      this.#retryLater();
      return;
    }
    if (this.closed) return;
    const url = `/v1/sessions/${enc(this.sessionId)}/events?afterSeq=${this.lastSeq}&ticket=${enc(ticket)}`;
    const es = new EventSource(url);
    this.es = es;
    this.connections++;
    es.onopen = () => {
      if (this.es !== es) return;
      this.backoff = 500;
      this.onStatus('live');
    };
    for (const type of EVENT_TYPES) es.addEventListener(type, (m) => this.#deliver(es, m));
    es.addEventListener('error', (e) => {
      if (this.es !== es) return;
      if (e.data) {
        // An error frame from the server: the stream cannot go on as is.
        let st = {};
        try { st = JSON.parse(e.data); } catch { /* keep {} */ }
        es.close();
        if (st.code === 5) {
          // NOT_FOUND: the session was deleted (here or on another replica).
          this.onStatus('offline', st.message);
          this.onProblem(new APIError(404, 5, st.message || 'the session was deleted'));
          return;
        }
        if (st.code === 11) {
          // OUT_OF_RANGE: the events after lastSeq are gone; go on from the
          // oldest the server still holds.
          this.onProblem(new APIError(400, 11, st.message || 'events were dropped'));
          this.lastSeq = 0;
        }
        this.onStatus('reconnecting', st.message);
        this.#retryLater();
        return;
      }
      if (es.readyState === EventSource.CLOSED) {
        this.onStatus('reconnecting', 'the stream was refused; taking a fresh ticket');
        this.#retryLater();
      } else {
        this.onStatus('reconnecting'); // the browser retries with Last-Event-ID
      }
    });
  }

  #deliver(es, m) {
    if (this.es !== es) return;
    const seq = Number(m.lastEventId);
    this.received.push(seq);
    if (!(seq > this.lastSeq)) return; // already delivered
    this.lastSeq = seq;
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    this.onEvent(ev);
  }

  #retryLater() {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.#open(), this.backoff);
    this.backoff = Math.min(this.backoff * 2, 15000);
  }
}
