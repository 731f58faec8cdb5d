/**
 * The gate-check page script (extension/media/gatecheck.js) run against a minimal fake DOM: the
 * form is not rebuilt under the pointer while the user types (the first click on Check after
 * typing must land: issue 17, item 5), and the "Pipeline call arguments" rows are edited in
 * place, added and removed, and sent with the check.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import * as vm from 'node:vm';
import { EMPTY_ANSWERS, FIELDS } from '../../src/gatecheck/answers';
import { emptyCallValidation, type CallRows } from '../../src/gatecheck/callArgs';
import { ROOT } from './helpers';

type Listener = (event: { type: string; target: FakeElement; data?: unknown }) => void;

class FakeText {
  parent: FakeElement | undefined;
  constructor(readonly data: string) {}
  get textContent(): string {
    return this.data;
  }
}

class FakeElement {
  parent: FakeElement | undefined;
  children: (FakeElement | FakeText)[] = [];
  attrs = new Map<string, string>();
  className = '';
  value = '';
  disabled = false;
  private readonly listeners = new Map<string, Listener[]>();
  constructor(
    readonly tagName: string,
    private readonly doc: FakeDocument,
  ) {}
  get id(): string {
    return this.attrs.get('id') ?? '';
  }
  setAttribute(k: string, v: unknown): void {
    this.attrs.set(k, String(v));
  }
  getAttribute(k: string): string | null {
    return this.attrs.get(k) ?? null;
  }
  appendChild<T extends FakeElement | FakeText>(c: T): T {
    c.parent = this;
    this.children.push(c);
    return c;
  }
  get textContent(): string {
    return this.children.map((c) => c.textContent).join('');
  }
  set textContent(v: string) {
    for (const c of this.children) c.parent = undefined;
    this.children = v ? [new FakeText(v)] : [];
  }
  addEventListener(type: string, fn: Listener): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), fn]);
  }
  dispatch(type: string): void {
    for (const fn of this.listeners.get(type) ?? []) fn({ type, target: this });
  }
  focus(): void {
    this.doc.activeElement = this;
  }
  get connected(): boolean {
    let node: FakeElement | undefined = this.parent;
    while (node && node !== this.doc.body) node = node.parent;
    return node === this.doc.body;
  }
  /** what a user types: the value, then an `input` event */
  type(text: string): void {
    this.focus();
    this.value = text;
    this.dispatch('input');
  }
  /** a click elsewhere: the `change` (blur) of the focused field comes first */
  click(): void {
    const focused = this.doc.activeElement;
    if (focused && focused !== this) focused.dispatch('change');
    // a detached node is not under the pointer any more: the browser drops the click
    if (!this.connected) return;
    this.focus();
    this.dispatch('click');
  }
}

class FakeDocument {
  body = new FakeElement('body', this);
  activeElement: FakeElement | null = null;
  createElement(tag: string): FakeElement {
    return new FakeElement(tag, this);
  }
  createTextNode(text: string): FakeText {
    return new FakeText(text);
  }
  getElementById(id: string): FakeElement | null {
    const stack: (FakeElement | FakeText)[] = [this.body];
    while (stack.length) {
      const n = stack.pop();
      if (n instanceof FakeElement) {
        if (n.id === id) return n;
        stack.push(...n.children);
      }
    }
    return null;
  }
}

function page(): {
  doc: FakeDocument;
  posted: Record<string, unknown>[];
  send: (m: unknown) => void;
  $: (id: string) => FakeElement;
  flush: () => void;
} {
  const doc = new FakeDocument();
  const initial = doc.createElement('script');
  initial.setAttribute('id', 'initial-state');
  initial.textContent = JSON.stringify({ fields: FIELDS });
  const app = doc.createElement('main');
  app.setAttribute('id', 'app');
  doc.body.appendChild(initial);
  doc.body.appendChild(app);
  const posted: Record<string, unknown>[] = [];
  const messageListeners: ((e: { data: unknown }) => void)[] = [];
  const timers: (() => void)[] = [];
  const context = vm.createContext({
    document: doc,
    window: {
      addEventListener: (type: string, fn: (e: { data: unknown }) => void) => {
        if (type === 'message') messageListeners.push(fn);
      },
    },
    acquireVsCodeApi: () => ({
      postMessage: (m: unknown) =>
        posted.push(JSON.parse(JSON.stringify(m)) as Record<string, unknown>),
    }),
    setTimeout: (fn: () => void) => timers.push(fn),
    clearTimeout: () => undefined,
  });
  vm.runInContext(
    fs.readFileSync(path.join(ROOT, 'extension', 'media', 'gatecheck.js'), 'utf8'),
    context,
  );
  return {
    doc,
    posted,
    send: (m) => {
      for (const fn of messageListeners) fn({ data: m });
    },
    $: (id) => {
      const found = doc.getElementById(id);
      assert.ok(found, `#${id} is on the page`);
      return found;
    },
    flush: () => {
      for (const fn of timers.splice(0)) fn();
    },
  };
}

function state(call: CallRows, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const fields: Record<string, { status: string; message: string }> = {};
  for (const f of FIELDS) fields[f.id] = { status: 'unchecked', message: '' };
  return {
    type: 'state',
    answers: { ...EMPTY_ANSWERS, transformerSource: 'models/demo.py' },
    confirmed: [],
    suggestions: [
      {
        field: 'transformerSource',
        value: 'models/demo.py',
        source: 'open file',
        reason: 'the open file defines Demo',
      },
    ],
    validation: { fields, general: [], passed: false },
    checkedCurrent: false,
    busy: '',
    saved: false,
    root: '/ws',
    trusted: true,
    call: {
      rows: call,
      validation: emptyCallValidation(call),
      hints: [
        {
          name: 'frames',
          value: '81',
          kind: 'arg',
          role: 'frames',
          reason: 'frames: pipeline default 81',
        },
      ],
      note: '',
      signature: {
        className: 'DemoPipeline',
        definedIn: 'DemoPipeline',
        where: 'pipelines/demo.py:10',
        acceptsVarKeyword: false,
        varKeyword: null,
        names: ['prompt', 'frames', 'use_resolution_binning'],
      },
      supplied: ['prompt', 'height', 'width'],
      base: { callArgs: {}, inputs: {} },
    },
    ...extra,
  };
}

describe('gate-check page', () => {
  it('the first click on Check after typing lands (no re-render on change)', () => {
    const p = page();
    p.send(state({ args: [], inputs: [] }));
    assert.equal(p.posted[0]?.type, 'ready');
    const check = p.$('check');
    p.$('input-localPath').type('tiny-model');
    p.$('input-pipelineClass').type('DemoPipeline');
    check.click();
    assert.ok(check.connected, 'the Check button was rebuilt under the pointer');
    const sent = p.posted.at(-1);
    assert.equal(sent?.type, 'check');
    assert.deepEqual(
      { ...(sent?.answers as object) },
      {
        ...EMPTY_ANSWERS,
        transformerSource: 'models/demo.py',
        localPath: 'tiny-model',
        pipelineClass: 'DemoPipeline',
      },
    );
  });

  it('a state message arriving before a pending edit is sent does not undo the edit', () => {
    const p = page();
    p.send(state({ args: [], inputs: [] }));
    p.$('input-localPath').type('tiny-model');
    // the extension answers something else (its copy predates the typing) before the timer fires
    p.send(state({ args: [], inputs: [] }));
    assert.equal(p.$('input-localPath').value, 'tiny-model');
    p.flush();
    const sent = p.posted.at(-1);
    assert.equal(sent?.type, 'edit');
    assert.equal((sent?.answers as Record<string, string>).localPath, 'tiny-model');
    // once sent, the extension's state is the truth again
    p.send(state({ args: [], inputs: [] }));
    assert.equal(p.$('input-localPath').value, '');
  });

  it('typing updates the field suggestion line in place', () => {
    const p = page();
    p.send(state({ args: [], inputs: [] }));
    p.$('input-transformerSource').type('models/other.py');
    p.$('input-transformerSource').dispatch('change');
    assert.match(p.$('suggestions-transformerSource').textContent, /Suggested: models\/demo\.py/);
    // the Use button still works and confirms the suggestion
    const box = p.$('suggestions-transformerSource');
    const use = box.children[0] instanceof FakeElement ? box.children[0].children.at(-1) : null;
    assert.ok(use instanceof FakeElement);
    use.click();
    assert.equal(p.$('input-transformerSource').value, 'models/demo.py');
    assert.match(p.$('suggestions-transformerSource').textContent, /✓ suggestion confirmed/);
  });

  it('call-argument rows: edited in place, added from a hint, removed, sent with the check', () => {
    const p = page();
    p.send(state({ args: [{ name: 'frames', value: '' }], inputs: [{ name: 'image', path: '' }] }));
    assert.match(
      p.$('call-signature').textContent,
      /DemoPipeline\.__call__ at pipelines\/demo\.py:10/,
    );
    const check = p.$('check');
    const value = p.$('callarg-value-0');
    value.type('9');
    assert.ok(value.connected && check.connected);
    assert.match(p.$('callarg-status-0').textContent, /changed since the last check/);
    p.flush(); // the debounced edit
    assert.deepEqual(p.posted.at(-1)?.call, {
      args: [{ name: 'frames', value: '9' }],
      inputs: [{ name: 'image', path: '' }],
    });
    // the extension's file dialog answer goes into the row without a re-render
    p.send({ type: 'setInputPath', index: 0, value: 'inputs/cat.png' });
    assert.equal(p.$('callinput-path-0').value, 'inputs/cat.png');
    assert.ok(check.connected);
    p.$('callarg-add').click();
    p.$('callarg-name-1').type('use_resolution_binning');
    p.$('callarg-value-1').type('false');
    p.$('callarg-remove-0').click();
    p.$('check').click();
    const sent = p.posted.at(-1);
    assert.equal(sent?.type, 'check');
    assert.deepEqual(sent?.call, {
      args: [{ name: 'use_resolution_binning', value: 'false' }],
      inputs: [{ name: 'image', path: 'inputs/cat.png' }],
    });
  });

  it('a hint adds its row with the default; verdicts show per row', () => {
    const p = page();
    p.send(state({ args: [], inputs: [] }));
    p.$('callhint-add-frames').click();
    assert.equal(p.$('callarg-value-0').value, '81');
    const rows = { args: [{ name: 'frames', value: 'x' }], inputs: [] };
    p.send(
      state(rows, {
        checkedCurrent: true,
        call: {
          ...(state(rows).call as object),
          validation: {
            args: [{ status: 'error', message: 'not valid JSON' }],
            inputs: [],
            general: ['image is required'],
            warnings: [],
            passed: false,
          },
        },
      }),
    );
    assert.match(p.$('callarg-status-0').textContent, /✗ not valid JSON/);
    assert.match(p.$('call-args').textContent, /✗ image is required/);
    assert.match(p.$('banner').textContent, /2 problem\(s\)/);
  });
});
