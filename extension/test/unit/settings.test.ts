import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT, readJson } from './helpers';
import {
  parseSizesArgument,
  DEFAULT_SETTINGS,
  parseSettings,
  resolveVariables,
  runOptionsText,
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
        target: 'cache-dit-checkout',
        cacheDitPath: '/src/cache-dit',
        cpSizes: [8, 2, 2],
        thresholds: { cachePsnrDb: 28, ssimMin: 0.95 },
        'smokeRun.steps': 6,
        'trace.server': 'verbose',
      }),
    );
    assert.deepEqual(problems, []);
    assert.equal(settings.interpreter, '/opt/py/bin/python');
    assert.equal(settings.target, 'cache-dit-checkout');
    assert.deepEqual(settings.cpSizes, [2, 8]);
    assert.deepEqual(settings.thresholds, { cachePsnrDb: 28, ssimMin: 0.95 });
    assert.equal(settings.smokeRun.steps, 6);
    assert.equal(settings.trace, 'verbose');
  });

  it('reads the earlier target spelling "checkout" as the plan\'s "cache-dit-checkout"', () => {
    const { settings, problems } = parseSettings(config({ target: 'checkout' }));
    assert.deepEqual(problems, []);
    assert.equal(settings.target, 'cache-dit-checkout');
    assert.equal(serverSettings(settings).target, 'cache-dit-checkout');
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
    assert.match(
      problems.join('\n'),
      /cdit\.target: expected standalone or cache-dit-checkout, got "cloud"/,
    );
    assert.match(problems.join('\n'), /cdit\.thresholds\.ssimMin/);
  });

  it('run options: dtype, DBCache options, call arguments and file inputs', () => {
    const { settings, problems } = parseSettings(
      config({
        dtype: 'float16',
        cache: { residualDiffThreshold: 2, maxWarmupSteps: 1, calibrateShare: 0.5, control: true },
        callArgs: { num_frames: 9, audio_duration: 2.5 },
        inputs: { image: ' inputs/cat.png ' },
        thresholds: { controlPsnrDbFloat32: 90, parallelPsnrDbFloat32: 70 },
      }),
    );
    assert.deepEqual(problems, []);
    assert.equal(settings.dtype, 'float16');
    assert.deepEqual(settings.cache, {
      residualDiffThreshold: 2,
      maxWarmupSteps: 1,
      calibrateShare: 0.5,
      control: true,
    });
    assert.deepEqual(settings.callArgs, { num_frames: 9, audio_duration: 2.5 });
    assert.deepEqual(settings.inputs, { image: 'inputs/cat.png' });
    assert.deepEqual(settings.thresholds, { controlPsnrDbFloat32: 90, parallelPsnrDbFloat32: 70 });
    assert.equal(
      runOptionsText(settings),
      'dtype float16, cache {"residualDiffThreshold":2,"maxWarmupSteps":1,"calibrateShare":0.5,"control":true}, ' +
        'call args {"num_frames":9,"audio_duration":2.5}, inputs {"image":"inputs/cat.png"}, ' +
        'thresholds {"parallelPsnrDbFloat32":70,"controlPsnrDbFloat32":90}',
    );
    // nothing set: the runtime decides the dtype
    assert.equal(parseSettings(config({})).settings.dtype, '');
    assert.equal(runOptionsText(DEFAULT_SETTINGS), 'dtype runtime default');
  });

  it('bad run options keep the defaults and say why', () => {
    const { settings, problems } = parseSettings(
      config({
        dtype: 'int8',
        cache: { maxWarmupSteps: 1.5, calibrateShare: 2, control: 'yes', fn: 1 },
        callArgs: [1],
        inputs: { image: 3 },
      }),
    );
    assert.equal(settings.dtype, '');
    assert.deepEqual(settings.cache, { fn: 1 });
    assert.deepEqual(settings.callArgs, {});
    assert.deepEqual(settings.inputs, {});
    const text = problems.join('\n');
    assert.equal(problems.length, 6, text);
    assert.match(text, /cdit\.dtype: expected "", float32, bfloat16 or float16, got "int8"/);
    assert.match(
      text,
      /cdit\.cache\.maxWarmupSteps: expected an integer from 0 to 10000, got 1\.5/,
    );
    assert.match(text, /cdit\.cache\.calibrateShare: expected a number from 0 to 1, got 2/);
    assert.match(text, /cdit\.cache\.control: expected true or false/);
  });

  it('the manifest offers what the parser reads and the runtime accepts', () => {
    const manifest = readJson<{
      contributes: {
        configuration: { properties: Record<string, { properties?: Record<string, unknown> }> };
      };
    }>(path.join(ROOT, 'package.json'));
    const props = manifest.contributes.configuration.properties;
    const schema = readJson<{
      $defs: Record<string, { properties: Record<string, unknown> }>;
    }>(path.join(ROOT, 'cdit_runtime', 'contract', 'verification.schema.json'));
    const cacheKeys = Object.keys(props['cdit.cache']?.properties ?? {});
    assert.ok(cacheKeys.length >= 8, cacheKeys.join(', '));
    for (const key of cacheKeys)
      assert.ok(key in (schema.$defs.CacheOptions?.properties ?? {}), `CacheOptions.${key}`);
    const thresholdKeys = Object.keys(props['cdit.thresholds']?.properties ?? {});
    for (const key of thresholdKeys)
      assert.ok(key in (schema.$defs.Thresholds?.properties ?? {}), `Thresholds.${key}`);
    // every key the manifest offers is kept by the parser
    const value = (key: string): unknown =>
      key === 'control' ? false : key === 'ssimMin' ? 0.5 : 1;
    const { settings, problems } = parseSettings(
      config({
        cache: Object.fromEntries(cacheKeys.map((k) => [k, value(k)])),
        thresholds: Object.fromEntries(thresholdKeys.map((k) => [k, value(k)])),
      }),
    );
    assert.deepEqual(problems, []);
    assert.deepEqual(Object.keys(settings.cache).sort(), [...cacheKeys].sort());
    assert.deepEqual(Object.keys(settings.thresholds).sort(), [...thresholdKeys].sort());
    // the plan's target kinds (lsp_server/codegen/plan_model.py TARGET_KINDS), by the same names
    const target = props['cdit.target'] as { enum?: string[] } | undefined;
    assert.deepEqual(target?.enum, ['standalone', 'cache-dit-checkout']);
    const dtype = props['cdit.dtype'] as { enum?: string[]; default?: string } | undefined;
    assert.deepEqual(dtype?.enum, ['', 'float32', 'bfloat16', 'float16']);
    assert.equal(dtype?.default, '');
  });

  it('reads diagnostic severities and reports the bad ones', () => {
    const { settings, problems } = parseSettings(
      config({
        diagnosticSeverity: { CDIT210: 'error', CDIT214: 'off', CDIT9: 'error', CDIT301: 'loud' },
      }),
    );
    assert.deepEqual(settings.diagnosticSeverity, { CDIT210: 'error', CDIT214: 'off' });
    assert.equal(problems.length, 2);
    assert.deepEqual(serverSettings(settings).diagnosticSeverity, {
      CDIT210: 'error',
      CDIT214: 'off',
    });
  });

  it('sends the server only the keys its parser knows', () => {
    const keys = Object.keys(serverSettings(DEFAULT_SETTINGS)).sort();
    assert.deepEqual(keys, [
      'cacheDitPath',
      'cpSizes',
      'debounceMs',
      'diagnosticSeverity',
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

describe('cdit.setParallelSizes', () => {
  it('takes only a sizes setting and a list of sizes >= 2', () => {
    assert.deepEqual(parseSizesArgument({ setting: 'cpSizes', sizes: [2, 4] }), {
      setting: 'cpSizes',
      sizes: [2, 4],
    });
    assert.equal(parseSizesArgument({ setting: 'interpreter', sizes: [2] }), undefined);
    assert.equal(parseSizesArgument({ setting: 'tpSizes', sizes: [1] }), undefined);
    assert.equal(parseSizesArgument({ setting: 'tpSizes', sizes: [] }), undefined);
    assert.equal(parseSizesArgument('cpSizes'), undefined);
  });
});
