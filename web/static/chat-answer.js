// One exchange on the chat page: the user's message, and the assistant's
// answer with its reasoning, Markdown body, sources, notices and feedback,
// updated as its stream's events arrive or loaded from the history.
import { t } from './i18n.js';
import { h, toast, errorText, setTrustedHTML } from './dom.js';
import { post, enc } from './api.js';
import { renderMarkdown } from './markdown.js';

export function userMessage(text) {
  return h('article', { class: 'msg user', 'data-testid': 'user-message' },
    h('div', { class: 'bubble' }, h('p', { class: 'plain' }, text)));
}

// answerView renders one answer and updates it as events arrive.
// key is the question's Idempotency-Key, which its retry button sends
// again ('' for an answer shown from history or resumed: a new one).
// page is the chat page: page.retry(question, key) asks again (when no
// answer is streaming), page.scrollToBottom() follows the growing answer.
export function answerView(question, key, page) {
  let answer = '';
  let thinking = '';
  let sources = [];
  let frame = 0;
  const citations = (n) => sources.some((src) => src.index === n);
  const citeLabel = (n) => {
    const name = sources.find((src) => src.index === n)?.documentName;
    return name ? t('chat.citeNamed', { n, name }) : t('chat.cite', { n });
  };
  const md = (text) => renderMarkdown(text, { citations, citeLabel, copyLabel: t('chat.copy') });

  const status = h('div', { class: 'status-line', 'data-testid': 'pending-indicator', 'aria-live': 'polite' },
    h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.thinkingWait'));
  const thinkBody = h('div', { class: 'md thinking-body' });
  const thinkSummary = h('summary', {}, t('chat.reasoning'));
  const think = h('details', { class: 'thinking', 'data-testid': 'thinking', hidden: true }, thinkSummary, thinkBody);
  const body = h('div', { class: 'md answer', 'data-testid': 'answer' });
  const notice = h('div', { class: 'notice', hidden: true, 'data-testid': 'message-notice', role: 'status' });
  const reconnect = h('div', { class: 'status-line', hidden: true, 'data-testid': 'reconnecting-indicator', role: 'status' },
    h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.reconnecting'));
  const sourceList = h('ol', { class: 'source-list' });
  const sourcesPanel = h('details', { class: 'sources', 'data-testid': 'sources-panel', hidden: true, open: true },
    h('summary', {}, h('span', { class: 'sources-title' }, t('chat.sources'))), sourceList);
  const el = h('article', { class: 'msg assistant', 'data-testid': 'assistant-message', 'data-status': 'streaming', 'aria-busy': 'true' },
    h('div', { class: 'avatar', 'aria-hidden': 'true' }, 'R'),
    h('div', { class: 'bubble' }, think, status, body, reconnect, notice, sourcesPanel));

  function render() {
    frame = 0;
    if (thinking) {
      think.hidden = false;
      setTrustedHTML(thinkBody, md(thinking));
    }
    setTrustedHTML(body, md(answer));
    page.scrollToBottom();
  }

  // schedule coalesces deltas into at most one Markdown render per frame.
  function schedule() {
    if (!frame) frame = requestAnimationFrame(render);
  }

  function flush() {
    if (frame) cancelAnimationFrame(frame);
    render();
  }

  function setSources(list) {
    sources = Array.isArray(list) ? list : [];
    // Scores are Reciprocal Rank Fusion values (around 0.016): meaningless
    // on their own, so the bar shows each score relative to the answer's
    // best source and the raw value stays in the tooltip.
    const top = Math.max(0, ...sources.map((src) => Number(src.score) || 0));
    sourceList.replaceChildren(...sources.map((src) => {
      const score = Number(src.score) || 0;
      const pct = top > 0 ? Math.round((score / top) * 100) : 0;
      const fill = h('span', { class: 'score-fill' });
      fill.style.width = `${pct}%`;
      return h('li', {
        class: 'source-item', tabindex: '-1', 'data-testid': 'source-item',
        'data-index': src.index, 'data-document-id': src.documentId,
      },
      h('div', { class: 'source-head' },
        h('span', { class: 'source-index' }, `[${src.index}]`),
        h('span', { class: 'source-name' }, src.documentName || src.documentId),
        top > 0 ? h('span', { class: 'source-score', title: t('chat.scoreTitle', { pct, score: score.toFixed(4) }) },
          h('span', { class: 'score-label', 'aria-hidden': 'true' }, t('chat.relevance')),
          h('span', { class: 'score-bar', 'aria-hidden': 'true' }, fill),
          h('span', { class: 'visually-hidden' }, t('chat.scoreRelative', { pct }))) : null),
      h('p', { class: 'source-excerpt' }, src.excerpt ?? ''));
    }));
    sourcesPanel.hidden = sources.length === 0;
    sourcesPanel.querySelector('.sources-title').textContent = `${t('chat.sources')} (${sources.length})`;
  }

  function setNotice(kind, text, retry) {
    notice.hidden = false;
    notice.dataset.kind = kind;
    notice.className = `notice notice-${kind}`;
    notice.replaceChildren(h('span', {}, text));
    if (retry && question) {
      notice.append(h('button', {
        type: 'button', class: 'btn btn-sm', 'data-testid': 'retry-button',
        onClick: () => page.retry(question, key),
      }, t('chat.retry')));
    }
  }

  // feedback is the thumbs up/down of a completed answer, with an
  // optional comment after a thumbs down (README "Answer feedback").
  function feedbackBar() {
    const id = el.dataset.messageId;
    if (!id || el.querySelector('.feedback-bar')) return;
    const comment = h('textarea', { class: 'feedback-comment', rows: 2, maxlength: 2000, 'data-testid': 'feedback-comment', 'aria-label': t('feedback.commentLabel'), placeholder: t('feedback.commentHint') });
    const sendComment = h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'feedback-send' }, t('feedback.send'));
    const more = h('div', { class: 'feedback-more', hidden: true }, comment, sendComment);
    const rate = async (rating, text) => {
      try {
        await post(`/messages/${enc(id)}/feedback`, { rating, comment: text ?? '' });
        bar.dataset.rating = rating;
        up.setAttribute('aria-pressed', String(rating === 'up'));
        down.setAttribute('aria-pressed', String(rating === 'down'));
        more.hidden = rating !== 'down';
        if (text !== undefined) {
          bar.dataset.commentSaved = 'true'; // what a test waits for
          toast(t('feedback.thanks'), 'info');
        }
      } catch (err) {
        toast(errorText(err));
      }
    };
    const up = h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'feedback-up', 'aria-pressed': 'false', title: t('feedback.up'), 'aria-label': t('feedback.up'), onClick: () => rate('up') }, '👍');
    const down = h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'feedback-down', 'aria-pressed': 'false', title: t('feedback.down'), 'aria-label': t('feedback.down'), onClick: () => rate('down') }, '👎');
    sendComment.addEventListener('click', () => rate('down', comment.value));
    const bar = h('div', { class: 'feedback-bar', 'data-testid': 'feedback-bar' }, up, down, more);
    el.querySelector('.bubble').append(bar);
  }

  function end(statusValue) {
    if (statusValue === 'completed') queueMicrotask(feedbackBar);
    status.remove();
    el.dataset.status = statusValue;
    el.removeAttribute('aria-busy');
    flush();
    if (!answer && !thinking) body.hidden = true;
    think.open = false;
    thinkSummary.textContent = t('chat.reasoning');
  }

  return {
    el,
    question,
    setMessageId(id) { if (id) el.dataset.messageId = id; },
    queue(position, queued) {
      status.dataset.testid = 'queue-indicator';
      status.dataset.position = position;
      status.dataset.queued = queued;
      status.className = 'status-line queued';
      status.replaceChildren(h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')),
        t('chat.queued', { position, queued }));
    },
    started() {
      if (status.isConnected && status.dataset.testid === 'queue-indicator') {
        status.dataset.testid = 'pending-indicator';
        status.className = 'status-line';
        status.replaceChildren(h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.thinkingWait'));
      }
    },
    setSources,
    reconnecting(on) { reconnect.hidden = !on; },
    delta(type, text) {
      if (status.isConnected) status.remove();
      if (type === 'think') {
        thinking += text;
        if (!think.open && !answer) think.open = true; // show reasoning live, fold it when the answer starts
        thinkSummary.textContent = t('chat.reasoningLive');
      } else {
        if (!answer && thinking) think.open = false;
        answer += text;
        thinkSummary.textContent = t('chat.reasoning');
      }
      schedule();
    },
    rejected(message) { end('rejected'); setNotice('rejected', message || t('chat.busy'), true); },
    cancelled(reason) { end('cancelled'); setNotice('cancelled', t(`chat.cancelled.${reason}`, {}, t('chat.cancelled.user'))); },
    failed(message) { end('failed'); setNotice('failed', `${t('chat.failed')}${message ? ': ' + message : ''}`, true); },
    completed() { end('completed'); },
    get status() { return el.dataset.status; },
    loadHistory(m) {
      answer = m.content ?? '';
      thinking = m.thinking ?? '';
      this.setMessageId(m.id);
      setSources(typeof m.sources === 'string' ? safeJSON(m.sources) : m.sources);
      switch (m.status) {
        case 'rejected': this.rejected(''); break;
        case 'cancelled': this.cancelled('user'); break;
        case 'failed': this.failed(''); break;
        default: this.completed();
      }
    },
  };
}

function safeJSON(text) {
  try {
    return JSON.parse(text);
  } catch {
    return [];
  }
}
