// Widget keys page (admins): create a public widget key (pk_) for chosen
// knowledge bases and allowed page origins, with its rates, and get the
// <script> snippet a site pastes into its pages, with a copy button; list
// and revoke the widget keys. The key is in the snippet and the page's
// source (it is public, bounded by its origins, knowledge bases and
// rates), but the server keeps only its hash, so the snippet is shown once.
// docs/widget.md.
import { t } from './i18n.js';
import { h, formatTime, field } from './dom.js';
import { pageHeader, createForm, rowAction, listPage } from './admin.js';
import { kbPicker, revokeKey, showOnce } from './keyforms.js';

// The server's bounds (service/auth/widget.go), checked here to say so early.
const MAX_ORIGINS = 20;
const MAX_RATE = 10000;

export function mountWidgets(root) {
  const name = h('input', { id: 'widgetkey-name', required: true, maxlength: 100, autocomplete: 'off', 'data-testid': 'widgetkey-name' });
  const origins = h('textarea', { id: 'widgetkey-origins', required: true, rows: 3, spellcheck: 'false', autocomplete: 'off',
    placeholder: 'https://intranet.example.com', 'data-testid': 'widgetkey-origins' });
  const rate = (id) => h('input', { id, type: 'number', min: 0, max: MAX_RATE, step: 1, inputmode: 'numeric', 'data-testid': id });
  const originRate = rate('widgetkey-origin-rate');
  const visitorRate = rate('widgetkey-visitor-rate');
  originRate.placeholder = '60';
  visitorRate.placeholder = '10';
  const kbs = kbPicker('widgetkey', t('widgets.knowledgeBases'), t('widgets.knowledgeBasesHint'));
  const form = createForm({
    name: 'widgetkey',
    title: t('widgets.createTitle'),
    fields: [
      field(t('widgets.name'), name),
      field(t('widgets.origins'), origins, t('widgets.originsHint')),
      field(t('widgets.originRate'), originRate, t('widgets.originRateHint')),
      field(t('widgets.visitorRate'), visitorRate, t('widgets.visitorRateHint'))],
    below: [kbs.fieldset],
    path: '/widget-keys',
    idempotent: false,
    body: () => {
      const list = origins.value.split(/[\s,]+/).map((o) => o.trim().replace(/\/+$/, '')).filter(Boolean);
      if (list.length === 0 || list.length > MAX_ORIGINS) throw new Error(t('widgets.originsCount', { max: MAX_ORIGINS }));
      const picked = kbs.picked();
      if (picked.length === 0) throw new Error(t('widgets.pickKnowledgeBase'));
      const body = { name: name.value.trim(), knowledgeBaseIds: picked, origins: list };
      if (originRate.value) body.originRate = Number(originRate.value);
      if (visitorRate.value) body.visitorRate = Number(visitorRate.value);
      return body;
    },
    created: showSnippetOnce,
    reload: () => load(),
  });

  const revoke = (k) => revokeKey('widgets', k, load);

  const { table, load, destroyed, destroy } = listPage({
    columns: [t('widgets.name'), t('widgets.prefix'), t('widgets.owner'), t('widgets.knowledgeBases'), t('widgets.origins'),
      t('widgets.rates'), t('widgets.lastUsed'), t('common.actions')],
    testid: 'widgetkey-table',
    path: '/api-keys?limit=200',
    keep: (k) => k.kind === 'widget',
    empty: t('widgets.empty'),
    row: (k) => h('tr', { 'data-testid': 'widgetkey-row', 'data-id': k.id, 'data-name': k.name },
      h('th', { scope: 'row' }, k.name),
      h('td', {}, h('code', {}, `${k.prefix}…`)),
      h('td', {}, k.username),
      h('td', { class: 'wrap' }, (k.knowledgeBaseIds ?? []).map((id) => kbs.names.get(id) ?? id).join(', ')),
      h('td', { class: 'wrap', 'data-testid': 'widgetkey-row-origins' }, (k.widget?.origins ?? []).map((o) => h('div', {}, o))),
      h('td', { class: 'muted' }, t('widgets.ratesValue', { origin: k.widget?.originRate ?? '', visitor: k.widget?.visitorRate ?? '' })),
      h('td', { class: 'muted' }, k.lastUsedAt ? formatTime(k.lastUsedAt) : t('widgets.never')),
      h('td', { class: 'actions' }, rowAction('widgetkey-revoke', t('widgets.revoke'), k.name, () => revoke(k), { danger: true }))),
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('widgets.title'), t('widgets.subtitle')), form, table));

  kbs.load(destroyed).then(load);
  return { destroy };
}

// widgetSnippet is what a site pastes into its pages: this server's
// widget.js with the key.
function widgetSnippet(key) {
  const attr = String(key).replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
  return `<script src="${location.origin}/widget.js" data-key="${attr}"></script>`;
}

// showSnippetOnce shows a new widget key's snippet with a copy button.
// Closing the dialog drops the only copy the page has.
function showSnippetOnce(created) {
  const snippet = widgetSnippet(created.key);
  const value = h('textarea', { id: 'widgetkey-snippet', readonly: true, rows: 3, spellcheck: 'false', autocomplete: 'off', 'data-testid': 'widgetkey-snippet' });
  value.value = snippet;
  showOnce({
    p: 'widgetkey',
    ns: 'widgets',
    title: t('widgets.createdTitle', { name: created.name }),
    text: snippet,
    value,
    body: [
      h('p', {}, t('widgets.snippetHelp')),
      field(t('widgets.snippet'), value),
      h('p', { class: 'muted', role: 'note' }, t('widgets.onceWarning'))],
  });
}
