/* The fabric page: the live view (changes only, every 2 s), search, zoom, tooltip, and a host's panel. */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const STATES = ['up', 'drained', 'lost', 'unregistered'];

  function init() {
    const canvas = $('fabric'), colour = $('colour'), tip = $('tip');
    const view = GP.fabricView = new GP.FabricView(canvas);
    let stat = null, live = null, digest = null, open = null, query = '';
    const telemetry = () => colour.value === 'util' || colour.value === 'temp';
    performance.mark('gp-fabric-start');

    const load = async () => {
      const t0 = performance.now();
      let url = '/ui/api/fabric?telemetry=' + telemetry();
      if (stat) url += '&version=' + stat.version + (digest ? '&since=' + digest : '');
      const a = await GP.api(url);
      const t1 = performance.now();
      if (a.static) { stat = a.static; view.d = null; view.setStatic(stat); }
      live = GP.applyLive(live, a); digest = a.digest;
      if (a.static || !a.same) { view.d = live; if (query) find(false); view.draw(); legend(); summary(); }
      const t2 = performance.now();
      if (!GP.timing) { // the first load is what an operator waits for: measured here, in the browser
        GP.timing = { fetch_ms: t1 - t0, render_ms: t2 - t1, since_navigation_ms: t2, hosts: stat.hosts.length };
        performance.mark('gp-fabric-drawn');
        canvas.dataset.ready = '1';
        const h = GP.hash().host;
        if (h) showHost(h, true).catch(GP.showError);
      }
      if (open && !a.same) showHost(open).catch(GP.showError);
    };
    function summary() {
      const s = live.summary, by = s.hosts_by_state;
      const off = STATES.slice(1).filter((k) => by[k]).map((k) => GP.t('state.' + k) + ' ' + GP.num(by[k]));
      $('fabric-summary').textContent = t('fabric.summary2', {
        hosts: GP.num(s.hosts), gpus: GP.num(s.gpus), schedulable: GP.num(s.schedulable_gpus), used: GP.num(s.allocated_gpus),
        bad: GP.num(s.bad_gpus), rails: stat.rails }) + (off.length ? ' · ' + t('fabric.unschedulable_hosts') + ': ' + off.join(', ') : '');
      $('fabric-summary').dataset.schedulable = String(s.schedulable_gpus);
    }
    function legend() { GP.legend($('legend'), view.legendItems()); }
    GP.legend($('state-legend'), GP.stateLegend());

    function find(centre) {
      const m = view.search(query);
      view.highlight = m;
      const out = $('find-result');
      if (!m) { out.textContent = ''; return; }
      out.textContent = m.hosts.size ? t('fabric.found', { hosts: GP.num(m.hosts.size), jobs: GP.num(m.jobs) }) : t('fabric.notfound');
      if (centre && m.hosts.size) {
        const b = view.bounds(m.hosts);
        view.centre(b, Math.min(view.cw / (b.w + 40), view.ch / (b.h + 40), 3));
      }
    }
    $('fabric-search').addEventListener('submit', (ev) => { ev.preventDefault(); query = $('find').value; find(true); view.draw(); });
    $('find').addEventListener('input', () => { if (!$('find').value) { query = ''; view.highlight = null; $('find-result').textContent = ''; view.draw(); } });
    colour.addEventListener('change', () => {
      view.mode = colour.value;
      if (telemetry() && !(live && live.util)) { digest = null; load().catch(GP.showError); } // ask for telemetry now
      view.draw(); legend();
    });
    $('zoom-in').addEventListener('click', () => view.zoomAt(1.5, view.cw / 2, view.ch / 2));
    $('zoom-out').addEventListener('click', () => view.zoomAt(1 / 1.5, view.cw / 2, view.ch / 2));
    $('zoom-fit').addEventListener('click', () => view.fit());
    window.addEventListener('resize', () => { if (stat && live) { view.layout(); view.fit(); } });

    canvas.addEventListener('mousemove', (ev) => {
      const b = canvas.getBoundingClientRect(), h = live ? view.hostAt(ev.clientX - b.left, ev.clientY - b.top) : -1;
      if (h < 0) { tip.hidden = true; return; }
      const n = stat.gpus[h], off = stat.gpu_offset[h], jobs = new Map();
      let used = 0, bad = 0;
      for (let g = 0; g < n; g++) {
        const a = live.alloc[off + g];
        if (a !== -1) used++;
        if (live.health[off + g] === 2) bad++;
        if (a >= 0) { const j = live.jobs[a]; if (j) jobs.set(j[0], j); } else if (a === -2) jobs.set('', null);
      }
      const leaf = view.suOf[h] >= 0 ? t('tier.su') + ' ' + (view.suOf[h] + 1) : '';
      tip.replaceChildren(el('b', {}, stat.hosts[h]), ' · ', GP.state(STATES[live.state[h]]), leaf ? ' · ' + leaf : '',
        el('br'), t('fabric.tip_gpus', { used, n }), bad ? el('span', { class: 'bad' }, ' · ' + t('fabric.tip_bad', { bad })) : '',
        ...[...jobs.values()].map((j) => el('div', {}, j ? (j[3] ? j[3] + ' · ' : '') + j[0] + ' · ' + j[1] + ' · ' + j[2] : t('legend.hidden'))));
      tip.hidden = false;
      tip.style.left = Math.min(ev.clientX - b.left + 14, view.cw - 260) + 'px'; tip.style.top = (ev.clientY - b.top + 14) + 'px';
    });
    canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    canvas.addEventListener('click', (ev) => {
      if (!stat || view.dragged) return;
      const b = canvas.getBoundingClientRect();
      const h = view.hostAt(ev.clientX - b.left, ev.clientY - b.top);
      if (h >= 0) showHost(stat.hosts[h]).catch(GP.showError);
    });

    const panel = GP.panel('host', () => { open = null; GP.setHash('host', null); });
    async function showHost(name, centre) {
      const d = await GP.api('/ui/api/hosts/' + enc(name));
      if (open !== name) GP.setHash('host', name);
      open = name;
      panel.open();
      if (centre && view.byName.has(name)) { const h = view.byName.get(name); view.highlight = { hosts: new Set([h]), gpus: null }; view.centre(view.rects[h], 4); }
      $('host-name').textContent = d.name;
      const st = $('host-state'); st.textContent = GP.state(d.state); st.dataset.state = d.state;
      $('host-drain-reason').textContent = d.drain_reason ? t('host.drained_because', { why: d.drain_reason }) : '';
      const health = ['ok', 'degraded', 'bad'], labels = GP.labels($('host-gpus'));
      GP.fill($('host-gpus').tBodies[0], d.gpus.map((g) => GP.row([g.index, g.model, GP.num(g.memory_mib), g.hca,
        g.health < 0 ? '' : el('span', { class: 'grade g' + g.health }, t('legend.' + health[g.health])), g.util == null ? '' : g.util,
        g.temp == null ? '' : g.temp, g.job === '-' ? t('legend.hidden') : g.job ? el('a', { href: '/ui/jobs#job=' + enc(g.job) }, g.job) : ''], {}, labels)));
      GP.fill($('host-hcas').tBodies[0], d.hcas.map((h) => GP.row([h.name, h.rail, h.leaf, h.rate_gbps])));
      $('host-jobs').replaceChildren(...(d.jobs.length ? d.jobs.map((j) => el('li', {}, el('a', { href: '/ui/jobs#job=' + enc(j.id) }, (j.name ? j.name + ' · ' : '') + j.id),
        ' · ' + j.tenant + ' · ' + t('col.rank') + ' ' + j.rank + ' · GPU ' + j.gpus.join(','))) : [el('li', { class: 'muted' }, t('host.nojobs'))]));
      $('drain-form').hidden = !GP.who.admin;
      $('drain').hidden = d.state !== 'up'; $('drain-reason').hidden = d.state !== 'up';
      $('undrain').hidden = d.state !== 'drained';
    }
    $('drain-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const reason = $('drain-reason').value.trim();
      if (!open || !reason) { $('drain-reason').focus(); GP.showError(new Error(t('host.drain_needs_reason'))); return; }
      try { await GP.api('/v1/nodes/' + enc(open) + '/drain', { method: 'POST', body: { reason } }); $('drain-reason').value = ''; await load(); await showHost(open); } catch (e) { GP.showError(e); }
    });
    $('undrain').addEventListener('click', async () => {
      if (!open) return;
      try { await GP.api('/v1/nodes/' + enc(open) + '/undrain', { method: 'POST' }); await load(); await showHost(open); } catch (e) { GP.showError(e); }
    });
    window.addEventListener('hashchange', () => { const h = GP.hash().host; if (h && h !== open) showHost(h, true).catch(GP.showError); });
    GP.poll(load, 2000);
  }
  GP.start(init);
})();
