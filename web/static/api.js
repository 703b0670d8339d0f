// The only module that talks to the server. Every call goes to /api/v1 with the
// session cookie (credentials: 'same-origin'); no token is kept in the page.
import { t } from './i18n.js';

const BASE = '/api/v1';

// ApiError mirrors the server's {"error":{"code","message","details"}} body.
export class ApiError extends Error {
  constructor(status, code, message, details = {}, retryAfter = 0) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.details = details ?? {};
    this.retryAfter = retryAfter; // seconds, from Retry-After on 429/503
  }
}

function retryAfterOf(headerValue) {
  const n = Number.parseInt(headerValue ?? '', 10);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

function errorFromBody(status, bodyText, retryAfterHeader) {
  let code = `http_${status}`;
  let message = '';
  let details = {};
  try {
    const e = JSON.parse(bodyText)?.error;
    if (e) ({ code = code, message = '', details = {} } = e);
  } catch {
    // Not JSON (a proxy page, an empty body): fall back to the status.
  }
  return new ApiError(status, code, message || t(`err.${code}`, {}, t('err.status', { status })), details, retryAfterOf(retryAfterHeader));
}

async function errorFromResponse(res) {
  const text = await res.text().catch(() => '');
  const err = errorFromBody(res.status, text, res.headers.get('Retry-After'));
  if (res.status === 401) window.dispatchEvent(new CustomEvent('ragent:unauthorized'));
  return err;
}

function networkError(err) {
  if (err?.name === 'AbortError') return err;
  return new ApiError(0, 'network', t('err.network'));
}

// newIdempotencyKey returns a random Idempotency-Key (128 bits, hex).
// crypto.getRandomValues works on plain http too, unlike randomUUID.
export function newIdempotencyKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// ActionKey is the Idempotency-Key of one user action (a form's create):
// the same key each time the action is sent again with the same body (a
// second click after a network error, a browser retry), so the server runs
// it once and replays its answer; a fresh key once the body changed (an
// edited form is another action, which the old key would have refused with
// 422) or once the server answered it (the next submit is a new action).
export class ActionKey {
  constructor() { this.key = ''; this.body = ''; }

  for(body) {
    const b = JSON.stringify(body ?? null);
    if (!this.key || b !== this.body) { this.key = newIdempotencyKey(); this.body = b; }
    return this.key;
  }

  // settled forgets the key after an answer of the server; it keeps it
  // when no answer came (status 0), the server failed (5xx, which frees
  // the key) or the first request under it still runs (duplicate_request).
  settled(err) {
    if (err && (err.status === 0 || err.status >= 500 || err.code === 'duplicate_request')) return;
    this.key = '';
  }
}

// request sends a JSON request and returns the decoded body (null for 204).
// With key (an ActionKey) it sends the action's Idempotency-Key.
export async function request(method, path, body, { signal, key } = {}) {
  // Every write says JSON, even a DELETE without a body: the server
  // refuses a cookie-authenticated write of any other content type
  // (CSRF), since only JSON needs a CORS preflight.
  const headers = method === 'GET' ? { Accept: 'application/json' } : { Accept: 'application/json', 'Content-Type': 'application/json' };
  if (key) headers['Idempotency-Key'] = key.for(body);
  let res;
  try {
    res = await fetch(BASE + path, {
      method,
      credentials: 'same-origin',
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    const e = networkError(err);
    key?.settled(e);
    throw e;
  }
  if (!res.ok) {
    const e = await errorFromResponse(res);
    key?.settled(e);
    throw e;
  }
  key?.settled(null);
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, opts) => request('GET', path, undefined, opts);
export const post = (path, body = {}, opts) => request('POST', path, body, opts);
export const put = (path, body, opts) => request('PUT', path, body, opts);
export const patch = (path, body, opts) => request('PATCH', path, body, opts);
export const del = (path, opts) => request('DELETE', path, undefined, opts);

// enc escapes one path segment.
export const enc = (s) => encodeURIComponent(String(s));

// upload posts one file as multipart field "file". It uses XMLHttpRequest
// because fetch cannot report upload progress. onProgress gets 0..1.
export function upload(knowledgeBaseId, file, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = new Promise((resolve, reject) => {
    xhr.open('POST', `${BASE}/knowledge-bases/${enc(knowledgeBaseId)}/documents`);
    xhr.withCredentials = true;
    xhr.setRequestHeader('Accept', 'application/json');
    xhr.upload.addEventListener('progress', (e) => {
      if (e.lengthComputable) onProgress?.(e.loaded / e.total);
    });
    xhr.addEventListener('load', () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress?.(1);
        try {
          const body = JSON.parse(xhr.responseText || 'null');
          resolve(body?.document ?? body);
        } catch {
          resolve(null);
        }
        return;
      }
      if (xhr.status === 401) window.dispatchEvent(new CustomEvent('ragent:unauthorized'));
      reject(errorFromBody(xhr.status, xhr.responseText, xhr.getResponseHeader('Retry-After')));
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, 'network', t('err.network'))));
    xhr.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')));
    const form = new FormData();
    form.append('file', file, file.name);
    xhr.send(form);
  });
  return { promise, abort: () => xhr.abort() };
}

// parseEvent decodes one SSE event block (lines without the blank separator).
// It returns null for comment-only blocks such as ": ping".
export function parseEvent(block) {
  let name = 'message';
  let id = '';
  const data = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  if (data.length === 0) return null;
  return { name, id, data: data.join('\n') };
}

// SSEDecoder splits a text stream into events; it copes with chunks that end
// mid-line and with CRLF line endings split across chunks.
export class SSEDecoder {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.carryCR = false;
  }

  push(text) {
    if (this.carryCR) { text = '\r' + text; this.carryCR = false; }
    if (text.endsWith('\r')) { this.carryCR = true; text = text.slice(0, -1); }
    this.buf += text.replace(/\r\n?/g, '\n');
    let i;
    while ((i = this.buf.indexOf('\n\n')) >= 0) {
      const block = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + 2);
      const ev = parseEvent(block);
      if (ev) this.onEvent(ev);
    }
  }

  end() {
    if (this.carryCR) this.buf += '\n';
    const ev = parseEvent(this.buf);
    this.buf = '';
    if (ev) this.onEvent(ev);
  }
}

// streamChat posts a question and calls onEvent(name, data) for every SSE
// event (data is parsed JSON, or the raw text for "done") and onId(id) with
// each event's id. It resolves when the stream ends and rejects with
// ApiError when the server refuses the request before streaming (400, 401,
// 429, …) or the connection breaks (status 0). Aborting signal closes the
// connection; the answer runs on on the server for a while
// (RAGENT_CHAT_DETACHED_TIMEOUT), so resumeChat can pick it up again.
// idempotencyKey names the question (one per question asked, the same on
// each retry of it): a retry of a question the server already took follows
// that answer instead of asking again (docs/operations.md, "Idempotency").
export async function streamChat(body, onEvent, signal, onId, idempotencyKey) {
  const headers = { 'Content-Type': 'application/json', Accept: 'text/event-stream' };
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  const res = await openStream(`${BASE}/chat`, {
    method: 'POST',
    headers,
    body: JSON.stringify(body),
  }, signal);
  await readStream(res, onEvent, onId);
}

// resumeChat reads a task's events after lastEventId ('' for all of them)
// and then the live ones until done, like streamChat (docs/streaming.md "Resuming an
// answer"); a 404 ApiError means the answer is no longer kept.
export async function resumeChat(taskId, lastEventId, onEvent, signal, onId) {
  const headers = { Accept: 'text/event-stream' };
  if (lastEventId) headers['Last-Event-ID'] = lastEventId;
  const res = await openStream(`${BASE}/chat/tasks/${encodeURIComponent(taskId)}/events`, { method: 'GET', headers }, signal);
  await readStream(res, onEvent, onId);
}

async function openStream(url, init, signal) {
  let res;
  try {
    res = await fetch(url, { ...init, credentials: 'same-origin', signal });
  } catch (err) {
    throw networkError(err);
  }
  if (!res.ok) throw await errorFromResponse(res);
  if (!(res.headers.get('Content-Type') ?? '').includes('text/event-stream') || !res.body) {
    throw new ApiError(res.status, 'bad_response', t('err.bad_response'));
  }
  return res;
}

async function readStream(res, onEvent, onId) {
  const decoder = new SSEDecoder((ev) => {
    if (ev.id && onId) onId(ev.id);
    if (ev.name === 'done') { onEvent('done', ev.data); return; }
    let data;
    try {
      data = JSON.parse(ev.data);
    } catch {
      onEvent('error', { code: 'bad_event', message: t('err.bad_response') });
      return;
    }
    onEvent(ev.name, data);
  });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      decoder.push(value);
    }
  } catch (err) {
    throw networkError(err);
  }
  decoder.end();
}
