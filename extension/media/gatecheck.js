// Gate-check webview: renders the form from the extension's `state` messages and posts the
// user's actions back. No inline handlers; all text goes through textContent.
(function () {
  'use strict';
  const vscode = acquireVsCodeApi();
  const initial = JSON.parse(document.getElementById('initial-state').textContent);
  const FIELDS = initial.fields;
  const app = document.getElementById('app');
  let state = null;
  let answers = null;
  let confirmed = new Set();
  let editTimer = null;

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

  function sendEdit() {
    clearTimeout(editTimer);
    editTimer = setTimeout(
      () => vscode.postMessage({ type: 'edit', answers, confirmed: Array.from(confirmed) }),
      250,
    );
  }

  function setValue(id, value, fromSuggestion) {
    answers[id] = value;
    if (fromSuggestion) confirmed.add(id);
    else confirmed.delete(id);
    sendEdit();
    render();
  }

  const MARK = { ok: '✓', error: '✗', warning: '⚠', unchecked: '·' };

  function fieldBlock(f) {
    const v = state.validation.fields[f.id] || { status: 'unchecked', message: '' };
    const stale = !state.checkedCurrent;
    const block = el('div', { class: 'field', id: `field-${f.id}` });
    block.appendChild(
      el('label', { for: `input-${f.id}`, text: f.label + (f.required ? '' : ' (optional)') }),
    );
    block.appendChild(el('div', { class: 'help', text: f.help }));
    let input;
    if (f.input === 'target-kind') {
      input = el('select', { id: `input-${f.id}` }, [
        el('option', { value: 'standalone', text: 'standalone module in this project' }),
        el('option', {
          value: 'cache-dit-checkout',
          text: 'cache-dit checkout (upstream contribution)',
        }),
      ]);
      input.value = answers[f.id];
      input.addEventListener('change', () => setValue(f.id, input.value, false));
    } else {
      input = el('input', { type: 'text', id: `input-${f.id}`, spellcheck: 'false' });
      input.value = answers[f.id];
      input.addEventListener('input', () => {
        answers[f.id] = input.value;
        confirmed.delete(f.id);
        sendEdit();
        markStale();
      });
      input.addEventListener('change', () => render());
    }
    const row = el('div', {}, [input]);
    if (f.input === 'folder' || f.input === 'file') {
      const browse = el('button', {
        class: 'secondary',
        id: `browse-${f.id}`,
        text:
          f.input === 'folder' || (f.id === 'targetPath' && answers.targetKind !== 'standalone')
            ? 'Choose folder…'
            : 'Choose file…',
      });
      browse.addEventListener('click', () => vscode.postMessage({ type: 'browse', field: f.id }));
      row.appendChild(document.createTextNode(' '));
      row.appendChild(browse);
    }
    block.appendChild(row);
    for (const s of state.suggestions.filter((x) => x.field === f.id)) {
      const isSet = answers[f.id] === s.value;
      const line = el('div', {
        class: 'suggestion' + (isSet && confirmed.has(f.id) ? ' confirmed' : ''),
      });
      if (isSet && confirmed.has(f.id)) {
        line.appendChild(
          document.createTextNode(`✓ suggestion confirmed (${s.source}: ${s.reason})`),
        );
      } else {
        line.appendChild(document.createTextNode('Suggested: '));
        line.appendChild(el('code', { text: s.value }));
        line.appendChild(document.createTextNode(` — ${s.reason} (${s.source}) `));
        const use = el('button', { class: 'link use-suggestion', 'data-field': f.id, text: 'Use' });
        use.addEventListener('click', () => setValue(f.id, s.value, true));
        line.appendChild(use);
      }
      block.appendChild(line);
    }
    const status = stale && v.status !== 'unchecked' ? 'unchecked' : v.status;
    const text =
      stale && v.status !== 'unchecked'
        ? 'changed since the last check'
        : v.message || (v.status === 'unchecked' ? 'not checked yet' : v.status);
    block.appendChild(
      el('div', {
        class: `status ${status}`,
        id: `status-${f.id}`,
        text: `${MARK[status]} ${text}`,
      }),
    );
    return block;
  }

  function markStale() {
    if (state.checkedCurrent) {
      state.checkedCurrent = false;
      state.saved = false;
      const banner = document.getElementById('banner');
      if (banner) {
        banner.className = 'banner';
        banner.textContent = 'Answers changed: run the check again.';
      }
      const save = document.getElementById('save');
      if (save) save.disabled = true;
    }
  }

  function render() {
    if (!state) return;
    const focused = document.activeElement && document.activeElement.id;
    app.textContent = '';
    app.appendChild(el('h1', { text: 'Gate check' }));
    app.appendChild(
      el('p', {
        class: 'lead',
        text: 'Before anything is generated or run: where the model is, which classes and source files make it up, and where the integration goes. Prefills are suggestions — confirm each with "Use".',
      }),
    );
    let banner;
    if (state.busy) banner = el('div', { class: 'banner busy', id: 'banner', text: state.busy });
    else if (state.saved && state.checkedCurrent && state.validation.passed)
      banner = el('div', {
        class: 'banner ok',
        id: 'banner',
        text: 'Gate check passed — answers saved in .cdit/integration.json.',
      });
    else if (state.checkedCurrent && state.validation.passed)
      banner = el('div', {
        class: 'banner ok',
        id: 'banner',
        text: 'Gate check passed. Save the answers to continue.',
      });
    else if (state.checkedCurrent) {
      const n =
        Object.values(state.validation.fields).filter((x) => x.status === 'error').length +
        state.validation.general.length;
      banner = el('div', {
        class: 'banner error',
        id: 'banner',
        text: `Gate check failed: ${n} problem(s). Nothing is generated or run until it passes.`,
      });
    } else banner = el('div', { class: 'banner', id: 'banner', text: 'Not checked yet.' });
    app.appendChild(banner);
    if (!state.trusted)
      app.appendChild(
        el('div', {
          class: 'banner error',
          text: 'This workspace is not trusted: answers can be checked, but nothing will be generated or run.',
        }),
      );
    for (const g of state.validation.general)
      app.appendChild(el('div', { class: 'status error', text: `✗ ${g}` }));
    const actionsTop = el('div', { class: 'actions' });
    const useAll = el('button', { class: 'secondary', id: 'use-all', text: 'Use all suggestions' });
    useAll.disabled = state.suggestions.length === 0 || !!state.busy;
    useAll.addEventListener('click', () => {
      for (const f of FIELDS) {
        const s = state.suggestions.find((x) => x.field === f.id);
        if (s && (!answers[f.id] || answers[f.id] === s.value)) {
          answers[f.id] = s.value;
          confirmed.add(f.id);
        }
      }
      sendEdit();
      render();
    });
    actionsTop.appendChild(useAll);
    app.appendChild(actionsTop);
    for (const f of FIELDS) app.appendChild(fieldBlock(f));
    const actions = el('div', { class: 'actions' });
    const check = el('button', { id: 'check', text: 'Check' });
    check.disabled = !!state.busy;
    check.addEventListener('click', () =>
      vscode.postMessage({ type: 'check', answers, confirmed: Array.from(confirmed) }),
    );
    const save = el('button', { id: 'save', text: 'Save answers' });
    save.disabled =
      !!state.busy || !(state.checkedCurrent && state.validation.passed) || !state.trusted;
    save.addEventListener('click', () =>
      vscode.postMessage({ type: 'save', answers, confirmed: Array.from(confirmed) }),
    );
    const review = el('button', { class: 'secondary', id: 'review', text: 'Review plan →' });
    review.disabled = !state.saved;
    review.addEventListener('click', () => vscode.postMessage({ type: 'reviewPlan' }));
    actions.appendChild(check);
    actions.appendChild(save);
    actions.appendChild(review);
    app.appendChild(actions);
    if (focused) {
      const again = document.getElementById(focused);
      if (again) again.focus();
    }
  }

  window.addEventListener('message', (event) => {
    const m = event.data;
    if (!m || typeof m !== 'object') return;
    if (m.type === 'state' && m.validation && m.answers) {
      state = m;
      answers = Object.assign({}, m.answers);
      confirmed = new Set(m.confirmed || []);
      render();
    } else if (
      m.type === 'setField' &&
      state &&
      typeof m.field === 'string' &&
      typeof m.value === 'string' &&
      m.field in answers
    ) {
      setValue(m.field, m.value, false);
    }
  });
  vscode.postMessage({ type: 'ready' });
})();
