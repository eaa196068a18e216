// The tables page: each table's schema, TTL, compaction window, regions
// (and partition tag), rows and bytes, from /ui/api/tables (metasrv's ListTables and
// ListRegions).
import {api, el, errorBox, fmtBytes, fmtDuration, fmtTime, n, table} from './util.js';

export function render(main) {
  const body = el('div', {id: 'tables'}, el('p', {class: 'muted'}, 'loading…'));
  main.append(body);
  api('/ui/api/tables').then(d => {
    const out = [];
    for (const [k, v] of Object.entries(d.errors || {})) out.push(errorBox(`${k}: ${v}`));
    const byTable = new Map();
    for (const r of (d.regions && d.regions.regions) || []) {
      if (!byTable.has(r.placement.table)) byTable.set(r.placement.table, []);
      byTable.get(r.placement.table).push(r);
    }
    const tables = (d.tables && d.tables.tables) || [];
    tables.sort((a, b) => a.name.localeCompare(b.name));
    const sum = (rs, f) => rs.reduce((a, r) => a + n(r.stats && r.stats[f]), 0);
    out.push(table(['table', '#id', '#regions', 'TTL', 'compaction window', '#columns', '#rows in files', '#bytes in files', '#memtables', 'created'], tables.map(t => {
      const rs = byTable.get(t.name) || [];
      return [el('a', {class: 'link', href: '#t-' + t.name}, t.name), t.id, t.logical ? el('i', null, 'logical, in __lines') : t.partition_by ? `${t.regions}, by ${t.partition_by}` : t.regions, fmtDuration(t.ttl_seconds) || 'forever',
        fmtDuration(t.compaction_window_seconds) || 'inferred', t.columns.length, t.logical ? '' : sum(rs, 'rows').toLocaleString('en-US'),
        t.logical ? '' : fmtBytes(sum(rs, 'bytes')), t.logical ? '' : fmtBytes(sum(rs, 'memtable_bytes')), fmtTime(t.created_at_unix)];
    }), {id: 'table-list'}));
    for (const t of tables) {
      const rs = byTable.get(t.name) || [];
      out.push(el('details', {id: 't-' + t.name, class: 'panel'}, el('summary', null, el('b', null, t.name), ` — ${t.columns.length} columns` + (t.logical ? ', logical (rows in __lines)' : `, ${rs.length} region${rs.length === 1 ? '' : 's'}`)),
        el('h2', null, 'Schema'), table(['column', 'role', 'type'], t.columns.map(c => [c.name, c.role, c.type])),
        rs.length ? [el('h2', null, 'Regions'), table(['region', 'owner', '#files', '#rows', '#bytes', '#memtable', '#pending', '#epoch', 'min time', 'max time'], rs.map(r => {
          const s = r.stats || {};
          return [r.placement.region, r.placement.owner, n(s.files), n(s.rows).toLocaleString('en-US'), fmtBytes(s.bytes), fmtBytes(s.memtable_bytes), n(s.pending_jobs), n(s.epoch),
            s.min_ts && n(s.max_ts) ? new Date(n(s.min_ts) / 1e6).toISOString() : '', s.max_ts && n(s.max_ts) ? new Date(n(s.max_ts) / 1e6).toISOString() : ''];
        }))] : null));
    }
    body.replaceChildren(...out);
  }).catch(e => body.replaceChildren(errorBox(e)));
}
