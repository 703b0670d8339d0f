// The UI's language: Chinese (the default) or English, kept in localStorage,
// and t, which looks a key up in it. The strings are in one dictionary per
// language, each in two modules (i18n-zh.js and i18n-zh-admin.js, i18n-en.js
// and i18n-en-admin.js); web_test.go checks that every key the modules use
// exists in every language.
import zhMain from './i18n-zh.js';
import zhAdmin from './i18n-zh-admin.js';
import enMain from './i18n-en.js';
import enAdmin from './i18n-en-admin.js';

const LANG_KEY = 'ragent.lang';

const zh = { ...zhMain, ...zhAdmin };
const en = { ...enMain, ...enAdmin };

const dicts = { zh, en };

function stored() {
  try {
    return localStorage.getItem(LANG_KEY);
  } catch {
    return null; // storage disabled: fall back to the default
  }
}

let lang = stored() === 'en' ? 'en' : 'zh';

export function getLang() {
  return lang;
}

// setLang switches the language and remembers it; callers re-render.
export function setLang(next) {
  lang = next === 'en' ? 'en' : 'zh';
  try {
    localStorage.setItem(LANG_KEY, lang);
  } catch {
    // The choice then lasts for this page only.
  }
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
}

// t looks key up in the current language, falling back to Chinese, then to
// fallback, then to the key itself; {name} placeholders take params.name.
export function t(key, params = {}, fallback) {
  let s = dicts[lang][key] ?? zh[key] ?? fallback ?? key;
  // A function replacement inserts the value as it is: a string one would
  // expand $&, $` and $' in user-supplied names into parts of the message.
  for (const [k, v] of Object.entries(params ?? {})) s = s.replaceAll(`{${k}}`, () => String(v));
  return s;
}
