// The account dialog: the signed-in user's month of usage, password change
// and signing out on every device.
import { t } from './i18n.js';
import { h, toast, errorText, confirmDialog, field } from './dom.js';
import { post, ApiError } from './api.js';
import { monthUsage } from './usage.js';

// openAccount shows the signed-in user's own settings: change the password
// (which ends every other session; the server answers with a new session
// cookie for this one) and sign out on every device. shell.user() is the
// signed-in user, shell.setUser(user) takes the one the password change
// answers with, shell.signedOut() leaves for the sign-in page.
export function openAccount(shell) {
  const dlg = h('dialog', { class: 'dialog', 'data-testid': 'account-dialog', 'aria-labelledby': 'account-title' });
  dlg.addEventListener('close', () => dlg.remove());
  const input = (id, autocomplete) => h('input', { id, type: 'password', required: true, autocomplete, 'data-testid': id });
  const oldPw = input('account-old-password', 'current-password');
  const newPw = input('account-new-password', 'new-password');
  const confirmPw = input('account-confirm-password', 'new-password');
  newPw.minLength = 8;
  const errorBox = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'account-error', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'account-password-submit' }, t('account.changePassword'));
  const form = h('form', { class: 'dialog-section', 'data-testid': 'account-password-form', 'aria-labelledby': 'account-password-title' },
    h('h3', { id: 'account-password-title' }, t('account.changePassword')),
    field(t('account.oldPassword'), oldPw),
    field(t('account.newPassword'), newPw, t('account.passwordHint')),
    field(t('account.confirmPassword'), confirmPw),
    errorBox,
    h('div', { class: 'dialog-actions' }, submit));
  const showError = (text, focus) => {
    errorBox.textContent = text;
    errorBox.hidden = false;
    focus?.select();
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errorBox.hidden = true;
    if (newPw.value !== confirmPw.value) {
      showError(t('account.mismatch'), confirmPw);
      return;
    }
    submit.disabled = true;
    try {
      const res = await post('/me/password', { oldPassword: oldPw.value, newPassword: newPw.value });
      if (res?.user) shell.setUser(res.user);
      dlg.close();
      toast(t('account.passwordChanged'), 'info');
    } catch (err) {
      if (err.status === 429) showError(t('account.tooMany', { seconds: err.retryAfter || 60 }));
      else if (err.details?.field === 'oldPassword') showError(t('account.wrongOld'), oldPw);
      else if (err.details?.field === 'newPassword') showError(t('account.samePassword'), newPw);
      else showError(errorText(err), err.status === 400 ? newPw : null);
    } finally {
      submit.disabled = false;
    }
  });
  // This month's own usage (docs/usage-and-quotas.md "Usage and quotas").
  const monthText = h('p', { class: 'muted' }, '…');
  const month = h('section', { class: 'dialog-section', 'data-testid': 'account-usage', 'aria-labelledby': 'account-usage-title' },
    h('h3', { id: 'account-usage-title' }, t('account.usageTitle')), monthText);
  const logoutAll = h('button', { type: 'button', class: 'btn btn-danger', 'data-testid': 'account-logout-all', onClick: async () => {
    if (!(await confirmDialog(t('account.logoutAllConfirm'), { okLabel: t('account.logoutAll'), danger: true }))) return;
    try {
      await post('/auth/logout-all');
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) { toast(errorText(err)); return; }
    }
    dlg.close();
    shell.signedOut();
  } }, t('account.logoutAll'));
  dlg.append(h('div', { class: 'dialog-body' },
    h('div', { class: 'dialog-head' },
      h('h2', { id: 'account-title' }, t('account.title', { name: shell.user().username })),
      h('button', { type: 'button', class: 'icon-btn', 'aria-label': t('common.close'), 'data-testid': 'account-close', onClick: () => dlg.close() }, '×')),
    month,
    form,
    h('section', { class: 'dialog-section', 'aria-labelledby': 'account-logout-title' },
      h('h3', { id: 'account-logout-title' }, t('account.logoutAll')),
      h('p', { class: 'muted' }, t('account.logoutAllHint')),
      h('div', { class: 'dialog-actions' }, logoutAll))));
  document.body.append(dlg);
  dlg.showModal();
  oldPw.focus();
  monthUsage().then(({ tokens, requests }) => {
    month.dataset.tokens = String(tokens);
    month.dataset.requests = String(requests);
    monthText.textContent = t('account.usage', { tokens: tokens.toLocaleString(), requests: requests.toLocaleString() });
  }, () => { monthText.textContent = t('account.usageUnavailable'); });
}
