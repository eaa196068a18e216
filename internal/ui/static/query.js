// The query page: a PromQL editor with completion of metric names, label
// names and label values, a range query drawn as a graph or an instant
// query as a table, and the state in the URL.
import {api, el, errorBox, fmtNum, parseDuration, seriesName, table} from './util.js';
import {Graph} from './graph.js';
import {setParams} from './route.js';

const RANGES = ['5m', '15m', '30m', '1h', '3h', '6h', '12h', '1d', '2d', '7d', '30d'];
const FUNCTIONS = ['abs', 'absent', 'absent_over_time', 'avg_over_time', 'ceil', 'changes', 'clamp', 'clamp_max', 'clamp_min',
  'count_over_time', 'day_of_month', 'day_of_week', 'delta', 'deriv', 'exp', 'floor', 'histogram_quantile', 'holt_winters', 'idelta',
  'increase', 'irate', 'label_join', 'label_replace', 'last_over_time', 'ln', 'log2', 'log10', 'max_over_time', 'min_over_time',
  'predict_linear', 'present_over_time', 'quantile_over_time', 'rate', 'resets', 'round', 'scalar', 'sort', 'sort_desc', 'sqrt',
  'stddev_over_time', 'sum_over_time', 'time', 'timestamp', 'vector'];
const AGGREGATORS = ['sum', 'avg', 'min', 'max', 'count', 'count_values', 'group', 'stddev', 'stdvar', 'topk', 'bottomk', 'quantile'];
const KEYWORDS = ['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool', 'and', 'or', 'unless'];
const MAX_TABLE_ROWS = 1000;

// Completion sources, asked once a page and kept.
const cache = new Map();
function cached(key, f) {
  if (!cache.has(key)) cache.set(key, f().catch(e => { cache.delete(key); throw e; }));
  return cache.get(key);
}
const metricNames = () => cached('names', () => api('/api/v1/label/__name__/values'));
const labelNames = metric => cached('labels ' + metric, () => api('/api/v1/labels', {'match[]': metric || undefined}));
const labelValues = (label, metric) => cached(`values ${label} ${metric}`,
  () => api(`/api/v1/label/${encodeURIComponent(label)}/values`, {'match[]': metric || undefined}));

// context is what the text before the cursor is completing: the partial
// word, and the kind of word (metric, label, value) with its metric and
// label.
export function context(pre) {
  const open = (pre.match(/{/g) || []).length > (pre.match(/}/g) || []).length;
  const selector = /([a-zA-Z_:][\w:]*)?\s*{[^{}]*$/.exec(pre);
  const metric = selector && selector[1] && !AGGREGATORS.includes(selector[1]) ? selector[1] : '';
  let m;
  if (open && (m = /([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)$/.exec(pre))) {
    return {kind: 'value', word: m[3], label: m[1], metric};
  }
  if (open && (m = /(?:^|[{,])\s*([a-zA-Z_]\w*)?$/.exec(pre.slice(pre.lastIndexOf('{'))))) {
    return {kind: 'label', word: m[1] || '', metric};
  }
  if ((m = /\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*?,\s*)?([a-zA-Z_]\w*)?$/.exec(pre))) {
    return {kind: 'label', word: m[2] || '', metric: ''};
  }
  if ((m = /(^|[^\w:"])([a-zA-Z_:][\w:]*)$/.exec(pre))) return {kind: 'metric', word: m[2]};
  return null;
}

// rank keeps the candidates that start with word, then those that hold it.
function rank(cands, word) {
  const w = word.toLowerCase();
  const starts = [], holds = [];
  for (const c of cands) {
    const l = c.text.toLowerCase();
    if (l.startsWith(w)) starts.push(c); else if (w && l.includes(w)) holds.push(c);
  }
  return starts.concat(holds).filter(c => c.text !== word).slice(0, 200);
}

async function candidates(ctx) {
  if (ctx.kind === 'value') return (await labelValues(ctx.label, ctx.metric)).map(v => ({text: v, kind: 'value'}));
  if (ctx.kind === 'label') return (await labelNames(ctx.metric)).filter(l => l !== '__name__').map(l => ({text: l, kind: 'label'}));
  const names = await metricNames().catch(() => []);
  return names.map(t => ({text: t, kind: 'metric'}))
    .concat(AGGREGATORS.map(t => ({text: t, kind: 'aggregation'})), FUNCTIONS.map(t => ({text: t, kind: 'function'})),
      KEYWORDS.map(t => ({text: t, kind: 'keyword'})));
}

// Editor is the expression's textarea with its completion list.
class Editor {
  constructor(value, onRun) {
    this.onRun = onRun;
    this.ta = el('textarea', {id: 'expr', rows: 1, spellcheck: 'false', autocomplete: 'off', placeholder: 'PromQL expression, e.g. rate(http_requests_total[5m]); Enter runs, Shift+Enter is a new line'});
    this.ta.value = value;
    this.list = el('ul', {class: 'complete', hidden: true, role: 'listbox'});
    this.box = el('div', {class: 'editor'}, this.ta, this.list);
    this.items = []; this.sel = 0; this.seq = 0;
    this.ta.addEventListener('input', () => this.update());
    this.ta.addEventListener('keydown', e => this.key(e));
    // A key's character can come after its keydown was handled (a
    // driven browser sends it apart): Enter without Shift adds no line.
    this.ta.addEventListener('beforeinput', e => {
      if ((e.inputType === 'insertLineBreak' || e.inputType === 'insertParagraph') && !this.shift) e.preventDefault();
    });
    this.ta.addEventListener('blur', () => setTimeout(() => this.close(), 150));
  }

  close() { this.seq++; this.list.hidden = true; this.items = []; } // a completion under way is dropped

  async update() {
    const seq = ++this.seq;
    const pre = this.ta.value.slice(0, this.ta.selectionStart);
    const ctx = context(pre);
    if (!ctx || (ctx.kind === 'metric' && ctx.word.length < 1)) { this.close(); return; }
    let items;
    try { items = rank(await candidates(ctx), ctx.word); } catch { items = []; }
    if (seq !== this.seq) return; // typed on meanwhile
    this.ctx = ctx; this.items = items; this.sel = 0;
    this.list.replaceChildren(...items.map((c, i) => el('li', {role: 'option', class: i ? null : 'sel',
      onmousedown: e => { e.preventDefault(); this.accept(i); }}, c.text, el('span', {class: 'kind'}, c.kind))));
    this.list.hidden = !items.length;
  }

  accept(i) {
    const c = this.items[i];
    if (!c) return;
    const pos = this.ta.selectionStart, v = this.ta.value;
    let ins = c.text;
    if (this.ctx.kind === 'value') ins = c.text.replace(/\\/g, '\\\\').replace(/"/g, '\\"') + (v[pos] === '"' ? '' : '"');
    if (c.kind === 'function' || c.kind === 'aggregation') ins += v[pos] === '(' ? '' : '(';
    const start = pos - this.ctx.word.length;
    this.ta.value = v.slice(0, start) + ins + v.slice(pos);
    this.ta.selectionStart = this.ta.selectionEnd = start + ins.length;
    this.close();
    this.ta.focus();
  }

  key(e) {
    this.shift = e.shiftKey;
    if (!this.list.hidden && this.items.length) {
      if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
        e.preventDefault();
        this.list.children[this.sel].classList.remove('sel');
        this.sel = (this.sel + (e.key === 'ArrowDown' ? 1 : this.items.length - 1)) % this.items.length;
        this.list.children[this.sel].classList.add('sel');
        this.list.children[this.sel].scrollIntoView({block: 'nearest'});
        return;
      }
      if (e.key === 'Tab' || (e.key === 'Enter' && !e.shiftKey)) { e.preventDefault(); this.accept(this.sel); return; }
      if (e.key === 'Escape') { this.close(); return; }
    }
    if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); this.close(); this.onRun(); }
  }
}

// errorPosition finds the line and column Prometheus' parser names in its
// message ("1:14: parse error: ...").
export function errorPosition(message) {
  const m = /(?:^|[\s"])(\d+):(\d+)(?:-\d+:\d+)?: parse error/.exec(message) || /(?:^|\s)(\d+):(\d+):/.exec(message);
  return m ? {line: Number(m[1]), col: Number(m[2])} : null;
}

function showError(out, err, expr) {
  const box = errorBox(err);
  const pos = errorPosition(String(err.message || err));
  if (pos) {
    const line = expr.split('\n')[pos.line - 1] ?? '';
    box.append(el('div', {class: 'caret mono', dataset: {line: pos.line, col: pos.col}},
      `${line}\n${' '.repeat(Math.max(pos.col - 1, 0))}^ line ${pos.line}, column ${pos.col}`));
  }
  out.append(box);
}

function resultTable(data) {
  const rows = [];
  const r = data.result;
  if (data.resultType === 'scalar' || data.resultType === 'string') {
    return table(['value'], [[el('span', {class: 'value'}, data.resultType === 'scalar' ? fmtNum(r[1]) : r[1])]], {id: 'result-table'});
  }
  for (const s of r.slice(0, MAX_TABLE_ROWS)) {
    const v = s.value ? el('span', {class: 'value'}, s.value[1]) : el('span', {class: 'value'}, (s.values || []).map(([t, x]) => `${x} @${t}`).join('\n'));
    rows.push([el('code', null, seriesName(s.metric)), v]);
  }
  const t = table(['series', '#value'], rows, {id: 'result-table', dataset: {series: r.length}});
  return r.length > MAX_TABLE_ROWS ? el('div', null, el('p', {class: 'warn'}, `showing ${MAX_TABLE_ROWS} of ${r.length} series`), t) : t;
}

// timeParam reads an end time: Unix seconds or a date the browser parses.
function timeParam(s) {
  if (!s) return Date.now() / 1000;
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return isNaN(t) ? Date.now() / 1000 : t / 1000;
}

export function render(main, params) {
  const state = {q: params.get('q') || '', mode: params.get('mode') || 'graph', range: params.get('range') || '1h',
    end: params.get('end') || '', step: params.get('step') || '', stack: params.get('stack') === '1'};
  let graph = null, abort = null;
  const out = el('div', {id: 'result'});
  const editor = new Editor(state.q, () => run());
  const modeSel = el('select', {id: 'mode', onchange: () => run()}, el('option', {value: 'graph'}, 'Graph (range)'), el('option', {value: 'table'}, 'Table (instant)'));
  modeSel.value = state.mode;
  const rangeSel = el('select', {id: 'range', title: 'time range', onchange: () => run()}, RANGES.map(r => el('option', {value: r}, r)));
  if (!RANGES.includes(state.range)) rangeSel.append(el('option', {value: state.range}, state.range));
  rangeSel.value = state.range;
  const endIn = el('input', {id: 'end', size: 22, placeholder: 'end: now', title: 'end time: Unix seconds or 2026-01-01T00:00:00Z; empty is now', value: state.end});
  const stepIn = el('input', {id: 'step', size: 6, placeholder: 'step: auto', title: 'resolution step (e.g. 30s, 5m); empty: range / 250', value: state.step});
  const stackBtn = el('button', {id: 'stack', class: state.stack ? 'on' : null, onclick: () => { state.stack = !state.stack; stackBtn.classList.toggle('on', state.stack); stackBtn.textContent = state.stack ? 'Stacked' : 'Lines'; run(); }},
    state.stack ? 'Stacked' : 'Lines');
  const runBtn = el('button', {id: 'run', class: 'primary', onclick: () => run()}, 'Run');
  main.append(el('div', {class: 'panel'},
    el('div', {class: 'row'}, editor.box, runBtn),
    el('div', {class: 'row', style: 'margin-top:8px'}, modeSel, 'range', rangeSel, endIn, stepIn, stackBtn)), el('div', {class: 'panel'}, out));

  async function run() {
    const expr = editor.ta.value.trim();
    state.q = expr; state.mode = modeSel.value; state.range = rangeSel.value; state.end = endIn.value.trim(); state.step = stepIn.value.trim();
    const p = new URLSearchParams();
    if (expr) p.set('q', expr);
    if (state.mode !== 'graph') p.set('mode', state.mode);
    if (state.range !== '1h') p.set('range', state.range);
    if (state.end) p.set('end', state.end);
    if (state.step) p.set('step', state.step);
    if (state.stack) p.set('stack', '1');
    setParams(p);
    editor.close();
    if (graph) { graph.destroy(); graph = null; }
    if (abort) abort.abort();
    out.replaceChildren();
    if (!expr) return;
    abort = new AbortController();
    const began = performance.now();
    const end = timeParam(state.end), range = parseDuration(state.range) || 3600;
    const start = end - range;
    let step = parseDuration(state.step);
    if (!(step > 0)) step = Math.max(1, Math.round(range / 250));
    const stats = el('div', {class: 'stats', id: 'stats'}, 'running…');
    out.append(stats);
    let data;
    try {
      data = state.mode === 'table'
        ? await api('/api/v1/query', {query: expr, time: end.toFixed(3), stats: 'all'}, abort.signal)
        : await api('/api/v1/query_range', {query: expr, start: start.toFixed(3), end: end.toFixed(3), step, stats: 'all'}, abort.signal);
    } catch (e) {
      if (e.name === 'AbortError') return;
      stats.textContent = `failed after ${Math.round(performance.now() - began)} ms`;
      showError(out, e, expr);
      return;
    }
    const queryMs = performance.now() - began;
    const r = data.result;
    const series = Array.isArray(r) && data.resultType !== 'scalar' && data.resultType !== 'string' ? r.length : 1;
    let points = 0;
    if (data.resultType === 'matrix') for (const s of r) points += (s.values || []).length;
    for (const w of [].concat(data.warnings || [], data.infos || [])) out.append(el('div', {class: 'warn'}, 'warning: ' + w));
    if (data.resultType === 'matrix' && state.mode === 'graph') {
      graph = new Graph(out, r, {start, end, step, stacked: state.stack});
    } else {
      out.append(resultTable(data));
    }
    const renderMs = performance.now() - began - queryMs;
    stats.dataset.queryMs = queryMs.toFixed(0);
    stats.dataset.renderMs = renderMs.toFixed(0);
    stats.dataset.sinceNavigationMs = performance.now().toFixed(0); // from the page's navigation start
    const read = data.stats && data.stats.samples ? data.stats.samples.totalQueryableSamples : undefined;
    if (read !== undefined) stats.dataset.samplesRead = String(read);
    stats.textContent = `query ${queryMs.toFixed(0)} ms · render ${renderMs.toFixed(0)} ms · ${series} series` +
      (data.resultType === 'matrix' ? ` · ${points} points · step ${step}s` : '') +
      (read !== undefined ? ` · ${read} samples read` : '') + ` · ${data.resultType}`;
  }
  if (state.q) run(); else editor.ta.focus();
  return () => { if (abort) abort.abort(); if (graph) graph.destroy(); };
}
