// The admin pages' shared parts: the page header, the form (one that
// creates, one that also edits), the table of a list and its row buttons,
// acting on a row, and keeping the list of a page or of a dialog. The pages are knowledgebases.js, terms.js,
// users.js, groups.js and limiter.js (and documents.js, intents.js,
// audit.js, usage.js, feedback.js, apikeys.js, widgets.js).
import { t } from './i18n.js';
import { h, toast, errorText, confirmDialog, modal } from './dom.js';
import { get, post, del, enc, ActionKey } from './api.js';

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
// the test ids: <name>-form, <name>-submit, <name>-cancel; label, the
// form's accessible name, is its title unless given.
export function adminForm({ name, title, label = title, fields = [], below = [], submitText = t('common.create'), onCancel, save, formClass = 'card form-card' }) {
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

// createForm is the adminForm of a page that creates items at path: its
// submit POSTs body(), empties the form, runs created with the answer (by
// default a "Created" toast) and reloads the list. The POST carries the
// form's Idempotency-Key (api.js ActionKey), so a double submit or a retry
// makes one item; the key pages set idempotent: false, as the server
// ignores the header there rather than store the new key (docs/api.md).
export function createForm({ path, body, idempotent = true, created = () => toast(t('common.created'), 'info'), reload, ...form }) {
  const key = idempotent ? new ActionKey() : undefined;
  const f = adminForm({
    ...form,
    save: async () => {
      const answer = await post(path, body(), { key });
      f.form.reset();
      created(answer);
      await reload();
    },
  });
  return f.form;
}

// editForm is the adminForm of a page that creates items at path and edits
// them there: edit(item) loads item into the form (fill sets the fields
// from it, focus takes the focus) and Save sends body() to its path with
// update (put or patch); edit(null), Cancel and every save empty it again
// (fill(null) sets the fields' defaults) for a create, which POSTs with
// the form's Idempotency-Key. title(item) is the form's title.
// remove(item, message) asks message and deletes item, emptying the form
// if it holds item.
export function editForm({ path, body, update, fill, focus, title, reload, ...form }) {
  let editing = null;
  const key = new ActionKey();
  const f = adminForm({
    ...form,
    title: title(null),
    onCancel: () => edit(null),
    save: async () => {
      if (editing) {
        await update(`${path}/${enc(editing.id)}`, body());
        toast(t('common.saved'), 'info');
      } else {
        await post(path, body(), { key });
        toast(t('common.created'), 'info');
      }
      edit(null);
      await reload();
    },
  });
  function edit(item) {
    editing = item;
    f.errBox.hidden = true;
    fill(item);
    f.heading.textContent = title(item);
    f.submit.textContent = item ? t('common.save') : t('common.create');
    f.cancel.hidden = !item;
    if (item) focus.focus();
  }
  const remove = (item, message) => confirmDelete(message, `${path}/${enc(item.id)}`, reload,
    () => { if (editing?.id === item.id) edit(null); });
  return { form: f.form, edit, remove };
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

// listPage keeps the list of an admin page in a table (the table, a card)
// under columns: load() fetches path and shows a row(item) per item that
// keep passes (in order, where given), or the empty text. After a failure
// (a toast) it shows what it had; a 403 calls onForbidden instead, where
// given. Nothing is shown once destroy() has run (destroyed() says so). Of
// loads that overlap only the newest shows (an older answer arriving later
// would put back what a newer one removed), and the table's body is
// aria-busy while any is out.
export function listPage({ columns, testid, path, row, empty, keep, order, onForbidden }) {
  const tbody = h('tbody');
  const table = dataTable(columns, tbody, { testid });
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
      if (keep) items = items.filter(keep);
      if (order) items = items.slice().sort(order);
    }
    tbody.replaceChildren(...items.map(row));
    if (items.length === 0) tbody.append(emptyRow(columns.length, empty));
  }
  return { table, load, destroyed: () => destroyed, destroy() { destroyed = true; } };
}

// dialogList opens a dialog (title, testid) holding a table of the list at
// path under columns, with before above it and after below it (an
// explanation, a form, the error box), and keeps that list: load() fetches
// path and shows a row(item) per item, or the empty text across the
// columns; remove(itemPath, after) deletes itemPath, loads again and runs
// after. A failure of either shows in errBox and leaves the list as it was.
export function dialogList({ title, testid, before, columns, after, path, row, empty, errBox }) {
  const tbody = h('tbody');
  const cols = columns.length;
  modal(title, h('div', {}, before, dataTable(columns, tbody, { card: false }), after), testid);
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

export function optionalInt(input) {
  const v = input.value.trim();
  return v === '' ? undefined : Number.parseInt(v, 10);
}
