// The user admin page: create users, change a role, disable, reset a
// password, delete.
import { t } from './i18n.js';
import { h, toast, promptDialog, formatTime, field } from './dom.js';
import { post, patch, enc, ActionKey } from './api.js';
import { pageHeader, adminForm, dataTable, rowAction, act, confirmDelete, listPage } from './admin.js';

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
