/* The queue page: pending jobs in the order they are taken, with why each waits (in the page's language). */
(function () {
  'use strict';
  const GP = window.GP, t = GP.t, el = GP.el, $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  function init() {
    GP.poll(async () => {
      const d = await GP.api('/ui/api/queue');
      $('queue-empty').hidden = d.jobs.length > 0;
      $('queue-hint').textContent = t('queue.hint', { policy: GP.msgs['policy.' + d.policy] ? t('policy.' + d.policy) : d.policy, time: d.as_of_s == null ? '—' : GP.time(d.as_of_s) });
      const labels = GP.labels($('queue'));
      GP.fill($('queue').tBodies[0], d.jobs.map((j) => GP.row([j.order,
        el('a', { href: '/ui/jobs#job=' + enc(j.id) }, j.name ? j.name : j.id), j.tenant, j.pool,
        GP.t('priority.' + j.priority), GP.num(j.gpus), GP.dur(j.waiting_s), GP.reason(j.reason, j.reason_code),
        j.expected_start_s == null ? '' : GP.time(j.expected_start_s),
        j.deadline_s == null ? '' : GP.time(j.deadline_s) + ' · ' + t('queue.' + j.admission),
        j.slack_s == null ? '' : GP.dur(j.slack_s)], { 'data-job': j.id }, labels)));
    }, 2000);
  }
  GP.start(init);
})();
