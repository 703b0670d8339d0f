// Admin pages: knowledge bases, term mappings, users, groups and the chat limiter.
// (Documents and the intent tree live in documents.js and intents.js.)
import { t } from './i18n.js';
import { h, toast, errorText, confirmDialog, promptDialog, formatTime, field, modal } from './dom.js';
import { get, post, put, patch, del, enc, ActionKey } from './api.js';

export function pageHeader(titleText, subtitle) {
  return h('div', { class: 'page-head' },
    h('h1', {}, titleText),
    subtitle ? h('p', { class: 'muted' }, subtitle) : null);
}

export function formError() {
  return h('p', { class: 'form-error', role: 'alert', hidden: true });
}

export function showFormError(box, err) {
  box.textContent = errorText(err);
  box.hidden = false;
}

// adminForm builds the form the admin pages repeat: a card with a title, a
// grid of fields, what goes below the grid, an error line and the actions
// (cancel, when onCancel is given, then submit). On submit it runs save with
// the button disabled and shows a failure in the error line. name prefixes
// the test ids: <name>-form, <name>-submit, <name>-cancel.
export function adminForm({ name, label, title, fields = [], below = [], submitText = t('common.create'), onCancel, save, formClass = 'card form-card' }) {
  const heading = title ? h('h2', {}, title) : null;
  const errBox = formError();
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': `${name}-submit` }, submitText);
  const cancel = onCancel ? h('button', { type: 'button', class: 'btn', 'data-testid': `${name}-cancel`, hidden: true, onClick: onCancel }, t('common.cancel')) : null;
  const form = h('form', { class: formClass, 'data-testid': `${name}-form`, 'aria-label': label },
    heading,
    fields.length > 0 ? h('div', { class: 'form-grid' }, fields) : null,
    below,
    errBox,
    h('div', { class: 'form-actions' }, cancel, submit));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errBox.hidden = true;
    submit.disabled = true;
    try {
      await save();
    } catch (err) {
      showFormError(errBox, err);
    } finally {
      submit.disabled = false;
    }
  });
  return { form, heading, errBox, submit, cancel };
}

// dataTable is the table of a list: a header cell per column (a label, or a
// cell such as numCol's), then tbody. On a page it sits in a card.
export function dataTable(columns, tbody, { card = true, testid } = {}) {
  return h('div', { class: card ? 'table-wrap card' : 'table-wrap' }, h('table', { class: 'table', 'data-testid': testid },
    h('thead', {}, h('tr', {}, columns.map((c) => (c instanceof Node ? c : h('th', { scope: 'col' }, c))))),
    tbody));
}

// rowAction is a button in a table row; its accessible name says which row
// it acts on ("Delete: handbook"), since every row has the same buttons.
export function rowAction(testid, label, rowName, onClick, { danger = false, disabled = false } = {}) {
  return h('button', { type: 'button', class: danger ? 'btn btn-sm btn-danger-ghost' : 'btn btn-sm', 'data-testid': testid, disabled, 'aria-label': `${label}: ${rowName}`, onClick }, label);
}

// act sends a change made from a list, says how it went in a toast (okText
// on success, where given) and reloads the list to show what the server has.
export async function act(request, reload, okText) {
  try {
    await request();
    if (okText) toast(okText, 'info');
  } catch (err) {
    toast(errorText(err));
  }
  await reload();
}

// confirmDelete asks to confirm message and, on OK, acts with DELETE path
// (then onDeleted, if the delete went through).
export async function confirmDelete(message, path, reload, onDeleted) {
  if (!(await confirmDialog(message, { okLabel: t('common.delete'), danger: true }))) return;
  await act(async () => {
    await del(path);
    onDeleted?.();
  }, reload);
}

// numCol is the header cell of a numeric (right-aligned) column.
export function numCol(label) {
  return h('th', { scope: 'col', class: 'num' }, label);
}

export function emptyRow(cols, text) {
  return h('tr', { class: 'empty-row' }, h('td', { colspan: cols, class: 'muted' }, text));
}

// listPage keeps the list of an admin page: load() fetches path and shows a
// row(item) per item in tbody, or the empty text across cols columns. After
// a failure (a toast) it shows what it had; a 403 calls onForbidden instead,
// where given. Nothing is shown once destroy() has run. Of loads that
// overlap only the newest shows (an older answer arriving later would put
// back what a newer one removed), and tbody is aria-busy while any is out.
function listPage({ path, tbody, row, cols, empty, order, onForbidden }) {
  let items = [];
  let destroyed = false;
  let latest = 0; // the newest load's number
  let pending = 0; // loads not answered yet
  async function load() {
    const mine = ++latest;
    pending++;
    tbody.setAttribute('aria-busy', 'true');
    let res, failure;
    try {
      res = await get(path);
    } catch (err) {
      failure = err;
    }
    if (--pending === 0) tbody.setAttribute('aria-busy', 'false');
    if (mine !== latest || destroyed) return;
    if (failure) {
      if (onForbidden && failure.status === 403) { onForbidden(); return; }
      toast(errorText(failure));
    } else {
      items = res?.items ?? [];
      if (order) items = items.slice().sort(order);
    }
    tbody.replaceChildren(...items.map(row));
    if (items.length === 0) tbody.append(emptyRow(cols, empty));
  }
  return { load, destroy() { destroyed = true; } };
}

// dialogList keeps the list of a dialog: load() fetches path and shows a
// row(item) per item in tbody, or the empty text across cols columns;
// remove(itemPath, after) deletes itemPath, loads again and runs after. A
// failure of either shows in errBox and leaves the list as it was.
function dialogList({ path, tbody, row, cols, empty, errBox }) {
  async function load() {
    try {
      const res = await get(path);
      const items = res?.items ?? [];
      tbody.replaceChildren(...items.map(row));
      if (items.length === 0) tbody.append(emptyRow(cols, empty));
    } catch (err) {
      showFormError(errBox, err);
    }
  }
  async function remove(itemPath, after) {
    try {
      await del(itemPath);
      await load();
      after?.();
    } catch (err) {
      showFormError(errBox, err);
    }
  }
  return { load, remove };
}

function optionalInt(input) {
  const v = input.value.trim();
  return v === '' ? undefined : Number.parseInt(v, 10);
}

// ---------------------------------------------------------------- knowledge bases

export function mountKnowledgeBases(root, ctx) {
  let editing = null;
  // Only admins create knowledge bases; a manager uses the form to edit.
  const isAdmin = ctx.user?.role === 'admin';

  const name = h('input', { id: 'kb-name', required: true, maxlength: ctx.limits.nameRunes, 'data-testid': 'kb-name', autocomplete: 'off' });
  const description = h('textarea', { id: 'kb-description', rows: 2, maxlength: ctx.limits.descriptionRunes, 'data-testid': 'kb-description' });
  const chunkSize = h('input', { id: 'kb-chunk-size', type: 'number', min: ctx.limits.chunkSizeMin, max: ctx.limits.chunkSizeMax, step: 1, 'data-testid': 'kb-chunk-size', placeholder: t('kb.default') });
  const chunkOverlap = h('input', { id: 'kb-chunk-overlap', type: 'number', min: 0, max: 2000, step: 1, 'data-testid': 'kb-chunk-overlap', placeholder: t('kb.default') });
  const visibility = h('select', { id: 'kb-visibility', 'data-testid': 'kb-visibility' },
    h('option', { value: 'private' }, t('kb.visibility.private')),
    h('option', { value: 'internal' }, t('kb.visibility.internal')));
  const { form, heading: formTitle, errBox, submit, cancel } = adminForm({
    name: 'kb',
    label: t('kb.formLabel'),
    title: t('kb.createTitle'),
    fields: [
      field(t('kb.name'), name),
      field(t('kb.chunkSize'), chunkSize, t('kb.chunkSizeHint')),
      field(t('kb.chunkOverlap'), chunkOverlap, t('kb.chunkOverlapHint')),
      field(t('kb.visibility'), visibility, t('kb.visibilityHint'))],
    below: [field(t('kb.description'), description)],
    onCancel: () => setEditing(null),
    save,
  });
  const tbody = h('tbody');
  const table = dataTable([t('kb.name'), t('kb.description'), t('kb.access'), numCol(t('kb.documents')), t('kb.chunking'), t('kb.embedding'), t('common.actions')], tbody);
  root.append(h('div', { class: 'page' }, pageHeader(t('kb.title'), t('kb.subtitle')), form, table));

  function setEditing(kb) {
    editing = kb;
    errBox.hidden = true;
    name.value = kb?.name ?? '';
    description.value = kb?.description ?? '';
    chunkSize.value = kb?.chunkSize || '';
    chunkOverlap.value = kb?.chunkOverlap ?? '';
    if (!kb) chunkOverlap.value = '';
    visibility.value = kb?.visibility ?? 'private';
    form.hidden = !kb && !isAdmin;
    formTitle.textContent = kb ? t('kb.editTitle', { name: kb.name }) : t('kb.createTitle');
    submit.textContent = kb ? t('common.save') : t('common.create');
    cancel.hidden = !kb;
    if (kb) name.focus();
  }

  // Creates send an Idempotency-Key: a double submit or a retry after a
  // network error makes one knowledge base (api.js ActionKey).
  const createKey = new ActionKey();
  async function save() {
    const body = { name: name.value.trim(), description: description.value.trim(), visibility: visibility.value };
    const cs = optionalInt(chunkSize);
    const co = optionalInt(chunkOverlap);
    if (cs !== undefined) body.chunkSize = cs;
    if (co !== undefined) body.chunkOverlap = co;
    if (editing) {
      await patch(`/knowledge-bases/${enc(editing.id)}`, body);
      toast(t('common.saved'), 'info');
    } else {
      await post('/knowledge-bases', body, { key: createKey });
      toast(t('common.created'), 'info');
    }
    setEditing(null);
    await load();
  }

  const remove = (kb) => confirmDelete(t('kb.deleteConfirm', { name: kb.name }), `/knowledge-bases/${enc(kb.id)}`, load,
    () => { if (editing?.id === kb.id) setEditing(null); });

  const { load, destroy } = listPage({
    path: '/knowledge-bases?limit=200',
    tbody,
    cols: 7,
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
          rowAction('kb-edit', t('common.edit'), kb.name, () => setEditing(kb)),
          rowAction('kb-delete', t('common.delete'), kb.name, () => remove(kb), { danger: true })] : null)),
  });

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
  const list = h('tbody');
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
  const content = h('div', {},
    h('p', { class: 'muted' }, t('members.explain')),
    dataTable([t('members.name'), t('members.kind'), t('members.role'), t('common.actions')], list, { card: false }),
    form);
  modal(t('members.title', { name: kb.name }), content, 'members-dialog');

  const { load, remove } = dialogList({
    path: `/knowledge-bases/${enc(kb.id)}/members`,
    tbody: list,
    cols: 4,
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
  const list = h('tbody');
  const errBox = formError();
  errBox.dataset.testid = 'webhook-error';
  const content = h('div', {},
    h('p', { class: 'muted' }, t('webhooks.explain')),
    dataTable([t('webhooks.url'), t('webhooks.createdBy'), t('webhooks.deliveries'), t('webhooks.lastError'), t('common.actions')], list, { card: false }),
    errBox);
  modal(t('webhooks.title', { name: kb.name }), content, 'webhooks-dialog');

  const { load, remove } = dialogList({
    path: `/knowledge-bases/${enc(kb.id)}/webhooks`,
    tbody: list,
    cols: 5,
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

// ---------------------------------------------------------------- term mappings

export function mountTerms(root, ctx) {
  let editing = null;

  const source = h('input', { id: 'term-source', required: true, maxlength: ctx.limits.sourceTermRunes, 'data-testid': 'term-source', autocomplete: 'off' });
  const target = h('input', { id: 'term-target', required: true, maxlength: ctx.limits.targetTermRunes, 'data-testid': 'term-target', autocomplete: 'off' });
  const priority = h('input', { id: 'term-priority', type: 'number', step: 1, value: '0', 'data-testid': 'term-priority' });
  const enabled = h('input', { id: 'term-enabled', type: 'checkbox', checked: true, 'data-testid': 'term-enabled' });
  const createKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form, heading: formTitle, errBox, submit, cancel } = adminForm({
    name: 'term',
    label: t('terms.formLabel'),
    title: t('terms.createTitle'),
    fields: [
      field(t('terms.source'), source, t('terms.sourceHint')),
      field(t('terms.target'), target),
      field(t('terms.priority'), priority, t('terms.priorityHint')),
      h('div', { class: 'field field-check' }, h('label', { class: 'check', for: 'term-enabled' }, enabled, h('span', {}, t('common.enabled'))))],
    onCancel: () => setEditing(null),
    save: async () => {
      if (editing) await put(`/admin/term-mappings/${enc(editing.id)}`, bodyOf());
      else await post('/admin/term-mappings', bodyOf(), { key: createKey });
      toast(editing ? t('common.saved') : t('common.created'), 'info');
      setEditing(null);
      await load();
    },
  });
  const tbody = h('tbody');
  root.append(h('div', { class: 'page' },
    pageHeader(t('terms.title'), t('terms.subtitle')),
    form,
    dataTable([t('terms.source'), t('terms.target'), numCol(t('terms.priority')), t('common.status'), t('common.updated'), t('common.actions')], tbody)));

  function setEditing(m) {
    editing = m;
    errBox.hidden = true;
    source.value = m?.sourceTerm ?? '';
    target.value = m?.targetTerm ?? '';
    priority.value = String(m?.priority ?? 0);
    enabled.checked = m ? Boolean(m.enabled) : true;
    formTitle.textContent = m ? t('terms.editTitle', { source: m.sourceTerm }) : t('terms.createTitle');
    submit.textContent = m ? t('common.save') : t('common.create');
    cancel.hidden = !m;
    if (m) source.focus();
  }

  function bodyOf() {
    return {
      sourceTerm: source.value.trim(),
      targetTerm: target.value.trim(),
      priority: optionalInt(priority) ?? 0,
      enabled: enabled.checked,
    };
  }

  async function toggle(m) {
    try {
      await put(`/admin/term-mappings/${enc(m.id)}`, { sourceTerm: m.sourceTerm, targetTerm: m.targetTerm, priority: m.priority, enabled: !m.enabled });
      await load();
    } catch (err) {
      toast(errorText(err));
    }
  }

  const remove = (m) => confirmDelete(t('terms.deleteConfirm', { source: m.sourceTerm, target: m.targetTerm }), `/admin/term-mappings/${enc(m.id)}`, load,
    () => { if (editing?.id === m.id) setEditing(null); });

  const { load, destroy } = listPage({
    path: '/admin/term-mappings',
    tbody,
    cols: 6,
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
        rowAction('term-edit', t('common.edit'), m.sourceTerm, () => setEditing(m)),
        rowAction('term-toggle', m.enabled ? t('common.disable') : t('common.enable'), m.sourceTerm, () => toggle(m)),
        rowAction('term-delete', t('common.delete'), m.sourceTerm, () => remove(m), { danger: true }))),
  });

  load();
  return { destroy };
}

// ---------------------------------------------------------------- users

export function mountUsers(root, ctx) {
  const username = h('input', { id: 'user-username', required: true, maxlength: 64, autocomplete: 'off', 'data-testid': 'user-username' });
  const password = h('input', { id: 'user-password', type: 'password', required: true, autocomplete: 'new-password', 'data-testid': 'user-password' });
  const role = h('select', { id: 'user-role', 'data-testid': 'user-role' },
    h('option', { value: 'user' }, t('role.user')),
    h('option', { value: 'admin' }, t('role.admin')));
  const createKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form } = adminForm({
    name: 'user',
    label: t('users.formLabel'),
    title: t('users.createTitle'),
    fields: [
      field(t('users.username'), username),
      field(t('users.password'), password),
      field(t('users.role'), role)],
    save: async () => {
      await post('/users', { username: username.value.trim(), password: password.value, role: role.value }, { key: createKey });
      toast(t('common.created'), 'info');
      form.reset();
      await load();
    },
  });
  const tbody = h('tbody');
  root.append(h('div', { class: 'page' },
    pageHeader(t('users.title'), t('users.subtitle')),
    form,
    dataTable([t('users.username'), t('users.role'), t('common.status'), t('common.createdAt'), t('common.actions')], tbody)));

  function update(u, body, okText = t('common.saved')) {
    return act(() => patch(`/users/${enc(u.id)}`, body), load, okText);
  }

  async function resetPassword(u) {
    const pw = await promptDialog(t('users.newPassword', { name: u.username }), '', { type: 'password' });
    if (pw) await update(u, { password: pw }, t('users.passwordChanged'));
  }

  function remove(u) {
    return confirmDelete(t('users.deleteConfirm', { name: u.username }), `/users/${enc(u.id)}`, load);
  }

  const { load, destroy } = listPage({
    path: '/users',
    tbody,
    cols: 5,
    empty: t('users.empty'),
    onForbidden: ctx.forbidden,
    row: (u) => {
      const self = u.id === ctx.user.id;
      const roleSelect = h('select', { 'data-testid': 'user-role-select', 'aria-label': `${t('users.role')}: ${u.username}`, disabled: self },
        h('option', { value: 'user', selected: u.role === 'user' }, t('role.user')),
        h('option', { value: 'admin', selected: u.role === 'admin' }, t('role.admin')));
      roleSelect.addEventListener('change', () => update(u, { role: roleSelect.value }));
      return h('tr', { 'data-testid': 'user-row', 'data-id': u.id, 'data-username': u.username, class: u.disabled ? 'row-disabled' : '' },
        h('th', { scope: 'row' }, u.username, self ? h('span', { class: 'badge' }, t('users.you')) : null),
        h('td', {}, roleSelect),
        h('td', {}, h('span', { class: u.disabled ? 'badge badge-bad' : 'badge badge-ok' }, u.disabled ? t('common.disabled') : t('common.enabled'))),
        h('td', { class: 'muted' }, formatTime(u.createdAt)),
        h('td', { class: 'actions' },
          rowAction('user-disable', u.disabled ? t('common.enable') : t('common.disable'), u.username, () => update(u, { disabled: !u.disabled }), { disabled: self }),
          rowAction('user-password-reset', t('users.resetPassword'), u.username, () => resetPassword(u)),
          rowAction('user-delete', t('common.delete'), u.username, () => remove(u), { danger: true, disabled: self })));
    },
  });

  load();
  return { destroy };
}

// ---------------------------------------------------------------- limiter

const LIMITER_REFRESH_MS = 2000;

export function mountLimiter(root, ctx) {
  let timer = 0;
  let destroyed = false;

  const stat = (testid, label) => {
    const value = h('strong', { class: 'stat-value', 'data-testid': testid }, '—');
    return { value, el: h('div', { class: 'card stat' }, h('span', { class: 'stat-label' }, label), value) };
  };
  const permits = stat('limiter-permits', t('limiter.permits'));
  const max = stat('limiter-max', t('limiter.max'));
  const queue = stat('limiter-queue', t('limiter.queue'));
  const oldest = stat('limiter-oldest', t('limiter.oldest'));
  const meterFill = h('div', { class: 'meter-fill' });
  const meter = h('div', { class: 'meter', role: 'meter', 'aria-label': t('limiter.usage'), 'aria-valuemin': '0', 'aria-valuemax': '1', 'aria-valuenow': '0' }, meterFill);
  const updated = h('p', { class: 'muted', 'data-testid': 'limiter-updated', 'aria-live': 'off' }, '');
  const errBox = formError();

  root.append(h('div', { class: 'page' },
    pageHeader(t('limiter.title'), t('limiter.subtitle')),
    h('section', { class: 'limiter', 'data-testid': 'limiter-panel', 'aria-label': t('limiter.title') },
      h('div', { class: 'stats' }, permits.el, max.el, queue.el, oldest.el),
      h('div', { class: 'card' }, h('p', { class: 'stat-label' }, t('limiter.usage')), meter, updated),
      errBox)));

  async function refresh() {
    try {
      const s = await get('/admin/limiter');
      if (destroyed) return;
      errBox.hidden = true;
      permits.value.textContent = String(s.permitsInUse ?? 0);
      max.value.textContent = String(s.maxConcurrent ?? '—');
      queue.value.textContent = String(s.queueLength ?? 0);
      oldest.value.textContent = s.oldestWaitMs ? `${(s.oldestWaitMs / 1000).toFixed(1)} s` : '0 s';
      const ratio = s.maxConcurrent ? Math.min(1, (s.permitsInUse ?? 0) / s.maxConcurrent) : 0;
      meterFill.style.width = `${Math.round(ratio * 100)}%`;
      meterFill.classList.toggle('full', ratio >= 1);
      meter.setAttribute('aria-valuenow', ratio.toFixed(2));
      updated.textContent = t('limiter.updated', { time: new Date().toLocaleTimeString() });
    } catch (err) {
      if (destroyed) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      showFormError(errBox, err);
    }
    // Schedule after the answer, so a slow server never gets overlapping polls.
    if (!destroyed) timer = setTimeout(refresh, LIMITER_REFRESH_MS);
  }

  refresh();
  return {
    destroy() {
      destroyed = true;
      clearTimeout(timer);
    },
  };
}


// ---------------------------------------------------------------- groups

// mountGroups manages the groups knowledge bases are shared with: create,
// rename, delete, and who is in each.
export function mountGroups(root, ctx) {
  const name = h('input', { id: 'group-name', required: true, maxlength: ctx.limits.nameRunes, autocomplete: 'off', 'data-testid': 'group-name' });
  const description = h('input', { id: 'group-description', maxlength: ctx.limits.descriptionRunes, autocomplete: 'off', 'data-testid': 'group-description' });
  const createKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form } = adminForm({
    name: 'group',
    label: t('groups.createTitle'),
    title: t('groups.createTitle'),
    fields: [
      field(t('groups.name'), name),
      field(t('groups.description'), description)],
    save: async () => {
      await post('/groups', { name: name.value.trim(), description: description.value.trim() }, { key: createKey });
      toast(t('common.created'), 'info');
      form.reset();
      await load();
    },
  });
  const tbody = h('tbody');
  root.append(h('div', { class: 'page' },
    pageHeader(t('groups.title'), t('groups.subtitle')),
    form,
    dataTable([t('groups.name'), t('groups.description'), numCol(t('groups.memberCount')), t('common.actions')], tbody)));

  async function rename(g) {
    const v = await promptDialog(t('groups.rename', { name: g.name }), g.name);
    if (!v || v.trim() === g.name) return;
    await act(() => patch(`/groups/${enc(g.id)}`, { name: v.trim() }), load, t('common.saved'));
  }

  function remove(g) {
    return confirmDelete(t('groups.deleteConfirm', { name: g.name }), `/groups/${enc(g.id)}`, load);
  }

  const { load, destroy } = listPage({
    path: '/groups?limit=200',
    tbody,
    cols: 4,
    empty: t('groups.empty'),
    // A group the identity provider manages follows its groups claim:
    // its members are shown, nothing about it can be changed here.
    row: (g) => h('tr', { 'data-testid': 'group-row', 'data-id': g.id, 'data-name': g.name, 'data-managed': g.managedBy || '' },
      h('th', { scope: 'row' }, g.name,
        g.managedBy ? h('span', { class: 'badge', 'data-testid': 'group-managed', title: t('groups.managedHint') }, t('groups.managed')) : null),
      h('td', { class: 'wrap' }, g.description || '—'),
      h('td', { class: 'num' }, g.memberCount ?? 0),
      h('td', { class: 'actions' },
        rowAction('group-members', t('kb.members'), g.name, () => openGroupMembers(g, load)),
        g.managedBy ? null : rowAction('group-rename', t('common.edit'), g.name, () => rename(g)),
        g.managedBy ? null : rowAction('group-delete', t('common.delete'), g.name, () => remove(g), { danger: true }))),
  });

  load();
  return { destroy };
}

// openGroupMembers lists a group's users and adds or removes one by
// username; changed() refreshes the member counts behind the dialog.
function openGroupMembers(g, changed) {
  const list = h('tbody');
  const username = h('input', { id: 'group-member-username', required: true, maxlength: 64, autocomplete: 'off', 'data-testid': 'group-member-username' });
  const addKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form, errBox } = adminForm({
    name: 'group-member',
    label: t('groups.addMember'),
    below: [field(t('users.username'), username)],
    submitText: t('groups.addMember'),
    formClass: 'member-form',
    save: async () => {
      await post(`/groups/${enc(g.id)}/members`, { username: username.value.trim() }, { key: addKey });
      username.value = '';
      await load();
      changed();
    },
  });
  const managed = Boolean(g.managedBy);
  modal(t('groups.membersOf', { name: g.name }), h('div', {},
    dataTable([t('users.username'), t('common.actions')], list, { card: false }),
    managed ? h('p', { class: 'muted', 'data-testid': 'group-managed-note' }, t('groups.managedHint')) : form), 'group-members-dialog');

  const { load, remove } = dialogList({
    path: `/groups/${enc(g.id)}/members`,
    tbody: list,
    cols: 2,
    empty: t('members.empty'),
    errBox,
    row: (u) => h('tr', { 'data-testid': 'group-member-row', 'data-username': u.username },
      h('th', { scope: 'row' }, u.username),
      h('td', { class: 'actions' },
        managed ? null : rowAction(null, t('members.remove'), u.username,
          () => remove(`/groups/${enc(g.id)}/members/${enc(u.id)}`, changed), { danger: true }))),
  });
  load();
}
