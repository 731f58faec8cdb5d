import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  distributionName,
  installRequirement,
  missingFor,
  RUNTIME_REQUIREMENT,
  runtimeInstallOffer,
  runtimeMissing,
  runtimeStatusNote,
} from '../../src/common/install';
import { installCommand, parseImportCheck } from '../../src/common/interpreter';

const ROOT = path.resolve(__dirname, '..', '..', '..');

const REFUSAL = {
  error: {
    code: 'runtime-missing',
    message:
      "a verification run needs the [runtime] extra (torch, cache-dit not installed): pip install 'cdit-integrator[runtime]'",
    hint: 'install it into /env/bin/python, or set cdit.interpreter to a Python that has it',
    missing: ['torch', 'cache_dit'],
    requirement: 'cdit-integrator[runtime]',
    interpreter: '/env/bin/python',
  },
};

describe('what to install for what the user does', () => {
  it('the server needs the base package only; a run needs the [runtime] extra', () => {
    const base = { ok: true, runtimeMissing: ['torch', 'diffusers'] };
    assert.equal(missingFor(base, 'serve'), undefined);
    assert.equal(missingFor(base, 'run'), 'runtime');
    const full = { ok: true, runtimeMissing: [] };
    assert.equal(missingFor(full, 'serve'), undefined);
    assert.equal(missingFor(full, 'run'), undefined);
  });

  it('an interpreter without lsp_server needs the server to serve and the extra to run', () => {
    const none = { ok: false };
    assert.equal(missingFor(none, 'serve'), 'server');
    assert.equal(missingFor(none, 'run'), 'runtime');
  });

  it('does not guess when the check could not tell (the server decides at run time)', () => {
    assert.equal(missingFor(undefined, 'run'), undefined);
    assert.equal(missingFor({ ok: true }, 'run'), undefined);
  });

  it('installs the bundled folder for the server and the folder with [runtime] for runs', () => {
    assert.equal(installRequirement('server', '/ext/dist/python'), '/ext/dist/python');
    assert.equal(installRequirement('runtime', '/ext/dist/python'), '/ext/dist/python[runtime]');
    assert.equal(installRequirement('server', undefined), undefined);
    assert.equal(installRequirement('runtime', undefined), 'cdit-integrator[runtime]');
    assert.deepEqual(installCommand('/env/bin/python', '/ext/dist/python[runtime]').args, [
      '-m',
      'pip',
      'install',
      '--disable-pip-version-check',
      '/ext/dist/python[runtime]',
    ]);
  });

  it('the extra it asks for is the one pyproject.toml declares, with the runtime packages', () => {
    const pyproject = fs.readFileSync(path.join(ROOT, 'pyproject.toml'), 'utf8');
    const runtime = /^runtime = \[([\s\S]*?)\]/m.exec(pyproject)?.[1] ?? '';
    for (const pkg of ['torch', 'diffusers', 'transformers', 'cache-dit', 'einops', 'scikit-image'])
      assert.match(runtime, new RegExp(`"${pkg}[>=<]`), pkg);
    const base = /^dependencies = \[([\s\S]*?)\]/m.exec(pyproject)?.[1] ?? '';
    assert.doesNotMatch(base, /"(torch|diffusers|cache-dit)/);
    assert.equal(RUNTIME_REQUIREMENT, 'cdit-integrator[runtime]');
  });
});

describe('a run refused for a missing runtime', () => {
  it('reads the server refusal and nothing else', () => {
    assert.deepEqual(runtimeMissing(REFUSAL), {
      message: REFUSAL.error.message,
      hint: REFUSAL.error.hint,
      missing: ['torch', 'cache_dit'],
      interpreter: '/env/bin/python',
    });
    assert.equal(runtimeMissing({ error: { code: 'BAD_REQUEST', message: 'x' } }), undefined);
    assert.equal(runtimeMissing({ runId: 'run-1' }), undefined);
    assert.equal(runtimeMissing(undefined), undefined);
    assert.deepEqual(runtimeMissing({ error: { code: 'runtime-missing', message: 'm' } }), {
      message: 'm',
      hint: undefined,
      missing: [],
      interpreter: undefined,
    });
  });

  it('offers to install [runtime] into the interpreter the run uses', () => {
    const refusal = runtimeMissing(REFUSAL);
    assert.ok(refusal);
    const offer = runtimeInstallOffer(refusal, {
      resolvedPython: '/other/bin/python',
      bundledDir: '/ext/dist/python',
      trusted: true,
    });
    assert.equal(offer.need, 'runtime');
    assert.equal(offer.python, '/env/bin/python');
    assert.equal(offer.requirement, '/ext/dist/python[runtime]');
    assert.deepEqual(offer.actions, ['Install', 'Choose Interpreter', 'Show Logs']);
    assert.match(offer.prompt, /\[runtime\] extra in \/env\/bin\/python/);
    assert.match(offer.prompt, /torch, cache-dit not installed/);
  });

  it('without a bundled package it installs the published package with the extra', () => {
    const offer = runtimeInstallOffer(
      { message: 'm', missing: ['torch'] },
      { resolvedPython: '/env/bin/python', bundledDir: undefined, trusted: true },
    );
    assert.equal(offer.python, '/env/bin/python');
    assert.equal(offer.requirement, 'cdit-integrator[runtime]');
    assert.match(offer.prompt, /Install cdit-integrator\[runtime\] with pip\?/);
  });

  it('does not offer pip in an untrusted workspace, and says why instead', () => {
    const refusal = runtimeMissing(REFUSAL);
    assert.ok(refusal);
    const offer = runtimeInstallOffer(refusal, {
      resolvedPython: undefined,
      bundledDir: '/ext/dist/python',
      trusted: false,
    });
    assert.ok(!offer.actions.includes('Install'));
    assert.ok(offer.prompt.includes("pip install 'cdit-integrator[runtime]'"));
  });
});

describe('the import check reports the runtime', () => {
  it('reads runtimeMissing and turns it into the status note', () => {
    const base = parseImportCheck(
      '{"ok": true, "python": "3.11.7", "location": "/x/lsp_server/__init__.py", "runtimeMissing": ["torch", "skimage"]}',
      '',
      0,
    );
    assert.deepEqual(base.runtimeMissing, ['torch', 'skimage']);
    assert.equal(
      runtimeStatusNote(base),
      'verification runs need the [runtime] extra (torch, scikit-image not installed)',
    );
    const full = parseImportCheck('{"ok": true, "runtimeMissing": []}', '', 0);
    assert.equal(runtimeStatusNote(full), undefined);
    // an older server package does not report it: nothing is claimed
    assert.equal(runtimeStatusNote(parseImportCheck('{"ok": true}', '', 0)), undefined);
    // no server at all: the server's own offer comes first
    assert.equal(runtimeStatusNote({ ok: false }), undefined);
  });

  it('names packages as pip knows them', () => {
    assert.equal(distributionName('cache_dit'), 'cache-dit');
    assert.equal(distributionName('skimage'), 'scikit-image');
    assert.equal(distributionName('torch'), 'torch');
  });
});
