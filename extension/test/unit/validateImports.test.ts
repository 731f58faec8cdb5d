import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { GateAnswers } from '../../src/gatecheck/answers';
import {
  REWRITE_IMPORTS_COMMAND,
  firstLine,
  isModuleName,
  validate,
  type AnalysisSummary,
  type LoadCheckReply,
  type ValidationDeps,
} from '../../src/gatecheck/validate';

// A diffusers video model whose transformer and pipeline files were copied into the workspace,
// with their relative imports (`from ..attention import AttentionMixin`).
const ANSWERS: GateAnswers = {
  localPath: 'tiny',
  pipelineClass: 'SanaVideoPipeline',
  transformerClass: 'SanaVideoTransformer3DModel',
  pipelineSource: 'pipeline_sana_video.py',
  transformerSource: 'transformer_sana_video.py',
  targetKind: 'standalone',
  targetPath: 'sana_cdit.py',
  registerName: 'SanaVideo',
};
const SITE = '/venv/lib/python3.11/site-packages/diffusers';
const INSTALLED_T = `${SITE}/models/transformers/transformer_sana_video.py`;
const MODULE_T = 'diffusers.models.transformers.transformer_sana_video';
const NO_PARENT = 'attempted relative import with no known parent package';

const ANCHORED: AnalysisSummary['imports'] = {
  anchor: {
    package: 'diffusers',
    version: '0.42.1',
    module: MODULE_T,
    installedFile: INSTALLED_T,
    identical: true,
  },
  runtimeImportable: false,
  importError: NO_PARENT,
};

interface World {
  files: Record<string, string>;
  imports?: AnalysisSummary['imports'];
  load?: LoadCheckReply | { error: { code: string; message: string } };
}

function deps(world: World, withLoadCheck = true): ValidationDeps & { calls: string[] } {
  const calls: string[] = [];
  const d: ValidationDeps & { calls: string[] } = {
    calls,
    root: '/ws',
    kind: async (p) =>
      ['/ws', '/ws/tiny'].includes(p) ? 'dir' : p in world.files ? 'file' : undefined,
    readText: async (p) => world.files[p],
    analyze: async (file) => {
      calls.push(`analyze ${file}`);
      const reply: AnalysisSummary = {
        transformers: [
          {
            className: 'SanaVideoTransformer3DModel',
            registry: { proposedName: 'SanaVideo', shadowedBy: [] },
          },
        ],
      };
      if (world.imports !== undefined) reply.imports = world.imports;
      return reply;
    },
    buildPlan: async () => {
      calls.push('buildPlan');
      return { plan: {} };
    },
    dryRun: async () => {
      calls.push('dryRun');
      return { files: [] };
    },
  };
  if (withLoadCheck)
    d.loadCheck = async (sources) => {
      calls.push(`loadCheck ${sources.join(' ')}`);
      return (
        world.load ?? {
          status: 'ok',
          message: 'every source imported',
          results: sources.map((source) => ({ source, ok: true })),
        }
      );
    };
  return d;
}

/** The copies, with their relative imports, in a folder that is not a package. */
function copiedWorld(): World {
  return {
    files: {
      '/ws/tiny/model_index.json': JSON.stringify({
        _class_name: 'SanaVideoPipeline',
        transformer: ['diffusers', 'SanaVideoTransformer3DModel'],
      }),
      '/ws/pipeline_sana_video.py':
        'import torch\n\nfrom ...models import SanaVideoTransformer3DModel\nfrom ..pipeline_utils import DiffusionPipeline\n\n\nclass SanaVideoPipeline(DiffusionPipeline):\n    pass\n',
      '/ws/transformer_sana_video.py':
        'from ..attention import AttentionMixin\n\n\nclass SanaVideoTransformer3DModel(AttentionMixin):\n    pass\n',
    },
  };
}

/** The same files after the rewrite to absolute imports. */
function rewrittenWorld(): World {
  const w = copiedWorld();
  w.files['/ws/pipeline_sana_video.py'] = (w.files['/ws/pipeline_sana_video.py'] ?? '')
    .replace('from ...models', 'from diffusers.models')
    .replace('from ..pipeline_utils', 'from diffusers.pipelines.pipeline_utils');
  w.files['/ws/transformer_sana_video.py'] = (
    w.files['/ws/transformer_sana_video.py'] ?? ''
  ).replace('from ..attention', 'from diffusers.models.attention');
  w.imports = { anchor: null, runtimeImportable: true, importError: null };
  return w;
}

describe('gate check: sources a run cannot import', () => {
  it('a copy whose relative imports resolve only in installed diffusers fails, with both fixes', async () => {
    const w = copiedWorld();
    w.imports = ANCHORED;
    const d = deps(w);
    const r = await validate(ANSWERS, d);
    assert.equal(r.passed, false);
    const t = r.fields.transformerSource;
    assert.equal(t.status, 'error');
    assert.equal(
      t.message,
      `defines SanaVideoTransformer3DModel, but a run cannot import it: ${NO_PARENT} (its relative imports resolve against installed diffusers 0.42.1 as ${MODULE_T})`,
    );
    assert.deepEqual(t.fixes, [
      {
        kind: 'setField',
        label: `Use the installed module ${MODULE_T} (diffusers 0.42.1, identical to this copy)`,
        field: 'transformerSource',
        value: INSTALLED_T,
      },
      {
        kind: 'command',
        label: 'Rewrite the relative imports as absolute diffusers imports (preview)',
        command: REWRITE_IMPORTS_COMMAND,
        arguments: [{ uri: 'file:///ws/transformer_sana_video.py', apply: true }],
      },
    ]);
    // the copied pipeline file: a module-level relative import outside a package
    assert.equal(r.fields.pipelineSource.status, 'error');
    assert.match(
      r.fields.pipelineSource.message,
      new RegExp(`${NO_PARENT} \\(line 3: from \\.\\.\\.models import`),
    );
    assert.deepEqual(r.fields.pipelineSource.fixes, [
      {
        kind: 'command',
        label: 'Rewrite the relative imports as absolute diffusers imports (preview)',
        command: REWRITE_IMPORTS_COMMAND,
        arguments: [{ uri: 'file:///ws/pipeline_sana_video.py', apply: true }],
      },
    ]);
    // nothing expensive runs while the fields are wrong
    assert.deepEqual(d.calls, ['analyze /ws/transformer_sana_video.py']);
  });

  it('without the analysis facts (an older server), a relative import outside a package still fails', async () => {
    const r = await validate(ANSWERS, deps(copiedWorld()));
    assert.equal(r.fields.transformerSource.status, 'error');
    assert.match(
      r.fields.transformerSource.message,
      /no known parent package \(line 1: from \.\.attention import/,
    );
  });

  it('a copy inside a package is left to the analysis and the load test', async () => {
    const w = copiedWorld();
    w.files['/ws/__init__.py'] = '';
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.fields.pipelineSource.status, 'ok');
    assert.equal(r.fields.transformerSource.status, 'ok');
  });

  it('the rewritten copies pass, after the load test imported them', async () => {
    const d = deps(rewrittenWorld());
    const r = await validate(ANSWERS, d);
    assert.equal(r.passed, true, JSON.stringify(r));
    assert.deepEqual(d.calls, [
      'analyze /ws/transformer_sana_video.py',
      'buildPlan',
      'dryRun',
      'loadCheck /ws/transformer_sana_video.py /ws/pipeline_sana_video.py',
    ]);
    assert.equal(
      r.fields.transformerSource.message,
      'defines SanaVideoTransformer3DModel; imports as a run imports it (load test)',
    );
  });

  it('a failed import is an error with the first line of the Python error and the fixes', async () => {
    const w = rewrittenWorld();
    w.load = {
      status: 'failed',
      message: `/ws/transformer_sana_video.py: ${NO_PARENT}`,
      results: [
        {
          source: '/ws/transformer_sana_video.py',
          ok: false,
          error: `${NO_PARENT}\nTraceback (most recent call last): ...`,
          errorType: 'ImportError',
          installed: { module: MODULE_T, file: INSTALLED_T, version: '0.42.1', identical: false },
          rewrite: {
            command: REWRITE_IMPORTS_COMMAND,
            arguments: [{ uri: 'file:///ws/transformer_sana_video.py' }],
          },
        },
        { source: '/ws/pipeline_sana_video.py', ok: true },
      ],
    };
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.passed, false);
    assert.deepEqual(r.fields.transformerSource, {
      status: 'error',
      message: `a run cannot import it: ImportError: ${NO_PARENT}`,
      fixes: [
        {
          kind: 'setField',
          label: `Use the installed module ${MODULE_T} (diffusers 0.42.1; your copy differs from it)`,
          field: 'transformerSource',
          value: INSTALLED_T,
        },
        {
          kind: 'command',
          label: 'Rewrite the relative imports as absolute diffusers imports (preview)',
          command: REWRITE_IMPORTS_COMMAND,
          arguments: [{ uri: 'file:///ws/transformer_sana_video.py', apply: true }],
        },
      ],
    });
    assert.equal(r.fields.pipelineSource.status, 'ok');
  });

  it('any other import error fails the field without fixes', async () => {
    const w = rewrittenWorld();
    w.load = {
      status: 'failed',
      message: "No module named 'ftfy'",
      results: [
        { source: '/ws/transformer_sana_video.py', ok: true },
        {
          source: '/ws/pipeline_sana_video.py',
          ok: false,
          error: "No module named 'ftfy'",
          errorType: 'ModuleNotFoundError',
        },
      ],
    };
    const r = await validate(ANSWERS, deps(w));
    assert.deepEqual(r.fields.pipelineSource, {
      status: 'error',
      message: "a run cannot import it: ModuleNotFoundError: No module named 'ftfy'",
    });
  });

  it('an untrusted workspace: the load test did not run, which is said and does not fail', async () => {
    const w = rewrittenWorld();
    w.load = {
      status: 'not-run',
      reason: 'untrusted',
      message: 'not run: untrusted workspace',
      results: [],
    };
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.passed, true);
    assert.deepEqual(r.fields.transformerSource, {
      status: 'warning',
      message: 'defines SanaVideoTransformer3DModel; load test not run: untrusted workspace',
    });
  });

  it('a load test that timed out or could not start fails the check', async () => {
    const w = rewrittenWorld();
    w.load = {
      status: 'timeout',
      message: 'importing the sources took longer than 90 s',
      results: [],
    };
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.passed, false);
    assert.deepEqual(r.general, ['load test: importing the sources took longer than 90 s']);
    w.load = { error: { code: 'no-interpreter', message: "the interpreter 'py' was not found" } };
    const e = await validate(ANSWERS, deps(w));
    assert.deepEqual(e.general, ["load test: the interpreter 'py' was not found"]);
  });

  it('sources outside the workspace are not load-tested (a run imports them from diffusers)', async () => {
    const w = rewrittenWorld();
    w.files[INSTALLED_T] = 'class SanaVideoTransformer3DModel:\n    pass\n';
    const d = deps(w);
    const r = await validate({ ...ANSWERS, transformerSource: INSTALLED_T }, d);
    assert.equal(r.passed, true, JSON.stringify(r));
    assert.ok(d.calls.includes('loadCheck /ws/pipeline_sana_video.py'), d.calls.join('; '));
  });

  it('without a load-check dependency only the static checks run', async () => {
    const d = deps(rewrittenWorld(), false);
    const r = await validate(ANSWERS, d);
    assert.equal(r.passed, true);
    assert.ok(!d.calls.some((c) => c.startsWith('loadCheck')));
  });

  it('helpers', () => {
    assert.equal(isModuleName(MODULE_T), true);
    assert.equal(isModuleName('transformer_sana_video.py'), false);
    assert.equal(isModuleName('models/x.py'), false);
    assert.equal(firstLine('\n  first  \nsecond'), 'first');
  });
});
