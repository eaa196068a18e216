// The cluster page: metasrv replicas, datanodes and their leases, every
// region's owner and statistics, and the GC scheduler's runs, from
// /ui/api/cluster (metasrv's admin API); it refreshes itself.
import {api, el, errorBox, fmtBytes, fmtTime, n, table} from './util.js';

const EVERY = 5000;

function badge(text, cls) { return el('span', {class: 'badge ' + cls}, text); }

function view(d) {
  const out = [];
  const errs = d.errors || {};
  for (const [k, v] of Object.entries(errs)) out.push(errorBox(`${k}: ${v}`));
  const st = d.status;
  if (st) {
    out.push(el('h2', null, 'Metasrv'), table(['address', 'role', 'version', 'revision', 'started'],
      st.metasrvs.map(m => [m.addr, m.leader ? badge('leader', 'leader') : 'follower', m.version, String(m.revision).slice(0, 12), fmtTime(m.started_unix)]),
      {id: 'metasrvs'}));
    const builds = new Set(st.metasrvs.map(m => m.version + m.revision).concat(st.datanodes.map(x => x.version + x.revision)));
    out.push(el('h2', null, `Datanodes (${st.datanodes.length} live)`), table(['datanode', 'gRPC', 'HTTP', '#regions', 'version', 'revision', 'lease since'],
      st.datanodes.map(x => [el('b', null, x.id), x.grpc_addr, x.http_addr ? el('a', {class: 'link', href: `//${x.http_addr}/`}, x.http_addr) : '',
        n(x.regions), x.version, String(x.revision).slice(0, 12), fmtTime(x.started_unix)]), {id: 'datanodes'}));
    if (builds.size > 1) out.push(el('p', {class: 'warn'}, `mixed versions: ${builds.size} different builds are running`));
  }
  const stats = new Map();
  for (const r of (d.regions && d.regions.regions) || []) stats.set(r.placement.region, r);
  if (st) {
    out.push(el('h2', null, `Regions (${st.regions.length})`), el('div', {class: 'scroll'}, table(
      ['region', 'table', 'owner', 'owner lease', '#gen', '#epoch', '#files', '#rows', '#bytes', '#memtables', '#pending', '#removed', '#manifest', 'error'],
      st.regions.map(p => {
        const r = stats.get(p.region) || {}, s = r.stats || {};
        return [el('code', null, p.region), p.table, p.owner || el('i', null, 'unassigned'), p.owner_live ? badge('live', 'live') : badge('not live', 'dead'),
          n(p.gen), n(s.epoch), n(s.files), n(s.rows).toLocaleString('en-US'), fmtBytes(s.bytes), fmtBytes(s.memtable_bytes), n(s.pending_jobs), n(s.removed_files), n(s.manifest_version),
          el('span', {class: 'error'}, r.error || '')];
      }), {id: 'regions'})));
  }
  if (d.gc) {
    out.push(el('h2', null, 'GC scheduler'), el('div', {class: 'scroll'}, table(
      ['region', 'last fast', 'last full', 'next fast', 'next full', 'result', '#runs', '#failures', '#deleted', '#orphans', 'error'],
      d.gc.regions.map(g => [el('code', null, g.region), fmtTime(g.last_fast_unix), fmtTime(g.last_full_unix), fmtTime(g.next_fast_unix), fmtTime(g.next_full_unix),
        g.last_result, n(g.runs), n(g.failures), n(g.deleted), n(g.orphans), el('span', {class: 'error'}, g.last_error)]), {id: 'gc'})));
  }
  return out;
}

export function render(main) {
  const updated = el('span', {class: 'muted', id: 'updated'});
  const body = el('div', {id: 'cluster'});
  const pause = el('button', {onclick: () => { paused = !paused; pause.textContent = paused ? 'Resume' : 'Pause'; }}, 'Pause');
  main.append(el('div', {class: 'row'}, el('b', null, 'Cluster'), updated, pause), body);
  let paused = false, timer = null, stopped = false;
  async function load() {
    if (!paused) {
      try {
        const d = await api('/ui/api/cluster');
        if (stopped) return;
        body.replaceChildren(...view(d));
        updated.textContent = `updated ${new Date().toISOString().slice(11, 19)}Z, every ${EVERY / 1000} s`;
        body.dataset.loaded = String(Number(body.dataset.loaded || 0) + 1);
      } catch (e) {
        if (stopped) return;
        body.replaceChildren(errorBox(e));
      }
    }
    if (!stopped) timer = setTimeout(load, EVERY);
  }
  load();
  return () => { stopped = true; clearTimeout(timer); };
}
