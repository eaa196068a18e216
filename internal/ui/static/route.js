// The URL's hash is a page's state: #/page?params, a link that can be shared.

// shown is the hash the page on screen shows.
export const shown = {hash: ''};

// route reads the hash: the page and its parameters.
export function route() {
  const h = location.hash.replace(/^#\/?/, '');
  const i = h.indexOf('?');
  const name = (i < 0 ? h : h.slice(0, i)) || 'query';
  return {name, params: new URLSearchParams(i < 0 ? '' : h.slice(i + 1))};
}

// setParams replaces the hash's parameters without rendering again (the
// page already shows them).
export function setParams(params) {
  const {name} = route();
  const next = `#/${name}${params.size ? '?' + params : ''}`;
  if (location.hash !== next) {
    shown.hash = next;
    history.replaceState(null, '', next);
  }
}
