// The cardinality page: top metrics, labels and label-value pairs by
// series from /api/v1/status/tsdb; a metric drills down to its labels'
// value counts (its series, /api/v1/series), a label to its values by
// series (focusLabel).
import {api, el, errorBox, fmtNum, table} from './util.js';
import {setParams} from './route.js';

function bars(rows, total, onclick, id, header) {
  const max = Math.max(1, ...rows.map(r => r.value));
  return table([header, '#series', '% of all', ''], rows.map(r => [
    onclick ? el('a', {class: 'link', onclick: () => onclick(r.name)}, r.name) : r.name, fmtNum(r.value),
    total ? (100 * r.value / total).toFixed(1) + '%' : '', el('span', {class: 'bar', style: `width:${Math.round(200 * r.value / max)}px`})]), {id});
}

function queryLink(expr, text) {
  return el('a', {class: 'link', href: '#/query?' + new URLSearchParams({q: expr})}, text || expr);
}

export function render(main, params) {
  const limitSel = el('select', {id: 'limit'}, [10, 20, 50, 100].map(v => el('option', {value: v}, `top ${v}`)));
  limitSel.value = params.get('limit') || '10';
  const body = el('div', {id: 'cardinality'});
  main.append(el('div', {class: 'row'}, el('b', null, 'Cardinality'), limitSel), body);
  limitSel.addEventListener('change', () => show({limit: limitSel.value}));

  async function show(state) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (v && !(k === 'limit' && v === '10')) p.set(k, v);
    setParams(p);
    body.replaceChildren(el('p', {class: 'muted'}, 'loading…'));
    try {
      const limit = state.limit || limitSel.value;
      const d = await api('/api/v1/status/tsdb', {limit, focusLabel: state.label});
      const total = d.headStats.numSeries;
      const out = [el('p', null, `${fmtNum(total)} series, ${fmtNum(d.headStats.numLabelPairs)} label pairs`)];
      if (state.metric) out.push(...await metric(state.metric));
      if (state.label) {
        out.push(el('h2', null, 'Values of ', el('code', null, state.label), ' by series ', el('a', {class: 'link', onclick: () => show({limit})}, '(back)')),
          bars((d.seriesCountByFocusLabelValue || []).map(r => ({name: r.name, value: r.value})), total,
            v => { location.hash = '#/query?' + new URLSearchParams({q: `count({${state.label}=${JSON.stringify(v)}})`}); }, 'focus', state.label));
      }
      out.push(el('h2', null, 'Metrics by series'), bars(d.seriesCountByMetricName, total, m => show({limit, metric: m}), 'metrics', 'metric'),
        el('h2', null, 'Labels by distinct values'), bars(d.labelValueCountByLabelName, 0, l => show({limit, label: l}), 'labels', 'label'),
        el('h2', null, 'Label-value pairs by series'), bars(d.seriesCountByLabelValuePair, total, pair => {
          const i = pair.indexOf('=');
          location.hash = '#/query?' + new URLSearchParams({q: `count by (__name__) ({${pair.slice(0, i)}=${JSON.stringify(pair.slice(i + 1))}})`, mode: 'table'});
        }, 'pairs', 'pair'));
      body.replaceChildren(...out);
    } catch (e) {
      body.replaceChildren(errorBox(e));
    }
  }

  // metric counts a metric's series by label and distinct values.
  async function metric(name) {
    const series = await api('/api/v1/series', {'match[]': `{__name__=${JSON.stringify(name)}}`});
    const values = new Map();
    for (const s of series) for (const [k, v] of Object.entries(s)) {
      if (k === '__name__') continue;
      if (!values.has(k)) values.set(k, new Set());
      values.get(k).add(v);
    }
    const rows = [...values].map(([k, vs]) => ({name: k, value: vs.size})).sort((a, b) => b.value - a.value);
    return [el('h2', null, 'Labels of ', queryLink(name), ` (${fmtNum(series.length)} series) `, el('a', {class: 'link', onclick: () => show({limit: limitSel.value})}, '(back)')),
      table(['label', '#distinct values', 'query'], rows.map(r => [r.name, fmtNum(r.value), queryLink(`count by (${r.name}) (${name})`, `count by (${r.name})`)]), {id: 'metric-labels'})];
  }

  show({limit: limitSel.value, metric: params.get('metric'), label: params.get('label')});
}
