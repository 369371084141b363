/* The jobs page: one page of GET /v1/jobs at a time (the server filters, sorts, searches and counts), and a
   job's panel at /ui/jobs#job=ID with its state, why it ended or waits, ranks, logs of any rank and stream
   (followed while it runs), runs and events. */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const PAGE = 50;
  const ACTIVE = ['pending', 'placed', 'running'];

  function init() {
    const f = { sort: 'default', order: 'desc', offset: 0 };
    let open = null, log = null;

    function query() {
      const p = new URLSearchParams({ limit: PAGE, offset: f.offset, sort: f.sort, order: f.order });
      const state = $('job-state').value;
      if (state === 'active') p.set('active', 'true'); else if (state) p.append('state', state);
      for (const [id, key] of [['job-q', 'q'], ['job-tenant', 'tenant'], ['job-pool', 'pool']]) {
        const v = $(id).value.trim(); if (v) p.set(key, v);
      }
      for (const [id, key] of [['job-after', 'submitted_after'], ['job-before', 'submitted_before']]) {
        const v = $(id).value; if (v) p.set(key, String(Math.floor(new Date(v).getTime() / 1000)));
      }
      return p;
    }

    const load = async () => {
      const d = await GP.api('/v1/jobs?' + query());
      const labels = GP.labels($('jobs'));
      GP.fill($('jobs').tBodies[0], d.jobs.map((j) => GP.row([
        el('a', { href: '#job=' + enc(j.id), class: 'mono' }, j.id), j.name, j.tenant, j.pool,
        el('span', { class: 'state', 'data-state': j.state }, GP.state(j.state)), GP.num(j.gpus || j.tasks * j.gpus_per_task),
        GP.time(j.submit_time_s), GP.dur(j.runtime_s), j.exit_code == null ? '' : String(j.exit_code),
        j.state === 'pending' ? GP.reason(j.reason, j.reason_code) : ''], { 'data-job': j.id, 'data-state': j.state }, labels)));
      $('jobs-empty').hidden = d.jobs.length > 0;
      const last = Math.min(d.offset + d.jobs.length, d.total);
      $('page-info').textContent = t('jobs.page', { first: GP.num(d.jobs.length ? d.offset + 1 : 0), last: GP.num(last), total: GP.num(d.total) });
      $('prev').disabled = d.offset <= 0; $('next').disabled = last >= d.total;
      $('jobs').dataset.total = String(d.total);
      if (open) await openJob(open, true);
    };
    // Tenant, pool and time filters folded away on a phone, open on a wider screen.
    $('more-filters').open = window.matchMedia('(min-width: 701px)').matches;
    const poll = GP.poll(load, 2000);
    const reload = () => { poll.tick(); };
    $('job-filters').addEventListener('submit', (ev) => { ev.preventDefault(); f.offset = 0; reload(); });
    $('job-state').addEventListener('change', () => { f.offset = 0; reload(); });
    $('prev').addEventListener('click', () => { f.offset = Math.max(0, f.offset - PAGE); reload(); });
    $('next').addEventListener('click', () => { f.offset += PAGE; reload(); });
    for (const th of $('jobs').tHead.rows[0].cells) {
      if (!th.dataset.sort) continue;
      th.classList.add('sortable');
      th.addEventListener('click', () => {
        if (f.sort === th.dataset.sort) f.order = f.order === 'asc' ? 'desc' : 'asc';
        else { f.sort = th.dataset.sort; f.order = th.dataset.sort === 'name' || th.dataset.sort === 'tenant' ? 'asc' : 'desc'; }
        for (const o of th.parentElement.cells) o.removeAttribute('aria-sort');
        th.setAttribute('aria-sort', f.order === 'asc' ? 'ascending' : 'descending');
        f.offset = 0; reload();
      });
    }

    const panel = GP.panel('job', () => { open = null; log = null; GP.setHash('job', null); });
    function fact(label, value) { return value === '' || value == null ? [] : [el('dt', {}, label), el('dd', {}, value)]; }

    async function openJob(id, quiet) {
      const [job, ev, at] = await Promise.all([GP.api('/v1/jobs/' + enc(id)), GP.api('/v1/jobs/' + enc(id) + '/events'),
        GP.api('/v1/jobs/' + enc(id) + '/attempts')]);
      if (!quiet || open !== id) { open = id; GP.setHash('job', id); panel.open(); }
      $('job-id').textContent = id;
      const badge = $('job-state-badge'); badge.textContent = GP.state(job.state); badge.dataset.state = job.state;
      $('job-name').textContent = [job.name, job.tenant, job.pool].filter(Boolean).join(' · ');
      $('cancel').hidden = !ACTIVE.includes(job.state);
      $('job-reason').replaceChildren(job.reason || job.reason_code ? GP.reason(job.reason, job.reason_code) : '');
      $('job-facts').replaceChildren(
        ...fact(t('col.priority'), GP.t('priority.' + job.priority)), ...fact(t('col.gpus'), job.tasks + ' × ' + job.gpus_per_task),
        ...fact(t('col.submitted'), GP.time(job.submit_time_s)), ...fact(t('col.started'), GP.time(job.started_s)),
        ...fact(t('col.ended'), GP.time(job.ended_s)), ...fact(t('col.runtime'), GP.dur(job.runtime_s)),
        ...fact(t('col.exit'), job.exit_code == null ? '' : String(job.exit_code)), ...fact(t('jobs.attempt'), job.attempt || ''),
        ...fact(t('col.deadline'), GP.time(job.deadline_s)), ...fact(t('jobs.expected_start'), GP.time(job.expected_start_s)));
      const ranks = job.ranks || [];
      GP.fill($('ranks').tBodies[0], ranks.map((r) => GP.row([r.rank, el('a', { href: '/ui/fabric#host=' + enc(r.host) }, r.host), r.gpus.join(','),
        GP.state(r.state), r.exit_code == null ? '' : String(r.exit_code), GP.time(r.started_s), GP.time(r.exited_s)], { 'data-rank': r.rank }, GP.labels($('ranks')))));
      GP.fill($('attempts').tBodies[0], at.attempts.map((a) => GP.row([a.attempt, GP.state(a.state), [...new Set(a.hosts)].join(', '), GP.time(a.started_s),
        GP.time(a.ended_s), a.exit_code == null ? '' : String(a.exit_code), GP.reason(a.reason, '')], {}, GP.labels($('attempts')))));
      GP.fill($('events').tBodies[0], ev.events.slice().reverse().map((e) => GP.row([GP.time(e.at_s), e.actor === 'scheduler' || e.actor === 'admin' ? GP.t('actor.' + e.actor) : e.actor,
        GP.event(e.action), e.data && e.data.reason ? GP.reason(String(e.data.reason), '') : ''], {}, GP.labels($('events')))));
      const sel = $('log-rank'), n = Math.max(job.tasks, ranks.length, 1);
      if (sel.options.length !== n) sel.replaceChildren(...Array.from({ length: n }, (_, i) => el('option', { value: i }, String(i))));
      if (!quiet) { const want = GP.hash().rank; sel.value = want !== undefined ? want : '0'; if (GP.hash().stream) $('log-stream').value = GP.hash().stream; startLog(); }
      else if (log && $('log-follow').checked) await follow();
    }

    // A rank's log: its last 500 lines, then (following) what was written since, from the offset it gave.
    async function startLog() {
      const mine = log = { job: open, rank: $('log-rank').value, stream: $('log-stream').value, next: null };
      GP.setHash('rank', mine.rank); GP.setHash('stream', mine.stream);
      const box = $('logs');
      box.textContent = ''; box.dataset.rank = mine.rank; box.dataset.stream = mine.stream;
      try {
        const d = await GP.api('/v1/jobs/' + enc(mine.job) + '/logs?tail=500&rank=' + mine.rank + '&stream=' + mine.stream);
        if (log !== mine) return;
        box.textContent = d.text || t('jobs.emptylog'); mine.next = d.next_offset; mine.empty = !d.text;
        box.scrollTop = box.scrollHeight;
      } catch (e) { if (log === mine) box.textContent = t('jobs.nologs', { why: e.message }); mine.failed = true; }
    }
    async function follow() {
      const mine = log;
      if (!mine || mine.next == null) return;
      const d = await GP.api('/v1/jobs/' + enc(mine.job) + '/logs?rank=' + mine.rank + '&stream=' + mine.stream + '&offset=' + mine.next).catch(() => null);
      if (!d || log !== mine || !d.text) return;
      const box = $('logs'), atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
      if (mine.empty) { box.textContent = ''; mine.empty = false; }
      box.append(d.text); mine.next = d.next_offset;
      if (atEnd) box.scrollTop = box.scrollHeight;
    }
    $('log-rank').addEventListener('change', startLog);
    $('log-stream').addEventListener('change', startLog);
    $('cancel').addEventListener('click', async () => {
      if (!open || !confirm(t('jobs.cancel_confirm', { job: open }))) return;
      try { await GP.api('/v1/jobs/' + enc(open) + '/cancel', { method: 'POST' }); await load(); } catch (e) { GP.showError(e); }
    });
    const fromHash = () => { const id = GP.hash().job; if (id && id !== open) openJob(id).catch(GP.showError); };
    window.addEventListener('hashchange', fromHash);
    fromHash();
  }
  GP.start(init);
})();
