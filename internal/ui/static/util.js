// Helpers shared by the pages: building elements, calling the node's API,
// formatting numbers and times.

// el builds an element: el('td', {class: 'num'}, 'text', child, ...).
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// table builds a table of header names and rows of cells; a header
// starting with '#' is a number column (right-aligned).
export function table(headers, rows, attrs) {
  const num = headers.map(h => h.startsWith('#'));
  return el('table', attrs,
    el('thead', null, el('tr', null, headers.map((h, i) => el('th', {class: num[i] ? 'num' : null}, num[i] ? h.slice(1) : h)))),
    el('tbody', null, rows.map(r => el('tr', null, r.map((c, i) => el('td', {class: num[i] ? 'num' : null}, c))))));
}

// APIError is a failed call, with Prometheus' error message when there is one.
export class APIError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

// api GETs path with params (arrays repeat a parameter) and returns the
// parsed JSON: a Prometheus answer's data, or the whole body otherwise.
export async function api(path, params, signal) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    for (const x of [].concat(v)) q.append(k, x);
  }
  // From the origin: a page opened as http://user:token@host/ has a URL
  // that fetch refuses to resolve paths against (it holds credentials);
  // the browser sends the credentials it was given for the page anyway.
  const url = location.origin + path + (q.size ? '?' + q : '');
  const resp = await fetch(url, {signal, headers: {Accept: 'application/json'}});
  let body;
  try { body = await resp.json(); } catch { throw new APIError(`${resp.status} ${resp.statusText}`, resp.status); }
  if (body.status === 'error') throw new APIError(body.error || 'error', resp.status);
  if (!resp.ok) throw new APIError(body.error || body.message || `${resp.status} ${resp.statusText}`, resp.status);
  return body.status === 'success' ? Object.assign(body.data, {warnings: body.warnings, infos: body.infos}) : body;
}

// n is a protojson int64 (a string) or a number, as a number.
export const n = v => Number(v || 0);

export function fmtNum(v) {
  if (typeof v !== 'number') v = Number(v);
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e15 || a < 1e-4)) return v.toExponential(3);
  return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', {maximumSignificantDigits: 6});
}

export function fmtBytes(v) {
  v = Number(v || 0);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + ' ' + units[i];
}

export function fmtTime(unixSeconds) {
  const s = Number(unixSeconds || 0);
  return s ? new Date(s * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '';
}

export function fmtDuration(seconds) {
  seconds = Number(seconds || 0);
  if (!seconds) return '';
  const units = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
  let out = '';
  for (const [u, s] of units) {
    if (seconds >= s) { out += Math.floor(seconds / s) + u; seconds %= s; }
  }
  return out;
}

// parseDuration reads a Prometheus duration ("5m", "1h30m", "90") in seconds.
export function parseDuration(s) {
  s = String(s).trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const units = {ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000};
  let total = 0, rest = s;
  const re = /^(\d+)(ms|s|m|h|d|w|y)/;
  while (rest) {
    const m = re.exec(rest);
    if (!m) return NaN;
    total += Number(m[1]) * units[m[2]];
    rest = rest.slice(m[0].length);
  }
  return total;
}

// seriesName is a series' labels as PromQL writes them.
export function seriesName(metric) {
  const name = metric.__name__ || '';
  const labels = Object.entries(metric).filter(([k]) => k !== '__name__').map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return labels.length || !name ? `${name}{${labels.join(', ')}}` : name;
}

// errorBox shows an error (and keeps the message in the DOM for tests).
export function errorBox(err) {
  return el('div', {class: 'panel error', role: 'alert'}, String(err && err.message || err));
}
