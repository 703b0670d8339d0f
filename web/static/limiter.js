// The chat limiter admin page: the permits in use and the queue, refreshed
// while the page is open.
import { t } from './i18n.js';
import { h } from './dom.js';
import { get } from './api.js';
import { pageHeader, formError, showFormError } from './admin.js';

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
