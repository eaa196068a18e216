// The range query's graph: lines (or stacked areas) on a canvas, time
// axis in UTC, a tooltip of the series nearest the pointer, and a legend
// whose entries toggle their series.
import {el, fmtNum, seriesName} from './util.js';

const HEIGHT = 360, PAD = {left: 64, right: 12, top: 10, bottom: 24};

export function color(i) {
  return `hsl(${(i * 137.508) % 360}, 65%, ${i % 2 ? 42 : 52}%)`;
}

// grid puts each series' values on the query's steps: Float64Arrays of
// length n (NaN where a series has no value).
export function grid(result, start, end, step) {
  const n = Math.floor((end - start) / step + 1e-9) + 1;
  return result.map(s => {
    const v = new Float64Array(n).fill(NaN);
    for (const [t, x] of s.values || []) {
      const i = Math.round((t - start) / step);
      if (i >= 0 && i < n) v[i] = parseFloat(x);
    }
    return v;
  });
}

function niceStep(range, ticks) {
  const raw = range / ticks;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * p) return m * p;
  return 10 * p;
}

const timeSteps = [1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 30 * 86400];

function fmtTick(t, step) {
  const d = new Date(t * 1000).toISOString();
  if (step >= 86400) return d.slice(5, 10);
  if (step >= 60) return d.slice(11, 16);
  return d.slice(11, 19);
}

// Graph draws result (a matrix) over [start, end] at step into container.
export class Graph {
  constructor(container, result, {start, end, step, stacked}) {
    this.result = result;
    this.start = start; this.end = end; this.step = step; this.stacked = stacked;
    this.values = grid(result, start, end, step);
    this.visible = result.map(() => true);
    this.names = result.map(s => seriesName(s.metric));
    this.canvas = el('canvas');
    this.tip = el('div', {class: 'tooltip', hidden: true});
    this.box = el('div', {class: 'graph', dataset: {series: result.length}}, this.canvas, this.tip);
    this.legend = el('div', {class: 'legend', dataset: {series: result.length}});
    container.append(this.box, this.buttons(), this.legend);
    this.canvas.addEventListener('mousemove', e => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    this.onResize = () => this.draw();
    window.addEventListener('resize', this.onResize);
    this.draw(); // before the legend: its layout is not waited for
    this.fillLegend();
  }

  destroy() { window.removeEventListener('resize', this.onResize); }

  buttons() {
    return el('div', {class: 'row', style: 'margin-top:6px'},
      el('button', {onclick: () => { this.visible.fill(true); this.refresh(); }}, 'Show all'),
      el('button', {onclick: () => { this.visible.fill(false); this.refresh(); }}, 'Hide all'),
      el('span', {class: 'muted'}, 'Click a series to show or hide it; Alt-click shows it alone.'));
  }

  // fillLegend writes the legend in one go (thousands of series: one
  // parse of HTML, not an element built at a time), its clicks handled
  // on the legend itself.
  fillLegend() {
    const esc = s => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/"/g, '&quot;');
    this.legend.innerHTML = this.names.map((name, i) =>
      `<div data-i="${i}" title="${esc(name)}"><span class="sw" style="background:${color(i)}"></span>${esc(name)}</div>`).join('');
    this.legend.addEventListener('click', e => {
      const d = e.target.closest('[data-i]');
      if (!d) return;
      const i = Number(d.dataset.i);
      if (e.altKey) { this.visible.fill(false); this.visible[i] = true; } else this.visible[i] = !this.visible[i];
      this.refresh();
    });
  }

  refresh() {
    [...this.legend.children].forEach((d, i) => d.classList.toggle('off', !this.visible[i]));
    this.draw();
  }

  // lines are what is drawn: each visible series' values, summed over
  // the ones before it when stacked.
  lines() {
    const out = [];
    let acc = null;
    this.values.forEach((v, i) => {
      if (!this.visible[i]) return;
      if (!this.stacked) { out.push({i, v}); return; }
      const s = new Float64Array(v.length);
      for (let k = 0; k < v.length; k++) {
        const base = acc ? acc[k] : 0;
        s[k] = isNaN(v[k]) ? NaN : base + v[k];
      }
      const next = new Float64Array(v.length);
      for (let k = 0; k < v.length; k++) next[k] = (acc ? acc[k] : 0) + (isNaN(v[k]) ? 0 : v[k]);
      out.push({i, v: s, base: acc});
      acc = next;
    });
    return out;
  }

  draw() {
    const began = performance.now();
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 800;
    c.width = w * dpr; c.height = HEIGHT * dpr;
    const g = c.getContext('2d');
    g.scale(dpr, dpr);
    g.clearRect(0, 0, w, HEIGHT);
    const lines = this.lines();
    let lo = Infinity, hi = -Infinity;
    for (const {v} of lines) for (const x of v) if (isFinite(x)) { if (x < lo) lo = x; if (x > hi) hi = x; }
    if (this.stacked && lo > 0) lo = 0;
    if (lo === Infinity) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 1; hi += 1; }
    const yStep = niceStep(hi - lo, 5);
    lo = Math.floor(lo / yStep) * yStep; hi = Math.ceil(hi / yStep) * yStep;
    const pw = w - PAD.left - PAD.right, ph = HEIGHT - PAD.top - PAD.bottom;
    const X = t => PAD.left + (t - this.start) / Math.max(this.end - this.start, 1e-9) * pw;
    const Y = y => PAD.top + (1 - (y - lo) / (hi - lo)) * ph;
    this.map = {X, Y, lo, hi, pw, ph, lines};
    // Axes and grid.
    g.font = '11px system-ui, sans-serif'; g.fillStyle = '#6b7280'; g.strokeStyle = '#e5e7eb'; g.lineWidth = 1;
    g.textAlign = 'right'; g.textBaseline = 'middle';
    for (let y = lo; y <= hi + yStep / 2; y += yStep) {
      g.beginPath(); g.moveTo(PAD.left, Y(y)); g.lineTo(w - PAD.right, Y(y)); g.stroke();
      g.fillText(fmtNum(Number(y.toPrecision(12))), PAD.left - 6, Y(y));
    }
    const span = this.end - this.start;
    const ts = timeSteps.find(s => span / s <= Math.max(2, pw / 90)) || timeSteps.at(-1);
    g.textAlign = 'center'; g.textBaseline = 'top';
    for (let t = Math.ceil(this.start / ts) * ts; t <= this.end; t += ts) {
      g.beginPath(); g.moveTo(X(t), PAD.top); g.lineTo(X(t), PAD.top + ph); g.stroke();
      g.fillText(fmtTick(t, ts), X(t), PAD.top + ph + 6);
    }
    // Series.
    const step = this.step, n = this.values.length ? this.values[0].length : 0;
    const xs = new Float64Array(n);
    for (let k = 0; k < n; k++) xs[k] = X(this.start + k * step);
    const y0 = PAD.top + ph, yk = ph / (hi - lo); // Y(v) = y0 - (v - lo) * yk
    g.lineWidth = lines.length > 200 ? 1 : 1.5;
    for (const {i, v, base} of lines) {
      g.strokeStyle = color(i);
      g.beginPath();
      let pen = false;
      for (let k = 0; k < n; k++) {
        const x = v[k];
        if (x !== x) { pen = false; continue; } // NaN: a gap
        if (pen) g.lineTo(xs[k], y0 - (x - lo) * yk); else g.moveTo(xs[k], y0 - (x - lo) * yk);
        pen = true;
      }
      g.stroke();
      if (this.stacked) {
        // One polygon: the series' top forward, its base back (a step
        // without a value is at its base).
        g.fillStyle = color(i); g.globalAlpha = 0.25;
        g.beginPath();
        for (let k = 0; k < v.length; k++) {
          const b = base ? base[k] : 0;
          g.lineTo(X(this.start + k * step), Y(Math.max(isNaN(v[k]) ? b : v[k], lo)));
        }
        for (let k = v.length - 1; k >= 0; k--) g.lineTo(X(this.start + k * step), Y(Math.max(base ? base[k] : 0, lo)));
        g.fill();
        g.globalAlpha = 1;
      }
    }
    this.box.dataset.drawn = String(lines.length);
    this.box.dataset.drawMs = (performance.now() - began).toFixed(0);
  }

  hover(e) {
    if (!this.map) return;
    const r = this.canvas.getBoundingClientRect();
    const mx = e.clientX - r.left, my = e.clientY - r.top;
    const k = Math.round(((mx - PAD.left) / this.map.pw) * (this.end - this.start) / this.step);
    if (k < 0 || k >= (this.values[0] || []).length) { this.tip.hidden = true; return; }
    let best = null, bestD = Infinity;
    for (const {i, v} of this.map.lines) {
      if (isNaN(v[k])) continue;
      const d = Math.abs(this.map.Y(v[k]) - my);
      if (d < bestD) { bestD = d; best = i; }
    }
    if (best === null) { this.tip.hidden = true; return; }
    const t = new Date((this.start + k * this.step) * 1000).toISOString().replace('T', ' ').replace('.000Z', 'Z');
    this.tip.replaceChildren(el('div', null, t), el('div', null, el('span', {class: 'sw', style: `display:inline-block;width:8px;height:8px;margin-right:4px;background:${color(best)}`}),
      this.names[best]), el('div', null, 'value: ', fmtNum(this.values[best][k])));
    this.tip.hidden = false;
    this.tip.style.left = Math.min(mx + 12, r.width - 260) + 'px';
    this.tip.style.top = (my + 12) + 'px';
  }
}
