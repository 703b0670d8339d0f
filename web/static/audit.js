// Audit log page (admins): the append-only record of logins and changes,
// newest first, with filters and "load more" paging.
import { t } from './i18n.js';
import { h, formatTime, field } from './dom.js';
import { pageHeader } from './admin.js';
import { filteredList } from './pager.js';

// The recorded actions (docs/security.md "Audit log"); the filter offers these.
const ACTIONS = [
  'auth.login', 'auth.password_change', 'auth.sso_login', 'auth.sso_recheck', 'auth.sso_logout',
  'user.create', 'user.update', 'user.delete', 'user.provision',
  'group.sync', 'group.create', 'group.update', 'group.delete', 'group.member_add', 'group.member_remove',
  'kb.create', 'kb.update', 'kb.delete', 'kb.member_put', 'kb.member_remove',
  'document.upload', 'document.delete', 'document.reindex', 'document.import',
  'chunk.create', 'chunk.update', 'chunk.restore', 'chunk.delete',
  'webhook.create', 'webhook.delete',
  'quota.put', 'quota.delete',
  'intent.create', 'intent.update', 'intent.delete',
  'term.create', 'term.update', 'term.delete',
];
const RESULTS = ['success', 'denied', 'invalid', 'not_found', 'conflict', 'locked', 'failed'];

// datetime-local gives local wall time without a zone; the API wants RFC 3339.
function toRFC3339(v) {
  if (!v) return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

export function mountAudit(root, ctx) {
  const action = h('select', { id: 'audit-action', 'data-testid': 'audit-action' },
    h('option', { value: '' }, t('audit.any')),
    ...ACTIONS.map((a) => h('option', { value: a }, a)));
  const result = h('select', { id: 'audit-result', 'data-testid': 'audit-result' },
    h('option', { value: '' }, t('audit.any')),
    ...RESULTS.map((r) => h('option', { value: r }, t(`audit.result.${r}`))));
  const actor = h('input', { id: 'audit-actor', inputmode: 'numeric', autocomplete: 'off', 'data-testid': 'audit-actor', placeholder: t('audit.actorHint') });
  const target = h('input', { id: 'audit-target', autocomplete: 'off', 'data-testid': 'audit-target', placeholder: t('audit.targetHint') });
  const since = h('input', { id: 'audit-since', type: 'datetime-local', 'data-testid': 'audit-since' });
  const until = h('input', { id: 'audit-until', type: 'datetime-local', 'data-testid': 'audit-until' });
  function query() {
    const q = new URLSearchParams();
    const add = (k, v) => { if (v) q.set(k, v); };
    add('action', action.value);
    add('result', result.value);
    add('actor', actor.value.trim());
    add('target', target.value.trim());
    add('since', toRFC3339(since.value));
    add('until', toRFC3339(until.value));
    return q;
  }

  function row(e) {
    const badge = e.result === 'success' ? 'badge-ok' : (e.result === 'failed' ? 'badge-bad' : 'badge-wait');
    const who = e.actorName || (e.actorUserId ? `#${e.actorUserId}` : t('audit.nobody'));
    return h('tr', { 'data-testid': 'audit-row', 'data-action': e.action, 'data-result': e.result, 'data-request-id': e.requestId },
      h('td', { title: e.at }, formatTime(e.at)),
      h('td', { title: e.actorUserId ? `#${e.actorUserId}` : '' }, who),
      h('td', {}, h('code', {}, e.action)),
      h('td', { class: 'wrap' }, [e.targetType, e.targetId].filter(Boolean).join(' ')),
      h('td', {}, h('span', { class: `badge ${badge}` }, t(`audit.result.${e.result}`))),
      h('td', { class: 'wrap' }, e.detail || ''),
      h('td', { class: 'wrap muted' }, e.ip || '', h('br'), h('small', {}, e.requestId || '')));
  }

  const { form, table, more, list } = filteredList({
    name: 'audit',
    fields: [
      field(t('audit.action'), action),
      field(t('audit.result'), result),
      field(t('audit.actor'), actor),
      field(t('audit.target'), target),
      field(t('audit.since'), since),
      field(t('audit.until'), until)],
    actions: [h('button', { type: 'reset', class: 'btn', 'data-testid': 'audit-reset' }, t('audit.reset'))],
    columns: [t('audit.time'), t('audit.actor'), t('audit.action'), t('audit.target'), t('audit.result'), t('audit.detail'), t('audit.source')],
    path: '/admin/audit',
    query,
    row,
    empty: t('audit.empty'),
    ctx,
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('audit.title'), t('audit.subtitle')), form, table, more));
  // After the reset has cleared the controls.
  form.addEventListener('reset', () => setTimeout(() => list.load(false)));
  list.load(false);
  return list;
}
