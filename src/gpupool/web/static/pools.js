/* The pools page: who owns which capacity now, the next 24 hours of each calendar, and lending. */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);

  function init() {
    GP.poll(async () => {
      const d = await GP.api('/ui/api/pools');
      const span = 86400;
      $('pools').replaceChildren(...(d.pools.length ? d.pools.map((p) => el('section', { class: 'pool' },
        el('h2', {}, p.name + ' · ' + p.timezone), el('p', { class: 'muted' }, t('pools.default', { pool: p.default_pool })),
        ...p.rules.map((r) => el('div', { class: 'rule' },
          el('div', {}, t('pools.rule', { pool: r.pool, share: Math.round(r.fraction_now * 100) + '%', what: r.sus.length ? t('tier.su') + ' ' + r.sus.join(',') : r.hosts.join(',') })),
          el('div', { class: 'timeline' }, ...r.segments.map((s) => el('span', {
            style: 'width:' + (100 * Math.max(s[1] - s[0], 900) / span).toFixed(2) + '%;opacity:' + (0.15 + 0.85 * s[2]).toFixed(2),
            title: GP.time(s[0]) + ' → ' + Math.round(s[2] * 100) + '%' }))))))) : [el('p', { class: 'muted' }, t('pools.none'))]));
      const labels = GP.labels($('lending'));
      GP.fill($('lending').tBodies[0], d.quotas.map((q) => GP.row([q.tenant, q.pool, q.gpu_model, q.cohort, q.nominal_gpus, q.used_gpus, q.borrowed_gpus, q.lendable_gpus], {}, labels)));
    }, 2000);
  }
  GP.start(init);
})();
