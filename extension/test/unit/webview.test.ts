import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { contentSecurityPolicy, escapeHtml, nonce, page } from '../../src/webview/html';
import {
  parseChoices,
  parseDetailMessage,
  parseGateMessage,
  parsePlanMessage,
} from '../../src/webview/messages';
import { EMPTY_ANSWERS } from '../../src/gatecheck/answers';
import { ROOT } from './helpers';

const MEDIA = path.join(ROOT, 'extension', 'media');

describe('webview pages', () => {
  const html = page({
    cspSource: 'vscode-webview://x',
    nonce: 'N0nce',
    title: 'T <1>',
    scripts: ['s.js'],
    styles: ['c.css'],
    body: '<main id="app"></main>',
    state: { a: '</script><script>alert(1)</script>' },
  });

  it('carry a strict CSP with the nonce', () => {
    assert.ok(html.includes(`content="${contentSecurityPolicy('vscode-webview://x', 'N0nce')}"`));
    assert.match(html, /default-src 'none'/);
    assert.match(html, /script-src 'nonce-N0nce'/);
    assert.doesNotMatch(html, /unsafe-inline|unsafe-eval/);
  });

  it('every script element has the nonce; state cannot close its element', () => {
    const scripts = html.match(/<script[^>]*>/g) ?? [];
    assert.equal(scripts.length, 2);
    for (const s of scripts) assert.match(s, /nonce="N0nce"/);
    assert.ok(!html.includes('</script><script>alert'));
    assert.ok(html.includes('<title>T &lt;1&gt;</title>'));
  });

  it('no inline event handlers or HTML injection in the pages and scripts', () => {
    assert.doesNotMatch(html, /\son[a-z]+\s*=/i);
    for (const file of fs.readdirSync(MEDIA).filter((f) => f.endsWith('.js'))) {
      const text = fs.readFileSync(path.join(MEDIA, file), 'utf8');
      assert.doesNotMatch(
        text,
        /innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/,
        file,
      );
      assert.doesNotMatch(text, /setAttribute\(\s*['"]on/i, file);
    }
  });

  it('nonces are fresh and URL-safe', () => {
    const a = nonce();
    assert.match(a, /^[A-Za-z0-9]{16,}$/);
    assert.notEqual(a, nonce());
    assert.equal(escapeHtml(`<a href="x">'&`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;');
  });
});

describe('webview messages are validated', () => {
  it('gate check', () => {
    assert.deepEqual(parseGateMessage({ type: 'ready' }), { type: 'ready' });
    assert.deepEqual(parseGateMessage({ type: 'check', answers: EMPTY_ANSWERS }), {
      type: 'check',
      answers: EMPTY_ANSWERS,
      confirmed: [],
    });
    assert.deepEqual(
      parseGateMessage({
        type: 'edit',
        answers: EMPTY_ANSWERS,
        confirmed: ['localPath', 'localPath'],
      }),
      { type: 'edit', answers: EMPTY_ANSWERS, confirmed: ['localPath'] },
    );
    assert.equal(
      parseGateMessage({ type: 'check', answers: { ...EMPTY_ANSWERS, targetKind: 'rm -rf' } }),
      undefined,
    );
    assert.equal(
      parseGateMessage({ type: 'check', answers: { ...EMPTY_ANSWERS, localPath: 7 } }),
      undefined,
    );
    assert.equal(
      parseGateMessage({
        type: 'check',
        answers: { ...EMPTY_ANSWERS, localPath: 'x'.repeat(5000) },
      }),
      undefined,
    );
    assert.equal(parseGateMessage({ type: 'browse', field: 'registerName' }), undefined);
    assert.deepEqual(parseGateMessage({ type: 'browse', field: 'localPath' }), {
      type: 'browse',
      field: 'localPath',
    });
    assert.equal(
      parseGateMessage({ type: 'save', answers: EMPTY_ANSWERS, confirmed: ['nope'] }),
      undefined,
    );
    assert.equal(parseGateMessage({ type: 'runShell', command: 'ls' }), undefined);
    assert.equal(parseGateMessage(null), undefined);
  });

  it('plan review: choices and only the links the review shows', () => {
    const choices = {
      forwardPatterns: { transformer_blocks: 'Pattern_1' },
      hasSeparateCfg: true,
      patchFunctor: false,
      cpEnabled: true,
      ulyssesAnything: true,
      tpEnabled: true,
      tpStrategy: 'mha',
    };
    assert.deepEqual(parseChoices(choices), choices);
    assert.equal(
      parseChoices({ ...choices, forwardPatterns: { transformer_blocks: 'Pattern_9' } }),
      undefined,
    );
    assert.equal(parseChoices({ ...choices, forwardPatterns: { 'a.b': 'Pattern_1' } }), undefined);
    assert.equal(parseChoices({ ...choices, tpEnabled: 'yes' }), undefined);
    assert.deepEqual(parsePlanMessage({ type: 'open', path: '/ws/m.py', line: 3 }, ['/ws/m.py']), {
      type: 'open',
      path: '/ws/m.py',
      line: 3,
    });
    assert.equal(
      parsePlanMessage({ type: 'open', path: '/etc/passwd', line: 1 }, ['/ws/m.py']),
      undefined,
    );
    assert.equal(
      parsePlanMessage({ type: 'open', path: '/ws/m.py', line: 0 }, ['/ws/m.py']),
      undefined,
    );
  });

  it('detail view', () => {
    assert.deepEqual(parseDetailMessage({ type: 'copy', text: 'reproduce' }), {
      type: 'copy',
      text: 'reproduce',
    });
    assert.equal(parseDetailMessage({ type: 'copy', text: 'rm -rf /' }), undefined);
  });
});
