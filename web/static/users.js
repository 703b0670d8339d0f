// The user admin page: create users, change a role, disable, reset a
// password, delete.
import { t } from './i18n.js';
import { h, promptDialog, formatTime, field } from './dom.js';
import { patch, enc } from './api.js';
import { pageHeader, createForm, rowAction, act, confirmDelete, listPage } from './admin.js';

export function mountUsers(root, ctx) {
  const username = h('input', { id: 'user-username', required: true, maxlength: 64, autocomplete: 'off', 'data-testid': 'user-username' });
  const password = h('input', { id: 'user-password', type: 'password', required: true, autocomplete: 'new-password', 'data-testid': 'user-password' });
  const role = h('select', { id: 'user-role', 'data-testid': 'user-role' },
    h('option', { value: 'user' }, t('role.user')),
    h('option', { value: 'admin' }, t('role.admin')));
  const form = createForm({
    name: 'user',
    label: t('users.formLabel'),
    title: t('users.createTitle'),
    fields: [
      field(t('users.username'), username),
      field(t('users.password'), password),
      field(t('users.role'), role)],
    path: '/users',
    body: () => ({ username: username.value.trim(), password: password.value, role: role.value }),
    reload: () => load(),
  });

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

  const { table, load, destroy } = listPage({
    columns: [t('users.username'), t('users.role'), t('common.status'), t('common.createdAt'), t('common.actions')],
    path: '/users',
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
  root.append(h('div', { class: 'page' }, pageHeader(t('users.title'), t('users.subtitle')), form, table));

  load();
  return { destroy };
}
