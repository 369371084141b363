/* The fabric on one canvas: tiers on top, then one panel per scalable unit with its rail leaves over its host
   tiles; every host a tile of GPU cells. The canvas is a window onto that world: zoom (wheel, buttons), pan
   (drag), and names drawn wherever they fit at the current zoom. Drawn from /ui/api/fabric's static part and
   its live part (kept up to date with changes only); only what is in view is drawn. */
(function () {
  'use strict';
  const GP = window.GP;
  const CELL = 8, GAP = 1, PAD = 8, ROW = 16, LABEL = 9;
  const FREE = -1, HIDDEN = -2;
  const UP = 0, DRAINED = 1, LOST = 2, UNREGISTERED = 3;
  // Tenant, pool and job colours: no red, amber or yellow, which mean trouble here (bad, degraded, congested).
  const PALETTE = ['#1e88e5', '#43a047', '#8e24aa', '#00acc1', '#6d4c41', '#3949ab', '#c0ca33', '#00897b',
    '#5e35b1', '#7cb342', '#546e7a', '#0277bd', '#ad1457', '#2e7d32', '#4527a0', '#00838f'];
  const FREE_C = '#e3ebe3', HIDDEN_C = '#9e9e9e', NODATA = '#eeeeee';
  const HEALTH = ['#43a047', '#ffb300', '#e53935'];
  const LEAF_FLAG = [null, '#fdd835', '#fb8c00', '#e53935'];
  const STATE_BG = ['#ffffff', '#cfd8dc', '#ffcdd2', '#eeeeee'];
  const STATE_LINE = [null, '#455a64', '#e53935', '#9e9e9e'];

  // Rails in soft hues, so that the strong red, orange and yellow stay the leaf flags' and the health's.
  const railColour = (r, n) => 'hsl(' + Math.round((360 * r) / Math.max(n, 1)) + ',30%,62%)';
  const ramp = (x, lo, hi, h0, h1) => {
    const f = Math.min(1, Math.max(0, (x - lo) / (hi - lo)));
    return 'hsl(' + Math.round(h0 + (h1 - h0) * f) + ',70%,50%)';
  };

  // Stable colours per name: the first names seen take the palette in order, later ones a hash of the name.
  class Colours {
    constructor() { this.map = new Map(); }
    of(name) {
      let c = this.map.get(name);
      if (!c) {
        if (this.map.size < PALETTE.length) c = PALETTE[this.map.size];
        else { let h = 0; for (const ch of name) h = (h * 31 + ch.charCodeAt(0)) >>> 0; c = 'hsl(' + (h % 360) + ',55%,' + (40 + (h >> 9) % 25) + '%)'; }
        this.map.set(name, c);
      }
      return c;
    }
  }

  class FabricView {
    constructor(canvas, opts) {
      this.canvas = canvas; this.opts = opts || {};
      this.mode = 'tenant'; this.highlight = null; this.s = null; this.d = null;
      this.tenants = new Colours(); this.pools = new Colours(); this.jobsC = new Colours();
      this.scale = 1; this.ox = 0; this.oy = 0; this.labels = [];
      if (!this.opts.mini) this.interact();
    }

    setStatic(s) { this.s = s; this.layout(); this.fit(); }
    setLive(d) { this.d = d; this.draw(); }

    // World positions change only with the fabric, so they are computed once per static part: the world's
    // width is the one (of a few tried) whose shape best fills the canvas.
    layout() {
      this.resize(1600, 1000);
      let best = null;
      for (const W of [700, 1000, 1300, 1600, 2000, 2500, 3200, 4000]) {
        this.place(W);
        const k = Math.min(this.cw / this.worldW, this.ch / this.worldH);
        if (!best || k > best.k) best = { W, k };
      }
      this.place(best.W);
      this.resize(this.worldW, this.worldH);
    }

    place(W) {
      const s = this.s;
      const maxG = Math.max(1, ...s.gpus);
      this.cols = Math.min(maxG, 4);
      const rows = Math.ceil(maxG / this.cols);
      this.tw = this.cols * (CELL + GAP) + 3; this.th = rows * (CELL + GAP) + 3 + LABEL;
      let y = PAD;
      this.tierRows = [];
      for (const tier of ['core', 'spine']) if (s.tiers[tier].length) { this.tierRows.push({ tier, y }); y += ROW; }
      const panels = [];
      let x = PAD, rowH = 0;
      y += this.tierRows.length ? 6 : 0;
      for (const g of s.groups) {
        const n = g.hosts.length;
        const perRow = n > 64 ? Math.max(8, Math.floor((W - 2 * PAD - 8) / (this.tw + 2))) : Math.min(n, 8);
        const pw = Math.max(perRow * (this.tw + 2) + 6, g.leaves.length * 6 + 6);
        const ph = 28 + Math.ceil(n / perRow) * (this.th + 2) + 4;
        if (x + pw > W - PAD && x > PAD) { x = PAD; y += rowH + 8; rowH = 0; }
        panels.push({ g, x, y, w: pw, h: ph, perRow });
        x += pw + 8; rowH = Math.max(rowH, ph);
      }
      this.panels = panels;
      this.worldW = Math.max(...panels.map((p) => p.x + p.w), 400) + PAD; this.worldH = y + rowH + PAD;
      this.rects = new Array(s.hosts.length);
      this.suOf = new Array(s.hosts.length);
      for (const p of panels) {
        p.g.hosts.forEach((h, k) => {
          this.rects[h] = { x: p.x + 3 + (k % p.perRow) * (this.tw + 2), y: p.y + 28 + Math.floor(k / p.perRow) * (this.th + 2), w: this.tw, h: this.th };
          this.suOf[h] = p.g.su;
        });
      }
      this.byName = new Map(s.hosts.map((n, i) => [n, i]));
    }

    // The canvas: the wrapper's width, and the height the world needs at that width, at most the window's.
    resize(worldW, worldH) {
      if (worldW) { this.shapeW = worldW; this.shapeH = worldH; }
      const wrap = this.canvas.parentElement;
      const cw = Math.max(300, wrap.clientWidth || 1200);
      const ch = this.opts.height || Math.max(320, Math.min(window.innerHeight - 170, Math.round(cw * this.shapeH / this.shapeW) + 2));
      const dpr = window.devicePixelRatio || 1;
      this.cw = cw; this.ch = ch;
      this.canvas.width = Math.round(cw * dpr); this.canvas.height = Math.round(ch * dpr);
      this.canvas.style.width = cw + 'px'; this.canvas.style.height = ch + 'px';
      this.ctx = this.canvas.getContext('2d');
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this.dpr = dpr;
    }

    fit() {
      this.scale = Math.min(this.cw / this.worldW, this.ch / this.worldH);
      this.ox = (this.worldW - this.cw / this.scale) / 2; this.oy = 0;
      this.minScale = this.scale;
      if (this.d) this.draw();
    }

    zoomAt(factor, sx, sy) {
      const wx = this.ox + sx / this.scale, wy = this.oy + sy / this.scale;
      this.scale = Math.min(12, Math.max(this.minScale * 0.8, this.scale * factor));
      this.ox = wx - sx / this.scale; this.oy = wy - sy / this.scale;
      this.draw();
    }

    // Centre a world rectangle, zoomed so that it fills about a quarter of the window (names then fit).
    centre(r, zoom) {
      if (zoom) this.scale = Math.max(this.scale, Math.min(6, zoom));
      this.ox = r.x + r.w / 2 - this.cw / 2 / this.scale;
      this.oy = r.y + r.h / 2 - this.ch / 2 / this.scale;
      this.draw();
    }

    interact() {
      const c = this.canvas;
      c.addEventListener('wheel', (ev) => {
        ev.preventDefault();
        const b = c.getBoundingClientRect();
        this.zoomAt(ev.deltaY < 0 ? 1.25 : 0.8, ev.clientX - b.left, ev.clientY - b.top);
      }, { passive: false });
      let drag = null;
      c.addEventListener('pointerdown', (ev) => { drag = { x: ev.clientX, y: ev.clientY, ox: this.ox, oy: this.oy, moved: false }; });
      window.addEventListener('pointermove', (ev) => {
        if (!drag) return;
        const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 4) drag.moved = true;
        if (drag.moved) { this.ox = drag.ox - dx / this.scale; this.oy = drag.oy - dy / this.scale; this.draw(); }
      });
      window.addEventListener('pointerup', () => { this.dragged = drag && drag.moved; drag = null; });
    }

    // -- colours ----------------------------------------------------------------------------------------
    job(code) { return this.d.jobs[String(code)]; } // [id, tenant, pool, name]

    cellColour(i) {
      const d = this.d, mode = this.mode;
      if (mode === 'util') { const u = d.util && d.util[i]; return u == null ? NODATA : ramp(u, 0, 100, 210, 0); }
      if (mode === 'temp') { const t = d.temp && d.temp[i]; return t == null ? NODATA : ramp(t, 30, 90, 220, 0); }
      if (mode === 'health') { const h = d.health[i]; return h < 0 ? NODATA : HEALTH[h]; }
      const a = d.alloc[i];
      if (a === FREE) return FREE_C;
      if (a === HIDDEN) return HIDDEN_C;
      const j = this.job(a);
      if (!j) return HIDDEN_C;
      return mode === 'pool' ? this.pools.of(j[2]) : mode === 'job' ? this.jobsC.of(j[0]) : this.tenants.of(j[1]);
    }

    // What each colour of the current mode means, with the GPUs it covers: the legend maps back.
    legendItems() {
      const d = this.d, mode = this.mode;
      if (!d) return [];
      if (mode === 'util') return [[ramp(0, 0, 1, 210, 0), GP.t('legend.idle')], [ramp(1, 0, 1, 210, 0), GP.t('legend.busy')], [NODATA, GP.t('legend.nodata')]];
      if (mode === 'temp') return [[ramp(0, 0, 1, 220, 0), '30 °C'], [ramp(1, 0, 1, 220, 0), '90 °C'], [NODATA, GP.t('legend.nodata')]];
      if (mode === 'health') return [[HEALTH[0], GP.t('legend.ok')], [HEALTH[1], GP.t('legend.degraded')], [HEALTH[2], GP.t('legend.bad')], [NODATA, GP.t('legend.nodata')]];
      const counts = new Map();
      let free = 0, hidden = 0;
      for (const a of d.alloc) {
        if (a === FREE) { free++; continue; }
        const j = a === HIDDEN ? null : this.job(a);
        if (!j) { hidden++; continue; }
        const key = mode === 'pool' ? j[2] : mode === 'job' ? j[0] : j[1];
        const item = counts.get(key) || { n: 0, label: mode === 'job' ? (j[3] ? j[3] + ' · ' : '') + j[0] + ' (' + j[1] + ')' : key };
        item.n++; counts.set(key, item);
      }
      const colours = mode === 'pool' ? this.pools : mode === 'job' ? this.jobsC : this.tenants;
      const sorted = [...counts.entries()].sort((a, b) => b[1].n - a[1].n || (a[0] < b[0] ? -1 : 1));
      const shown = sorted.slice(0, mode === 'job' ? 12 : 40).map(([k, v]) => [colours.of(k), v.label + ' · ' + GP.t('unit.gpus', { n: v.n }), k]);
      if (sorted.length > shown.length) shown.push([null, GP.t('legend.more', { n: sorted.length - shown.length })]);
      shown.push([FREE_C, GP.t('legend.free') + ' · ' + GP.t('unit.gpus', { n: free })]);
      if (hidden) shown.push([HIDDEN_C, GP.t('legend.hidden') + ' · ' + GP.t('unit.gpus', { n: hidden })]);
      return shown;
    }

    // -- drawing ----------------------------------------------------------------------------------------
    text(str, x, y, maxW, colour, font) {
      const c = this.ctx;
      c.font = font || '10px system-ui, sans-serif';
      if (c.measureText(str).width > maxW) return false;
      c.fillStyle = colour || '#333'; c.fillText(str, x, y);
      this.labels.push(str);
      return true;
    }

    draw() {
      const s = this.s, d = this.d, c = this.ctx;
      if (!s || !d) return;
      const k = this.scale, X = (x) => (x - this.ox) * k, Y = (y) => (y - this.oy) * k;
      const seen = (x, y, w, h) => X(x + w) >= 0 && X(x) <= this.cw && Y(y + h) >= 0 && Y(y) <= this.ch;
      this.labels = [];
      c.clearRect(0, 0, this.cw, this.ch);
      c.textBaseline = 'middle';
      for (const r of this.tierRows) {
        const names = s.tiers[r.tier];
        this.text(GP.t('tier.' + r.tier) + ' · ' + names.length, X(PAD), Y(r.y + 6), 68 * k, '#555');
        const x0 = PAD + 70, w = (this.worldW - x0 - PAD) / names.length;
        for (let i = 0; i < names.length; i++) {
          if (!seen(x0 + i * w, r.y, w, 12)) continue;
          c.fillStyle = r.tier === 'core' ? '#5c6bc0' : '#7986cb';
          c.fillRect(X(x0 + i * w), Y(r.y + 2), Math.max(1, w * k - 1), 9 * k);
          this.text(names[i], X(x0 + i * w) + 2, Y(r.y + 6.5), w * k - 4, '#fff', Math.min(11, 8 * k) + 'px system-ui');
        }
      }
      const hl = this.highlight, flags = d.leaf_flag || [];
      for (const p of this.panels) {
        if (!seen(p.x, p.y, p.w, p.h)) continue;
        c.fillStyle = '#fafafa'; c.fillRect(X(p.x), Y(p.y), p.w * k, p.h * k);
        c.strokeStyle = '#ccc'; c.lineWidth = 1; c.strokeRect(X(p.x) + 0.5, Y(p.y) + 0.5, p.w * k - 1, p.h * k - 1);
        this.text(p.g.su >= 0 ? GP.t('tier.su') + ' ' + (p.g.su + 1) : GP.t('fabric.unattached'), X(p.x + 3), Y(p.y + 7), p.w * k, '#263238', 'bold ' + Math.min(12, Math.max(9, 7 * k)) + 'px system-ui');
        const lw = (p.w - 6) / Math.max(p.g.leaves.length, 1);
        p.g.leaves.forEach((li, n) => {
          const leaf = s.tiers.leaf[li], lx = p.x + 3 + n * lw;
          c.fillStyle = railColour(leaf[1], s.rails); c.fillRect(X(lx), Y(p.y + 14), Math.max(1, (lw - 1) * k), 10 * k);
          const flag = LEAF_FLAG[flags[li] || 0];
          if (flag) { c.strokeStyle = flag; c.lineWidth = 2; c.strokeRect(X(lx - 1), Y(p.y + 13), (lw + 1) * k, 12 * k); c.lineWidth = 1; }
          this.text(leaf[0], X(lx) + 2, Y(p.y + 19), (lw - 2) * k, '#fff', Math.min(11, 8 * k) + 'px system-ui');
        });
      }
      const cs = CELL * k;
      for (let h = 0; h < s.hosts.length; h++) {
        const r = this.rects[h];
        if (!r || !seen(r.x, r.y, r.w, r.h)) continue;
        const n = s.gpus[h], off = s.gpu_offset[h], st = d.state[h];
        const dim = hl && !hl.hosts.has(h);
        c.globalAlpha = dim ? 0.25 : 1;
        c.fillStyle = STATE_BG[st]; c.fillRect(X(r.x), Y(r.y), r.w * k, r.h * k);
        let worst = -1;
        for (let g = 0; g < n; g++) {
          const i = off + g, cx = X(r.x + 2 + (g % this.cols) * (CELL + GAP)), cy = Y(r.y + 2 + Math.floor(g / this.cols) * (CELL + GAP));
          c.globalAlpha = dim || (hl && hl.gpus && !hl.gpus.has(i)) ? 0.25 : st === UP ? 1 : 0.45;
          c.fillStyle = this.cellColour(i); c.fillRect(cx, cy, cs, cs);
          const grade = d.health[i];
          worst = Math.max(worst, grade);
          if (grade > 0 && this.mode !== 'health') { // the health outline, in every mode
            c.globalAlpha = 1; c.strokeStyle = HEALTH[grade]; c.lineWidth = Math.max(1.5, k * 1.2);
            c.strokeRect(cx + 0.5, cy + 0.5, cs - 1, cs - 1);
            if (grade === 2) { c.beginPath(); c.moveTo(cx, cy); c.lineTo(cx + cs, cy + cs); c.moveTo(cx + cs, cy); c.lineTo(cx, cy + cs); c.stroke(); }
            c.lineWidth = 1;
          }
        }
        c.globalAlpha = 1;
        const line = worst === 2 ? HEALTH[2] : STATE_LINE[st];
        if (line) {
          c.strokeStyle = line; c.lineWidth = worst === 2 ? 2 : 1; c.setLineDash(st === UNREGISTERED ? [3, 2] : []);
          c.strokeRect(X(r.x) + 0.5, Y(r.y) + 0.5, r.w * k - 1, r.h * k - 1); c.setLineDash([]); c.lineWidth = 1;
        }
        if (hl && hl.hosts.has(h)) { c.strokeStyle = '#0d47a1'; c.lineWidth = 3; c.strokeRect(X(r.x) - 2, Y(r.y) - 2, r.w * k + 4, r.h * k + 4); c.lineWidth = 1; }
        this.text(s.hosts[h], X(r.x + 1), Y(r.y + r.h - LABEL / 2 - 1), r.w * k - 2, dim ? '#bbb' : '#222', Math.min(12, Math.max(8, 6.5 * k)) + 'px system-ui');
      }
      this.canvas.dataset.drawn = String(this.rects.filter(Boolean).length);
      this.canvas.dataset.scale = this.scale.toFixed(3);
    }

    // -- looking things up -----------------------------------------------------------------------------
    hostAt(sx, sy) {
      const wx = this.ox + sx / this.scale, wy = this.oy + sy / this.scale;
      for (let h = 0; h < this.rects.length; h++) {
        const r = this.rects[h];
        if (r && wx >= r.x && wx < r.x + r.w && wy >= r.y && wy < r.y + r.h) return h;
      }
      return -1;
    }

    // Where host ``name`` is on the canvas now (CSS pixels), and where one of its GPUs is.
    hostRect(name) {
      const h = this.byName.get(name);
      if (h === undefined) return null;
      const r = this.rects[h];
      return { x: (r.x - this.ox) * this.scale, y: (r.y - this.oy) * this.scale, w: r.w * this.scale, h: r.h * this.scale };
    }
    gpuRect(name, g) {
      const h = this.byName.get(name);
      if (h === undefined) return null;
      const r = this.rects[h], k = this.scale;
      return { x: (r.x + 2 + (g % this.cols) * (CELL + GAP) - this.ox) * k, y: (r.y + 2 + Math.floor(g / this.cols) * (CELL + GAP) - this.oy) * k, w: CELL * k, h: CELL * k };
    }

    // Hosts (and GPUs) matching a search: a host name, a job id or name, or a tenant.
    search(q) {
      q = q.trim().toLowerCase();
      if (!q) return null;
      const s = this.s, d = this.d, hosts = new Set(), gpus = new Set();
      s.hosts.forEach((n, h) => { if (n.toLowerCase().includes(q)) hosts.add(h); });
      const keys = new Set();
      for (const [key, j] of Object.entries(d.jobs)) {
        if (j[0].toLowerCase().startsWith(q) || j[1].toLowerCase() === q || (j[3] && j[3].toLowerCase().includes(q))) keys.add(Number(key));
      }
      if (keys.size) {
        for (let h = 0; h < s.hosts.length; h++) {
          for (let g = 0; g < s.gpus[h]; g++) {
            const i = s.gpu_offset[h] + g;
            if (keys.has(d.alloc[i])) { hosts.add(h); gpus.add(i); }
          }
        }
      }
      return { hosts, gpus: keys.size && gpus.size ? gpus : null, jobs: keys.size };
    }

    bounds(hosts) {
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const h of hosts) { const r = this.rects[h]; x0 = Math.min(x0, r.x); y0 = Math.min(y0, r.y); x1 = Math.max(x1, r.x + r.w); y1 = Math.max(y1, r.y + r.h); }
      return { x: x0, y: y0, w: x1 - x0, h: y1 - y0 };
    }
  }

  // Applies /ui/api/fabric's answer to the live part held: the whole of it, or the changes since it.
  GP.applyLive = function (held, answer) {
    if (answer.live) return answer.live;
    if (answer.same) return held;
    const out = Object.assign({}, held), diff = answer.diff;
    for (const [name, ch] of Object.entries(diff)) {
      if (name === 'summary') out.summary = ch;
      else if (name === 'jobs') {
        out.jobs = Object.assign({}, held.jobs, ch.set);
        for (const k of ch.del) delete out.jobs[k];
      } else if (ch.all) out[name] = ch.all;
      else { const a = held[name].slice(); for (let i = 0; i < ch.set.length; i += 2) a[ch.set[i]] = ch.set[i + 1]; out[name] = a; }
    }
    return out;
  };

  GP.FabricView = FabricView;
  GP.legend = function (box, items) {
    box.replaceChildren(...items.map(([c, label]) => GP.el('span', {}, c ? GP.el('i', { style: 'background:' + c }) : '', label)));
  };
  GP.stateLegend = () => [[STATE_BG[DRAINED], GP.t('legend.drained')], [STATE_BG[LOST], GP.t('legend.lost')],
    [STATE_BG[UNREGISTERED], GP.t('legend.unregistered')], [HEALTH[2], GP.t('legend.bad_gpu')], [HEALTH[1], GP.t('legend.degraded_gpu')],
    [LEAF_FLAG[1], GP.t('legend.congested')], [LEAF_FLAG[2], GP.t('legend.erroring')], [LEAF_FLAG[3], GP.t('legend.down')]];
})();
