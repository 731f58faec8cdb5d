/**
 * Gate-check validation, field by field, with the reason for each verdict.
 *
 * File-system facts (does the folder exist, does it hold model_index.json) are checked here; what
 * needs analysis or codegen is asked of the language server: which transformer classes the
 * source defines (`cdit.analyzeFile`), whether the answers make a valid IntegrationPlan
 * (`cdit.buildPlan`: register name prefixes, module path...) and whether generation would succeed
 * against the target (`cdit.generate` without applying: register-name shadowing in the checkout,
 * conflicts with edited code). Dependencies are passed in, so this runs in unit tests.
 */
import * as path from 'node:path';
import type { FieldId, GateAnswers } from './answers';
import {
  FIELDS,
  classesDefined,
  fieldForErrorPath,
  isIdentifier,
  serverAnswers,
  splitServerProblems,
  toAbsolute,
} from './answers';
import { isRecord } from '../contract/guards';

export type FieldStatus = 'ok' | 'warning' | 'error' | 'unchecked';

export interface FieldResult {
  status: FieldStatus;
  message: string;
}

export type ValidationResult = {
  fields: Record<FieldId, FieldResult>;
  /** problems that belong to no single field */
  general: string[];
  passed: boolean;
  /** the analysis' proposed register name, a suggestion for the form */
  proposedRegisterName?: string;
};

/** What the server returns from `cdit.analyzeFile`, reduced to what validation needs. */
export interface AnalysisSummary {
  transformers: {
    className: string;
    registry?: {
      proposedName?: string | null;
      shadowedBy?: string[];
      existingAdapter?: string | null;
    };
  }[];
}

export type ServerReply<T> = T | { error: { code: string; message: string; hint?: string } };

export interface ValidationDeps {
  root: string;
  kind(p: string): Promise<'file' | 'dir' | undefined>;
  readText(p: string): Promise<string | undefined>;
  analyze(file: string): Promise<ServerReply<AnalysisSummary>>;
  buildPlan(
    file: string,
    answers: Record<string, unknown>,
  ): Promise<ServerReply<{ plan?: unknown; errors?: { path: string; message: string }[] }>>;
  dryRun(
    file: string,
    answers: Record<string, unknown>,
  ): Promise<ServerReply<{ files?: unknown[] }>>;
}

function isError(
  value: unknown,
): value is { error: { code: string; message: string; hint?: string } } {
  return isRecord(value) && isRecord(value.error) && typeof value.error.message === 'string';
}

export function emptyResult(): ValidationResult {
  const fields = {} as Record<FieldId, FieldResult>;
  for (const f of FIELDS) fields[f.id] = { status: 'unchecked', message: '' };
  return { fields, general: [], passed: false };
}

export async function validate(a: GateAnswers, deps: ValidationDeps): Promise<ValidationResult> {
  const result = emptyResult();
  const { fields } = result;
  const set = (id: FieldId, status: FieldStatus, message: string): void => {
    // an error is never downgraded by a later, milder finding
    if (fields[id].status === 'error' && status !== 'error') return;
    fields[id] = { status, message };
  };
  const abs = (p: string): string => toAbsolute(p, deps.root);

  for (const f of FIELDS) {
    const value = a[f.id];
    if (f.required && !value.trim()) set(f.id, 'error', 'required');
  }

  // Local model folder and its model_index.json.
  let modelIndex: Record<string, unknown> | undefined;
  if (a.localPath.trim()) {
    const kind = await deps.kind(abs(a.localPath));
    if (kind !== 'dir')
      set(
        'localPath',
        'error',
        kind === 'file' ? 'is a file, not a folder' : 'folder does not exist',
      );
    else {
      const text = await deps.readText(path.join(abs(a.localPath), 'model_index.json'));
      if (text === undefined) set('localPath', 'error', 'folder has no model_index.json');
      else {
        try {
          const parsed: unknown = JSON.parse(text);
          modelIndex = isRecord(parsed) ? parsed : undefined;
        } catch {
          modelIndex = undefined;
        }
        if (!modelIndex) set('localPath', 'error', 'model_index.json is not a JSON object');
        else
          set(
            'localPath',
            'ok',
            `has model_index.json (${typeof modelIndex._class_name === 'string' ? modelIndex._class_name : 'no _class_name'})`,
          );
      }
    }
  }

  // Pipeline class (+ its source file, when given).
  if (a.pipelineClass.trim()) {
    if (!isIdentifier(a.pipelineClass)) set('pipelineClass', 'error', 'is not a Python class name');
    else if (
      modelIndex &&
      typeof modelIndex._class_name === 'string' &&
      modelIndex._class_name !== a.pipelineClass
    ) {
      set(
        'pipelineClass',
        'warning',
        `model_index.json names ${modelIndex._class_name}; from_pretrained will be told to use ${a.pipelineClass}`,
      );
    } else set('pipelineClass', 'ok', modelIndex ? 'matches model_index.json' : 'a class name');
  }
  if (a.pipelineSource.trim()) {
    const kind = await deps.kind(abs(a.pipelineSource));
    if (kind !== 'file') set('pipelineSource', 'error', 'file does not exist');
    else if (!a.pipelineSource.endsWith('.py')) set('pipelineSource', 'error', 'is not a .py file');
    else if (a.pipelineClass && isIdentifier(a.pipelineClass)) {
      const defined = classesDefined((await deps.readText(abs(a.pipelineSource))) ?? '');
      if (!defined.includes(a.pipelineClass)) {
        const found = defined.length ? ` (classes there: ${defined.join(', ')})` : '';
        set(
          'pipelineSource',
          'error',
          `class ${a.pipelineClass} is not defined in that file${found}`,
        );
        set('pipelineClass', 'error', `not defined in ${a.pipelineSource}`);
      } else set('pipelineSource', 'ok', `defines ${a.pipelineClass}`);
    } else set('pipelineSource', 'ok', 'a Python file');
  } else {
    set(
      'pipelineSource',
      'warning',
      'optional, but without it has_separate_cfg cannot be inferred (False is assumed)',
    );
  }

  // Transformer source and class, through the server's analysis.
  let analysis: AnalysisSummary | undefined;
  if (a.transformerSource.trim()) {
    const kind = await deps.kind(abs(a.transformerSource));
    if (kind !== 'file') set('transformerSource', 'error', 'file does not exist');
    else if (!a.transformerSource.endsWith('.py'))
      set('transformerSource', 'error', 'is not a .py file');
    else {
      const reply = await deps.analyze(abs(a.transformerSource));
      if (isError(reply))
        set('transformerSource', 'error', `analysis failed: ${reply.error.message}`);
      else {
        analysis = reply;
        const names = reply.transformers.map((t) => t.className);
        if (names.length === 0)
          set(
            'transformerSource',
            'error',
            'defines no diffusion transformer the analysis recognises',
          );
        else set('transformerSource', 'ok', `defines ${names.join(', ')}`);
      }
    }
  }
  if (a.transformerClass.trim()) {
    if (!isIdentifier(a.transformerClass))
      set('transformerClass', 'error', 'is not a Python class name');
    else if (analysis) {
      const names = analysis.transformers.map((t) => t.className);
      if (!names.includes(a.transformerClass)) {
        set(
          'transformerClass',
          'error',
          `class ${a.transformerClass} is not defined in ${a.transformerSource}${names.length ? ` (found: ${names.join(', ')})` : ''}`,
        );
      } else {
        const entry = modelIndex?.transformer;
        const indexed = Array.isArray(entry) && typeof entry[1] === 'string' ? entry[1] : undefined;
        if (indexed && indexed !== a.transformerClass)
          set('transformerClass', 'warning', `model_index.json's transformer is ${indexed}`);
        else set('transformerClass', 'ok', `defined in ${a.transformerSource}`);
      }
    }
  }

  // Target.
  if (a.targetPath.trim()) {
    const target = abs(a.targetPath);
    if (a.targetKind === 'standalone') {
      const base = path.basename(target);
      const parent = await deps.kind(path.dirname(target));
      if (!base.endsWith('.py') || !isIdentifier(base.slice(0, -3)))
        set('targetPath', 'error', 'must name an importable module file (name.py)');
      else if (parent !== 'dir')
        set('targetPath', 'error', `folder ${path.dirname(a.targetPath) || '.'} does not exist`);
      else {
        const exists = (await deps.kind(target)) === 'file';
        set(
          'targetPath',
          'ok',
          exists ? 'exists: generation updates it (edited code is kept)' : 'will be created',
        );
      }
    } else {
      const kind = await deps.kind(target);
      if (kind !== 'dir') set('targetPath', 'error', 'folder does not exist');
      else if ((await deps.kind(path.join(target, 'src', 'cache_dit'))) !== 'dir')
        set('targetPath', 'error', 'not a cache-dit checkout (no src/cache_dit)');
      else set('targetPath', 'ok', 'a cache-dit checkout');
    }
  }
  if (a.targetKind === 'standalone' || a.targetKind === 'cache-dit-checkout')
    set('targetKind', 'ok', a.targetKind);

  // Register name: identifier, prefix of the classes, registry shadowing from the analysis.
  const chosen = analysis?.transformers.find((t) => t.className === a.transformerClass);
  result.proposedRegisterName = chosen?.registry?.proposedName ?? undefined;
  if (a.registerName.trim()) {
    if (!isIdentifier(a.registerName)) set('registerName', 'error', 'is not a Python identifier');
    else if (a.transformerClass && !a.transformerClass.startsWith(a.registerName)) {
      set(
        'registerName',
        'error',
        `is not a prefix of ${a.transformerClass}: cache-dit finds adapters by class-name prefix`,
      );
    } else if (
      chosen?.registry?.proposedName === a.registerName &&
      (chosen.registry.shadowedBy?.length ?? 0) > 0
    ) {
      set(
        'registerName',
        'error',
        `shadowed by the existing cache-dit name(s) ${(chosen.registry.shadowedBy ?? []).join(', ')}`,
      );
    } else set('registerName', 'ok', 'a valid register name');
  }

  // The server's plan and generation checks, once the fields themselves are fine.
  const fieldErrors = Object.values(fields).some((f) => f.status === 'error');
  if (!fieldErrors && analysis) {
    const file = abs(a.transformerSource);
    const configExists = a.localPath
      ? (await deps.kind(path.join(abs(a.localPath), 'transformer', 'config.json'))) === 'file'
      : false;
    const answers = serverAnswers(a, deps.root, configExists);
    const plan = await deps.buildPlan(file, answers);
    if (isError(plan)) result.general.push(`plan: ${plan.error.message}`);
    else if (plan.errors && plan.errors.length > 0) {
      for (const e of plan.errors) attach(e.path, e.message);
    } else {
      const dry = await deps.dryRun(file, answers);
      if (isError(dry) && dry.error.code !== 'up-to-date') {
        for (const p of splitServerProblems(dry.error.message)) attach(p.path, p.message);
      }
    }
  }

  function attach(errorPath: string, message: string): void {
    const field = fieldForErrorPath(errorPath);
    if (field) set(field, 'error', message);
    else result.general.push(errorPath ? `${errorPath}: ${message}` : message);
  }

  result.passed =
    result.general.length === 0 &&
    FIELDS.every(
      (f) =>
        fields[f.id].status !== 'error' && (!f.required || fields[f.id].status !== 'unchecked'),
    );
  return result;
}
