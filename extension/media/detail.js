// Phase detail webview: renders the state embedded in the page (images or waveform previews,
// metrics with the final latents, the no-cache control, the calibration, thresholds, reproduce
// command, and the tune section of a `verify --tune` run). No inline handlers; text via
// textContent. The tune plot is an SVG document the extension built (every text escaped, no
// script, no styles): it is parsed as XML, never as HTML.
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
      el('span', { class: `verdict-${s.verdict}`, id: 'verdict', text: s.verdictText }),
    ]),
  );
  app.appendChild(
    el('p', {
      class: 'lead',
      text: `Run ${s.run} · ${s.kindLabel || s.kind}${s.outputKind ? ' · ' + s.outputKind : ''}${s.verdictReason ? ' · ' + s.verdictReason : ''}`,
    }),
  );
  if (s.notExercised)
    app.appendChild(
      el('p', { class: 'callout not-exercised', id: 'not-exercised', text: s.notExercised }),
    );

  // An SVG document from the extension, parsed as XML (no HTML parsing, scripts never run);
  // null when it is not a well-formed <svg>.
  function svgNode(markup) {
    const doc = new DOMParser().parseFromString(markup, 'image/svg+xml');
    const root = doc.documentElement;
    if (!root || root.localName !== 'svg' || doc.getElementsByTagName('parsererror').length)
      return null;
    return document.importNode(root, true);
  }

  function copyBlock(id, text, target, label) {
    const block = el('div', { class: 'copy-block' }, [el('pre', { class: 'command', id, text })]);
    const button = el('button', { id: `${id}-copy`, text: label });
    button.addEventListener('click', () => vscode.postMessage({ type: 'copy', text: target }));
    block.appendChild(button);
    return block;
  }

  if (s.tune) {
    const t = s.tune;
    const section = el('section', { id: 'tune' }, [el('h2', { text: 'Tune' })]);
    section.appendChild(
      el('p', {
        class: t.recommended ? 'tune-recommendation' : 'muted',
        id: 'tune-recommendation',
        text: t.recommendation,
      }),
    );
    const plot = el('div', { class: 'tune-plot-wrap', id: 'tune-plot' });
    const svg = svgNode(t.svg);
    if (svg) plot.appendChild(svg);
    else plot.appendChild(el('p', { class: 'muted', text: 'The plot could not be drawn.' }));
    section.appendChild(plot);
    section.appendChild(
      el('p', {
        class: 'muted',
        text: 'Latency against PSNR (∞: identical to the baseline). Filled: passed its verdict; hollow: caching not exercised; crossed: failed or did not run. The line joins the Pareto front of the passing points.',
      }),
    );
    const head = [
      'Point',
      'Stage',
      'Settings',
      'Latency',
      'Compile',
      'Speedup',
      'PSNR',
      'SSIM',
      'Cached',
      'Verdict',
      'Front',
    ];
    const table = el('table', { id: 'tune-points', class: 'tune-table' }, [
      el(
        'tr',
        {},
        head.map((h) => el('th', { text: h })),
      ),
    ]);
    for (const r of t.rows) {
      let name;
      if (r.phase !== s.phase && t.phases.includes(r.phase)) {
        name = el('button', { class: 'link', text: r.phase, title: `Open ${r.phase}` });
        name.addEventListener('click', () =>
          vscode.postMessage({ type: 'openPhase', phase: r.phase }),
        );
      } else name = el('span', { text: r.phase });
      const cells = [
        el('td', {}, [name]),
        el('td', { class: 'num', text: r.stage }),
        el('td', { text: r.settings }),
        el('td', { class: 'num', text: r.latency }),
        el('td', { class: 'num', text: r.compile }),
        el('td', { class: 'num', text: r.speedup }),
        el('td', { class: 'num', text: r.psnr }),
        el('td', { class: 'num', text: r.ssim }),
        el('td', { class: 'num', text: r.cached }),
        el('td', {}, [el('span', { class: `verdict-${r.verdict}`, text: r.verdictText })]),
        el('td', { class: r.front === 'recommended' ? 'tune-recommended' : '', text: r.front }),
      ];
      const classes = [
        r.phase === s.phase ? 'current' : '',
        r.front === 'recommended' ? 'recommended' : '',
      ]
        .filter(Boolean)
        .join(' ');
      table.appendChild(el('tr', classes ? { class: classes } : {}, cells));
    }
    section.appendChild(table);
    if (t.recommended) {
      section.appendChild(el('h3', { text: `Recommended: ${t.recommended}` }));
      if (t.python) section.appendChild(copyBlock('tune-python', t.python, 'tunePython', 'Copy'));
      if (t.cli) {
        section.appendChild(
          el('p', { class: 'muted', text: 'Verify the recommendation alone from a terminal:' }),
        );
        section.appendChild(copyBlock('tune-cli', t.cli, 'tuneCli', 'Copy'));
      }
    }
    const notes = [
      ...t.notes,
      ...(t.skipped.length ? [`not run (time box): ${t.skipped.join(', ')}`] : []),
    ];
    if (notes.length) {
      const ul = el('ul', { id: 'tune-notes' });
      for (const n of notes) ul.appendChild(el('li', { text: n }));
      section.appendChild(ul);
    }
    app.appendChild(section);
  }

  const figures = el('div', { class: 'images', id: 'images' });
  const figure = (src, caption, id) => {
    if (!src) return;
    const img = el('img', { src, alt: caption, id });
    const fig = el('figure', {}, [img, el('figcaption', { text: caption })]);
    // a preview that cannot be loaded says so instead of showing a broken image
    img.addEventListener('error', () => {
      fig.replaceChild(
        el('p', {
          class: 'muted broken',
          id: `${id}-missing`,
          text: 'preview could not be loaded',
        }),
        img,
      );
    });
    figures.appendChild(fig);
  };
  figure(s.images.baseline, s.captions.baseline, 'img-baseline');
  figure(s.images.output, s.captions.output, 'img-output');
  figure(s.images.diff, s.captions.diff, 'img-diff');
  if (figures.childNodes.length) app.appendChild(figures);
  if (s.previewMessage)
    app.appendChild(el('p', { class: 'muted', id: 'no-preview', text: s.previewMessage }));

  const rows = (id, list) => {
    const table = el('table', { id });
    for (const m of list)
      table.appendChild(el('tr', {}, [el('th', { text: m.label }), el('td', { text: m.value })]));
    return table;
  };
  const table = rows('metrics', s.metrics);
  table.appendChild(
    el('tr', {}, [el('th', { text: 'Thresholds' }), el('td', { text: s.thresholds })]),
  );
  table.appendChild(
    el('tr', {}, [el('th', { text: 'Config' }), el('td', {}, [el('code', { text: s.config })])]),
  );
  app.appendChild(el('h2', { text: 'Metrics' }));
  app.appendChild(table);
  if (s.control) {
    const section = el('section', { id: 'control' }, [
      el('h2', {}, [
        'No-cache control ',
        el('span', {
          class: `verdict-${s.control.verdict}`,
          id: 'control-verdict',
          text: s.control.verdict,
        }),
      ]),
      el('p', {
        class: 'muted',
        text: 'The same integration with caching disabled must reproduce the baseline; if it does not, the integration itself changes the math and the phase fails whatever its PSNR.',
      }),
      el('p', { id: 'control-summary', text: s.control.summary }),
      rows('control-metrics', s.control.rows),
    ]);
    app.appendChild(section);
  }
  if (s.calibration) {
    app.appendChild(el('h2', { text: 'Threshold calibration' }));
    app.appendChild(rows('calibration', s.calibration));
  }
  if (s.cacheStats.length || s.notes.length) {
    app.appendChild(el('h2', { text: 'Notes' }));
    const ul = el('ul');
    for (const t of [...s.cacheStats, ...s.notes]) ul.appendChild(el('li', { text: t }));
    app.appendChild(ul);
  }
  if (s.cause) {
    app.appendChild(el('h2', { text: 'Cause' }));
    app.appendChild(el('p', { class: 'sev-error', id: 'cause', text: s.cause.title }));
    if (s.cause.explanation) app.appendChild(el('p', { text: s.cause.explanation }));
    if (s.cause.next) {
      const next = el('button', { id: 'next-step', text: s.cause.next.label });
      const action = s.cause.next.action;
      next.addEventListener('click', () => vscode.postMessage({ type: 'next', action }));
      app.appendChild(next);
    }
  }
  if (s.error) {
    app.appendChild(el('h2', { text: 'Error' }));
    app.appendChild(el('p', { class: 'sev-error', text: `${s.error.code}: ${s.error.message}` }));
    if (s.error.hint && !s.cause) app.appendChild(el('p', { text: s.error.hint }));
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
