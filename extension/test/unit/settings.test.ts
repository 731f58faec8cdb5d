import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  DEFAULT_SETTINGS,
  parseSettings,
  resolveVariables,
  serverSettings,
} from '../../src/common/settings';

function config(values: Record<string, unknown>): { get(key: string): unknown } {
  return { get: (key) => values[key] };
}

describe('settings', () => {
  it('defaults when nothing is set', () => {
    const { settings, problems } = parseSettings(config({}));
    assert.deepEqual(settings, DEFAULT_SETTINGS);
    assert.deepEqual(problems, []);
  });

  it('reads typed values', () => {
    const { settings, problems } = parseSettings(
      config({
        interpreter: ' /opt/py/bin/python ',
        target: 'checkout',
        cacheDitPath: '/src/cache-dit',
        cpSizes: [8, 2, 2],
        thresholds: { cachePsnrDb: 28, ssimMin: 0.95 },
        'smokeRun.steps': 6,
        'trace.server': 'verbose',
      }),
    );
    assert.deepEqual(problems, []);
    assert.equal(settings.interpreter, '/opt/py/bin/python');
    assert.equal(settings.target, 'checkout');
    assert.deepEqual(settings.cpSizes, [2, 8]);
    assert.deepEqual(settings.thresholds, { cachePsnrDb: 28, ssimMin: 0.95 });
    assert.equal(settings.smokeRun.steps, 6);
    assert.equal(settings.trace, 'verbose');
  });

  it('keeps the default for a bad value and says why', () => {
    const { settings, problems } = parseSettings(
      config({
        target: 'cloud',
        cpSizes: [1],
        debounceMs: -3,
        interpreter: 42,
        thresholds: { ssimMin: 3 },
      }),
    );
    assert.equal(settings.target, 'standalone');
    assert.deepEqual(settings.cpSizes, [2, 4, 8]);
    assert.equal(settings.debounceMs, 250);
    assert.equal(settings.interpreter, '');
    assert.deepEqual(settings.thresholds, {});
    assert.equal(problems.length, 5);
    assert.match(problems.join('\n'), /cdit\.target: expected standalone or checkout, got "cloud"/);
    assert.match(problems.join('\n'), /cdit\.thresholds\.ssimMin/);
  });

  it('sends the server only the keys its parser knows', () => {
    const keys = Object.keys(serverSettings(DEFAULT_SETTINGS)).sort();
    assert.deepEqual(keys, [
      'cacheDitPath',
      'cpSizes',
      'debounceMs',
      'interpreter',
      'maxFileKb',
      'target',
      'thresholds',
      'tpSizes',
    ]);
  });
});

describe('resolveVariables', () => {
  const ctx = {
    workspaceFolder: '/ws',
    workspaceFolders: { other: '/other' },
    userHome: '/home/u',
    env: { VENV: '/venvs/a' },
  };

  it('expands workspace, home and env variables and a leading ~', () => {
    assert.equal(
      resolveVariables('${workspaceFolder}/.venv/bin/python', ctx),
      '/ws/.venv/bin/python',
    );
    assert.equal(resolveVariables('${workspaceFolder:other}/py', ctx), '/other/py');
    assert.equal(resolveVariables('${userHome}/py', ctx), '/home/u/py');
    assert.equal(resolveVariables('${env:VENV}/bin/python', ctx), '/venvs/a/bin/python');
    assert.equal(resolveVariables('~/bin/python', ctx), '/home/u/bin/python');
  });

  it('leaves unknown variables for the error message', () => {
    assert.equal(resolveVariables('${workspaceFolder:nope}/py', ctx), '${workspaceFolder:nope}/py');
    assert.equal(resolveVariables('${file}', ctx), '${file}');
  });
});
