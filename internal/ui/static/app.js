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
  const page = pages[name] || pages.query;
  if (cleanup) cleanup();
  cleanup = null;
  main.replaceChildren();
  main.dataset.page = name;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  cleanup = page.render(main, params) || null;
}

window.addEventListener('hashchange', render);
render();
api('/api/v1/status/buildinfo').then(b => {
  document.getElementById('build').textContent = `version ${b.version}${b.revision ? ' (' + String(b.revision).slice(0, 12) + ')' : ''}`;
}).catch(() => {});
