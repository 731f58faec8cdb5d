import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { GateAnswers } from '../../src/gatecheck/answers';
import { validate, type AnalysisSummary, type ValidationDeps } from '../../src/gatecheck/validate';

const ANSWERS: GateAnswers = {
  localPath: 'tiny',
  pipelineClass: 'DemoPipeline',
  transformerClass: 'DemoTransformer2DModel',
  pipelineSource: 'pipelines/demo_pipeline.py',
  transformerSource: 'models/demo.py',
  targetKind: 'standalone',
  targetPath: 'demo_cdit.py',
  registerName: 'Demo',
};

interface World {
  dirs: string[];
  files: Record<string, string>;
  analysis?: AnalysisSummary | { error: { code: string; message: string } };
  planErrors?: { path: string; message: string }[];
  dryRunError?: {
    code: string;
    message: string;
    problems?: { path: string; message: string }[];
  };
}

function deps(world: World): ValidationDeps & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    root: '/ws',
    kind: async (p) => (world.dirs.includes(p) ? 'dir' : p in world.files ? 'file' : undefined),
    readText: async (p) => world.files[p],
    analyze: async (file) => {
      calls.push(`analyze ${file}`);
      return (
        world.analysis ?? {
          transformers: [
            {
              className: 'DemoTransformer2DModel',
              registry: { proposedName: 'Demo', shadowedBy: [] },
            },
          ],
        }
      );
    },
    buildPlan: async () => {
      calls.push('buildPlan');
      return world.planErrors ? { errors: world.planErrors } : { plan: {} };
    },
    dryRun: async () => {
      calls.push('dryRun');
      return world.dryRunError ? { error: world.dryRunError } : { files: [] };
    },
  };
}

function goodWorld(): World {
  return {
    dirs: ['/ws', '/ws/tiny'],
    files: {
      '/ws/tiny/model_index.json': JSON.stringify({
        _class_name: 'DemoPipeline',
        transformer: ['demo', 'DemoTransformer2DModel'],
      }),
      '/ws/tiny/transformer/config.json': '{}',
      '/ws/pipelines/demo_pipeline.py': 'class DemoPipeline(DiffusionPipeline):\n    pass\n',
      '/ws/models/demo.py': 'class DemoTransformer2DModel(ModelMixin):\n    pass\n',
    },
  };
}

describe('gate-check validation', () => {
  it('passes a consistent set of answers, asking the server for the source and plan checks', async () => {
    const d = deps(goodWorld());
    const r = await validate(ANSWERS, d);
    assert.equal(r.passed, true, JSON.stringify(r));
    assert.deepEqual(d.calls, ['analyze /ws/models/demo.py', 'buildPlan', 'dryRun']);
    assert.equal(r.fields.localPath.message, 'has model_index.json (DemoPipeline)');
    assert.equal(r.fields.transformerClass.status, 'ok');
    assert.equal(r.fields.targetPath.message, 'will be created');
  });

  it('names a folder without model_index.json', async () => {
    const w = goodWorld();
    delete w.files['/ws/tiny/model_index.json'];
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.passed, false);
    assert.deepEqual(r.fields.localPath, {
      status: 'error',
      message: 'folder has no model_index.json',
    });
  });

  it('a class that the file does not define, with what it does define', async () => {
    const w = goodWorld();
    w.analysis = { transformers: [{ className: 'OtherModel' }] };
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.fields.transformerClass.status, 'error');
    assert.equal(
      r.fields.transformerClass.message,
      'class DemoTransformer2DModel is not defined in models/demo.py (found: OtherModel)',
    );
    const p = await validate({ ...ANSWERS, pipelineClass: 'NotHere' }, deps(goodWorld()));
    assert.match(
      p.fields.pipelineSource.message,
      /class NotHere is not defined in that file \(classes there: DemoPipeline\)/,
    );
  });

  it("one register-name rule: the suggestion is the server's name for the target", async () => {
    const w = goodWorld();
    w.analysis = {
      transformers: [
        {
          className: 'DemoTransformer2DModel',
          registry: {
            proposedName: 'Demo',
            shadowedBy: ['Dem'],
            checkoutName: null,
            checkoutNameReason: "cache-dit already registers 'Dem', a prefix of both classes",
          },
        },
      ],
    };
    // standalone: no registry lookup, the analysis' name is offered and the server checks it
    const standalone = await validate(ANSWERS, deps(w));
    assert.equal(standalone.proposedRegisterName, 'Demo');
    assert.equal(standalone.fields.registerName.status, 'ok');
    // checkout under a registered prefix of both classes: no name can pass, and it says why
    const checkout = await validate(
      { ...ANSWERS, targetKind: 'cache-dit-checkout', targetPath: 'cache-dit' },
      deps({ ...w, dirs: [...w.dirs, '/ws/cache-dit/src/cache_dit'] }),
    );
    assert.equal(checkout.proposedRegisterName, undefined);
    assert.deepEqual(checkout.fields.registerName, {
      status: 'error',
      message:
        "no register name works here: cache-dit already registers 'Dem', a prefix of both classes",
    });
  });

  it("a register name the server's rule rejects is an error on the field", async () => {
    const w = goodWorld();
    w.planErrors = [
      {
        path: 'registerName',
        message:
          "'Flux' is not a prefix of the transformer class 'DemoTransformer2DModel': cache-dit finds adapters by class-name prefix",
      },
    ];
    const r = await validate({ ...ANSWERS, registerName: 'Flux' }, deps(w));
    assert.equal(r.fields.registerName.status, 'error');
    assert.match(r.fields.registerName.message, /is not a prefix of the transformer class/);
  });

  it('maps the server plan and generation problems onto fields', async () => {
    const w = goodWorld();
    w.dryRunError = {
      code: 'generation-failed',
      message:
        "registerName: BlockAdapter 'Demo' is shadowed by the registered 'De' (first registered prefix wins); pick a name; plan: manifest unreadable",
      problems: [
        {
          path: 'registerName',
          message:
            "BlockAdapter 'Demo' is shadowed by the registered 'De' (first registered prefix wins); pick a name",
        },
        { path: 'plan', message: 'manifest unreadable' },
      ],
    };
    const r = await validate(ANSWERS, deps(w));
    assert.equal(r.passed, false);
    assert.match(r.fields.registerName.message, /shadowed by the registered 'De'/);
    assert.deepEqual(r.general, ['plan: manifest unreadable']);
    assert.match(r.fields.registerName.message, /; pick a name$/);
    const w1 = goodWorld();
    w1.dryRunError = { code: 'conflict', message: '/ws/x_cdit.py: edited since generation' };
    const r1 = await validate(ANSWERS, deps(w1));
    assert.equal(r1.passed, false);
    assert.match(r1.general.join('\n'), /edited since generation/);
    const w2 = goodWorld();
    w2.planErrors = [{ path: 'target.path', message: "'x' must name an importable module file" }];
    const r2 = await validate(ANSWERS, deps(w2));
    assert.equal(r2.fields.targetPath.status, 'error');
  });

  it('an up-to-date integration is not a problem', async () => {
    const w = goodWorld();
    w.dryRunError = {
      code: 'up-to-date',
      message: 'the generated code is up to date: nothing to change',
    };
    assert.equal((await validate(ANSWERS, deps(w))).passed, true);
  });

  it('requires the required fields and checks the checkout target', async () => {
    const r = await validate(
      { ...ANSWERS, registerName: '', targetKind: 'cache-dit-checkout', targetPath: '/src/cd' },
      deps({ ...goodWorld(), dirs: ['/ws', '/ws/tiny', '/src/cd'] }),
    );
    assert.deepEqual(r.fields.registerName, { status: 'error', message: 'required' });
    assert.deepEqual(r.fields.targetPath, {
      status: 'error',
      message: 'not a cache-dit checkout (no src/cache_dit)',
    });
  });

  it('the pipeline source is optional, with a warning', async () => {
    const r = await validate({ ...ANSWERS, pipelineSource: '' }, deps(goodWorld()));
    assert.equal(r.passed, true);
    assert.equal(r.fields.pipelineSource.status, 'warning');
  });
});
