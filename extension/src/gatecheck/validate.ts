/**
 * Gate-check validation, field by field, with the reason for each verdict.
 *
 * File-system facts (does the folder exist, does it hold model_index.json) are checked here; what
 * needs analysis or codegen is asked of the language server: which transformer classes the
 * source defines (`cdit.analyzeFile`), whether the answers make a valid IntegrationPlan
 * (`cdit.buildPlan`: register name prefixes, module path...) and whether generation would succeed
 * against the target (`cdit.generate` without applying: register-name shadowing in the checkout,
 * conflicts with edited code). Dependencies are passed in, so this runs in unit tests.
 *
 * The sources must also load the way a verification run imports them. Statically: a source file
 * with relative imports must lie in a package (the analysis' `imports.runtimeImportable`; for the
 * pipeline file, a module-level `from .` outside a folder with `__init__.py`). Then, after every
 * other check passed, `loadCheck` (`cdit.lsp.loadCheck`, trusted workspaces only) imports them in
 * a subprocess as the runtime does. A source that fails is an error with the first line of the
 * Python error and, for a module copied out of diffusers, the fixes: use the installed module
 * (`setField`) or rewrite its relative imports as absolute ones (`command`: a previewed edit).
 */
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { FieldId, GateAnswers } from './answers';
import {
  FIELDS,
  classesDefined,
  fieldForErrorPath,
  isIdentifier,
  serverAnswers,
  toAbsolute,
} from './answers';
import { isRecord } from '../contract/guards';
import { SERVER_COMMANDS } from '../common/serverCommands';

export type FieldStatus = 'ok' | 'warning' | 'error' | 'unchecked';

export interface FieldResult {
  status: FieldStatus;
  message: string;
  /** ways to fix an error, offered next to it */
  fixes?: GateFix[];
}

/**
 * A fix offered with a field's error: set the field to a value (as a suggestion's *Use* does),
 * or run a server command (its edits open in the Refactor Preview; nothing is written unasked).
 */
export type GateFix =
  | { kind: 'setField'; label: string; field: FieldId; value: string }
  | { kind: 'command'; label: string; command: string; arguments: unknown[] };

/** What to do without a model folder: one can be built from the classes alone. */
export const NO_MODEL_FOLDER =
  'required: the folder holding model_index.json. No model yet? Build the pipeline from its ' +
  'classes with small configs and random weights and save it with save_pretrained (see ' +
  '"No model folder yet" in the extension docs): verification needs no trained weights.';

/** `cdit.lsp.rewriteImports`: makes a copied module's relative imports absolute (previewed). */
export const REWRITE_IMPORTS_COMMAND = SERVER_COMMANDS.rewriteImports;

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
      /** the name the checkout target accepts; null: none can (checkoutNameReason says why) */
      checkoutName?: string | null;
      checkoutNameReason?: string;
      existingAdapter?: string | null;
    };
  }[];
  /** the source file's imports (absent from older servers) */
  imports?: ImportsSummary | null;
}

/** Where a copied module's relative imports resolved (an installed diffusers package). */
export interface AnchorSummary {
  package: string;
  version?: string | null;
  /** the dotted module name the file's layout matches */
  module: string;
  /** the installed module of that name, when there is one */
  installedFile?: string | null;
  /** whether the file equals that installed module */
  identical?: boolean | null;
}

export interface ImportsSummary {
  anchor?: AnchorSummary | null;
  /** whether importing the file as it lies gets past its own imports (a static check) */
  runtimeImportable?: boolean;
  /** the error importing it raises first, when that is certain */
  importError?: string | null;
}

/** One source of `cdit.lsp.loadCheck`'s reply. */
export interface LoadCheckResult {
  source: string;
  ok: boolean;
  error?: string;
  errorType?: string;
  module?: string;
  classes?: string[];
  /** for a copy of an installed diffusers module: that module */
  installed?: { module: string; file: string; version?: string | null; identical?: boolean };
  /** for a file whose relative imports resolve against installed diffusers: the rewrite */
  rewrite?: { command: string; arguments: unknown[] };
}

/** `cdit.lsp.loadCheck`: imports the sources in a subprocess as a run does. */
export interface LoadCheckReply {
  status: 'ok' | 'failed' | 'not-run' | 'timeout' | 'error';
  message: string;
  reason?: string;
  results: LoadCheckResult[];
  elapsedS?: number;
}

/** `problems`: the `{path, message}` pairs a joined `message` is made of (path: an answer or
 * plan field, "" when none). */
export interface ServerProblem {
  path: string;
  message: string;
}
export type ServerReply<T> =
  T | { error: { code: string; message: string; hint?: string; problems?: ServerProblem[] } };

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
  /**
   * `cdit.lsp.loadCheck {sources}`: import the sources (absolute paths or dotted module names)
   * in a subprocess as a run does. Without it only the static import checks run.
   */
  loadCheck?(sources: string[]): Promise<ServerReply<LoadCheckReply>>;
}

function isError(value: unknown): value is {
  error: { code: string; message: string; hint?: string; problems?: ServerProblem[] };
} {
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
  const set = (id: FieldId, status: FieldStatus, message: string, fixes?: GateFix[]): void => {
    // an error is never downgraded by a later, milder finding
    if (fields[id].status === 'error' && status !== 'error') return;
    fields[id] = fixes && fixes.length > 0 ? { status, message, fixes } : { status, message };
  };
  const abs = (p: string): string => toAbsolute(p, deps.root);

  for (const f of FIELDS) {
    const value = a[f.id];
    if (f.required && !value.trim())
      set(f.id, 'error', f.id === 'localPath' ? NO_MODEL_FOLDER : 'required');
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
  if (a.pipelineSource.trim() && fields.pipelineSource.status !== 'error') {
    const problem = await outsidePackage(abs(a.pipelineSource), deps);
    // the server's rewrite finds the installed module the copy came from (or says it found none)
    if (problem) set('pipelineSource', 'error', problem, [rewriteFix(abs(a.pipelineSource))]);
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
        else {
          set('transformerSource', 'ok', `defines ${names.join(', ')}`);
          const imports = reply.imports;
          const outside =
            imports === undefined
              ? await outsidePackage(abs(a.transformerSource), deps)
              : undefined;
          if (outside) set('transformerSource', 'error', outside);
          if (imports && imports.runtimeImportable === false) {
            const anchor = imports.anchor ?? undefined;
            const where = anchor
              ? ` (its relative imports resolve against installed ${anchor.package}${anchor.version ? ` ${anchor.version}` : ''} as ${anchor.module})`
              : '';
            set(
              'transformerSource',
              'error',
              `defines ${names.join(', ')}, but a run cannot import it: ${imports.importError ?? 'an import fails'}${where}`,
              anchor ? anchorFixes('transformerSource', abs(a.transformerSource), anchor) : [],
            );
          }
        }
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

  // Register name: one rule, on the server (lsp_server/analysis/register_names.py), for both the
  // suggestion and the check: the suggestion is the analysis' name for this target, and the
  // check is the server's plan validation below. Only a non-identifier is refused here.
  const chosen = analysis?.transformers.find((t) => t.className === a.transformerClass);
  const registry = chosen?.registry;
  const checkout = a.targetKind === 'cache-dit-checkout';
  result.proposedRegisterName =
    (checkout ? registry?.checkoutName : registry?.proposedName) ?? undefined;
  if (checkout && registry?.checkoutName === null && registry.checkoutNameReason)
    set('registerName', 'error', `no register name works here: ${registry.checkoutNameReason}`);
  else if (a.registerName.trim()) {
    if (!isIdentifier(a.registerName)) set('registerName', 'error', 'is not a Python identifier');
    else set('registerName', 'ok', 'checked with the plan');
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
        const problems = dry.error.problems ?? [{ path: '', message: dry.error.message }];
        for (const p of problems) attach(p.path, p.message);
      }
    }
  }

  // Last, the load test: the sources imported in a subprocess as a run imports them.
  if (
    deps.loadCheck &&
    result.general.length === 0 &&
    !Object.values(fields).some((f) => f.status === 'error')
  ) {
    await loadTest(a, deps, fields, set, result.general);
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

type Setter = (id: FieldId, status: FieldStatus, message: string, fixes?: GateFix[]) => void;

/** Source fields a run imports, with the value the load test is given for each. */
const SOURCE_FIELDS = ['transformerSource', 'pipelineSource'] as const;

const MODULE_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$/;

/** A dotted module name (`diffusers.models.transformers.x`) rather than a file. */
export function isModuleName(value: string): boolean {
  return MODULE_NAME.test(value.trim()) && !value.trim().endsWith('.py');
}

/** The first non-empty line of an error text. */
export function firstLine(text: string): string {
  return (
    text
      .split(/\r?\n/)
      .map((l) => l.trim())
      .find((l) => l !== '') ?? ''
  );
}

/** The fixes for a module copied out of an installed package (the analysis' anchor). */
function anchorFixes(field: FieldId, file: string, anchor: AnchorSummary): GateFix[] {
  const fixes: GateFix[] = [];
  if (anchor.installedFile) {
    const same =
      anchor.identical === true
        ? ', identical to this copy'
        : anchor.identical === false
          ? '; your copy differs from it'
          : '';
    fixes.push({
      kind: 'setField',
      label: `Use the installed module ${anchor.module} (${anchor.package}${anchor.version ? ` ${anchor.version}` : ''}${same})`,
      field,
      value: anchor.installedFile,
    });
  }
  fixes.push(rewriteFix(file, anchor.package));
  return fixes;
}

/** The server rewrites a copied module's relative imports as absolute ones, in the preview. */
function rewriteFix(file: string, pkg = 'diffusers'): GateFix {
  return {
    kind: 'command',
    label: `Rewrite the relative imports as absolute ${pkg} imports (preview)`,
    command: REWRITE_IMPORTS_COMMAND,
    arguments: [{ uri: pathToFileURL(file).toString(), apply: true }],
  };
}

/**
 * A module-level relative import in a file whose folder is not a package: the run imports the
 * file as a top-level module, so Python refuses it (the pipeline file is not analysed).
 */
async function outsidePackage(file: string, deps: ValidationDeps): Promise<string | undefined> {
  const text = await deps.readText(file);
  if (text === undefined) return undefined;
  const match = /^from[ \t]+(\.+[\w.]*)[ \t]+import/m.exec(text);
  if (!match) return undefined;
  if ((await deps.kind(path.join(path.dirname(file), '__init__.py'))) === 'file') return undefined;
  const line = text.slice(0, match.index).split('\n').length;
  return `a run cannot import it: attempted relative import with no known parent package (line ${line}: from ${match[1]} import …, and its folder has no __init__.py)`;
}

async function loadTest(
  a: GateAnswers,
  deps: ValidationDeps,
  fields: Record<FieldId, FieldResult>,
  set: Setter,
  general: string[],
): Promise<void> {
  const add = (id: FieldId, status: FieldStatus, note: string): void =>
    set(id, status, fields[id].message ? `${fields[id].message}; ${note}` : note);
  const wanted: { field: FieldId; source: string }[] = [];
  for (const field of SOURCE_FIELDS) {
    const value = a[field].trim();
    if (!value) continue;
    const source = isModuleName(value) ? value : toAbsolute(value, deps.root);
    // a run imports only the sources inside the workspace (others come from installed packages)
    if (!isModuleName(value) && !(source === deps.root || source.startsWith(deps.root + path.sep)))
      continue;
    wanted.push({ field, source });
  }
  if (wanted.length === 0 || !deps.loadCheck) return;
  const reply = await deps.loadCheck(wanted.map((w) => w.source));
  if (isError(reply)) {
    general.push(`load test: ${reply.error.message}`);
    return;
  }
  if (reply.status === 'not-run') {
    for (const w of wanted) add(w.field, 'warning', `load test ${reply.message}`);
    return;
  }
  if (reply.status === 'timeout' || reply.status === 'error') {
    general.push(`load test: ${reply.message}`);
    return;
  }
  for (const w of wanted) {
    const r = reply.results.find((x) => x.source === w.source);
    if (!r) {
      general.push(`load test: no result for ${a[w.field]}`);
      continue;
    }
    if (r.ok) {
      add(w.field, 'ok', 'imports as a run imports it (load test)');
      continue;
    }
    const fixes: GateFix[] = [];
    if (r.installed) {
      fixes.push(
        ...anchorFixes(w.field, w.source, {
          package: 'diffusers',
          version: r.installed.version,
          module: r.installed.module,
          installedFile: r.installed.file,
          identical: r.installed.identical,
        }).filter((f) => f.kind === 'setField'),
      );
    }
    if (r.rewrite) {
      fixes.push({
        kind: 'command',
        label: 'Rewrite the relative imports as absolute diffusers imports (preview)',
        command: r.rewrite.command,
        arguments: r.rewrite.arguments.map((x) => (isRecord(x) ? { ...x, apply: true } : x)),
      });
    }
    const kind = r.errorType ? `${r.errorType}: ` : '';
    set(w.field, 'error', `a run cannot import it: ${kind}${firstLine(r.error ?? '')}`, fixes);
  }
}
