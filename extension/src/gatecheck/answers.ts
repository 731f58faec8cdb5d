/**
 * Gate-check answers (pure): the fields, how they are stored in `.cdit/integration.json`, what the
 * server is sent, and prefill suggestions from `model_index.json`, the transformer's
 * `config.json` and the open file.
 *
 * The stored document is shaped like the answers codegen's `build_plan` reads (`model`,
 * `target`, `registerName`), so the server's own code actions generate from the same answers;
 * `gateCheck` and `checklist` are the extension's records. Paths inside the workspace are stored
 * relative to it (a checked-in `.cdit/` works on another machine) and sent to the server absolute.
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import type { TargetKind } from '../common/settings';
import { isRecord } from '../contract/guards';
import type { Override } from '../checklist/model';
import { isChecklistPhaseId } from '../checklist/model';
import { isEmptyRunConfig, parseRunConfig, type RunConfig } from './callArgs';

export const FIELD_IDS = [
  'localPath',
  'pipelineClass',
  'transformerClass',
  'pipelineSource',
  'transformerSource',
  'targetKind',
  'targetPath',
  'registerName',
] as const;
export type FieldId = (typeof FIELD_IDS)[number];

export function isFieldId(value: unknown): value is FieldId {
  return typeof value === 'string' && (FIELD_IDS as readonly string[]).includes(value);
}

export interface GateAnswers {
  localPath: string;
  pipelineClass: string;
  transformerClass: string;
  pipelineSource: string;
  transformerSource: string;
  targetKind: TargetKind;
  /** standalone: the module file to write; checkout: the cache-dit checkout root */
  targetPath: string;
  registerName: string;
}

export const EMPTY_ANSWERS: Readonly<GateAnswers> = Object.freeze({
  localPath: '',
  pipelineClass: '',
  transformerClass: '',
  pipelineSource: '',
  transformerSource: '',
  targetKind: 'standalone',
  targetPath: '',
  registerName: '',
});

export interface FieldSpec {
  id: FieldId;
  label: string;
  help: string;
  input: 'folder' | 'file' | 'text' | 'target-kind';
  required: boolean;
}

export const FIELDS: readonly FieldSpec[] = [
  {
    id: 'localPath',
    label: 'Local model path',
    help: 'Folder holding model_index.json (loaded with from_pretrained, no download).',
    input: 'folder',
    required: true,
  },
  {
    id: 'pipelineClass',
    label: 'Pipeline class',
    help: 'The DiffusionPipeline subclass (model_index.json `_class_name`).',
    input: 'text',
    required: true,
  },
  {
    id: 'transformerClass',
    label: 'Transformer class',
    help: 'The denoiser class cache-dit will wrap.',
    input: 'text',
    required: true,
  },
  {
    id: 'pipelineSource',
    label: 'Pipeline source file',
    help: 'The .py file defining the pipeline (its denoising loop decides has_separate_cfg).',
    input: 'file',
    required: false,
  },
  {
    id: 'transformerSource',
    label: 'Transformer source file',
    help: 'The .py file defining the transformer (analysed, never imported by the editor).',
    input: 'file',
    required: true,
  },
  {
    id: 'targetKind',
    label: 'Target',
    help: 'A standalone module in this project, or a cache-dit checkout (contributing upstream).',
    input: 'target-kind',
    required: true,
  },
  {
    id: 'targetPath',
    label: 'Target path',
    help: 'Standalone: the module file to write. Checkout: the cache-dit repository root.',
    input: 'file',
    required: true,
  },
  {
    id: 'registerName',
    label: 'Register name',
    help: 'The BlockAdapter name; cache-dit matches it as a class-name prefix.',
    input: 'text',
    required: true,
  },
];

export interface GateRecord {
  passed: boolean;
  /** ISO time of the last check */
  checkedAt: string;
  /** suggestions the user accepted (field ids) */
  confirmed: FieldId[];
}

export interface StoredIntegration {
  answers: GateAnswers;
  gate?: GateRecord;
  overrides: Override[];
  /**
   * The pipeline call arguments and file inputs of every verification run (the gate check's
   * "Pipeline call arguments"); they win over the `cdit.callArgs` / `cdit.inputs` settings.
   */
  run?: RunConfig;
}

export function toWorkspaceRelative(p: string, root: string): string {
  if (!p) return p;
  const abs = path.resolve(root, p);
  const rel = path.relative(root, abs);
  if (rel === '') return '.';
  return rel.startsWith('..') || path.isAbsolute(rel) ? abs : rel.split(path.sep).join('/');
}

export function toAbsolute(p: string, root: string): string {
  if (!p) return p;
  return path.resolve(root, p);
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function isIdentifier(value: string): boolean {
  return IDENTIFIER.test(value);
}

/** The answers as `.cdit/integration.json` (paths relative to the workspace where possible). */
export function toStored(stored: StoredIntegration, root: string): Record<string, unknown> {
  const a = stored.answers;
  const rel = (p: string): string | null => (p ? toWorkspaceRelative(p, root) : null);
  const localPath = rel(a.localPath);
  const config = a.localPath ? rel(path.join(a.localPath, 'transformer', 'config.json')) : null;
  const modelIndex = a.localPath ? rel(path.join(a.localPath, 'model_index.json')) : null;
  return {
    schemaVersion: 1,
    model: {
      transformerClass: a.transformerClass || null,
      pipelineClass: a.pipelineClass || null,
      localPath,
      sources: {
        transformer: rel(a.transformerSource),
        pipeline: rel(a.pipelineSource),
        config,
        modelIndex,
      },
    },
    target:
      a.targetKind === 'standalone'
        ? { kind: 'standalone', path: rel(a.targetPath) }
        : { kind: 'cache-dit-checkout', root: rel(a.targetPath) },
    registerName: a.registerName || null,
    gateCheck: stored.gate ?? { passed: false, checkedAt: null, confirmed: [] },
    checklist: { overrides: stored.overrides },
    ...(isEmptyRunConfig(stored.run)
      ? {}
      : {
          run: {
            callArgs: { ...stored.run?.callArgs },
            inputs: Object.fromEntries(
              Object.entries(stored.run?.inputs ?? {}).map(([name, p]) => [
                name,
                toWorkspaceRelative(p, root),
              ]),
            ),
          },
        }),
  };
}

function str(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** Reads `.cdit/integration.json`; unknown or malformed parts fall back to empty answers. */
export function fromStored(data: unknown): StoredIntegration {
  const answers: GateAnswers = { ...EMPTY_ANSWERS };
  const overrides: Override[] = [];
  let gate: GateRecord | undefined;
  if (!isRecord(data)) return { answers, overrides };
  const run = parseRunConfig(data.run);
  const model = isRecord(data.model) ? data.model : {};
  const sources = isRecord(model.sources) ? model.sources : {};
  answers.transformerClass = str(model.transformerClass);
  answers.pipelineClass = str(model.pipelineClass);
  answers.localPath = str(model.localPath);
  answers.transformerSource = str(sources.transformer);
  answers.pipelineSource = str(sources.pipeline);
  const target = isRecord(data.target) ? data.target : {};
  if (target.kind === 'cache-dit-checkout') {
    answers.targetKind = 'cache-dit-checkout';
    answers.targetPath = str(target.root);
  } else {
    answers.targetKind = 'standalone';
    answers.targetPath = str(target.path);
  }
  answers.registerName = str(data.registerName);
  if (isRecord(data.gateCheck) && typeof data.gateCheck.passed === 'boolean') {
    gate = {
      passed: data.gateCheck.passed,
      checkedAt: str(data.gateCheck.checkedAt),
      confirmed: Array.isArray(data.gateCheck.confirmed)
        ? data.gateCheck.confirmed.filter(isFieldId)
        : [],
    };
  }
  const checklist = isRecord(data.checklist) ? data.checklist : {};
  if (Array.isArray(checklist.overrides)) {
    for (const o of checklist.overrides) {
      if (isRecord(o) && isChecklistPhaseId(o.phase) && typeof o.reason === 'string') {
        overrides.push({ phase: o.phase, reason: o.reason, at: str(o.at) });
      }
    }
  }
  return isEmptyRunConfig(run) ? { answers, gate, overrides } : { answers, gate, overrides, run };
}

/** The answers the server's `cdit.buildPlan` / `cdit.generate` read (absolute paths). */
export function serverAnswers(
  a: GateAnswers,
  root: string,
  configExists: boolean,
): Record<string, unknown> {
  const abs = (p: string): string | null => (p ? toAbsolute(p, root) : null);
  const local = abs(a.localPath);
  return {
    model: {
      transformerClass: a.transformerClass || undefined,
      pipelineClass: a.pipelineClass || null,
      localPath: local,
      sources: {
        transformer: abs(a.transformerSource),
        pipeline: abs(a.pipelineSource),
        config: local && configExists ? path.join(local, 'transformer', 'config.json') : null,
        modelIndex: local ? path.join(local, 'model_index.json') : null,
      },
    },
    target:
      a.targetKind === 'standalone'
        ? { kind: 'standalone', path: abs(a.targetPath) }
        : { kind: 'cache-dit-checkout', root: abs(a.targetPath) },
    registerName: a.registerName || undefined,
  };
}

/** Which field a server error path (`model.transformerClass`, `target.path`, ...) belongs to. */
export function fieldForErrorPath(errorPath: string): FieldId | undefined {
  const p = errorPath.trim();
  if (p.startsWith('model.transformerClass') || p.startsWith('model.transformerModule'))
    return 'transformerClass';
  if (p.startsWith('model.pipelineClass')) return 'pipelineClass';
  if (
    p.startsWith('model.localPath') ||
    p.startsWith('model.sources.modelIndex') ||
    p.startsWith('model.sources.config')
  )
    return 'localPath';
  if (p.startsWith('model.sources.transformer')) return 'transformerSource';
  if (p.startsWith('model.sources.pipeline')) return 'pipelineSource';
  if (p.startsWith('target')) return 'targetPath';
  if (p.startsWith('registerName') || p.startsWith('modelSlug')) return 'registerName';
  return undefined;
}

export type SuggestionSource =
  | 'model_index.json'
  | 'config.json'
  | 'open file'
  | 'analysis'
  | 'workspace'
  | 'settings'
  | 'installed diffusers';

/** An installed diffusers pipeline that declares the transformer class as a component. */
export interface PipelineCandidate {
  className: string;
  module: string;
  path: string;
}

export interface Suggestion {
  field: FieldId;
  value: string;
  source: SuggestionSource;
  /** why this value */
  reason: string;
}

export interface SuggestionInputs {
  root: string;
  /** a folder with model_index.json, if one was found */
  modelDir?: string;
  modelIndex?: unknown;
  transformerConfig?: unknown;
  /** the active editor's file and the transformer classes the server found in it */
  openFile?: { path: string; transformerClasses: string[] };
  /** files that define a class, found by a workspace search: class name -> path */
  definedIn?: Record<string, string>;
  /** the analysis' proposed register name (registry facts) */
  proposedRegisterName?: string;
  /** without a model_index.json: installed pipelines that take the transformer class */
  pipelineCandidates?: PipelineCandidate[];
  defaultTarget: TargetKind;
  cacheDitPath: string;
}

/** Prefill suggestions; the user confirms each one (nothing is filled in silently). */
export function suggestions(inputs: SuggestionInputs): Suggestion[] {
  const out: Suggestion[] = [];
  const add = (
    field: FieldId,
    value: string | undefined,
    source: SuggestionSource,
    reason: string,
  ): void => {
    if (value && !out.some((s) => s.field === field && s.value === value))
      out.push({ field, value, source, reason });
  };
  const rel = (p: string): string => toWorkspaceRelative(p, inputs.root);
  if (inputs.modelDir)
    add(
      'localPath',
      rel(inputs.modelDir),
      'workspace',
      'a folder in the workspace holds model_index.json',
    );
  const index = isRecord(inputs.modelIndex) ? inputs.modelIndex : undefined;
  if (index) {
    add(
      'pipelineClass',
      str(index._class_name),
      'model_index.json',
      '`_class_name` in model_index.json',
    );
    const transformerEntry = index.transformer;
    if (Array.isArray(transformerEntry) && typeof transformerEntry[1] === 'string') {
      add(
        'transformerClass',
        transformerEntry[1],
        'model_index.json',
        '`transformer` component in model_index.json',
      );
    }
  }
  const config = isRecord(inputs.transformerConfig) ? inputs.transformerConfig : undefined;
  if (config)
    add(
      'transformerClass',
      str(config._class_name),
      'config.json',
      '`_class_name` in transformer/config.json',
    );
  if (inputs.openFile && inputs.openFile.transformerClasses.length > 0) {
    add(
      'transformerSource',
      rel(inputs.openFile.path),
      'open file',
      `the open file defines ${inputs.openFile.transformerClasses.join(', ')}`,
    );
    for (const cls of inputs.openFile.transformerClasses)
      add('transformerClass', cls, 'open file', 'defined in the open file');
  }
  const definedIn = inputs.definedIn ?? {};
  const transformerClass = out.find((s) => s.field === 'transformerClass')?.value;
  const pipelineClass = out.find((s) => s.field === 'pipelineClass')?.value;
  if (transformerClass && definedIn[transformerClass]) {
    add(
      'transformerSource',
      rel(definedIn[transformerClass]),
      'workspace',
      `defines class ${transformerClass}`,
    );
  }
  if (pipelineClass && definedIn[pipelineClass]) {
    add(
      'pipelineSource',
      rel(definedIn[pipelineClass]),
      'workspace',
      `defines class ${pipelineClass}`,
    );
  }
  add('targetKind', inputs.defaultTarget, 'settings', 'cdit.target');
  if (inputs.defaultTarget === 'cache-dit-checkout') {
    if (inputs.cacheDitPath)
      add('targetPath', inputs.cacheDitPath, 'settings', 'cdit.cacheDitPath');
  } else {
    const source = out.find((s) => s.field === 'transformerSource')?.value;
    if (source) {
      const stem = path.basename(source, '.py');
      add(
        'targetPath',
        `${stem}_cdit.py`,
        'workspace',
        'a module next to the workspace root, named after the transformer file',
      );
    }
  }
  add(
    'registerName',
    inputs.proposedRegisterName,
    'analysis',
    'derived from the class names (prefixes both)',
  );
  // No model_index.json names the pipeline: the installed pipelines that take this transformer.
  if (!out.some((s) => s.field === 'pipelineClass'))
    for (const c of inputs.pipelineCandidates ?? []) {
      add('pipelineClass', c.className, 'installed diffusers', `declares it (${c.module})`);
      if (out.filter((s) => s.field === 'pipelineClass').length === 1)
        add('pipelineSource', c.path, 'installed diffusers', `defines ${c.className}`);
    }
  return out;
}

/** Class names a Python file defines at top level (a text scan; the server does the analysis). */
export function classesDefined(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/^class\s+([A-Za-z_][A-Za-z0-9_]*)\s*[(:]/gm))
    out.push(m[1] as string);
  return out;
}

/** A stable digest of the answers (the plan approval records which answers it was made from). */
export function answersDigest(a: GateAnswers): string {
  const ordered = FIELD_IDS.map((id) => [id, a[id]]);
  return createHash('sha256').update(JSON.stringify(ordered)).digest('hex').slice(0, 16);
}
