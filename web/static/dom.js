// Small DOM helpers. Everything user-supplied goes in as text nodes or
// attribute values; the only HTML string the UI ever assigns comes from
// markdown.js, which escapes its input first (see setTrustedHTML).
import { t } from './i18n.js';

// h builds an element. attrs: "class", "text", "on<Event>" (function),
// boolean values toggle attributes, null/undefined/false skip them;
// children may be strings, nodes, arrays, or null.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') el.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked' || k === 'selected') el[k] = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// setTrustedHTML assigns HTML produced by markdown.js. Keep every other
// HTML assignment out of the code base.
export function setTrustedHTML(el, html) {
  el.innerHTML = html;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export function toast(message, kind = 'error') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const ttl = kind === 'error' ? 8000 : 4000;
  // A failing poll repeats its error every few seconds: keep one toast per
  // message and restart its timer instead of stacking copies.
  for (const old of box.children) {
    if (old.dataset.kind === kind && old.dataset.message === message) {
      clearTimeout(Number(old.dataset.timer));
      old.dataset.timer = String(setTimeout(() => old.remove(), ttl));
      return;
    }
  }
  const el = h('div', { class: `toast toast-${kind}`, 'data-testid': 'toast', 'data-kind': kind },
    h('span', {}, message),
    h('button', { type: 'button', class: 'icon-btn', 'aria-label': t('common.close'), onClick: () => el.remove() }, '×'));
  el.dataset.message = message;
  el.dataset.timer = String(setTimeout(() => el.remove(), ttl));
  box.append(el);
}

// errorText turns an ApiError (or anything thrown) into a sentence for the user.
export function errorText(err) {
  if (!err) return t('err.unknown');
  if (err.code === 'network') return t('err.network');
  const msg = err.message || t('err.unknown');
  return err.status ? `${msg} (${err.status}${err.code ? ' ' + err.code : ''})` : msg;
}

function dialogShell(titleText, testid) {
  const dlg = h('dialog', { class: 'dialog', 'data-testid': testid, 'aria-label': titleText });
  dlg.addEventListener('close', () => dlg.remove());
  document.body.append(dlg);
  return dlg;
}

// confirmDialog is an in-page replacement for window.confirm, which blocks
// the page and is awkward for keyboard and automated browser users alike.
export function confirmDialog(message, { okLabel = t('common.ok'), danger = false } = {}) {
  return new Promise((resolve) => {
    const dlg = dialogShell(t('common.confirm'), 'confirm-dialog');
    let result = false;
    const form = h('form', { method: 'dialog', class: 'dialog-body' },
      h('p', {}, message),
      h('div', { class: 'dialog-actions' },
        h('button', { type: 'button', class: 'btn', 'data-testid': 'confirm-cancel', onClick: () => dlg.close() }, t('common.cancel')),
        h('button', { type: 'submit', class: danger ? 'btn btn-danger' : 'btn btn-primary', 'data-testid': 'confirm-ok' }, okLabel)));
    form.addEventListener('submit', () => { result = true; });
    dlg.addEventListener('close', () => resolve(result));
    dlg.append(form);
    dlg.showModal();
    form.querySelector('[data-testid=confirm-ok]').focus();
  });
}

// promptDialog asks for one line of text; it resolves to null when cancelled.
export function promptDialog(label, value = '', { type = 'text', testid = 'prompt-dialog' } = {}) {
  return new Promise((resolve) => {
    const dlg = dialogShell(label, testid);
    let result = null;
    const input = h('input', { id: 'prompt-input', type, value, required: true, 'data-testid': 'prompt-input', autocomplete: 'off' });
    const form = h('form', { method: 'dialog', class: 'dialog-body' },
      h('label', { for: 'prompt-input' }, label),
      input,
      h('div', { class: 'dialog-actions' },
        h('button', { type: 'button', class: 'btn', 'data-testid': 'prompt-cancel', onClick: () => dlg.close() }, t('common.cancel')),
        h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'prompt-ok' }, t('common.ok'))));
    form.addEventListener('submit', () => { result = input.value; });
    dlg.addEventListener('close', () => resolve(result));
    dlg.append(form);
    dlg.showModal();
    input.select();
  });
}

// modal shows read-only content with a close button.
export function modal(titleText, content, testid = 'modal') {
  const dlg = dialogShell(titleText, testid);
  dlg.classList.add('dialog-wide');
  dlg.append(h('div', { class: 'dialog-body' },
    h('div', { class: 'dialog-head' },
      h('h2', {}, titleText),
      h('button', { type: 'button', class: 'icon-btn', 'aria-label': t('common.close'), 'data-testid': 'modal-close', onClick: () => dlg.close() }, '×')),
    content));
  dlg.showModal();
  return dlg;
}

export function formatTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return d.toLocaleString(document.documentElement.lang || undefined, {
    year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit',
  });
}

export function formatBytes(n) {
  if (!Number.isFinite(n)) return '';
  const units = ['B', 'KB', 'MB', 'GB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

// field wraps a control with its visible label.
export function field(labelText, control, hint) {
  return h('div', { class: 'field' },
    h('label', { for: control.id }, labelText),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null);
}

// Icons are inline SVG so they render the same without emoji or symbol fonts.
const ICONS = {
  edit: ['M12 20h9', 'M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4Z'],
  trash: ['M3 6h18', 'M8 6V4h8v2', 'M19 6l-1 14H6L5 6', 'M10 11v6', 'M14 11v6'],
  menu: ['M3 6h18', 'M3 12h18', 'M3 18h18'],
};

export function icon(name) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: '16', height: '16', fill: 'none', stroke: 'currentColor', 'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true', focusable: 'false' })) {
    svg.setAttribute(k, v);
  }
  for (const d of ICONS[name] ?? []) {
    const p = document.createElementNS(ns, 'path');
    p.setAttribute('d', d);
    svg.append(p);
  }
  return svg;
}
