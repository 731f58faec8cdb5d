// Gate-check webview: renders the form from the extension's `state` messages and posts the
// user's actions back. No inline handlers; all text goes through textContent.
//
// The DOM is never rebuilt under the pointer while the user types: typing updates the field's
// own suggestion lines (or a call-argument row's status) in place, and a `change` — the blur
// when the user clicks "Check" — re-renders nothing, so that click lands on the button it was
// aimed at. Full renders happen on the extension's `state` messages and after clicks (Use, Add,
// Remove).
(function () {
  'use strict';
  const vscode = acquireVsCodeApi();
  const initial = JSON.parse(document.getElementById('initial-state').textContent);
  const FIELDS = initial.fields;
  const app = document.getElementById('app');
  let state = null;
  let answers = null;
  let confirmed = new Set();
  // pipeline call arguments: { args: [{name, value}], inputs: [{name, path}] }
  let call = { args: [], inputs: [] };
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

  // answers sent to the extension so far; every state echoes the count it has applied, and a
  // state that has not seen the latest answers sent keeps the webview's own
  let sent = 0;

  function message(type) {
    sent += 1;
    return { type, answers, confirmed: Array.from(confirmed), call, seq: sent };
  }

  function sendEdit() {
    clearTimeout(editTimer);
    editTimer = setTimeout(() => {
      editTimer = null;
      vscode.postMessage(message('edit'));
    }, 250);
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
        refreshSuggestions(f);
      });
      // no re-render on `change`: it fires on the blur of a click elsewhere (issue 17, item 5)
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
    const lines = el('div', { id: `suggestions-${f.id}` });
    fillSuggestions(f, lines);
    block.appendChild(lines);
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
    if (!stale && v.fixes && v.fixes.length) {
      const fixes = el('div', { class: 'fixes', id: `fixes-${f.id}` });
      v.fixes.forEach((fix, index) => {
        const button = el('button', { class: 'secondary fix', text: fix.label });
        button.addEventListener('click', () =>
          vscode.postMessage({ type: 'fix', field: f.id, index }),
        );
        fixes.appendChild(button);
      });
      block.appendChild(fixes);
    }
    return block;
  }

  function fillSuggestions(f, box) {
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
      box.appendChild(line);
    }
  }

  /** The field's suggestion lines after typing, replaced in place (nothing else is rebuilt). */
  function refreshSuggestions(f) {
    const box = document.getElementById(`suggestions-${f.id}`);
    if (!box) return;
    box.textContent = '';
    fillSuggestions(f, box);
  }

  // --- pipeline call arguments ------------------------------------------------------------------

  function rowStatus(kind, i) {
    const v = (state.call && state.call.validation && state.call.validation[kind][i]) || null;
    if (!state.checkedCurrent || !v)
      return {
        status: 'unchecked',
        text: state.checkedCurrent ? 'not checked yet' : 'changed since the last check',
      };
    return { status: v.status, text: v.message || v.status };
  }

  function statusLine(id, kind, i) {
    const r = rowStatus(kind, i);
    return el('div', {
      class: `status ${r.status} call-status`,
      id,
      text: `${MARK[r.status]} ${r.text}`,
    });
  }

  function rowEdited(statusId) {
    sendEdit();
    markStale();
    const line = document.getElementById(statusId);
    if (line) {
      line.className = 'status unchecked call-status';
      line.textContent = `${MARK.unchecked} changed since the last check`;
    }
  }

  function rowsChanged() {
    state.checkedCurrent = false;
    state.saved = false;
    sendEdit();
    render();
  }

  function callSection() {
    const c = state.call;
    if (!c) return null;
    const sec = el('section', { class: 'call-args', id: 'call-args' });
    sec.appendChild(el('h2', { text: 'Pipeline call arguments' }));
    const sig = c.signature;
    sec.appendChild(
      el('p', {
        class: 'help',
        id: 'call-signature',
        text: sig
          ? `Checked against ${sig.className}.__call__` +
            (sig.definedIn !== sig.className ? ` (inherited from ${sig.definedIn})` : '') +
            ` at ${sig.where}` +
            (sig.acceptsVarKeyword
              ? ` — it takes **${sig.varKeyword}, so any name is passed.`
              : '.')
          : c.note || 'The pipeline signature is not known yet.',
      }),
    );
    if (sig && c.note) sec.appendChild(el('p', { class: 'status warning', text: `⚠ ${c.note}` }));
    sec.appendChild(
      el('p', {
        class: 'help',
        text:
          'Passed to the pipeline on every verification run (smoke, all, phase, tune); values are JSON (49, 2.5, false, "text"). ' +
          `The runtime itself passes ${c.supplied.join(', ')}. Saved with the answers; a row wins over the cdit.callArgs / cdit.inputs settings of the same name.`,
      }),
    );
    if (sig) {
      const list = el('datalist', { id: 'call-param-names' });
      for (const n of sig.names) list.appendChild(el('option', { value: n }));
      sec.appendChild(list);
    }
    const base = [
      ...Object.entries(c.base.callArgs || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`),
      ...Object.entries(c.base.inputs || {}).map(([k, v]) => `${k} ← ${v}`),
    ];
    if (base.length)
      sec.appendChild(
        el('p', { class: 'help', id: 'call-base', text: `From settings: ${base.join(', ')}` }),
      );

    sec.appendChild(el('h3', { text: 'Arguments' }));
    call.args.forEach((row, i) => {
      const line = el('div', { class: 'call-row', id: `callarg-row-${i}` });
      const name = el('input', {
        type: 'text',
        class: 'call-name',
        id: `callarg-name-${i}`,
        placeholder: 'name',
        spellcheck: 'false',
        'aria-label': 'argument name',
      });
      if (sig) name.setAttribute('list', 'call-param-names');
      name.value = row.name;
      name.addEventListener('input', () => {
        row.name = name.value;
        rowEdited(`callarg-status-${i}`);
      });
      const value = el('input', {
        type: 'text',
        class: 'call-value',
        id: `callarg-value-${i}`,
        placeholder: 'JSON value, e.g. 49, false, "text"',
        spellcheck: 'false',
        'aria-label': `value of ${row.name || 'the argument'} (JSON)`,
      });
      value.value = row.value;
      value.addEventListener('input', () => {
        row.value = value.value;
        rowEdited(`callarg-status-${i}`);
      });
      const remove = el('button', {
        class: 'secondary',
        id: `callarg-remove-${i}`,
        text: 'Remove',
      });
      remove.addEventListener('click', () => {
        call.args.splice(i, 1);
        rowsChanged();
      });
      line.appendChild(name);
      line.appendChild(document.createTextNode(' = '));
      line.appendChild(value);
      line.appendChild(document.createTextNode(' '));
      line.appendChild(remove);
      sec.appendChild(line);
      sec.appendChild(statusLine(`callarg-status-${i}`, 'args', i));
    });
    const addArg = el('button', { class: 'secondary', id: 'callarg-add', text: 'Add argument' });
    addArg.addEventListener('click', () => {
      call.args.push({ name: '', value: '' });
      rowsChanged();
      const focus = document.getElementById(`callarg-name-${call.args.length - 1}`);
      if (focus) focus.focus();
    });
    sec.appendChild(el('div', { class: 'actions' }, [addArg]));

    sec.appendChild(el('h3', { text: 'File inputs' }));
    call.inputs.forEach((row, i) => {
      const line = el('div', { class: 'call-row', id: `callinput-row-${i}` });
      const name = el('input', {
        type: 'text',
        class: 'call-name',
        id: `callinput-name-${i}`,
        placeholder: 'name',
        spellcheck: 'false',
        'aria-label': 'input name',
      });
      if (sig) name.setAttribute('list', 'call-param-names');
      name.value = row.name;
      name.addEventListener('input', () => {
        row.name = name.value;
        rowEdited(`callinput-status-${i}`);
      });
      const file = el('input', {
        type: 'text',
        class: 'call-value',
        id: `callinput-path-${i}`,
        placeholder: 'file (relative to the workspace): .png .mp4 .wav .npy …',
        spellcheck: 'false',
        'aria-label': `file loaded into ${row.name || 'the argument'}`,
      });
      file.value = row.path;
      file.addEventListener('input', () => {
        row.path = file.value;
        rowEdited(`callinput-status-${i}`);
      });
      const browse = el('button', {
        class: 'secondary',
        id: `callinput-browse-${i}`,
        text: 'Choose file…',
      });
      browse.addEventListener('click', () => vscode.postMessage({ type: 'browseInput', index: i }));
      const remove = el('button', {
        class: 'secondary',
        id: `callinput-remove-${i}`,
        text: 'Remove',
      });
      remove.addEventListener('click', () => {
        call.inputs.splice(i, 1);
        rowsChanged();
      });
      line.appendChild(name);
      line.appendChild(document.createTextNode(' ← '));
      line.appendChild(file);
      line.appendChild(document.createTextNode(' '));
      line.appendChild(browse);
      line.appendChild(document.createTextNode(' '));
      line.appendChild(remove);
      sec.appendChild(line);
      sec.appendChild(statusLine(`callinput-status-${i}`, 'inputs', i));
    });
    const addInput = el('button', {
      class: 'secondary',
      id: 'callinput-add',
      text: 'Add file input',
    });
    addInput.addEventListener('click', () => {
      call.inputs.push({ name: '', path: '' });
      rowsChanged();
    });
    sec.appendChild(el('div', { class: 'actions' }, [addInput]));

    const hints = c.hints || [];
    if (hints.length) {
      sec.appendChild(el('h3', { text: 'From the signature' }));
      for (const h of hints) {
        const line = el('div', { class: 'suggestion call-hint', id: `callhint-${h.name}` });
        line.appendChild(el('code', { text: h.value ? `${h.name} = ${h.value}` : h.name }));
        line.appendChild(document.createTextNode(` — ${h.reason} `));
        const add = el('button', { class: 'link', id: `callhint-add-${h.name}`, text: 'Add' });
        add.addEventListener('click', () => {
          if (h.kind === 'input') call.inputs.push({ name: h.name, path: '' });
          else call.args.push({ name: h.name, value: h.value });
          rowsChanged();
        });
        line.appendChild(add);
        sec.appendChild(line);
      }
    }
    if (state.checkedCurrent) {
      for (const g of c.validation.general)
        sec.appendChild(el('div', { class: 'status error', text: `✗ ${g}` }));
      for (const w of c.validation.warnings)
        sec.appendChild(el('div', { class: 'status warning', text: `⚠ ${w}` }));
    }
    return sec;
  }

  function callErrors() {
    const v = state.call && state.call.validation;
    if (!v) return 0;
    return [...v.args, ...v.inputs].filter((x) => x.status === 'error').length + v.general.length;
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
    const active = document.activeElement;
    const focused = active && active.id;
    // where the caret is in the field being typed in: a re-render keeps it there
    const caret =
      active && typeof active.selectionStart === 'number'
        ? [active.selectionStart, active.selectionEnd]
        : null;
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
        state.validation.general.length +
        callErrors();
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
    const section = callSection();
    if (section) app.appendChild(section);
    const actions = el('div', { class: 'actions' });
    const check = el('button', { id: 'check', text: 'Check' });
    check.disabled = !!state.busy;
    check.addEventListener('click', () => {
      clearTimeout(editTimer);
      editTimer = null;
      vscode.postMessage(message('check'));
    });
    const save = el('button', { id: 'save', text: 'Save answers' });
    save.disabled =
      !!state.busy || !(state.checkedCurrent && state.validation.passed) || !state.trusted;
    save.addEventListener('click', () => {
      clearTimeout(editTimer);
      editTimer = null;
      vscode.postMessage(message('save'));
    });
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
      if (again && caret && typeof again.setSelectionRange === 'function')
        again.setSelectionRange(caret[0], caret[1]);
    }
  }

  window.addEventListener('message', (event) => {
    const m = event.data;
    if (!m || typeof m !== 'object') return;
    if (m.type === 'state' && m.validation && m.answers) {
      state = m;
      // an edit not yet sent (typing, "Use all suggestions") is newer than the extension's copy
      // of the answers: keep it; it reaches the extension when the timer fires
      const current = typeof m.seq !== 'number' || m.seq >= sent;
      if ((editTimer === null && current) || answers === null) {
        answers = Object.assign({}, m.answers);
        confirmed = new Set(m.confirmed || []);
        const rows = (m.call && m.call.rows) || { args: [], inputs: [] };
        call = {
          args: rows.args.map((r) => ({ name: r.name, value: r.value })),
          inputs: rows.inputs.map((r) => ({ name: r.name, path: r.path })),
        };
      }
      render();
    } else if (
      m.type === 'setInputPath' &&
      state &&
      Number.isInteger(m.index) &&
      typeof m.value === 'string' &&
      call.inputs[m.index]
    ) {
      // the chosen file goes into its row in place (no re-render)
      call.inputs[m.index].path = m.value;
      const input = document.getElementById(`callinput-path-${m.index}`);
      if (input) input.value = m.value;
      rowEdited(`callinput-status-${m.index}`);
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
