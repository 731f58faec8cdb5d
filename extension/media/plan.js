// Plan review webview: renders the review model (the integration guide's TODO template filled in)
// and posts choices / approval / evidence-link clicks. No inline handlers; text via textContent.
(function () {
  'use strict';
  const vscode = acquireVsCodeApi();
  const app = document.getElementById('app');
  let state = null;
  let choices = null;

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

  function shortPath(p) {
    const parts = String(p).split('/');
    return parts.length > 3 ? '…/' + parts.slice(-2).join('/') : p;
  }

  function evidenceList(items) {
    const ul = el('ul', { class: 'evidence' });
    for (const e of items) {
      const link = el('button', { class: 'link', text: `${shortPath(e.path)}:${e.line}` });
      link.addEventListener('click', () =>
        vscode.postMessage({ type: 'open', path: e.path, line: e.line }),
      );
      ul.appendChild(el('li', {}, [link, ` ${e.message}`]));
    }
    return ul;
  }

  function itemList(items) {
    const ul = el('ul');
    for (const i of items) {
      const li = el('li', { class: i.severity ? `sev-${i.severity}` : '' }, [i.text]);
      if (i.evidence && i.evidence.length) li.appendChild(evidenceList(i.evidence));
      ul.appendChild(li);
    }
    return ul;
  }

  function checkbox(id, label, checked) {
    const box = el('input', { type: 'checkbox', id });
    box.checked = !!checked;
    box.addEventListener('change', () => {
      choices[id] = box.checked;
      send('choices');
    });
    return el('label', {}, [box, ' ' + label]);
  }

  function send(type) {
    vscode.postMessage({ type, choices });
  }

  function section(title, children) {
    return [el('h2', { text: title }), ...children];
  }

  function render() {
    app.textContent = '';
    app.appendChild(el('h1', { text: 'Integration plan' }));
    if (state.busy)
      app.appendChild(el('div', { class: 'banner busy', id: 'banner', text: state.busy }));
    for (const e of state.errors || [])
      app.appendChild(el('div', { class: 'banner error', text: e }));
    const m = state.model;
    if (!m) return;
    if (state.approval) {
      const text = state.approval.stale
        ? `Approved ${state.approval.at}, but ${state.approval.stale}: approve again.`
        : `Approved ${state.approval.at} — stored in .cdit/plan.json.`;
      app.appendChild(
        el('div', {
          class: state.approval.stale ? 'banner error' : 'banner ok',
          id: 'approval',
          text,
        }),
      );
    } else
      app.appendChild(
        el('div', {
          class: 'banner',
          id: 'approval',
          text: 'Not approved yet. Nothing is written before you approve and confirm the preview.',
        }),
      );

    if (m.blockers && m.blockers.length)
      app.appendChild(
        el('div', { class: 'banner error', id: 'blockers' }, [
          el('p', { text: 'Blockers — this plan would fail when it runs:' }),
          itemList(m.blockers),
        ]),
      );
    const head = el('table', {}, [
      el('tr', {}, [
        el('th', { text: 'Transformer' }),
        el('td', {}, [el('code', { text: m.transformerClass })]),
      ]),
      el('tr', {}, [
        el('th', { text: 'Register name' }),
        el('td', {}, [el('code', { text: m.registerName })]),
      ]),
      el('tr', {}, [el('th', { text: 'Target' }), el('td', { text: m.target })]),
    ]);
    app.appendChild(head);

    // 1. block lists and ForwardPatterns
    const table = el('table', { id: 'block-lists' }, [
      el(
        'tr',
        {},
        ['Block list', 'Block class', 'Blocks', 'ForwardPattern', 'Confidence'].map((h) =>
          el('th', { text: h }),
        ),
      ),
    ]);
    for (const b of m.blockLists) {
      let patternCell;
      if (b.options.length > 1) {
        const select = el(
          'select',
          { id: `pattern-${b.attr}` },
          b.options.map((o) => el('option', { value: o, text: o })),
        );
        select.value = choices.forwardPatterns[b.attr] || b.pattern;
        select.addEventListener('change', () => {
          choices.forwardPatterns[b.attr] = select.value;
          send('choices');
        });
        patternCell = el('td', {}, [select]);
      } else patternCell = el('td', {}, [el('code', { text: b.pattern })]);
      table.appendChild(
        el('tr', {}, [
          el('td', {}, [el('code', { text: b.attr })]),
          el('td', { text: b.blockClass }),
          el('td', {
            text: b.blockCount === null || b.blockCount === undefined ? '?' : String(b.blockCount),
          }),
          patternCell,
          el('td', { text: b.confidence.toFixed(2) }),
        ]),
      );
    }
    const blockEvidence = el('details', {}, [el('summary', { text: 'Evidence' })]);
    for (const b of m.blockLists) {
      blockEvidence.appendChild(el('div', { text: b.attr }));
      blockEvidence.appendChild(evidenceList(b.evidence));
    }
    section('1. Block lists and ForwardPatterns', [table, blockEvidence]).forEach((n) =>
      app.appendChild(n),
    );

    // 2. PatchFunctor
    const pf = [
      el('p', {
        text: m.patchFunctor.needed
          ? 'The analysis found code cache-dit cannot run as is:'
          : 'Not needed: the loops hold only the block calls.',
      }),
    ];
    if (m.patchFunctor.reasons.length) pf.push(itemList(m.patchFunctor.reasons));
    pf.push(checkbox('patchFunctor', 'generate the PatchFunctor', choices.patchFunctor));
    section('2. PatchFunctor', pf).forEach((n) => app.appendChild(n));

    // 3. has_separate_cfg
    const cfgText =
      m.separateCfg.value === null ? 'unknown (no pipeline analysed)' : String(m.separateCfg.value);
    section('3. has_separate_cfg', [
      el('p', {}, ['Analysis: ', el('code', { text: cfgText })]),
      evidenceList(m.separateCfg.evidence),
      checkbox('hasSeparateCfg', 'has_separate_cfg=True', choices.hasSeparateCfg),
    ]).forEach((n) => app.appendChild(n));

    // 4. context parallelism
    const cp = [
      el('p', {}, ['Approach: ', el('code', { text: m.cp.approach }), ` · ${m.cp.maskNote}`]),
    ];
    const hooks = el('ul', { id: 'cp-hooks' });
    for (const h of m.cp.hooks) hooks.appendChild(el('li', {}, [el('code', { text: h })]));
    cp.push(hooks);
    if (m.cp.patches.length)
      cp.push(
        el('p', { text: 'Patches the plan needs:' }),
        itemList(m.cp.patches.map((t) => ({ text: t, evidence: [] }))),
      );
    if (m.cp.warnings.length)
      cp.push(el('p', { text: 'Warnings (masks, UAA, GQA):' }), itemList(m.cp.warnings));
    cp.push(
      checkbox('cpEnabled', 'generate the context-parallel plan', choices.cpEnabled),
      el('br'),
      checkbox(
        'ulyssesAnything',
        `Ulysses Anything Attention (UAA)${m.cp.uaaRecommended ? ' — recommended' : ''}`,
        choices.ulyssesAnything,
      ),
    );
    section('4. Context parallelism (hook plan)', cp).forEach((n) => app.appendChild(n));

    // 5. tensor parallelism
    const tp = [];
    if (m.tp.strategies.length > 1) {
      const select = el(
        'select',
        { id: 'tp-strategy' },
        m.tp.strategies.map((s) => el('option', { value: s, text: s })),
      );
      select.value = choices.tpStrategy || m.tp.strategy;
      select.addEventListener('change', () => {
        choices.tpStrategy = select.value;
        send('choices');
      });
      tp.push(el('p', {}, ['Attention strategy: ', select]));
    } else
      tp.push(el('p', {}, ['Attention strategy: ', el('code', { text: m.tp.strategy || 'none' })]));
    if (m.tp.reasons.length)
      tp.push(itemList(m.tp.reasons.map((t) => ({ text: t, evidence: [] }))));
    const layers = el('details', {}, [
      el('summary', {
        text: `Layer plan (${m.tp.layers.length} layers, shard_div_attr: ${m.tp.shardDivAttrs.join(', ') || 'none'})`,
      }),
    ]);
    const lt = el('table');
    for (const [k, v] of m.tp.layers)
      lt.appendChild(
        el('tr', {}, [el('td', {}, [el('code', { text: k })]), el('td', { text: v })]),
      );
    layers.appendChild(lt);
    tp.push(layers);
    if (m.tp.warnings.length) tp.push(itemList(m.tp.warnings));
    tp.push(checkbox('tpEnabled', 'generate the tensor-parallel planner', choices.tpEnabled));
    section('5. Tensor parallelism', tp).forEach((n) => app.appendChild(n));

    // 6. TE-P / VAE-P
    section('6. Text-encoder and VAE parallelism', [
      m.components.length
        ? itemList(m.components.map((t) => ({ text: t, evidence: [] })))
        : el('p', {
            class: 'muted',
            text: 'No text encoder or VAE information (pass model_index.json in the gate check).',
          }),
    ]).forEach((n) => app.appendChild(n));

    // 7. files
    const files = el('ul', { id: 'files' });
    for (const f of m.files)
      files.appendChild(
        el('li', {}, [`${f.created ? 'create' : 'update'} `, el('code', { text: f.path })]),
      );
    if (!m.files.length) files.appendChild(el('li', { class: 'muted', text: 'no file changes' }));
    const notes = m.generatorNotes.length
      ? [
          el('p', { text: 'Left for you to review:' }),
          itemList(m.generatorNotes.map((t) => ({ text: t, evidence: [] }))),
        ]
      : [];
    section('7. Files that will be touched', [files, ...notes]).forEach((n) => app.appendChild(n));

    const actions = el('div', { class: 'actions' });
    const approve = el('button', { id: 'approve', text: 'Approve plan' });
    approve.disabled = !!state.busy || (state.errors || []).length > 0;
    approve.addEventListener('click', () => send('approve'));
    const generate = el('button', {
      class: 'secondary',
      id: 'generate',
      text: 'Generate integration…',
    });
    generate.disabled = !state.approval || !!state.approval.stale || !state.trusted;
    generate.addEventListener('click', () => vscode.postMessage({ type: 'generate' }));
    actions.appendChild(approve);
    actions.appendChild(generate);
    app.appendChild(actions);
  }

  window.addEventListener('message', (event) => {
    const msg = event.data;
    if (!msg || msg.type !== 'state') return;
    state = msg;
    if (msg.model) choices = JSON.parse(JSON.stringify(msg.model.choices));
    render();
  });
  vscode.postMessage({ type: 'ready' });
})();
