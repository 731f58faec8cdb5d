/**
 * Pipeline call arguments of the verification runs (pure): what the gate-check form's "Pipeline
 * call arguments" section edits, prefills and validates against the pipeline's `__call__`
 * signature (the analysis' `pipeline.callSignature`), and what `.cdit/integration.json` stores
 * under `run` — the same fields as the CLI's `--call-arg NAME=JSON` (`extraCallKwargs`) and
 * `--input NAME=PATH` (`inputs`).
 *
 * The form edits rows of text (a value is JSON text until the check passes); the stored run
 * configuration holds parsed values and workspace-relative paths.
 */
import * as path from 'node:path';
import { isRecord } from '../contract/guards';
import type { CallParameter, CallSignature } from '../contract/analysis';

/** Stored with the gate-check answers (`run` in `.cdit/integration.json`). */
export interface RunConfig {
  /** name -> JSON value (`extraCallKwargs`) */
  callArgs: Record<string, unknown>;
  /** name -> file path, workspace-relative where possible (`inputs`) */
  inputs: Record<string, string>;
}

export const EMPTY_RUN_CONFIG: Readonly<RunConfig> = Object.freeze({ callArgs: {}, inputs: {} });

export interface CallArgRow {
  name: string;
  /** JSON text */
  value: string;
}

export interface InputRow {
  name: string;
  path: string;
}

export interface CallRows {
  args: CallArgRow[];
  inputs: InputRow[];
}

/** Limits of what the webview may send (rows, text lengths). */
export const MAX_ROWS = 64;
export const MAX_NAME = 200;
export const MAX_VALUE = 16_384;

/**
 * What the runtime passes to every pipeline call itself (cdit_runtime/controller.py
 * `_call_settings`, worker `_call`): a required parameter of these names is not asked for.
 * `overwritten`: the worker sets them after the call arguments, so a value given here is lost.
 */
export const RUNTIME_SUPPLIED: Readonly<Record<string, { overwritten: boolean; note: string }>> =
  Object.freeze({
    prompt: { overwritten: false, note: 'the request prompt' },
    height: { overwritten: false, note: 'cdit.smokeRun.height on CPU smoke runs' },
    width: { overwritten: false, note: 'cdit.smokeRun.width on CPU smoke runs' },
    output_type: { overwritten: false, note: '"np" (the runtime compares arrays)' },
    num_inference_steps: {
      overwritten: true,
      note: 'cdit.smokeRun.steps on CPU smoke runs (28 on GPUs)',
    },
    generator: { overwritten: true, note: 'a seeded CPU generator' },
    callback_on_step_end: { overwritten: true, note: 'the runtime step callback' },
    callback_on_step_end_tensor_inputs: { overwritten: true, note: '["latents"]' },
  });

/**
 * File types the runtime loads (cdit_runtime/inputs.py `EXTENSIONS`); anything else fails the
 * run with BAD_INPUT before a process starts.
 */
export const INPUT_EXTENSIONS: Readonly<Record<string, readonly string[]>> = Object.freeze({
  image: ['.png', '.jpg', '.jpeg', '.webp', '.bmp', '.tif', '.tiff'],
  video: ['.gif', '.mp4', '.mov', '.avi', '.mkv', '.webm'],
  audio: ['.wav', '.flac', '.ogg', '.mp3'],
  array: ['.npy'],
});

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

// --- stored form <-> rows -----------------------------------------------------------------------

/** Reads `run` of `.cdit/integration.json`; malformed parts are dropped. */
export function parseRunConfig(data: unknown): RunConfig {
  const out: RunConfig = { callArgs: {}, inputs: {} };
  if (!isRecord(data)) return out;
  if (isRecord(data.callArgs))
    for (const [name, value] of Object.entries(data.callArgs))
      if (IDENTIFIER.test(name) && value !== undefined) out.callArgs[name] = value;
  if (isRecord(data.inputs))
    for (const [name, value] of Object.entries(data.inputs))
      if (IDENTIFIER.test(name) && typeof value === 'string' && value.trim() !== '')
        out.inputs[name] = value;
  return out;
}

export function isEmptyRunConfig(run: RunConfig | undefined): boolean {
  return !run || (Object.keys(run.callArgs).length === 0 && Object.keys(run.inputs).length === 0);
}

export function rowsFromRunConfig(run: RunConfig | undefined): CallRows {
  return {
    args: Object.entries(run?.callArgs ?? {}).map(([name, value]) => ({
      name,
      value: JSON.stringify(value),
    })),
    inputs: Object.entries(run?.inputs ?? {}).map(([name, p]) => ({ name, path: p })),
  };
}

/**
 * The run configuration of rows that passed `validateCallRows` (values parsed; rows with an empty
 * name or an unparsable value are left out). Input paths are made workspace-relative by `rel`.
 */
export function runConfigFromRows(rows: CallRows, rel: (p: string) => string): RunConfig {
  const out: RunConfig = { callArgs: {}, inputs: {} };
  for (const row of rows.args) {
    const name = row.name.trim();
    const parsed = parseJson(row.value);
    if (name && parsed.ok) out.callArgs[name] = parsed.value;
  }
  for (const row of rows.inputs) {
    const name = row.name.trim();
    if (name && row.path.trim()) out.inputs[name] = rel(row.path.trim());
  }
  return out;
}

/** A stable digest of the rows (the form's "checked for exactly these values"). */
export function rowsKey(rows: CallRows): string {
  return JSON.stringify([
    rows.args.map((r) => [r.name, r.value]),
    rows.inputs.map((r) => [r.name, r.path]),
  ]);
}

function parseJson(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  if (text.trim() === '') return { ok: false, error: 'empty' };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.message : String(e) };
  }
}

// --- the signature ----------------------------------------------------------------------------

function isCallParameter(value: unknown): value is CallParameter {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.kind === 'string' &&
    typeof value.required === 'boolean' &&
    typeof value.hasDefault === 'boolean'
  );
}

/** A server document's call signature, checked (undefined when it is not one). */
export function parseCallSignature(value: unknown): CallSignature | undefined {
  if (
    !isRecord(value) ||
    typeof value.className !== 'string' ||
    !Array.isArray(value.parameters) ||
    !value.parameters.every(isCallParameter)
  )
    return undefined;
  return {
    className: value.className,
    definedIn: typeof value.definedIn === 'string' ? value.definedIn : value.className,
    isPipeline: value.isPipeline !== false,
    path: typeof value.path === 'string' ? value.path : '',
    line: typeof value.line === 'number' ? value.line : 1,
    acceptsVarKeyword: value.acceptsVarKeyword === true,
    varKeyword: typeof value.varKeyword === 'string' ? value.varKeyword : null,
    varPositional: typeof value.varPositional === 'string' ? value.varPositional : null,
    parameters: value.parameters,
    required: value.parameters.filter((p) => p.required).map((p) => p.name),
    checks: Array.isArray(value.checks)
      ? value.checks.filter(
          (c): c is CallSignature['checks'][number] =>
            isRecord(c) && Array.isArray(c.params) && typeof c.condition === 'string',
        )
      : [],
  };
}

/**
 * The signature of `pipelineClass` from an analyze reply (`pipeline.callSignature` and
 * `pipeline.otherCallSignatures`); without a class, or when the file does not define it, the
 * analysis' choice.
 */
export function pickSignature(report: unknown, pipelineClass: string): CallSignature | undefined {
  if (!isRecord(report) || !isRecord(report.pipeline)) return undefined;
  const others: unknown[] = Array.isArray(report.pipeline.otherCallSignatures)
    ? (report.pipeline.otherCallSignatures as unknown[])
    : [];
  const all = [report.pipeline.callSignature, ...others]
    .map(parseCallSignature)
    .filter((s): s is CallSignature => s !== undefined);
  return (pipelineClass && all.find((s) => s.className === pipelineClass)) || all[0];
}

function passableByName(p: CallParameter): boolean {
  return p.kind === 'positional_or_keyword' || p.kind === 'keyword_only';
}

// --- prefill and hints ----------------------------------------------------------------------------

/**
 * Rows for every required parameter (no default) that neither the runtime nor the rows nor the
 * base (the `cdit.callArgs` / `cdit.inputs` settings) supply: an input row (empty path) for a file
 * input, else an argument row with an empty value to fill in. Returns the new rows and the names
 * added.
 */
export function prefillRows(
  rows: CallRows,
  signature: CallSignature | undefined,
  base: RunConfig = EMPTY_RUN_CONFIG,
): { rows: CallRows; added: string[] } {
  if (!signature) return { rows, added: [] };
  const given = givenNames(rows, base);
  const out: CallRows = { args: [...rows.args], inputs: [...rows.inputs] };
  const added: string[] = [];
  for (const p of signature.parameters) {
    if (!p.required || !passableByName(p) || given.has(p.name) || RUNTIME_SUPPLIED[p.name])
      continue;
    if (p.role === 'input') out.inputs.push({ name: p.name, path: '' });
    else out.args.push({ name: p.name, value: '' });
    added.push(p.name);
  }
  return { rows: out, added };
}

function givenNames(rows: CallRows, base: RunConfig): Set<string> {
  return new Set([
    ...rows.args.map((r) => r.name.trim()),
    ...rows.inputs.map((r) => r.name.trim()),
    ...Object.keys(base.callArgs),
    ...Object.keys(base.inputs),
  ]);
}

export interface CallHint {
  name: string;
  /** JSON text the "Add" button puts in a new row */
  value: string;
  kind: 'arg' | 'input';
  role: string;
  /** why it is shown */
  reason: string;
}

function defaultText(p: CallParameter): string {
  if (!p.hasDefault) return 'no default';
  return p.defaultIsLiteral ? JSON.stringify(p.default) : (p.defaultText ?? '?');
}

/**
 * What the form shows below the rows: resolution / frames / duration parameters with their
 * defaults (a CPU smoke run of a video pipeline at its default 81 frames is slow; "Invalid sample
 * size" style checks), optional file inputs, and switches that skip a check that raises
 * (`use_resolution_binning: false`). Parameters already given are not repeated.
 */
export function callHints(
  signature: CallSignature | undefined,
  rows: CallRows,
  base: RunConfig = EMPTY_RUN_CONFIG,
): CallHint[] {
  if (!signature) return [];
  const given = givenNames(rows, base);
  const out: CallHint[] = [];
  const seen = new Set<string>();
  for (const c of signature.checks) {
    for (const [name, value] of Object.entries(c.avoid ?? {})) {
      if (given.has(name) || seen.has(name)) continue;
      seen.add(name);
      const said = c.message ? `raises "${c.message}"` : 'raises';
      out.push({
        name,
        value: JSON.stringify(value),
        kind: 'arg',
        role: 'check',
        reason: `${c.method} ${said} when ${c.condition} (line ${c.line}); ${JSON.stringify(value)} skips it`,
      });
    }
  }
  for (const p of signature.parameters) {
    if (given.has(p.name) || seen.has(p.name) || !passableByName(p)) continue;
    const supplied = RUNTIME_SUPPLIED[p.name];
    if (p.role === 'resolution' || p.role === 'frames' || p.role === 'duration') {
      seen.add(p.name);
      const where = supplied ? `; the runtime passes ${supplied.note}` : '';
      out.push({
        name: p.name,
        value:
          p.hasDefault && p.defaultIsLiteral && p.default !== null ? JSON.stringify(p.default) : '',
        kind: 'arg',
        role: p.role,
        reason: `${p.role}: pipeline default ${defaultText(p)}${where}`,
      });
    } else if (p.role === 'input' && !p.required) {
      seen.add(p.name);
      out.push({
        name: p.name,
        value: '',
        kind: 'input',
        role: 'input',
        reason: `optional ${p.inputKind ?? 'file'} input${p.annotation ? ` (${p.annotation})` : ''}`,
      });
    }
  }
  return out;
}

// --- validation ---------------------------------------------------------------------------------

export type RowStatus = 'ok' | 'warning' | 'error' | 'unchecked';

export interface RowResult {
  status: RowStatus;
  message: string;
}

export interface CallValidation {
  args: RowResult[];
  inputs: RowResult[];
  /** problems of no single row (a required parameter missing) */
  general: string[];
  /** worth knowing, not blocking (settings the pipeline ignores) */
  warnings: string[];
  passed: boolean;
}

export interface CallValidationDeps {
  root: string;
  kind(p: string): Promise<'file' | 'dir' | undefined>;
}

export function emptyCallValidation(rows?: CallRows): CallValidation {
  const unchecked = (): RowResult => ({ status: 'unchecked', message: '' });
  return {
    args: (rows?.args ?? []).map(unchecked),
    inputs: (rows?.inputs ?? []).map(unchecked),
    general: [],
    warnings: [],
    passed: true,
  };
}

/** Edit distance (Levenshtein), for "did you mean". */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost);
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/** The closest candidate to `name`: within a third of its length, or a word of it. */
export function didYouMean(name: string, candidates: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  let best: { name: string; score: number } | undefined;
  for (const c of candidates) {
    const d = editDistance(lower, c.toLowerCase());
    const words = c.toLowerCase().split('_');
    const score =
      d <= Math.max(2, Math.floor(Math.max(name.length, c.length) / 3))
        ? d
        : words.includes(lower) || lower.split('_').includes(c.toLowerCase())
          ? 10
          : Infinity;
    if (score < (best?.score ?? Infinity)) best = { name: c, score };
  }
  return best?.name;
}

function fileType(p: string): string | undefined {
  const ext = path.extname(p).toLowerCase();
  return Object.entries(INPUT_EXTENSIONS).find(([, list]) => list.includes(ext))?.[0];
}

const NUMERIC = /^(?:int|float|Optional\[(?:int|float)\])(?:\s*\|\s*None)?$/;
const BOOLEAN = /^(?:bool|Optional\[bool\])(?:\s*\|\s*None)?$/;

/**
 * Checks the rows against the signature: names (identifiers, given once, parameters of
 * `__call__` unless it takes **kwargs — with a "did you mean"), values (valid JSON, and of the
 * annotated kind where that is plain), inputs (an existing file of a type the runtime loads), and
 * that every required parameter is given (by the rows, the settings in `base`, or the runtime).
 */
export async function validateCallRows(
  rows: CallRows,
  signature: CallSignature | undefined,
  deps: CallValidationDeps,
  base: RunConfig = EMPTY_RUN_CONFIG,
): Promise<CallValidation> {
  const result = emptyCallValidation(rows);
  const params = new Map((signature?.parameters ?? []).map((p) => [p.name, p]));
  const names = (signature?.parameters ?? []).filter(passableByName).map((p) => p.name);
  const owner = signature ? `${signature.className}.__call__` : '';
  const counts = new Map<string, number>();
  for (const r of [...rows.args, ...rows.inputs]) {
    const n = r.name.trim();
    if (n) counts.set(n, (counts.get(n) ?? 0) + 1);
  }

  /** a name's problem, or undefined when it is fine */
  const nameProblem = (raw: string): RowResult | undefined => {
    const name = raw.trim();
    if (!name) return { status: 'error', message: 'give the parameter name' };
    if (!IDENTIFIER.test(name)) return { status: 'error', message: 'is not a Python identifier' };
    if ((counts.get(name) ?? 0) > 1)
      return { status: 'error', message: `${name} is given twice (one row per name)` };
    const supplied = RUNTIME_SUPPLIED[name];
    if (supplied?.overwritten)
      return {
        status: 'error',
        message: `${name} is set by the runtime (${supplied.note}): a value here is ignored`,
      };
    if (!signature) return undefined;
    const p = params.get(name);
    if (p && !passableByName(p))
      return {
        status: 'error',
        message:
          p.kind === 'positional_only'
            ? `${name} is positional-only in ${owner}: it cannot be passed by name`
            : `${name} is the ${p.kind === 'var_keyword' ? '**' : '*'}${name} of ${owner}, not a parameter`,
      };
    if (!p && !signature.acceptsVarKeyword) {
      const guess = didYouMean(name, names);
      return {
        status: 'error',
        message:
          `${owner} has no parameter ${name} (and no **kwargs): the runtime would drop it` +
          (guess ? ` — did you mean ${guess}?` : ''),
      };
    }
    return undefined;
  };

  rows.args.forEach((row, i) => {
    const bad = nameProblem(row.name);
    if (bad) {
      result.args[i] = bad;
      return;
    }
    const name = row.name.trim();
    const parsed = parseJson(row.value);
    if (!parsed.ok) {
      const quoted = /^[A-Za-z_][\w .-]*$/.test(row.value.trim())
        ? ` (a string is written in quotes: ${JSON.stringify(row.value.trim())})`
        : '';
      result.args[i] = {
        status: 'error',
        message:
          parsed.error === 'empty'
            ? `give a value for ${name} (JSON: 49, 2.5, false, "text", [1, 2])`
            : `not valid JSON${quoted}`,
      };
      return;
    }
    const p = params.get(name);
    const ann = (p?.annotation ?? '').trim();
    const v = parsed.value;
    if (
      p &&
      NUMERIC.test(ann) &&
      typeof v !== 'number' &&
      !(v === null && /None|Optional/.test(ann))
    )
      result.args[i] = { status: 'warning', message: `${name} is annotated ${ann}` };
    else if (p && BOOLEAN.test(ann) && typeof v !== 'boolean')
      result.args[i] = { status: 'warning', message: `${name} is annotated ${ann}: true or false` };
    else if (RUNTIME_SUPPLIED[name])
      result.args[i] = {
        status: 'warning',
        message: `replaces the runtime's ${name} (${RUNTIME_SUPPLIED[name]?.note})`,
      };
    else if (p?.role === 'input')
      result.args[i] = {
        status: 'warning',
        message: `${name} looks like a file input: add it under File inputs to load a file`,
      };
    else
      result.args[i] = {
        status: 'ok',
        message: p
          ? `${JSON.stringify(v)}${p.hasDefault ? ` (pipeline default ${defaultText(p)})` : ''}`
          : signature
            ? `taken by **${signature.varKeyword ?? 'kwargs'}`
            : 'valid JSON (no pipeline signature to check the name against)',
      };
  });

  for (const [i, row] of rows.inputs.entries()) {
    const bad = nameProblem(row.name);
    if (bad) {
      result.inputs[i] = bad;
      continue;
    }
    const file = row.path.trim();
    if (!file) {
      result.inputs[i] = { status: 'error', message: 'choose the file to load' };
      continue;
    }
    const abs = path.resolve(deps.root, file);
    const kind = await deps.kind(abs);
    if (kind !== 'file') {
      result.inputs[i] = {
        status: 'error',
        message: kind === 'dir' ? `${file} is a folder` : `${file} does not exist`,
      };
      continue;
    }
    const type = fileType(file);
    if (!type) {
      const known = Object.values(INPUT_EXTENSIONS).flat().join(' ');
      result.inputs[i] = {
        status: 'error',
        message: `the runtime cannot load ${path.extname(file) || 'a file without an extension'} (it loads ${known})`,
      };
      continue;
    }
    const p = params.get(row.name.trim());
    const expected = p?.inputKind === 'mask' ? 'image' : p?.inputKind;
    if (expected && type !== 'array' && type !== expected)
      result.inputs[i] = {
        status: 'warning',
        message: `loaded as ${type}; ${row.name.trim()} looks like a${expected === 'image' || expected === 'audio' ? 'n' : ''} ${expected} input`,
      };
    else result.inputs[i] = { status: 'ok', message: `loaded as ${type}` };
  }

  if (signature) {
    const given = givenNames(rows, base);
    for (const p of signature.parameters) {
      if (!p.required || RUNTIME_SUPPLIED[p.name] || given.has(p.name)) continue;
      result.general.push(
        passableByName(p)
          ? `${p.name} is required by ${owner} (no default): add it${p.role === 'input' ? ' as a file input' : ''}`
          : `${p.name} is a required positional-only parameter of ${owner}: the runtime cannot pass it`,
      );
    }
    if (!signature.acceptsVarKeyword) {
      const known = new Set(names);
      const fromRows = new Set(
        [...rows.args, ...rows.inputs].map((r) => r.name.trim()).filter(Boolean),
      );
      for (const [setting, map] of [
        ['cdit.callArgs', base.callArgs],
        ['cdit.inputs', base.inputs],
      ] as const)
        for (const name of Object.keys(map))
          if (!known.has(name) && !fromRows.has(name))
            result.warnings.push(
              `${setting} gives ${name}, which ${owner} does not take (the runtime drops it)`,
            );
    }
  }
  result.passed =
    result.general.length === 0 &&
    [...result.args, ...result.inputs].every((r) => r.status !== 'error');
  return result;
}
