// The UI's entry: a router over the URL's hash (#/page?params, so a page's
// state is a link that can be shared) and the build in the header.
import {api} from './util.js';
import {route, shown} from './route.js';
import * as query from './query.js';
import * as cluster from './cluster.js';
import * as cardinality from './cardinality.js';
import * as rules from './rules.js';
import * as tables from './tables.js';

const pages = {query, cluster, cardinality, rules, tables};
const main = document.getElementById('main');
let cleanup = null;

function render() {
  if (location.hash === shown.hash && main.childElementCount) return; // setParams changed it
  shown.hash = location.hash;
  const {name, params} = route();
  const page = pages[name] || pages.query || pages.cluster;
  if (cleanup) cleanup();
  cleanup = null;
  main.replaceChildren();
  main.dataset.page = name;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  cleanup = page.render(main, params) || null;
}

// A metasrv replica serves only the pages of metasrv's admin API.
const metasrvPages = ['cluster', 'tables'];

async function start() {
  const node = await api('/ui/api/node').catch(() => ({role: 'datanode'}));
  if (node.role === 'metasrv') {
    for (const name of Object.keys(pages)) if (!metasrvPages.includes(name)) delete pages[name];
    for (const a of document.querySelectorAll('#nav a')) if (!pages[a.dataset.page]) a.remove();
    document.getElementById('build').textContent = 'metasrv';
    if (!pages[route().name]) location.hash = '#/cluster';
  } else {
    api('/api/v1/status/buildinfo').then(b => {
      document.getElementById('build').textContent = `version ${b.version}${b.revision ? ' (' + String(b.revision).slice(0, 12) + ')' : ''}`;
    }).catch(() => {});
  }
  window.addEventListener('hashchange', render);
  render();
}
start();
