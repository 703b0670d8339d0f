// The knowledge-base admin page: create (admins), edit and delete
// knowledge bases, with the dialogs of their members (who a knowledge base
// is shared with) and webhooks. Its documents are in documents.js.
import { t } from './i18n.js';
import { h, confirmDialog, field } from './dom.js';
import { post, patch, enc, ActionKey } from './api.js';
import { pageHeader, formError, adminForm, editForm, rowAction, numCol, listPage, dialogList, optionalInt } from './admin.js';

export function mountKnowledgeBases(root, ctx) {
  // Only admins create knowledge bases; a manager uses the form to edit.
  const isAdmin = ctx.user?.role === 'admin';

  const name = h('input', { id: 'kb-name', required: true, maxlength: ctx.limits.nameRunes, 'data-testid': 'kb-name', autocomplete: 'off' });
  const description = h('textarea', { id: 'kb-description', rows: 2, maxlength: ctx.limits.descriptionRunes, 'data-testid': 'kb-description' });
  const chunkSize = h('input', { id: 'kb-chunk-size', type: 'number', min: ctx.limits.chunkSizeMin, max: ctx.limits.chunkSizeMax, step: 1, 'data-testid': 'kb-chunk-size', placeholder: t('kb.default') });
  const chunkOverlap = h('input', { id: 'kb-chunk-overlap', type: 'number', min: 0, max: 2000, step: 1, 'data-testid': 'kb-chunk-overlap', placeholder: t('kb.default') });
  const visibility = h('select', { id: 'kb-visibility', 'data-testid': 'kb-visibility' },
    h('option', { value: 'private' }, t('kb.visibility.private')),
    h('option', { value: 'internal' }, t('kb.visibility.internal')));
  const { form, edit, remove } = editForm({
    name: 'kb',
    label: t('kb.formLabel'),
    title: (kb) => (kb ? t('kb.editTitle', { name: kb.name }) : t('kb.createTitle')),
    fields: [
      field(t('kb.name'), name),
      field(t('kb.chunkSize'), chunkSize, t('kb.chunkSizeHint')),
      field(t('kb.chunkOverlap'), chunkOverlap, t('kb.chunkOverlapHint')),
      field(t('kb.visibility'), visibility, t('kb.visibilityHint'))],
    below: [field(t('kb.description'), description)],
    path: '/knowledge-bases',
    update: patch,
    body: () => {
      const body = { name: name.value.trim(), description: description.value.trim(), visibility: visibility.value };
      const cs = optionalInt(chunkSize);
      const co = optionalInt(chunkOverlap);
      if (cs !== undefined) body.chunkSize = cs;
      if (co !== undefined) body.chunkOverlap = co;
      return body;
    },
    fill: (kb) => {
      name.value = kb?.name ?? '';
      description.value = kb?.description ?? '';
      chunkSize.value = kb?.chunkSize || '';
      chunkOverlap.value = kb?.chunkOverlap ?? '';
      visibility.value = kb?.visibility ?? 'private';
      form.hidden = !kb && !isAdmin;
    },
    focus: name,
    reload: () => load(),
  });

  const { table, load, destroy } = listPage({
    columns: [t('kb.name'), t('kb.description'), t('kb.access'), numCol(t('kb.documents')), t('kb.chunking'), t('kb.embedding'), t('common.actions')],
    path: '/knowledge-bases?limit=200',
    empty: t('kb.empty'),
    onForbidden: ctx.forbidden,
    row: (kb) => h('tr', { 'data-testid': 'kb-row', 'data-kb-id': kb.id, 'data-name': kb.name },
      h('th', { scope: 'row' }, h('a', { href: `#/admin/docs/${enc(kb.id)}` }, kb.name)),
      h('td', { class: 'wrap' }, kb.description || '—'),
      h('td', {},
        h('span', { class: `badge ${kb.visibility === 'internal' ? 'badge-ok' : 'badge-wait'}` }, t(`kb.visibility.${kb.visibility}`, {}, kb.visibility)),
        ' ',
        h('span', { class: 'muted' }, t(`kb.role.${kb.role}`, {}, kb.role ?? ''))),
      h('td', { class: 'num' }, kb.documentCount ?? '—'),
      h('td', {}, kb.chunkSize ? `${kb.chunkSize} / ${kb.chunkOverlap ?? 0}` : '—'),
      h('td', { class: 'muted' }, kb.embeddingModel ? `${kb.embeddingModel} · ${kb.embeddingDim}` : '—', reembedBadge(kb)),
      h('td', { class: 'actions' },
        h('a', { class: 'btn btn-sm', href: `#/admin/docs/${enc(kb.id)}`, 'data-testid': 'kb-docs-link' }, t('kb.docs')),
        kb.role === 'manager' ? [
          rowAction('kb-members', t('kb.members'), kb.name, () => openMembers(kb)),
          rowAction('kb-webhooks', t('kb.webhooks'), kb.name, () => openWebhooks(kb)),
          rowAction('kb-edit', t('common.edit'), kb.name, () => edit(kb)),
          rowAction('kb-delete', t('common.delete'), kb.name, () => remove(kb, t('kb.deleteConfirm', { name: kb.name })), { danger: true })] : null)),
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('kb.title'), t('kb.subtitle')), form, table));

  form.hidden = !isAdmin;
  load();
  return { destroy };
}

// reembedBadge shows a knowledge base's move to another embedding model
// ("re-embedding n/m"), or nothing.
export function reembedBadge(kb) {
  const r = kb.reembedding;
  if (!r) return null;
  return h('span', { class: 'badge badge-wait', 'data-testid': 'kb-reembedding', title: `${r.target.model} · ${r.target.dim}` },
    t('kb.reembedding', { done: r.done, total: r.total }));
}

// openMembers shows who a knowledge base is shared with, and lets its
// managers add a user or group by name with a role, change a role (adding
// again) or remove a grant.
function openMembers(kb) {
  const kind = h('select', { id: 'member-kind', 'data-testid': 'member-kind' },
    h('option', { value: 'user' }, t('members.kind.user')),
    h('option', { value: 'group' }, t('members.kind.group')));
  const name = h('input', { id: 'member-name', required: true, maxlength: 100, autocomplete: 'off', 'data-testid': 'member-name' });
  const role = h('select', { id: 'member-role', 'data-testid': 'member-role' },
    ...['viewer', 'editor', 'manager'].map((r) => h('option', { value: r }, t(`kb.role.${r}`))));
  const addKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form, errBox } = adminForm({
    name: 'member',
    label: t('members.add'),
    fields: [
      field(t('members.kind'), kind),
      field(t('members.name'), name, t('members.nameHint')),
      field(t('members.role'), role)],
    submitText: t('members.add'),
    formClass: 'member-form',
    save: async () => {
      await post(`/knowledge-bases/${enc(kb.id)}/members`, { kind: kind.value, name: name.value.trim(), role: role.value }, { key: addKey });
      name.value = '';
      await load();
    },
  });
  errBox.dataset.testid = 'member-error';

  const { load, remove } = dialogList({
    title: t('members.title', { name: kb.name }),
    testid: 'members-dialog',
    before: h('p', { class: 'muted' }, t('members.explain')),
    columns: [t('members.name'), t('members.kind'), t('members.role'), t('common.actions')],
    after: form,
    path: `/knowledge-bases/${enc(kb.id)}/members`,
    empty: t('members.empty'),
    errBox,
    row: (m) => h('tr', { 'data-testid': 'member-row', 'data-kind': m.kind, 'data-name': m.name, 'data-role': m.role },
      h('th', { scope: 'row' }, m.name),
      h('td', {}, t(`members.kind.${m.kind}`, {}, m.kind)),
      h('td', {}, t(`kb.role.${m.role}`, {}, m.role)),
      h('td', { class: 'actions' },
        rowAction('member-remove', t('members.remove'), m.name,
          () => remove(`/knowledge-bases/${enc(kb.id)}/members/${enc(m.id)}`), { danger: true }))),
  });
  load();
}

// openWebhooks lists a knowledge base's webhooks with who made them (a
// webhook sends only while its creator may read the knowledge base) and
// their deliveries, and lets its managers delete one. Webhooks are made
// through the API: their secret is shown once, to a pipeline.
function openWebhooks(kb) {
  const errBox = formError();
  errBox.dataset.testid = 'webhook-error';

  const { load, remove } = dialogList({
    title: t('webhooks.title', { name: kb.name }),
    testid: 'webhooks-dialog',
    before: h('p', { class: 'muted' }, t('webhooks.explain')),
    columns: [t('webhooks.url'), t('webhooks.createdBy'), t('webhooks.deliveries'), t('webhooks.lastError'), t('common.actions')],
    after: errBox,
    path: `/knowledge-bases/${enc(kb.id)}/webhooks`,
    empty: t('webhooks.empty'),
    errBox,
    row: (w) => h('tr', { 'data-testid': 'webhook-row', 'data-webhook-id': w.id },
      h('th', { scope: 'row', class: 'wrap' }, w.url),
      h('td', { 'data-testid': 'webhook-creator' }, w.createdByName || t('webhooks.creatorGone')),
      h('td', { class: 'muted' }, t('webhooks.counts', { pending: w.pendingDeliveries, failed: w.failedDeliveries, skipped: w.skippedDeliveries })),
      h('td', { class: 'wrap muted' }, w.lastError || '—'),
      h('td', { class: 'actions' },
        rowAction('webhook-delete', t('common.delete'), w.url, () => removeWebhook(w), { danger: true }))),
  });

  async function removeWebhook(w) {
    if (!(await confirmDialog(t('webhooks.deleteConfirm', { url: w.url }), { okLabel: t('common.delete'), danger: true }))) return;
    await remove(`/knowledge-bases/${enc(kb.id)}/webhooks/${enc(w.id)}`);
  }

  load();
}
