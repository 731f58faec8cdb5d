import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  EMPTY_ANSWERS,
  answersDigest,
  classesDefined,
  fieldForErrorPath,
  fromStored,
  serverAnswers,
  suggestions,
  toStored,
  toWorkspaceRelative,
  type GateAnswers,
} from '../../src/gatecheck/answers';

const ANSWERS: GateAnswers = {
  localPath: 'tiny-demo-mmdit',
  pipelineClass: 'DemoMMDiTPipeline',
  transformerClass: 'DemoMMDiTTransformer2DModel',
  pipelineSource: 'pipelines/demo_mmdit_pipeline.py',
  transformerSource: '/ws/models/demo_mmdit.py',
  targetKind: 'standalone',
  targetPath: 'demo_mmdit_cdit.py',
  registerName: 'DemoMMDiT',
};

describe('gate-check answers', () => {
  it('are stored the way codegen reads answers (paths relative to the workspace) and read back', () => {
    const stored = toStored(
      {
        answers: ANSWERS,
        gate: { passed: true, checkedAt: 't', confirmed: ['localPath'] },
        overrides: [],
      },
      '/ws',
    );
    assert.deepEqual(stored.model, {
      transformerClass: 'DemoMMDiTTransformer2DModel',
      pipelineClass: 'DemoMMDiTPipeline',
      localPath: 'tiny-demo-mmdit',
      sources: {
        transformer: 'models/demo_mmdit.py',
        pipeline: 'pipelines/demo_mmdit_pipeline.py',
        config: 'tiny-demo-mmdit/transformer/config.json',
        modelIndex: 'tiny-demo-mmdit/model_index.json',
      },
    });
    assert.deepEqual(stored.target, { kind: 'standalone', path: 'demo_mmdit_cdit.py' });
    const back = fromStored(JSON.parse(JSON.stringify(stored)));
    assert.deepEqual(back.answers, { ...ANSWERS, transformerSource: 'models/demo_mmdit.py' });
    assert.equal(back.gate?.passed, true);
    assert.deepEqual(back.gate?.confirmed, ['localPath']);
  });

  it('reads a checkout target and overrides, and survives junk', () => {
    const back = fromStored({
      target: { kind: 'cache-dit-checkout', root: '/src/cd' },
      checklist: {
        overrides: [
          { phase: 'tp', reason: 'r', at: 'a' },
          { phase: 'warp', reason: 'x' },
        ],
      },
    });
    assert.equal(back.answers.targetKind, 'cache-dit-checkout');
    assert.equal(back.answers.targetPath, '/src/cd');
    assert.deepEqual(back.overrides, [{ phase: 'tp', reason: 'r', at: 'a' }]);
    assert.deepEqual(fromStored('nonsense').answers, EMPTY_ANSWERS);
  });

  it('are sent to the server with absolute paths', () => {
    const sent = serverAnswers(ANSWERS, '/ws', true) as {
      model: { sources: Record<string, string> };
      target: unknown;
    };
    assert.deepEqual(sent.model.sources, {
      transformer: '/ws/models/demo_mmdit.py',
      pipeline: '/ws/pipelines/demo_mmdit_pipeline.py',
      config: '/ws/tiny-demo-mmdit/transformer/config.json',
      modelIndex: '/ws/tiny-demo-mmdit/model_index.json',
    });
    assert.deepEqual(sent.target, { kind: 'standalone', path: '/ws/demo_mmdit_cdit.py' });
  });

  it('keeps paths outside the workspace absolute', () => {
    assert.equal(toWorkspaceRelative('/elsewhere/x.py', '/ws'), '/elsewhere/x.py');
    assert.equal(toWorkspaceRelative('/ws/a/b.py', '/ws'), 'a/b.py');
  });

  it('digest changes with any answer', () => {
    assert.notEqual(answersDigest(ANSWERS), answersDigest({ ...ANSWERS, registerName: 'Demo' }));
    assert.equal(answersDigest(ANSWERS), answersDigest({ ...ANSWERS }));
  });
});

describe('server problems to fields', () => {
  it('maps plan paths to fields', () => {
    assert.equal(fieldForErrorPath('registerName'), 'registerName');
    assert.equal(fieldForErrorPath('model.transformerClass'), 'transformerClass');
    assert.equal(fieldForErrorPath('target.path'), 'targetPath');
    assert.equal(fieldForErrorPath('model.sources.pipeline'), 'pipelineSource');
    assert.equal(fieldForErrorPath('cache.blockLists[0].forwardPattern'), undefined);
  });
});

describe('prefill suggestions', () => {
  const modelIndex = {
    _class_name: 'DemoMMDiTPipeline',
    transformer: ['demo_mmdit', 'DemoMMDiTTransformer2DModel'],
    vae: ['diffusers', 'AutoencoderKL'],
  };

  it('come from model_index.json, config.json, the open file and the workspace', () => {
    const s = suggestions({
      root: '/ws',
      modelDir: '/ws/tiny-demo-mmdit',
      modelIndex,
      transformerConfig: { _class_name: 'DemoMMDiTTransformer2DModel', num_layers: 2 },
      openFile: {
        path: '/ws/models/demo_mmdit.py',
        transformerClasses: ['DemoMMDiTTransformer2DModel'],
      },
      definedIn: { DemoMMDiTPipeline: '/ws/pipelines/demo_mmdit_pipeline.py' },
      proposedRegisterName: 'DemoMMDiT',
      defaultTarget: 'standalone',
      cacheDitPath: '',
    });
    const first = (field: string): string | undefined => s.find((x) => x.field === field)?.value;
    assert.equal(first('localPath'), 'tiny-demo-mmdit');
    assert.equal(first('pipelineClass'), 'DemoMMDiTPipeline');
    assert.equal(first('transformerClass'), 'DemoMMDiTTransformer2DModel');
    assert.equal(
      s.filter((x) => x.field === 'transformerClass').length,
      1,
      'one suggestion per value',
    );
    assert.equal(s.find((x) => x.field === 'transformerClass')?.source, 'model_index.json');
    assert.equal(first('transformerSource'), 'models/demo_mmdit.py');
    assert.equal(first('pipelineSource'), 'pipelines/demo_mmdit_pipeline.py');
    assert.equal(first('targetKind'), 'standalone');
    assert.equal(first('targetPath'), 'demo_mmdit_cdit.py');
    assert.equal(first('registerName'), 'DemoMMDiT');
  });

  it('suggest the cache-dit checkout from the settings', () => {
    const s = suggestions({
      root: '/ws',
      defaultTarget: 'cache-dit-checkout',
      cacheDitPath: '/src/cache-dit',
    });
    assert.deepEqual(
      s.map((x) => [x.field, x.value]),
      [
        ['targetKind', 'cache-dit-checkout'],
        ['targetPath', '/src/cache-dit'],
      ],
    );
  });

  it('top-level classes of a file', () => {
    assert.deepEqual(
      classesDefined('class A(B):\n  class Inner:\n    pass\nclass C:\n  pass\n# class D(E):\n'),
      ['A', 'C'],
    );
  });
});

describe('no model_index.json', () => {
  const candidates = [
    {
      className: 'SanaVideoPipeline',
      module: 'diffusers.pipelines.sana_video.pipeline_sana_video',
      path: '/site/diffusers/pipelines/sana_video/pipeline_sana_video.py',
    },
    {
      className: 'SanaImageToVideoPipeline',
      module: 'diffusers.pipelines.sana_video.pipeline_sana_video_i2v',
      path: '/site/diffusers/pipelines/sana_video/pipeline_sana_video_i2v.py',
    },
  ];
  it('suggests the installed pipelines that take the transformer, the first with its source', () => {
    const out = suggestions({
      root: '/ws',
      pipelineCandidates: candidates,
      defaultTarget: 'standalone',
      cacheDitPath: '',
    });
    const classes = out.filter((s) => s.field === 'pipelineClass');
    assert.deepEqual(
      classes.map((s) => s.value),
      ['SanaVideoPipeline', 'SanaImageToVideoPipeline'],
    );
    assert.ok(classes.every((s) => s.source === 'installed diffusers'));
    const sources = out.filter((s) => s.field === 'pipelineSource');
    assert.deepEqual(
      sources.map((s) => s.value),
      [candidates[0]?.path],
    );
  });
  it('model_index.json wins when there is one', () => {
    const out = suggestions({
      root: '/ws',
      modelIndex: { _class_name: 'MyPipeline' },
      pipelineCandidates: candidates,
      defaultTarget: 'standalone',
      cacheDitPath: '',
    });
    assert.deepEqual(
      out.filter((s) => s.field === 'pipelineClass').map((s) => s.value),
      ['MyPipeline'],
    );
  });
});
