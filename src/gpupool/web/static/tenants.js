/* The tenants page: GPU-hours per tenant and GPU model (a Chart.js bar chart), CSV export, quotas. */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function init() {
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
      GP.fill($('usage').tBodies[0], rows.map((u) => GP.row([u.tenant, u.gpu_model, u.pool, GP.num(+(u.gpu_seconds / 3600).toFixed(2))], {}, GP.labels($('usage')))));
      const names = [...new Set(rows.map((u) => u.tenant))].sort(), models = [...new Set(rows.map((u) => u.gpu_model))].sort();
      const datasets = models.map((m, i) => ({ label: m || '?', backgroundColor: 'hsl(' + (i * 67) % 360 + ',55%,55%)',
        data: names.map((n) => rows.filter((u) => u.tenant === n && u.gpu_model === m).reduce((a, u) => a + u.gpu_seconds / 3600, 0)) }));
      if (window.Chart) {
        if (!chart) chart = new Chart($('usage-chart'), { type: 'bar', data: { labels: names, datasets }, options: { animation: false, maintainAspectRatio: false, scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: t('col.gpu_hours') } } } } });
        else { chart.data.labels = names; chart.data.datasets = datasets; chart.update('none'); }
      }
      const quotas = (await Promise.all(tenants.tenants.map((x) => GP.api('/v1/tenants/' + enc(x.name) + '/quotas')))).flatMap((q) => q.quotas);
      GP.fill($('quotas').tBodies[0], quotas.map((q) => GP.row([q.tenant, q.pool, q.gpu_model, q.nominal_gpus, q.borrowing_limit_gpus ?? '∞', q.lending_limit_gpus ?? '∞', q.cohort], {}, GP.labels($('quotas')))));
    }, 2000);
  }
  GP.start(init);
})();
