import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  installCommand,
  parseImportCheck,
  resolveInterpreter,
  sameResolution,
  type InterpreterInputs,
} from '../../src/common/interpreter';

function inputs(
  over: Partial<InterpreterInputs> & { files?: string[]; path?: Record<string, string> },
): InterpreterInputs {
  const files = new Set(over.files ?? []);
  const onPath = over.path ?? {};
  return {
    configured: over.configured ?? '',
    variables: over.variables ?? { workspaceFolder: '/ws', userHome: '/home/u', env: {} },
    activeEnvironment: over.activeEnvironment,
    isExecutableFile: (f) => files.has(f),
    which: (c) => onPath[c],
  };
}

describe('resolveInterpreter', () => {
  it('uses cdit.interpreter first, with variables expanded', () => {
    const r = resolveInterpreter(
      inputs({
        configured: '${workspaceFolder}/.venv/bin/python',
        files: ['/ws/.venv/bin/python'],
        activeEnvironment: '/env/bin/python',
      }),
    );
    assert.deepEqual(
      [r.python, r.source, r.dependsOnActiveInterpreter],
      ['/ws/.venv/bin/python', 'setting', false],
    );
  });

  it('resolves a relative setting against the workspace folder', () => {
    const r = resolveInterpreter(
      inputs({ configured: './venv/bin/python', files: ['/ws/venv/bin/python'] }),
    );
    assert.equal(r.python, '/ws/venv/bin/python');
  });

  it('looks a bare command up on PATH', () => {
    const r = resolveInterpreter(
      inputs({ configured: 'python3.11', path: { 'python3.11': '/usr/bin/python3.11' } }),
    );
    assert.equal(r.python, '/usr/bin/python3.11');
    assert.equal(r.source, 'setting');
  });

  it('an invalid configured interpreter falls back to the active environment, with a note', () => {
    const r = resolveInterpreter(
      inputs({
        configured: '/gone/python',
        activeEnvironment: '/env/bin/python',
        files: ['/env/bin/python'],
      }),
    );
    assert.deepEqual(
      [r.python, r.source, r.dependsOnActiveInterpreter],
      ['/env/bin/python', 'python-extension', true],
    );
    assert.match(r.notes[0] ?? '', /cdit\.interpreter "\/gone\/python" was not found/);
  });

  it('falls back to python3 on PATH', () => {
    const r = resolveInterpreter(inputs({ path: { python3: '/usr/bin/python3' } }));
    assert.deepEqual([r.python, r.source], ['/usr/bin/python3', 'default']);
    const none = resolveInterpreter(inputs({}));
    assert.equal(none.python, 'python3');
    assert.match(none.notes.join(), /not on PATH/);
  });

  it('compares resolutions by interpreter and source', () => {
    const a = resolveInterpreter(inputs({ path: { python3: '/usr/bin/python3' } }));
    assert.equal(sameResolution(undefined, a), false);
    assert.equal(sameResolution(a, { ...a, notes: ['x'] }), true);
    assert.equal(sameResolution(a, { ...a, python: '/other' }), false);
  });
});

describe('import check and install', () => {
  it('reads the check script output', () => {
    assert.deepEqual(
      parseImportCheck(
        '{"ok": true, "python": "3.11.7", "location": "/x/lsp_server/__init__.py"}\n',
        '',
        0,
      ),
      {
        ok: true,
        python: '3.11.7',
        location: '/x/lsp_server/__init__.py',
        error: undefined,
      },
    );
    const failed = parseImportCheck(
      '{"ok": false, "python": "3.12.1", "error": "ModuleNotFoundError: No module named \'lsp_server\'"}',
      '',
      0,
    );
    assert.equal(failed.ok, false);
    assert.match(failed.error ?? '', /No module named/);
  });

  it('turns a crash into a failed check with the stderr tail', () => {
    const r = parseImportCheck('', 'Traceback...\nSyntaxError: bad', 1);
    assert.equal(r.ok, false);
    assert.match(r.error ?? '', /exited with 1: .*SyntaxError: bad/);
    assert.match(parseImportCheck('', '', null).error ?? '', /a signal/);
  });

  it('installs the bundled folder with pip in the same interpreter', () => {
    assert.deepEqual(installCommand('/env/bin/python', '/ext/dist/python'), {
      command: '/env/bin/python',
      args: ['-m', 'pip', 'install', '--disable-pip-version-check', '/ext/dist/python'],
    });
  });
});
