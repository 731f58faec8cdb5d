// Phase detail webview: renders the state embedded in the page (images, metrics, thresholds,
// reproduce command). No inline handlers; text via textContent.
(function () {
  'use strict';
  const vscode = acquireVsCodeApi();
  const s = JSON.parse(document.getElementById('initial-state').textContent);
  const app = document.getElementById('app');

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') node.textContent = v;
      else if (k === 'class') node.className = v;
      else node.setAttribute(k, v);
    }
    for (const c of children || [])
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    return node;
  }

  if (s.missing) {
    app.appendChild(el('p', { text: `Phase ${s.missing} is not in this run.` }));
    return;
  }
  app.appendChild(
    el('h1', {}, [
      `${s.phase} `,
      el('span', { class: `verdict-${s.verdict}`, id: 'verdict', text: s.verdict }),
    ]),
  );
  app.appendChild(
    el('p', {
      class: 'lead',
      text: `Run ${s.run} · ${s.kind}${s.verdictReason ? ' · ' + s.verdictReason : ''}`,
    }),
  );

  const figures = el('div', { class: 'images', id: 'images' });
  const figure = (src, caption, id) => {
    if (!src) return;
    figures.appendChild(
      el('figure', {}, [el('img', { src, alt: caption, id }), el('figcaption', { text: caption })]),
    );
  };
  figure(s.images.baseline, 'baseline', 'img-baseline');
  figure(s.images.output, s.phase, 'img-output');
  figure(s.images.diff, 'difference (amplified to the largest error)', 'img-diff');
  if (figures.childNodes.length) app.appendChild(figures);
  else app.appendChild(el('p', { class: 'muted', text: 'No images for this phase.' }));

  const table = el('table', { id: 'metrics' });
  for (const m of s.metrics)
    table.appendChild(el('tr', {}, [el('th', { text: m.label }), el('td', { text: m.value })]));
  table.appendChild(
    el('tr', {}, [el('th', { text: 'Thresholds' }), el('td', { text: s.thresholds })]),
  );
  table.appendChild(
    el('tr', {}, [el('th', { text: 'Config' }), el('td', {}, [el('code', { text: s.config })])]),
  );
  app.appendChild(el('h2', { text: 'Metrics' }));
  app.appendChild(table);
  if (s.cacheStats.length || s.notes.length) {
    app.appendChild(el('h2', { text: 'Notes' }));
    const ul = el('ul');
    for (const t of [...s.cacheStats, ...s.notes]) ul.appendChild(el('li', { text: t }));
    app.appendChild(ul);
  }
  if (s.error) {
    app.appendChild(el('h2', { text: 'Error' }));
    app.appendChild(el('p', { class: 'sev-error', text: `${s.error.code}: ${s.error.message}` }));
    if (s.error.hint) app.appendChild(el('p', { text: s.error.hint }));
    if (s.error.traceback)
      app.appendChild(el('pre', { class: 'command', text: s.error.traceback }));
  }
  app.appendChild(el('h2', { text: 'Reproduce from a terminal' }));
  if (s.command) {
    app.appendChild(el('pre', { class: 'command', id: 'command', text: s.command }));
    const copy = el('button', { id: 'copy', text: 'Copy command' });
    copy.addEventListener('click', () => vscode.postMessage({ type: 'copy', text: 'reproduce' }));
    app.appendChild(copy);
  } else app.appendChild(el('p', { class: 'muted', text: 'This run has no request.json.' }));
  const folder = el('button', {
    class: 'secondary',
    id: 'open-folder',
    text: 'Reveal output folder',
  });
  folder.addEventListener('click', () => vscode.postMessage({ type: 'openFolder' }));
  app.appendChild(folder);
  vscode.postMessage({ type: 'ready' });
})();
