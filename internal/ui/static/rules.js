// The rules page: rule groups with their health and last evaluation, and
// the firing and pending alerts (/api/v1/rules, /api/v1/alerts).
import {api, el, errorBox, fmtNum, seriesName, table} from './util.js';

function badge(text) { return el('span', {class: 'badge ' + text}, text); }

function when(t) {
  if (!t || t.startsWith('0001-')) return 'never';
  const s = (Date.now() - Date.parse(t)) / 1000;
  return s < 120 ? `${s.toFixed(1)} s ago` : new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function render(main) {
  const body = el('div', {id: 'rules'}, el('p', {class: 'muted'}, 'loading…'));
  main.append(body);
  Promise.all([api('/api/v1/rules'), api('/api/v1/alerts')]).then(([r, a]) => {
    const out = [el('h2', null, `Alerts (${a.alerts.length} firing or pending)`)];
    out.push(a.alerts.length ? table(['alert', 'state', 'labels', 'active since', '#value'], a.alerts.map(x => [
      el('b', null, x.labels.alertname), badge(x.state), el('code', null, seriesName(Object.fromEntries(Object.entries(x.labels).filter(([k]) => k !== 'alertname')))),
      when(x.activeAt), fmtNum(parseFloat(x.value))]), {id: 'alerts'}) : el('p', {class: 'muted'}, 'No alert is firing or pending.'));
    out.push(el('h2', null, `Rule groups (${r.groups.length})`));
    if (!r.groups.length) out.push(el('p', {class: 'muted'}, 'No rule groups: load some with `strata rules load` (docs/rules.md).'));
    for (const g of r.groups) {
      out.push(el('div', {class: 'panel group'},
        el('div', {class: 'row'}, el('b', null, g.name), el('span', {class: 'muted'}, g.file), el('span', {class: 'muted'},
          `every ${g.interval}s · last evaluation ${when(g.lastEvaluation)} · took ${((g.evaluationTime || 0) * 1000).toFixed(1)} ms`)),
        table(['rule', 'type', 'health', 'state', 'last evaluation', 'error'], g.rules.map(x => [
          el('div', null, el('b', null, x.name), el('div', null, el('code', null, x.query))), x.type, badge(x.health), x.state ? badge(x.state) : '',
          when(x.lastEvaluation), el('span', {class: 'error'}, x.lastError || '')]))));
    }
    body.replaceChildren(...out);
  }).catch(e => body.replaceChildren(errorBox(e)));
}
