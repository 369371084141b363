/* gpupool dashboard: token, API calls, messages from codes, locale formats, polling, panels. No framework, no
   network but this server. Each page's own script calls GP.start(init). */
(function () {
  'use strict';
  const GP = window.GP;
  const KEY = 'gpupool.token';
  const timers = new Set();
  let session = 0; // bumped at sign-out: a poll or a fetch of an older session does nothing more

  GP.t = function (key, vars) {
    let s = GP.msgs[key];
    if (s === undefined) s = key;
    if (vars) for (const [k, v] of Object.entries(vars)) s = s.split('{' + k + '}').join(String(v));
    return s;
  };
  GP.token = () => sessionStorage.getItem(KEY);

  // Every call carries the token; without one nothing is sent (no "Bearer null"), and a 401 means it was
  // revoked or mistyped: back to the login form.
  GP.api = async function (path, opts) {
    const token = GP.token(), mine = session;
    if (!token) { const e = new Error(GP.t('login.bad')); e.signedOut = true; throw e; }
    opts = Object.assign({}, opts || {});
    const headers = Object.assign({ Authorization: 'Bearer ' + token }, opts.headers || {});
    if (opts.body !== undefined && typeof opts.body !== 'string') {
      opts.body = JSON.stringify(opts.body);
      headers['Content-Type'] = 'application/json';
    }
    opts.headers = headers;
    const r = await fetch(path, opts);
    if (mine !== session) { const e = new Error('signed out'); e.signedOut = true; throw e; }
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
  // Cells carry their column's label (data-label) for the phone layout, where each row becomes a card.
  GP.row = function (cells, attrs, labels) {
    return GP.el('tr', attrs, ...cells.map((c, i) => GP.el('td', labels && labels[i] ? { 'data-label': labels[i] } : {}, c)));
  };
  GP.labels = (table) => [...table.tHead.rows[0].cells].map((c) => c.textContent);
  GP.fill = function (tbody, rows) { tbody.replaceChildren(...rows); };

  // -- the locale's times, durations and numbers (Intl), never epoch seconds ----------------------------
  const dateFmt = new Intl.DateTimeFormat(GP.lang, { dateStyle: 'medium', timeStyle: 'short' });
  const nearFmt = new Intl.DateTimeFormat(GP.lang, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const unitFmt = (unit) => new Intl.NumberFormat(GP.lang, { style: 'unit', unit, unitDisplay: 'narrow', maximumFractionDigits: 1 });
  const UNITS = { s: unitFmt('second'), m: unitFmt('minute'), h: unitFmt('hour'), d: unitFmt('day') };
  GP.num = (n) => new Intl.NumberFormat(GP.lang).format(n);
  GP.time = function (s) {
    if (s == null || s === '') return '';
    const d = new Date(Number(s) * 1000), near = Math.abs(Date.now() - d.getTime()) < 86400e3;
    return (near ? nearFmt : dateFmt).format(d);
  };
  GP.dur = function (s) {
    if (s == null || s === '' || !isFinite(s)) return '';
    s = Number(s);
    const neg = s < 0; s = Math.abs(s);
    let out;
    if (s < 90) out = UNITS.s.format(Math.round(s));
    else if (s < 5400) out = UNITS.m.format(Math.round(s / 60));
    else if (s < 172800) out = UNITS.h.format(Math.round(s / 360) / 10);
    else out = UNITS.d.format(Math.round(s / 8640) / 10);
    return (neg ? '-' : '') + out;
  };

  // -- codes: states, reasons, events ---------------------------------------------------------------------
  GP.state = (s) => (s ? GP.t('state.' + s) : '');
  GP.event = (a) => (GP.msgs['event.' + a] !== undefined ? GP.t('event.' + a) : a);
  const patterns = (GP.reasons || []).map(([key, src]) => [key, new RegExp(src.replace(/\(\?P</g, '(?<'))]);
  function param(name, v) {
    if (v === undefined) return '';
    if (name === 'matching') return v ? GP.t('reason.on_matching') : '';
    if (name.endsWith('_t')) return GP.time(Number(v));
    if (name.endsWith('_s')) return GP.dur(Number(v));
    if (name === 'scope' || name === 'level') return GP.t('scope.' + v);
    if (name === 'state') return GP.state(v);
    if (name === 'code') return GP.t('code.' + v);
    if (name === 'why' || name === 'note') return GP.sentence(v, '');
    return v;
  }
  // One of the scheduler's (or the store's) English sentences said again in the page's language from its
  // parameters; one no pattern knows falls back to its reason code's words (the English stays in the title).
  GP.sentence = function (text, code) {
    text = (text || '').trim();
    for (const [key, re] of patterns) {
      const m = re.exec(text);
      if (m) {
        const vars = {};
        for (const [k, v] of Object.entries(m.groups || {})) vars[k] = param(k, v);
        return GP.t('reason.' + key, vars);
      }
    }
    if (GP.lang === 'en') return text || (code ? GP.t('code.' + code) : '');
    return code ? GP.t('code.' + code) : (text ? GP.t('reason.untranslated') : '');
  };
  GP.reason = (text, code) => GP.el('span', { class: 'reason', title: text || code || '', 'data-code': code || '' }, GP.sentence(text, code));

  GP.showError = function (e) {
    const box = document.getElementById('error');
    box.textContent = e ? GP.t('err.generic', { msg: e.message || e }) : '';
  };

  // Live updates by polling: one request in flight at a time, none while the tab is hidden, none after sign-out.
  GP.poll = function (fn, ms) {
    let busy = false;
    const live = document.getElementById('live'), mine = session;
    const tick = async function () {
      if (busy || document.hidden || mine !== session || !GP.token()) return;
      busy = true;
      try { await fn(); live.classList.remove('stale'); GP.showError(null); }
      catch (e) { if (!e.signedOut) { live.classList.add('stale'); GP.showError(e); } }
      finally { busy = false; }
    };
    tick();
    const id = setInterval(tick, ms || 2000);
    timers.add(id);
    return { tick, stop: () => { clearInterval(id); timers.delete(id); } };
  };

  // -- side panels: a close button, Esc, and the URL hash (#job=ID, #host=NAME) that opens one -------------
  GP.hash = function () {
    const out = {};
    for (const part of location.hash.replace(/^#/, '').split('&')) {
      const [k, v] = part.split('=');
      if (k) out[decodeURIComponent(k)] = decodeURIComponent(v || '');
    }
    return out;
  };
  GP.setHash = function (key, value) {
    const h = GP.hash();
    if (value == null) delete h[key]; else h[key] = value;
    const s = Object.entries(h).map(([k, v]) => encodeURIComponent(k) + '=' + encodeURIComponent(v)).join('&');
    history.replaceState(null, '', location.pathname + location.search + (s ? '#' + s : ''));
  };
  GP.panel = function (id, onClose) {
    const box = document.getElementById(id);
    const close = () => { if (box.hidden) return; box.hidden = true; document.body.classList.remove('panel-open'); onClose(); };
    box.prepend(GP.el('button', { type: 'button', class: 'close', 'aria-label': GP.t('panel.close'), title: GP.t('panel.close'), onclick: close }, '×'));
    document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') close(); });
    return { open: () => { box.hidden = false; document.body.classList.add('panel-open'); }, close, box };
  };

  GP.logout = function (why) {
    session++;
    sessionStorage.removeItem(KEY);
    for (const id of timers) clearInterval(id);
    timers.clear();
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
    // A second sign-in in the same tab starts the page afresh: its polls were stopped at sign-out.
    if (!GP.started) { GP.started = true; init(); } else location.reload();
  }

  GP.start = function (init) {
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
