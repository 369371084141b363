/* gpupool dashboard: token handling, API calls, messages, polling. No framework, no network but this server. */
(function () {
  'use strict';
  const GP = window.GP;
  const KEY = 'gpupool.token';

  GP.t = function (key, vars) {
    let s = GP.msgs[key] || key;
    if (vars) for (const [k, v] of Object.entries(vars)) s = s.split('{' + k + '}').join(String(v));
    return s;
  };
  GP.token = () => sessionStorage.getItem(KEY);

  // Every call carries the token; a 401 means it was revoked or mistyped: back to the login form.
  GP.api = async function (path, opts) {
    opts = Object.assign({}, opts || {});
    const headers = Object.assign({ Authorization: 'Bearer ' + GP.token() }, opts.headers || {});
    if (opts.body !== undefined && typeof opts.body !== 'string') {
      opts.body = JSON.stringify(opts.body);
      headers['Content-Type'] = 'application/json';
    }
    opts.headers = headers;
    const r = await fetch(path, opts);
    if (r.status === 401) { GP.logout(GP.t('login.bad')); throw new Error(GP.t('login.bad')); }
    if (!r.ok) {
      let msg = String(r.status);
      try {
        const j = await r.json();
        if (j.message) msg = j.message;
        else if (typeof j.detail === 'string') msg = j.detail;
        else if (Array.isArray(j.detail)) msg = j.detail.map((d) => d.msg).join('; ');
      } catch (e) { /* not JSON: keep the status */ }
      const err = new Error(msg); err.status = r.status; throw err;
    }
    const type = r.headers.get('content-type') || '';
    return type.includes('json') ? r.json() : r;
  };

  GP.el = function (tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? '' : String(k)));
    return e;
  };
  GP.row = (cells, attrs) => GP.el('tr', attrs, ...cells.map((c) => GP.el('td', {}, c)));
  GP.fill = function (tbody, rows) { tbody.replaceChildren(...rows); };
  GP.time = (s) => (s == null ? '' : new Date(s * 1000).toLocaleString(GP.lang));
  GP.dur = function (s) {
    if (s == null) return '';
    const neg = s < 0; s = Math.abs(s);
    const out = s < 90 ? Math.round(s) + 's' : s < 5400 ? Math.round(s / 60) + 'm' : (s / 3600).toFixed(1) + 'h';
    return (neg ? '-' : '') + out;
  };
  GP.showError = function (e) {
    const box = document.getElementById('error');
    box.textContent = e ? GP.t('err.generic', { msg: e.message || e }) : '';
  };

  // Live updates by polling: one request in flight at a time, none while the tab is hidden.
  GP.poll = function (fn, ms) {
    let busy = false;
    const live = document.getElementById('live');
    const tick = async function () {
      if (busy || document.hidden) return;
      busy = true;
      try { await fn(); live.classList.remove('stale'); GP.showError(null); }
      catch (e) { live.classList.add('stale'); GP.showError(e); }
      finally { busy = false; }
    };
    tick();
    return setInterval(tick, ms || 2000);
  };

  GP.logout = function (why) {
    sessionStorage.removeItem(KEY);
    document.getElementById('main').hidden = true;
    document.getElementById('logout').hidden = true;
    document.getElementById('who').textContent = '';
    document.getElementById('login').hidden = false;
    document.getElementById('login-error').textContent = why || '';
  };

  async function enter(init) {
    const who = await GP.api('/ui/api/whoami');
    GP.who = who;
    document.getElementById('who').textContent = who.admin ? GP.t('who.admin') : GP.t('who.tenant') + ': ' + who.tenant;
    document.getElementById('login').hidden = true;
    document.getElementById('main').hidden = false;
    document.getElementById('logout').hidden = false;
    document.body.classList.toggle('admin', !!who.admin);
    init();
  }

  GP.start = function (init) {
    GP.lang = GP.lang || GP.lang;
    const sel = document.getElementById('lang');
    sel.value = GP.lang;
    sel.addEventListener('change', () => {
      const u = new URL(location.href); u.searchParams.set('lang', sel.value); location.href = u.toString();
    });
    document.getElementById('logout').addEventListener('click', () => GP.logout(''));
    document.getElementById('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, document.getElementById('token').value.trim());
      try { await enter(init); } catch (e) { GP.logout(GP.t('login.bad')); }
    });
    if (GP.token()) enter(init).catch(() => GP.logout(''));
    else GP.logout('');
  };
})();
