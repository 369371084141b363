/* The fabric on one canvas: tiers on top, then one panel per scalable unit with its rail leaves over its host
   tiles; every host a tile of GPU cells. Drawn from the compact /ui/api/fabric payload (flat per-GPU arrays),
   so 1,000 hosts are ~8,000 rectangles: a few milliseconds. */
(function () {
  'use strict';
  const GP = window.GP;
  const GAP = 1, PAD = 8, ROW = 16;
  const FREE = -1, HIDDEN = -2;

  const railColour = (r, n) => 'hsl(' + Math.round((360 * r) / Math.max(n, 1)) + ',65%,45%)';
  const jobColour = (i) => 'hsl(' + ((i * 137.508) % 360).toFixed(0) + ',60%,50%)';
  const ramp = (x, lo, hi, h0, h1) => {
    const f = Math.min(1, Math.max(0, (x - lo) / (hi - lo)));
    return 'hsl(' + Math.round(h0 + (h1 - h0) * f) + ',70%,50%)';
  };
  const HEALTH = ['#43a047', '#ffb300', '#e53935'];
  const LEAF_FLAG = [null, '#fdd835', '#fb8c00', '#e53935'];

  function cellColour(d, mode, i) {
    if (mode === 'alloc') { const a = d.alloc[i]; return a === FREE ? '#dfe7df' : a === HIDDEN ? '#9e9e9e' : jobColour(a); }
    if (mode === 'util') { const u = d.util[i]; return u == null ? '#eeeeee' : ramp(u, 0, 100, 210, 0); }
    if (mode === 'temp') { const t = d.temp[i]; return t == null ? '#eeeeee' : ramp(t, 30, 90, 220, 0); }
    const h = d.health[i]; return h < 0 ? '#eeeeee' : HEALTH[h];
  }

  class FabricView {
    constructor(canvas, data, opts) {
      this.canvas = canvas; this.d = data; this.opts = opts || {};
      this.mode = 'alloc'; this.highlight = null; this.rects = [];
      this.layout();
    }

    // Positions only change with the fabric, so they are computed once per payload version.
    layout() {
      const d = this.d;
      const width = Math.max(600, this.opts.width || this.canvas.parentElement.clientWidth || 1200);
      // Small fabrics get bigger cells; 1,000 hosts still fit a screen's width at 6 px.
      const CELL = this.cell = d.hosts.length <= 64 ? 14 : d.hosts.length <= 256 ? 9 : 6;
      const maxG = Math.max(1, ...d.gpus);
      this.cols = Math.min(maxG, 4);
      const rows = Math.ceil(maxG / this.cols);
      this.tw = this.cols * (CELL + GAP) + 3; this.th = rows * (CELL + GAP) + 5;
      let y = PAD;
      this.tierRows = [];
      for (const tier of ['core', 'spine']) {
        if (d.tiers[tier].length) { this.tierRows.push({ tier, y }); y += ROW; }
      }
      const leafY0 = y + (this.tierRows.length ? 6 : 0);
      const panels = [];
      let x = PAD, rowH = 0; y = leafY0;
      for (const g of d.groups) {
        const n = g.hosts.length;
        const perRow = n > 64 ? Math.max(8, Math.floor((width - 2 * PAD - 8) / (this.tw + 2))) : Math.min(n, 8);
        const pw = Math.max(perRow * (this.tw + 2) + 6, g.leaves.length * 6 + 6);
        const ph = 14 + Math.ceil(n / perRow) * (this.th + 2) + 6;
        if (x + pw > width - PAD && x > PAD) { x = PAD; y += rowH + 8; rowH = 0; }
        panels.push({ g, x, y, w: pw, h: ph, perRow });
        x += pw + 8; rowH = Math.max(rowH, ph);
      }
      this.panels = panels;
      this.width = width; this.height = y + rowH + PAD;
      this.rects = new Array(d.hosts.length);
      for (const p of panels) {
        p.g.hosts.forEach((h, k) => {
          this.rects[h] = { x: p.x + 3 + (k % p.perRow) * (this.tw + 2), y: p.y + 14 + Math.floor(k / p.perRow) * (this.th + 2), w: this.tw, h: this.th };
        });
      }
      const dpr = window.devicePixelRatio || 1;
      this.canvas.width = Math.round(width * dpr); this.canvas.height = Math.round(this.height * dpr);
      this.canvas.style.width = width + 'px'; this.canvas.style.height = this.height + 'px';
      this.ctx = this.canvas.getContext('2d');
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }

    setData(d) {
      const same = this.d && d.version === this.d.version && d.hosts.length === this.d.hosts.length;
      this.d = d;
      if (!same) this.layout();
      this.draw();
    }

    draw() {
      const d = this.d, c = this.ctx, mode = this.mode, CELL = this.cell;
      c.clearRect(0, 0, this.width, this.height);
      c.font = '10px sans-serif'; c.textBaseline = 'middle';
      for (const r of this.tierRows) {
        const names = d.tiers[r.tier];
        c.fillStyle = '#555'; c.fillText(GP.t('tier.' + r.tier), PAD, r.y + 6);
        const x0 = PAD + 44, w = (this.width - x0 - PAD) / names.length;
        c.fillStyle = r.tier === 'core' ? '#5c6bc0' : '#7986cb';
        for (let i = 0; i < names.length; i++) c.fillRect(x0 + i * w, r.y + 2, Math.max(1, w - 1), 9);
      }
      const spineY = this.tierRows.length ? this.tierRows[this.tierRows.length - 1].y + 11 : null;
      let used = 0, gpus = 0;
      for (const p of this.panels) {
        if (spineY !== null) {
          c.strokeStyle = '#c5cae9'; c.beginPath(); c.moveTo(p.x + p.w / 2, spineY); c.lineTo(p.x + p.w / 2, p.y); c.stroke();
        }
        c.fillStyle = '#fafafa'; c.fillRect(p.x, p.y, p.w, p.h);
        c.strokeStyle = '#ddd'; c.strokeRect(p.x + 0.5, p.y + 0.5, p.w - 1, p.h - 1);
        const lw = (p.w - 6) / Math.max(p.g.leaves.length, 1);
        p.g.leaves.forEach((li, k) => {
          const leaf = d.tiers.leaf[li];
          c.fillStyle = railColour(leaf[1], d.rails); c.fillRect(p.x + 3 + k * lw, p.y + 3, Math.max(1, lw - 1), 8);
          const flag = LEAF_FLAG[leaf[3]];
          if (flag) { c.strokeStyle = flag; c.lineWidth = 2; c.strokeRect(p.x + 2 + k * lw, p.y + 2, lw + 1, 10); c.lineWidth = 1; }
        });
      }
      const hl = this.highlight;
      for (let h = 0; h < d.hosts.length; h++) {
        const r = this.rects[h], n = d.gpus[h], off = d.gpu_offset[h];
        const st = d.state[h];
        c.fillStyle = st === 1 ? '#b0bec5' : st === 2 ? '#ffcdd2' : '#ffffff';
        c.fillRect(r.x, r.y, r.w, r.h);
        for (let g = 0; g < n; g++) {
          const i = off + g;
          if (d.alloc[i] !== FREE) used++;
          const cx = r.x + 2 + (g % this.cols) * (CELL + GAP), cy = r.y + 2 + Math.floor(g / this.cols) * (CELL + GAP);
          c.fillStyle = hl && !(hl.has(h + ':' + g)) ? '#eceff1' : cellColour(d, mode, i);
          c.fillRect(cx, cy, CELL, CELL);
          if (d.rails > 1 && n > 1) { // rails visible: a tick under each GPU in its rail's colour
            c.fillStyle = railColour(Math.floor((g * d.rails) / n), d.rails); c.fillRect(cx, cy + CELL - 1, CELL, 1);
          }
        }
        gpus += n;
        if (st !== 0) {
          c.strokeStyle = st === 1 ? '#455a64' : st === 2 ? '#e53935' : '#bdbdbd';
          c.setLineDash(st === 3 ? [2, 2] : []); c.strokeRect(r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1); c.setLineDash([]);
        }
      }
      this.canvas.dataset.hosts = String(d.hosts.length);
      this.canvas.dataset.drawn = String(this.rects.filter(Boolean).length);
      this.stats = { hosts: d.hosts.length, gpus, used };
    }

    hostAt(x, y) {
      for (let h = 0; h < this.rects.length; h++) {
        const r = this.rects[h];
        if (r && x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + r.h) return h;
      }
      return -1;
    }

    hostRect(name) {
      const h = this.d.hosts.indexOf(name);
      return h < 0 ? null : this.rects[h];
    }
  }

  GP.FabricView = FabricView;
  GP.legend = function (box, mode) {
    const items = {
      alloc: [['#dfe7df', 'legend.free'], [jobColour(0), 'legend.mine'], ['#9e9e9e', 'legend.hidden']],
      util: [[ramp(0, 0, 1, 210, 0), 'legend.idle'], [ramp(1, 0, 1, 210, 0), 'legend.busy'], ['#eeeeee', 'legend.nodata']],
      temp: [[ramp(0, 0, 1, 220, 0), 'legend.cool'], [ramp(1, 0, 1, 220, 0), 'legend.hot'], ['#eeeeee', 'legend.nodata']],
      health: [[HEALTH[0], 'legend.ok'], [HEALTH[1], 'legend.degraded'], [HEALTH[2], 'legend.bad'], ['#eeeeee', 'legend.nodata']],
    }[mode].concat([['#b0bec5', 'legend.drained'], ['#ffcdd2', 'legend.lost'], ['#ffffff', 'legend.unregistered'],
      [LEAF_FLAG[1], 'legend.congested'], [LEAF_FLAG[2], 'legend.erroring'], [LEAF_FLAG[3], 'legend.down']]);
    box.replaceChildren(...items.map(([c, k]) => GP.el('span', {}, GP.el('i', { style: 'background:' + c }), GP.t(k))));
  };
})();
