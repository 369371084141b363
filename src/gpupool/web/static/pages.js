/* One init function per page; each polls what it shows every 2 s (live updates without reloading). */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function fabricPage() {
    const canvas = $('fabric'), colour = $('colour');
    let view = null, open = null;
    performance.mark('gp-fabric-start');
    const load = async () => {
      const t0 = performance.now();
      const d = await GP.api('/ui/api/fabric');
      const t1 = performance.now();
      if (!view) { view = GP.fabricView = new GP.FabricView(canvas, d); view.mode = colour.value; view.draw(); }
      else view.setData(d);
      const t2 = performance.now();
      if (!GP.timing) { // the first load is what an operator waits for: measured here, in the browser
        GP.timing = { fetch_ms: t1 - t0, render_ms: t2 - t1, since_navigation_ms: t2, hosts: d.hosts.length };
        performance.mark('gp-fabric-drawn');
        canvas.dataset.ready = '1';
      }
      $('fabric-summary').textContent = t('fabric.summary', { hosts: view.stats.hosts, gpus: view.stats.gpus, used: view.stats.used, rails: d.rails });
      if (open) showHost(open).catch(GP.showError);
    };
    colour.addEventListener('change', () => { if (view) { view.mode = colour.value; view.draw(); } GP.legend($('legend'), colour.value); });
    GP.legend($('legend'), colour.value);
    canvas.addEventListener('click', (ev) => {
      if (!view) return;
      const b = canvas.getBoundingClientRect();
      const h = view.hostAt(ev.clientX - b.left, ev.clientY - b.top);
      if (h >= 0) { open = view.d.hosts[h]; showHost(open).catch(GP.showError); }
    });
    async function showHost(name) {
      const d = await GP.api('/ui/api/hosts/' + enc(name));
      $('host').hidden = false; document.body.classList.add('panel-open');
      $('host-name').textContent = d.name;
      const st = $('host-state'); st.textContent = d.state; st.dataset.state = d.state;
      const health = ['ok', 'degraded', 'bad'];
      GP.fill($('host-gpus').tBodies[0], d.gpus.map((g) => GP.row([g.index, g.model, g.memory_mib, g.hca,
        g.health < 0 ? '' : t('legend.' + health[g.health]), g.util == null ? '' : g.util, g.temp == null ? '' : g.temp, g.job])));
      GP.fill($('host-hcas').tBodies[0], d.hcas.map((h) => GP.row([h.name, h.rail, h.leaf, h.rate_gbps])));
      $('host-jobs').replaceChildren(...(d.jobs.length ? d.jobs.map((j) => el('li', {}, j.id + ' · rank ' + j.rank + ' · GPUs ' + j.gpus.join(',')))
        : [el('li', { class: 'muted' }, t('host.nojobs'))]));
      $('drain').hidden = !GP.who.admin || d.state !== 'up';
      $('undrain').hidden = !GP.who.admin || d.state !== 'drained';
    }
    $('drain').addEventListener('click', async () => {
      if (!open || !confirm(t('host.drain_confirm', { host: open }))) return;
      try { await GP.api('/v1/nodes/' + enc(open) + '/drain', { method: 'POST', body: {} }); await load(); } catch (e) { GP.showError(e); }
    });
    $('undrain').addEventListener('click', async () => {
      if (!open) return;
      try { await GP.api('/v1/nodes/' + enc(open) + '/undrain', { method: 'POST' }); await load(); } catch (e) { GP.showError(e); }
    });
    GP.poll(load, 2000);
  }

  function queuePage() {
    GP.poll(async () => {
      const d = await GP.api('/ui/api/queue');
      $('queue-empty').hidden = d.jobs.length > 0;
      GP.fill($('queue').tBodies[0], d.jobs.map((j) => GP.row([j.order, j.name ? j.id + ' (' + j.name + ')' : j.id, j.tenant, j.pool,
        j.priority, j.gpus, GP.dur(j.waiting_s), el('span', { class: 'reason', title: j.reason_code }, j.reason || j.reason_code),
        j.deadline_s == null ? '' : GP.time(j.deadline_s) + ' · ' + t('queue.' + j.admission),
        j.slack_s == null ? '' : GP.dur(j.slack_s)], { 'data-job': j.id })));
    }, 2000);
  }

  function jobsPage() {
    let open = null, fabric = null, view = null;
    const load = async () => {
      const state = $('job-state').value;
      const d = await GP.api('/v1/jobs?limit=500' + (state ? '&state=' + state : ''));
      GP.fill($('jobs').tBodies[0], d.jobs.map((j) => GP.row([j.id, j.name, j.tenant, j.state, j.tasks * j.gpus_per_task,
        GP.time(j.submit_time_s), j.reason, el('button', { type: 'button', onclick: () => openJob(j.id) }, t('jobs.open'))], { 'data-job': j.id })));
      if (open) await openJob(open, true);
    };
    async function openJob(id, quiet) {
      open = id;
      $('job').hidden = false; document.body.classList.add('panel-open'); $('job-id').textContent = id;
      const [job, ev, pl] = await Promise.all([GP.api('/v1/jobs/' + enc(id)), GP.api('/v1/jobs/' + enc(id) + '/events'), GP.api('/ui/api/jobs/' + enc(id) + '/placement')]);
      $('cancel').hidden = !['pending', 'placed', 'running'].includes(job.state);
      GP.fill($('events').tBodies[0], ev.events.map((e) => GP.row([GP.time(e.at_s), e.actor, e.action])));
      const hosts = new Set(pl.tasks.map((x) => x.host));
      $('placement-text').textContent = pl.tasks.length ? t('jobs.placed_on', { n: pl.tasks.length, hosts: hosts.size }) + ': ' + [...hosts].join(', ') : t('jobs.noplacement');
      if (!fabric) { try { fabric = await GP.api('/ui/api/fabric'); } catch (e) { fabric = null; } }
      if (fabric) {
        if (!view) view = new GP.FabricView($('placement'), fabric);
        const hl = new Set();
        for (const x of pl.tasks) { const h = fabric.hosts.indexOf(x.host); for (const g of x.gpus) hl.add(h + ':' + g); }
        view.highlight = hl; view.draw();
      }
      if (!quiet) {
        try { const logs = await GP.api('/v1/jobs/' + enc(id) + '/logs?tail=200'); $('logs').textContent = logs.text; }
        catch (e) { $('logs').textContent = t('jobs.nologs', { why: e.message }); }
      }
    }
    $('cancel').addEventListener('click', async () => {
      if (!open || !confirm(t('jobs.cancel_confirm', { job: open }))) return;
      try { await GP.api('/v1/jobs/' + enc(open) + '/cancel', { method: 'POST' }); await load(); } catch (e) { GP.showError(e); }
    });
    $('job-state').addEventListener('change', () => load().catch(GP.showError));
    GP.poll(load, 2000);
  }

  function poolsPage() {
    GP.poll(async () => {
      const d = await GP.api('/ui/api/pools');
      const span = 86400;
      $('pools').replaceChildren(...(d.pools.length ? d.pools.map((p) => el('section', { class: 'pool' },
        el('h2', {}, p.name + ' · ' + p.timezone), el('p', { class: 'muted' }, t('pools.default', { pool: p.default_pool })),
        ...p.rules.map((r) => el('div', { class: 'rule' },
          el('div', {}, t('pools.rule', { pool: r.pool, share: Math.round(r.fraction_now * 100) + '%', what: r.sus.length ? 'SU ' + r.sus.join(',') : r.hosts.join(',') })),
          el('div', { class: 'timeline' }, ...r.segments.map((s) => el('span', {
            style: 'width:' + (100 * Math.max(s[1] - s[0], 900) / span).toFixed(2) + '%;opacity:' + (0.15 + 0.85 * s[2]).toFixed(2),
            title: GP.time(s[0]) + ' → ' + Math.round(s[2] * 100) + '%' }))))))) : [el('p', { class: 'muted' }, t('pools.none'))]));
      GP.fill($('lending').tBodies[0], d.quotas.map((q) => GP.row([q.tenant, q.pool, q.gpu_model, q.cohort, q.nominal_gpus, q.used_gpus, q.borrowed_gpus, q.lendable_gpus])));
    }, 2000);
  }

  function tenantsPage() {
    let chart = null, rows = [];
    $('csv').addEventListener('click', () => {
      const lines = ['tenant,gpu_model,pool,gpu_hours'].concat(rows.map((u) => [u.tenant, u.gpu_model, u.pool, (u.gpu_seconds / 3600).toFixed(3)]
        .map((v) => /[",\n]/.test(String(v)) ? '"' + String(v).replace(/"/g, '""') + '"' : v).join(',')));
      const a = el('a', { href: URL.createObjectURL(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' })), download: 'gpupool-usage.csv' });
      document.body.append(a); a.click(); a.remove();
    });
    GP.poll(async () => {
      const [usage, tenants] = await Promise.all([GP.api('/v1/usage'), GP.api('/v1/tenants')]);
      rows = usage.usage;
      GP.fill($('usage').tBodies[0], rows.map((u) => GP.row([u.tenant, u.gpu_model, u.pool, (u.gpu_seconds / 3600).toFixed(2)])));
      const names = [...new Set(rows.map((u) => u.tenant))].sort(), models = [...new Set(rows.map((u) => u.gpu_model))].sort();
      const datasets = models.map((m, i) => ({ label: m || '?', backgroundColor: 'hsl(' + (i * 67) % 360 + ',55%,55%)',
        data: names.map((n) => rows.filter((u) => u.tenant === n && u.gpu_model === m).reduce((a, u) => a + u.gpu_seconds / 3600, 0)) }));
      if (window.Chart) {
        if (!chart) chart = new Chart($('usage-chart'), { type: 'bar', data: { labels: names, datasets }, options: { animation: false, maintainAspectRatio: false, scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: t('col.gpu_hours') } } } } });
        else { chart.data.labels = names; chart.data.datasets = datasets; chart.update('none'); }
      }
      const quotas = (await Promise.all(tenants.tenants.map((x) => GP.api('/v1/tenants/' + enc(x.name) + '/quotas')))).flatMap((q) => q.quotas);
      GP.fill($('quotas').tBodies[0], quotas.map((q) => GP.row([q.tenant, q.pool, q.gpu_model, q.nominal_gpus, q.borrowing_limit_gpus ?? '∞', q.lending_limit_gpus ?? '∞', q.cohort])));
    }, 2000);
  }

  function simPage() {
    const charts = [];
    const cdf = (xs) => xs.map((x, i) => ({ x, y: (i + 1) / xs.length }));
    $('sim-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const path = $('sim-path').value.trim();
      try {
        const d = await GP.api('/ui/api/sim?path=' + enc(path));
        $('sim').hidden = false; $('sim-name').textContent = d.path + ' · ' + d.jobs;
        GP.fill($('sim-metrics').tBodies[0], Object.entries(d.metrics).map(([k, v]) => GP.row([k, typeof v === 'number' ? +v.toFixed(4) : JSON.stringify(v)])));
        charts.splice(0).forEach((c) => c.destroy());
        for (const [id, xs, label] of [['jct-chart', d.jct_h, 'sim.jct'], ['wait-chart', d.wait_h, 'sim.wait']]) {
          charts.push(new Chart($(id), { type: 'line', data: { datasets: [{ label: t(label), data: cdf(xs), pointRadius: 0, borderColor: '#3949ab', stepped: true }] },
            options: { animation: false, maintainAspectRatio: false, parsing: false, scales: { x: { type: 'linear' }, y: { min: 0, max: 1, title: { display: true, text: t('sim.share') } } } } }));
        }
        // Plots are fetched with the token (an <img src> could not send it) and shown from blob URLs.
        const imgs = await Promise.all(d.plots.map(async (name) => {
          const r = await GP.api('/ui/api/sim/plot?path=' + enc(path) + '&name=' + enc(name));
          return el('figure', {}, el('img', { src: URL.createObjectURL(await r.blob()), alt: name }), el('figcaption', {}, name));
        }));
        $('sim-plots').replaceChildren(...imgs);
        GP.showError(null);
      } catch (e) { GP.showError(e.status === 403 ? new Error(t('err.forbidden')) : e); }
    });
  }

  const init = { fabric: fabricPage, queue: queuePage, jobs: jobsPage, pools: poolsPage, tenants: tenantsPage, sim: simPage }[GP.page];
  GP.start(init);
})();
