// The term-mapping admin page: the terms a question's words are rewritten
// to before retrieval (create, edit, enable or disable, delete).
import { t } from './i18n.js';
import { h, toast, errorText, formatTime, field } from './dom.js';
import { put, enc } from './api.js';
import { pageHeader, editForm, rowAction, numCol, listPage, optionalInt } from './admin.js';

export function mountTerms(root, ctx) {
  const source = h('input', { id: 'term-source', required: true, maxlength: ctx.limits.sourceTermRunes, 'data-testid': 'term-source', autocomplete: 'off' });
  const target = h('input', { id: 'term-target', required: true, maxlength: ctx.limits.targetTermRunes, 'data-testid': 'term-target', autocomplete: 'off' });
  const priority = h('input', { id: 'term-priority', type: 'number', step: 1, value: '0', 'data-testid': 'term-priority' });
  const enabled = h('input', { id: 'term-enabled', type: 'checkbox', checked: true, 'data-testid': 'term-enabled' });
  const { form, edit, remove } = editForm({
    name: 'term',
    label: t('terms.formLabel'),
    title: (m) => (m ? t('terms.editTitle', { source: m.sourceTerm }) : t('terms.createTitle')),
    fields: [
      field(t('terms.source'), source, t('terms.sourceHint')),
      field(t('terms.target'), target),
      field(t('terms.priority'), priority, t('terms.priorityHint')),
      h('div', { class: 'field field-check' }, h('label', { class: 'check', for: 'term-enabled' }, enabled, h('span', {}, t('common.enabled'))))],
    path: '/admin/term-mappings',
    update: put,
    body: () => ({
      sourceTerm: source.value.trim(),
      targetTerm: target.value.trim(),
      priority: optionalInt(priority) ?? 0,
      enabled: enabled.checked,
    }),
    fill: (m) => {
      source.value = m?.sourceTerm ?? '';
      target.value = m?.targetTerm ?? '';
      priority.value = String(m?.priority ?? 0);
      enabled.checked = m ? Boolean(m.enabled) : true;
    },
    focus: source,
    reload: () => load(),
  });

  async function toggle(m) {
    try {
      await put(`/admin/term-mappings/${enc(m.id)}`, { sourceTerm: m.sourceTerm, targetTerm: m.targetTerm, priority: m.priority, enabled: !m.enabled });
      await load();
    } catch (err) {
      toast(errorText(err));
    }
  }

  const { table, load, destroy } = listPage({
    columns: [t('terms.source'), t('terms.target'), numCol(t('terms.priority')), t('common.status'), t('common.updated'), t('common.actions')],
    path: '/admin/term-mappings',
    empty: t('terms.empty'),
    order: (a, b) => (b.priority ?? 0) - (a.priority ?? 0) || a.sourceTerm.localeCompare(b.sourceTerm),
    onForbidden: ctx.forbidden,
    row: (m) => h('tr', { 'data-testid': 'term-row', 'data-id': m.id, 'data-source': m.sourceTerm, class: m.enabled ? '' : 'row-disabled' },
      h('th', { scope: 'row' }, m.sourceTerm),
      h('td', {}, '→ ', m.targetTerm),
      h('td', { class: 'num' }, m.priority ?? 0),
      h('td', {}, h('span', { class: m.enabled ? 'badge badge-ok' : 'badge' }, m.enabled ? t('common.enabled') : t('common.disabled'))),
      h('td', { class: 'muted' }, formatTime(m.updatedAt)),
      h('td', { class: 'actions' },
        rowAction('term-edit', t('common.edit'), m.sourceTerm, () => edit(m)),
        rowAction('term-toggle', m.enabled ? t('common.disable') : t('common.enable'), m.sourceTerm, () => toggle(m)),
        rowAction('term-delete', t('common.delete'), m.sourceTerm,
          () => remove(m, t('terms.deleteConfirm', { source: m.sourceTerm, target: m.targetTerm })), { danger: true }))),
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('terms.title'), t('terms.subtitle')), form, table));

  load();
  return { destroy };
}
