// API keys page: every user lists, creates and revokes their own keys;
// admins see (and may revoke) every user's, with the owner. A new key is
// shown once, in a dialog with a copy button; the server keeps only its hash.
import { t } from './i18n.js';
import { h, formatTime, field } from './dom.js';
import { pageHeader, createForm, listPage } from './admin.js';
import { kbPicker, revokeKey, showOnce } from './keyforms.js';

const SCOPES = ['read', 'search', 'chat', 'ingest'];

export function mountAPIKeys(root, ctx) {
  const isAdmin = ctx.user?.role === 'admin';

  const name = h('input', { id: 'apikey-name', required: true, maxlength: 100, autocomplete: 'off', 'data-testid': 'apikey-name' });
  const scopeBoxes = SCOPES.map((s) => h('input', { type: 'checkbox', id: `apikey-scope-${s}`, value: s, 'data-testid': 'apikey-scope', 'data-scope': s, checked: s === 'read' || s === 'search' }));
  const scopes = h('fieldset', { class: 'checks' },
    h('legend', {}, t('apikeys.scopes')),
    scopeBoxes.map((box) => h('label', { for: box.id, class: 'check' }, box, ' ', h('strong', {}, box.value), ' ', h('span', { class: 'muted' }, t(`apikeys.scope.${box.value}`)))));
  const kbs = kbPicker('apikey', t('apikeys.knowledgeBases'), t('apikeys.knowledgeBasesHint'));
  const expires = h('input', { id: 'apikey-expires', type: 'date', 'data-testid': 'apikey-expires' });
  const form = createForm({
    name: 'apikey',
    title: t('apikeys.createTitle'),
    fields: [
      field(t('apikeys.name'), name),
      field(t('apikeys.expires'), expires, t('apikeys.expiresHint'))],
    below: [scopes, kbs.fieldset],
    path: '/api-keys',
    idempotent: false,
    body: () => {
      const body = { name: name.value.trim(), scopes: scopeBoxes.filter((b) => b.checked).map((b) => b.value) };
      const picked = kbs.picked();
      if (picked.length > 0) body.knowledgeBaseIds = picked;
      if (expires.value) body.expiresAt = new Date(`${expires.value}T23:59:59`).toISOString();
      return body;
    },
    created: (key) => {
      for (const b of scopeBoxes) b.checked = b.value === 'read' || b.value === 'search';
      showKeyOnce(key);
    },
    reload: () => load(),
  });
  const columns = [t('apikeys.name'), t('apikeys.prefix')];
  if (isAdmin) columns.push(t('apikeys.owner'));
  columns.push(t('apikeys.scopes'), t('apikeys.knowledgeBases'), t('apikeys.lastUsed'), t('apikeys.expires'), t('common.actions'));

  const revoke = (k) => revokeKey('apikeys', k, load);

  const { table, load, destroyed, destroy } = listPage({
    columns,
    testid: 'apikey-table',
    path: '/api-keys?limit=200',
    keep: (k) => k.kind !== 'widget', // widget keys have a page of their own (widgets.js)
    empty: t('apikeys.empty'),
    row: (k) => h('tr', { 'data-testid': 'apikey-row', 'data-id': k.id, 'data-name': k.name },
      h('th', { scope: 'row' }, k.name),
      h('td', {}, h('code', {}, `${k.prefix}…`)),
      isAdmin ? h('td', {}, k.username) : null,
      h('td', {}, (k.scopes ?? []).join(', ')),
      h('td', { class: 'wrap' }, k.knowledgeBaseIds ? k.knowledgeBaseIds.map((id) => kbs.names.get(id) ?? id).join(', ') : t('apikeys.allKnowledgeBases')),
      h('td', { class: 'muted' }, k.lastUsedAt ? formatTime(k.lastUsedAt) : t('apikeys.never')),
      h('td', { class: 'muted' }, k.expiresAt ? formatTime(k.expiresAt) : t('apikeys.noExpiry')),
      h('td', { class: 'actions' },
        h('button', { type: 'button', class: 'btn btn-sm btn-danger', 'data-testid': 'apikey-revoke', onClick: () => revoke(k) }, t('apikeys.revoke')))),
  });
  root.append(h('div', { class: 'page' },
    pageHeader(t('apikeys.title'), t(isAdmin ? 'apikeys.subtitleAdmin' : 'apikeys.subtitle')),
    form, table,
    isAdmin ? h('p', { class: 'muted' }, h('a', { href: '#/admin/widgets', 'data-testid': 'apikey-widgets-link' }, t('apikeys.widgetsElsewhere'))) : null));

  kbs.load(destroyed).then(load);
  return { destroy };
}

// showKeyOnce shows a new key with a copy button. Closing the dialog drops
// the only copy the page has.
function showKeyOnce(created) {
  const value = h('input', { id: 'apikey-value', readonly: true, value: created.key, 'data-testid': 'apikey-value', spellcheck: 'false', autocomplete: 'off' });
  showOnce({
    p: 'apikey',
    ns: 'apikeys',
    title: t('apikeys.createdTitle', { name: created.name }),
    text: created.key,
    value,
    body: [
      h('p', { role: 'alert' }, t('apikeys.onceWarning')),
      field(t('apikeys.key'), value),
      h('p', { class: 'muted' }, t('apikeys.usage')),
      h('pre', { class: 'apikey-usage' }, h('code', {}, `curl -H "Authorization: Bearer ${created.prefix}…" ${location.origin}/api/v1/knowledge-bases`))],
  });
}
