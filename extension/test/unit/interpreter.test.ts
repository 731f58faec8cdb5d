import assert from 'node:assert/strict';
import * as cp from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import {
  installCommand,
  interpreterSetting,
  parseImportCheck,
  pythonLaunch,
  resolveInterpreter,
  sameResolution,
  workspaceFolderOf,
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
    trusted: over.trusted,
    workspaceFolders: over.workspaceFolders ?? ['/ws'],
    realpath: over.realpath,
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
        runtimeMissing: undefined,
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

describe('untrusted workspaces: no interpreter the workspace chose', () => {
  it('refuses a cdit.interpreter inside the workspace and takes python3', () => {
    const r = resolveInterpreter(
      inputs({
        trusted: false,
        configured: '${workspaceFolder}/.venv/bin/python',
        files: ['/ws/.venv/bin/python'],
        path: { python3: '/usr/bin/python3' },
      }),
    );
    assert.deepEqual([r.python, r.source, r.refused], ['/usr/bin/python3', 'default', undefined]);
    assert.match(r.notes.join(), /inside the workspace folder \/ws; not used in an untrusted/);
    // relative paths are relative to the workspace: refused as well
    const rel = resolveInterpreter(
      inputs({
        trusted: false,
        configured: './venv/bin/python',
        files: ['/ws/venv/bin/python'],
        path: { python3: '/usr/bin/python3' },
      }),
    );
    assert.equal(rel.python, '/usr/bin/python3');
  });

  it('refuses an interpreter that links into the workspace', () => {
    const r = resolveInterpreter(
      inputs({
        trusted: false,
        configured: '/home/u/bin/python',
        files: ['/home/u/bin/python'],
        realpath: (f) => (f === '/home/u/bin/python' ? '/ws/.venv/bin/python' : f),
        path: { python3: '/usr/bin/python3' },
      }),
    );
    assert.equal(r.python, '/usr/bin/python3');
  });

  it("keeps the user's own interpreter outside the workspace", () => {
    const r = resolveInterpreter(
      inputs({
        trusted: false,
        configured: '/opt/py/bin/python',
        files: ['/opt/py/bin/python'],
      }),
    );
    assert.deepEqual([r.python, r.source, r.refused], ['/opt/py/bin/python', 'setting', undefined]);
  });

  it("does not use the Python extension's environment", () => {
    const r = resolveInterpreter(
      inputs({
        trusted: false,
        activeEnvironment: '/ws/.venv/bin/python',
        files: ['/ws/.venv/bin/python'],
        path: { python3: '/usr/bin/python3' },
      }),
    );
    assert.deepEqual([r.python, r.source], ['/usr/bin/python3', 'default']);
    assert.match(r.notes.join(), /not used in an untrusted workspace/);
    // trusted: the same environment is used
    const t = resolveInterpreter(
      inputs({ activeEnvironment: '/ws/.venv/bin/python', files: ['/ws/.venv/bin/python'] }),
    );
    assert.equal(t.source, 'python-extension');
  });

  it('starts nothing when python3 itself is inside the workspace', () => {
    const r = resolveInterpreter(inputs({ trusted: false, path: { python3: '/ws/bin/python3' } }));
    assert.match(r.refused ?? '', /inside the workspace folder \/ws: no interpreter is started/);
    const t = resolveInterpreter(inputs({ path: { python3: '/ws/bin/python3' } }));
    assert.equal(t.refused, undefined);
  });

  it('reads cdit.interpreter from the user settings only', () => {
    const scopes = { globalValue: ' /opt/py/bin/python ', workspaceValue: './.venv/bin/python' };
    assert.equal(interpreterSetting('./.venv/bin/python', scopes, true), './.venv/bin/python');
    assert.equal(interpreterSetting('./.venv/bin/python', scopes, false), '/opt/py/bin/python');
    assert.equal(interpreterSetting('./.venv/bin/python', { workspaceValue: 'x' }, false), '');
    assert.equal(interpreterSetting('x', undefined, false), '');
  });

  it('tells whether a path lies in a workspace folder', () => {
    assert.equal(workspaceFolderOf('/ws/a/python', ['/other', '/ws']), '/ws');
    assert.equal(workspaceFolderOf('/ws', ['/ws']), '/ws');
    assert.equal(workspaceFolderOf('/wsx/python', ['/ws']), undefined);
    assert.equal(workspaceFolderOf('/ws/../usr/bin/python', ['/ws']), undefined);
    assert.equal(workspaceFolderOf('/ws/..venv/python', ['/ws']), '/ws');
  });
});

describe('how Python processes start', () => {
  it('runs in the neutral folder with PYTHONSAFEPATH=1, the environment kept', () => {
    const launch = pythonLaunch(
      '/py',
      ['-m', 'lsp_server'],
      '/storage/python-cwd',
      { PATH: '/bin', PYTHONSAFEPATH: '0' },
      { PYTHONUNBUFFERED: '1' },
    );
    assert.deepEqual(launch, {
      command: '/py',
      args: ['-m', 'lsp_server'],
      cwd: '/storage/python-cwd',
      env: { PATH: '/bin', PYTHONSAFEPATH: '1', PYTHONUNBUFFERED: '1' },
    });
  });

  it('a pygls.py in the workspace is not imported, even with the workspace as cwd', () => {
    const python = ['python3', '/usr/bin/python3'].find(
      (p) => cp.spawnSync(p, ['-c', 'import sys; assert sys.version_info >= (3, 11)']).status === 0,
    );
    if (!python) return; // PYTHONSAFEPATH needs 3.11+; the neutral cwd covers 3.10
    const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'cdit-ws-'));
    const neutral = fs.mkdtempSync(path.join(os.tmpdir(), 'cdit-cwd-'));
    const marker = path.join(ws, 'IMPORTED');
    try {
      fs.writeFileSync(path.join(ws, 'pygls.py'), `open(${JSON.stringify(marker)}, 'w').close()\n`);
      const script = ['-c', 'import pygls'];
      const env = { ...process.env };
      delete env.PYTHONSAFEPATH;
      delete env.PYTHONPATH;
      for (const cwd of [neutral, ws]) {
        const launch = pythonLaunch(python, script, cwd, env);
        cp.spawnSync(launch.command, launch.args, { cwd: launch.cwd, env: launch.env });
        assert.equal(fs.existsSync(marker), false, `pygls.py imported with cwd ${cwd}`);
      }
      // the control: started the old way (workspace cwd, no safe path) it is imported
      cp.spawnSync(python, script, { cwd: ws, env });
      assert.equal(fs.existsSync(marker), true);
    } finally {
      fs.rmSync(ws, { recursive: true, force: true });
      fs.rmSync(neutral, { recursive: true, force: true });
    }
  });
});
