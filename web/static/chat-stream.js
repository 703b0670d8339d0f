// The streamed answer of the chat page (SSE over fetch, see DESIGN §6): the
// record that lets a reload resume it, reading its stream to its end (again
// after a dropped connection) and what each of its events does.
import { t } from './i18n.js';
import { errorText } from './dom.js';
import { enc, resumeChat } from './api.js';

// The answer being streamed, kept for this tab until its stream ends, so a
// reload (or coming back to its conversation) resumes it.
export const ANSWER_KEY = 'ragent.answer';
const RETRY_DELAYS = [250, 500, 1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000];

export function savedAnswer() {
  try {
    return JSON.parse(sessionStorage.getItem(ANSWER_KEY) || 'null');
  } catch {
    return null;
  }
}

// answerStreams follows the answers of one chat page. s is the page's state:
// s.streaming the answer being followed, s.current the conversation shown,
// s.conversations the list, s.destroyed once the page is gone. page has
// setStreamingUI(on), renderConversations() and touchConversation(id, title).
export function answerStreams(s, page) {
  function newStream(view, question, conversationId) {
    const st = { controller: new AbortController(), taskId: null, lastId: '', view, question, stopRequested: false, conversationId, finished: false, done: false, errorMessage: '' };
    s.streaming = st;
    page.setStreamingUI(true);
    return st;
  }

  // follow reads an answer's stream to its end: open's first, then, after a
  // dropped connection, the task's events after the last one seen, retrying
  // while the server keeps the answer (it runs on without us).
  async function follow(st, open) {
    const { view } = st;
    const onEvent = eventHandler(st);
    const onId = (id) => { st.lastId = id; };
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await open(onEvent, onId);
          if (st.done || st.finished || !st.taskId) break;
        } catch (err) {
          if (err?.name === 'AbortError' || !st.taskId || err?.status !== 0) throw err;
        }
        // Cut before done: pick the answer up again where it was.
        if (attempt >= RETRY_DELAYS.length) break;
        view.reconnecting(true);
        await sleep(RETRY_DELAYS[attempt], st.controller.signal);
        open = (onEvent, onId) => resumeChat(st.taskId, st.lastId, onEvent, st.controller.signal, onId);
      }
      view.reconnecting(false);
      if (!st.finished && view.status === 'streaming') {
        if (st.errorMessage) view.failed(st.errorMessage);
        else view.failed(t('chat.streamEnded'));
      }
    } catch (err) {
      view.reconnecting(false);
      if (view.status === 'streaming') {
        if (err?.name === 'AbortError') view.cancelled(st.stopRequested ? 'user' : 'disconnect');
        else if (err?.status === 429) view.rejected(err.message);
        else if (err?.status === 404 && st.taskId) view.failed(t('chat.resumeGone'));
        else view.failed(errorText(err));
      }
    } finally {
      // A page that leaves keeps the record so it can resume; an answer
      // that ended (or cannot be resumed) forgets it.
      if (!st.leaving && !s.destroyed && savedAnswer()?.taskId === st.taskId) sessionStorage.removeItem(ANSWER_KEY);
      if (s.streaming === st) s.streaming = null;
      if (!s.destroyed) page.setStreamingUI(false);
    }
  }

  function eventHandler(st) {
    const { view, question } = st;
    const onEvent = (name, data) => {
      if (s.destroyed) return;
      view.reconnecting(false);
      switch (name) {
        case 'meta':
          st.taskId = data.taskId;
          view.setMessageId(data.messageId);
          if (data.conversationId) {
            sessionStorage.setItem(ANSWER_KEY, JSON.stringify({
              taskId: data.taskId, messageId: data.messageId, conversationId: data.conversationId, question,
            }));
          }
          if (data.conversationId && !s.current) {
            s.current = data.conversationId;
            st.conversationId = data.conversationId;
            st.newConversation = true;
            s.conversations.unshift({ id: data.conversationId, title: question.slice(0, 40), updatedAt: new Date().toISOString() });
            // Record the conversation in the URL without triggering the router,
            // so a reload shows this history.
            history.replaceState(null, '', `#/chat/${enc(data.conversationId)}`);
            page.renderConversations();
          }
          break;
        case 'queue':
          view.queue(data.position, data.queued);
          break;
        case 'sources':
          view.started();
          view.setSources(data.sources);
          break;
        case 'message':
          view.delta(data.type, data.delta ?? '');
          break;
        case 'reject':
          st.finished = true;
          view.rejected(data.message);
          break;
        case 'cancel':
          st.finished = true;
          view.cancelled(data.reason);
          break;
        case 'error':
          st.errorMessage = data.message || data.code || '';
          break;
        case 'finish':
          st.finished = true;
          view.setMessageId(data.messageId);
          if (view.status === 'streaming') {
            if (data.status === 'completed') view.completed();
            else if (data.status === 'rejected') view.rejected('');
            else if (data.status === 'cancelled') view.cancelled('user');
            else view.failed(st.errorMessage);
          }
          if (data.saved === false && st.newConversation) {
            // Refused before it started: the server kept nothing, so the
            // conversation named in meta does not exist. The next question
            // starts a new one.
            s.conversations = s.conversations.filter((x) => x.id !== st.conversationId);
            if (s.current === st.conversationId) {
              s.current = null;
              history.replaceState(null, '', '#/chat');
            }
            page.renderConversations();
          } else if (!st.resumed) {
            page.touchConversation(st.conversationId, data.title);
          }
          break;
        case 'done':
          st.done = true;
          break;
        default:
          break; // unknown events are ignored so the server can add more
      }
    };
    return onEvent;
  }

  return { newStream, follow };
}

// sleep waits ms, or rejects with an AbortError when signal aborts.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) { reject(new DOMException('aborted', 'AbortError')); return; }
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(); }, ms);
    function onAbort() { clearTimeout(timer); reject(new DOMException('aborted', 'AbortError')); }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
