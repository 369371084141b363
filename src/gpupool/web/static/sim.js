/* The simulator page: a run folder's metrics, completion and wait CDFs (Chart.js) and its plots. */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function init() {
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
  GP.start(init);
})();
