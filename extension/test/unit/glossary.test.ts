/**
 * The glossary: packaged as is, contributed as `cdit.openGlossary`, trusted alone in server
 * markdown, and every anchor the server links to resolves to a heading the preview can scroll to.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  GLOSSARY_COMMAND,
  GLOSSARY_PATH,
  headingSlug,
  locate,
  parseAnchor,
} from '../../src/common/glossary';

const ROOT = path.join(__dirname, '..', '..', '..');
const TEXT = fs.readFileSync(path.join(ROOT, GLOSSARY_PATH), 'utf8');

/** The anchors lsp_server/features/glossary.py links to (its TERMS table). */
function serverAnchors(): string[] {
  const source = fs.readFileSync(path.join(ROOT, 'lsp_server', 'features', 'glossary.py'), 'utf8');
  const table = /TERMS: dict\[[^\]]*\]\] = \{([\s\S]*?)\n\}/.exec(source)?.[1] ?? '';
  return [...table.matchAll(/^\s*"[^"]+": \("[^"]*", "([^"]+)"/gm)].map((m) => m[1] ?? '');
}

describe('glossary', () => {
  it('is packaged as the file itself and contributed as a command', () => {
    const ignore = fs.readFileSync(path.join(ROOT, '.vscodeignore'), 'utf8').split(/\r?\n/);
    assert.ok(ignore.includes(`!${GLOSSARY_PATH.split(path.sep).join('/')}`));
    const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      contributes: { commands: { command: string }[] };
    };
    assert.ok(manifest.contributes.commands.some((c) => c.command === GLOSSARY_COMMAND));
  });

  it('trusts only the glossary command in server markdown', () => {
    const server = fs.readFileSync(
      path.join(ROOT, 'extension', 'src', 'common', 'server.ts'),
      'utf8',
    );
    assert.match(server, /markdown: \{ isTrusted: \{ enabledCommands: \[GLOSSARY_COMMAND\] \} \}/);
  });

  it('resolves every anchor the server links to, at its section heading', () => {
    const anchors = serverAnchors();
    assert.ok(anchors.length >= 10, `read ${anchors.length} anchors from glossary.py`);
    const headings = new Set(
      [...TEXT.matchAll(/^#{1,6}\s+(.+)$/gm)].map((m) => headingSlug(m[1] ?? '')),
    );
    for (const anchor of anchors) {
      const target = locate(TEXT, anchor);
      assert.ok(target.fragment && headings.has(target.fragment), `${anchor}: no section`);
      assert.ok(target.line > 0, `${anchor}: not found`);
      assert.ok(TEXT.split('\n')[target.line]?.includes(`<a id="${anchor}">`), anchor);
    }
    assert.equal(locate(TEXT, 'forwardpattern').fragment, 'the-model');
    assert.equal(locate(TEXT, 'uaa').fragment, 'parallelism');
    assert.equal(locate(TEXT, 'dbcache').fragment, 'caching');
  });

  it('takes a heading slug as is and falls back to the top', () => {
    assert.deepEqual(locate(TEXT, 'verification').fragment, 'verification');
    assert.deepEqual(locate(TEXT, 'no-such-term'), { fragment: undefined, line: 0 });
    assert.deepEqual(locate(TEXT, undefined), { fragment: undefined, line: 0 });
    assert.equal(
      locate('```\n# not a heading\n```\n## Real one\n', 'not-a-heading').fragment,
      undefined,
    );
  });

  it('slugs headings as GitHub does', () => {
    assert.equal(headingSlug('The model'), 'the-model');
    assert.equal(headingSlug('  TE-P / VAE-P (2) '), 'te-p--vae-p-2');
    assert.equal(headingSlug('`has_separate_cfg`'), 'has_separate_cfg');
  });

  it('accepts the anchor from a command URI or the palette', () => {
    assert.equal(parseAnchor(['forwardpattern']), 'forwardpattern');
    assert.equal(parseAnchor('uaa'), 'uaa');
    assert.equal(parseAnchor(undefined), undefined);
    assert.equal(parseAnchor(['../../etc']), undefined);
    assert.equal(parseAnchor([42]), undefined);
  });
});
