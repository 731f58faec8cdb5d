/**
 * Typed `cdit.*` settings, read from a raw configuration object (pure: no `vscode` import).
 *
 * The server parses the same section again (lsp_server/features/settings.py) and is the authority
 * on what it accepts; here we only need typed values for what the client itself uses (which
 * interpreter to start, smoke-run sizes, the gate check's default target) and the list of keys
 * that require a server restart.
 */

/** Where generated code goes: the plan's `target.kind` values, by the same names. */
export type TargetKind = 'standalone' | 'cache-dit-checkout';
/** Earlier spellings of `cdit.target` still read from users' settings (never written). */
const TARGET_ALIASES: ReadonlyMap<string, TargetKind> = new Map<string, TargetKind>([
  ['checkout', 'cache-dit-checkout'],
]);
export type TraceLevel = 'off' | 'messages' | 'verbose';

export interface Thresholds {
  cachePsnrDb?: number;
  cacheWarnPsnrDb?: number;
  parallelPsnrDb?: number;
  parallelPsnrDbFloat32?: number;
  controlPsnrDb?: number;
  controlPsnrDbFloat32?: number;
  ssimMin?: number;
}

export type DType = 'float32' | 'bfloat16' | 'float16';

/** DBCache options of the runs (the runtime's `CacheOptions`); unset keys keep its defaults. */
export interface CacheSettings {
  fn?: number;
  bn?: number;
  residualDiffThreshold?: number;
  maxWarmupSteps?: number;
  warmupInterval?: number;
  maxCachedSteps?: number;
  maxContinuousCachedSteps?: number;
  calibrateShare?: number;
  control?: boolean;
}

export interface SmokeRun {
  steps: number;
  height: number;
  width: number;
}

/** `verify --tune` (cdit.verifyTune). */
export interface TuneSettings {
  /** time box of the grid from the run's start, seconds */
  budgetS: number;
}

export interface Settings {
  /** Python that runs the server and verification ('' = Python extension, else python3). */
  interpreter: string;
  target: TargetKind;
  cacheDitPath: string;
  cpSizes: number[];
  tpSizes: number[];
  thresholds: Thresholds;
  debounceMs: number;
  maxFileKb: number;
  smokeRun: SmokeRun;
  /** '' = the runtime decides (float32 on CPU, bfloat16 on GPUs) */
  dtype: DType | '';
  cache: CacheSettings;
  /** extra pipeline call arguments (`extraCallKwargs`) */
  callArgs: Record<string, unknown>;
  /** pipeline call arguments loaded from files: name -> path (relative: to the workspace) */
  inputs: Record<string, string>;
  tune: TuneSettings;
  /** diagnostic code -> severity (error | warning | info | hint | off), as linters allow */
  diagnosticSeverity: Record<string, DiagnosticLevel>;
  trace: TraceLevel;
}

export type DiagnosticLevel = 'error' | 'warning' | 'info' | 'hint' | 'off';
const DIAGNOSTIC_LEVELS: readonly string[] = ['error', 'warning', 'info', 'hint', 'off'];

export const DEFAULT_SETTINGS: Readonly<Settings> = Object.freeze({
  interpreter: '',
  target: 'standalone',
  cacheDitPath: '',
  cpSizes: [2, 4, 8],
  tpSizes: [2, 4, 8],
  thresholds: {},
  debounceMs: 250,
  maxFileKb: 2048,
  smokeRun: { steps: 4, height: 64, width: 64 },
  dtype: '',
  cache: {},
  callArgs: {},
  inputs: {},
  tune: { budgetS: 900 },
  diagnosticSeverity: {},
  trace: 'off',
});

/** Settings whose change needs a new server process (the rest reach it as didChangeConfiguration). */
export const RESTART_KEYS: readonly string[] = ['cdit.interpreter'];

/** What `getConfiguration('cdit')` offers: `get(key)` with dotted sub-keys. */
export interface ConfigurationLike {
  get(key: string): unknown;
}

export interface ParsedSettings {
  settings: Settings;
  problems: string[];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function intInRange(value: unknown, low: number, high: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= low && value <= high;
}

function sizes(value: unknown): number[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  if (!value.every((v) => intInRange(v, 2, 1024))) return undefined;
  return [...new Set(value)].sort((a, b) => a - b);
}

const THRESHOLD_LIMITS: Record<keyof Thresholds, number> = {
  cachePsnrDb: 200,
  cacheWarnPsnrDb: 200,
  parallelPsnrDb: 200,
  parallelPsnrDbFloat32: 200,
  controlPsnrDb: 200,
  controlPsnrDbFloat32: 200,
  ssimMin: 1,
};

/** Each cache option: integer or number, and its range. */
const CACHE_LIMITS: Record<
  Exclude<keyof CacheSettings, 'control'>,
  { int: boolean; low: number; high: number }
> = {
  fn: { int: true, low: 0, high: 1000 },
  bn: { int: true, low: 0, high: 1000 },
  residualDiffThreshold: { int: false, low: 0, high: 100 },
  maxWarmupSteps: { int: true, low: 0, high: 10000 },
  warmupInterval: { int: true, low: 1, high: 10000 },
  maxCachedSteps: { int: true, low: -1, high: 10000 },
  maxContinuousCachedSteps: { int: true, low: -1, high: 10000 },
  calibrateShare: { int: false, low: 0, high: 1 },
};

const DTYPES: readonly string[] = ['float32', 'bfloat16', 'float16'];

/** Typed settings from the `cdit` section; a bad value keeps the default and adds a problem. */
export function parseSettings(config: ConfigurationLike): ParsedSettings {
  const problems: string[] = [];
  const d = DEFAULT_SETTINGS;
  const bad = (key: string, expected: string, value: unknown): void => {
    problems.push(
      `cdit.${key}: expected ${expected}, got ${JSON.stringify(value)}; using the default`,
    );
  };
  const str = (key: string, fallback: string): string => {
    const v = config.get(key);
    if (v === undefined || v === null) return fallback;
    if (typeof v === 'string') return v.trim();
    bad(key, 'a string', v);
    return fallback;
  };
  const int = (key: string, fallback: number, low: number, high: number): number => {
    const v = config.get(key);
    if (v === undefined || v === null) return fallback;
    if (intInRange(v, low, high)) return v;
    bad(key, `an integer from ${low} to ${high}`, v);
    return fallback;
  };

  const targetRaw = config.get('target');
  const aliased = typeof targetRaw === 'string' ? TARGET_ALIASES.get(targetRaw) : undefined;
  let target: TargetKind = d.target;
  if (targetRaw === 'standalone' || targetRaw === 'cache-dit-checkout') target = targetRaw;
  else if (aliased !== undefined) target = aliased;
  else if (targetRaw !== undefined && targetRaw !== null)
    bad('target', 'standalone or cache-dit-checkout', targetRaw);

  const sizeOf = (key: 'cpSizes' | 'tpSizes'): number[] => {
    const v = config.get(key);
    if (v === undefined || v === null) return [...d[key]];
    const parsed = sizes(v);
    if (parsed) return parsed;
    bad(key, 'a non-empty list of integers >= 2', v);
    return [...d[key]];
  };

  const thresholds: Thresholds = {};
  const rawThresholds = config.get('thresholds');
  if (isRecord(rawThresholds)) {
    for (const [key, limit] of Object.entries(THRESHOLD_LIMITS) as [keyof Thresholds, number][]) {
      const v = rawThresholds[key];
      if (v === undefined) continue;
      if (typeof v === 'number' && v >= 0 && v <= limit) thresholds[key] = v;
      else bad(`thresholds.${key}`, `a number from 0 to ${limit}`, v);
    }
  } else if (rawThresholds !== undefined && rawThresholds !== null) {
    bad('thresholds', 'an object', rawThresholds);
  }

  const dtypeRaw = config.get('dtype');
  let dtype: DType | '' = d.dtype;
  if (dtypeRaw === '' || (typeof dtypeRaw === 'string' && DTYPES.includes(dtypeRaw)))
    dtype = dtypeRaw as DType | '';
  else if (dtypeRaw !== undefined && dtypeRaw !== null)
    bad('dtype', '"", float32, bfloat16 or float16', dtypeRaw);

  const cache: CacheSettings = {};
  const rawCache = config.get('cache');
  if (isRecord(rawCache)) {
    for (const [key, limit] of Object.entries(CACHE_LIMITS) as [
      Exclude<keyof CacheSettings, 'control'>,
      { int: boolean; low: number; high: number },
    ][]) {
      const v = rawCache[key];
      if (v === undefined || v === null) continue;
      const ok =
        typeof v === 'number' &&
        Number.isFinite(v) &&
        v >= limit.low &&
        v <= limit.high &&
        (!limit.int || Number.isInteger(v));
      if (ok) cache[key] = v;
      else
        bad(
          `cache.${key}`,
          `${limit.int ? 'an integer' : 'a number'} from ${limit.low} to ${limit.high}`,
          v,
        );
    }
    if (rawCache.control !== undefined && rawCache.control !== null) {
      if (typeof rawCache.control === 'boolean') cache.control = rawCache.control;
      else bad('cache.control', 'true or false', rawCache.control);
    }
  } else if (rawCache !== undefined && rawCache !== null) {
    bad('cache', 'an object', rawCache);
  }

  let callArgs: Record<string, unknown> = {};
  const rawCallArgs = config.get('callArgs');
  if (isRecord(rawCallArgs)) callArgs = { ...rawCallArgs };
  else if (rawCallArgs !== undefined && rawCallArgs !== null)
    bad('callArgs', 'an object', rawCallArgs);

  const inputs: Record<string, string> = {};
  const rawInputs = config.get('inputs');
  if (isRecord(rawInputs)) {
    for (const [name, v] of Object.entries(rawInputs)) {
      if (typeof v === 'string' && v.trim() !== '') inputs[name] = v.trim();
      else bad(`inputs.${name}`, 'a file path', v);
    }
  } else if (rawInputs !== undefined && rawInputs !== null) {
    bad('inputs', 'an object', rawInputs);
  }

  let budgetS = d.tune.budgetS;
  const rawBudget = config.get('tune.budgetS');
  if (
    typeof rawBudget === 'number' &&
    Number.isFinite(rawBudget) &&
    rawBudget >= 1 &&
    rawBudget <= 604800
  )
    budgetS = rawBudget;
  else if (rawBudget !== undefined && rawBudget !== null)
    bad('tune.budgetS', 'a number of seconds from 1 to 604800', rawBudget);

  const diagnosticSeverity: Record<string, DiagnosticLevel> = {};
  const rawSeverity = config.get('diagnosticSeverity');
  if (isRecord(rawSeverity)) {
    for (const [code, level] of Object.entries(rawSeverity)) {
      if (
        /^CDIT\d{3}$/.test(code) &&
        typeof level === 'string' &&
        DIAGNOSTIC_LEVELS.includes(level)
      )
        diagnosticSeverity[code] = level as DiagnosticLevel;
      else bad(`diagnosticSeverity.${code}`, DIAGNOSTIC_LEVELS.join(' | '), level);
    }
  } else if (rawSeverity !== undefined && rawSeverity !== null)
    bad('diagnosticSeverity', 'an object of code -> severity', rawSeverity);

  const traceRaw = config.get('trace.server');
  const trace: TraceLevel =
    traceRaw === 'messages' || traceRaw === 'verbose' || traceRaw === 'off' ? traceRaw : 'off';

  return {
    settings: {
      interpreter: str('interpreter', d.interpreter),
      target,
      cacheDitPath: str('cacheDitPath', d.cacheDitPath),
      cpSizes: sizeOf('cpSizes'),
      tpSizes: sizeOf('tpSizes'),
      thresholds,
      debounceMs: int('debounceMs', d.debounceMs, 0, 5000),
      maxFileKb: int('maxFileKb', d.maxFileKb, 1, 20000),
      smokeRun: {
        steps: int('smokeRun.steps', d.smokeRun.steps, 1, 1000),
        height: int('smokeRun.height', d.smokeRun.height, 8, 8192),
        width: int('smokeRun.width', d.smokeRun.width, 8, 8192),
      },
      dtype,
      cache,
      callArgs,
      inputs,
      tune: { budgetS },
      diagnosticSeverity,
      trace,
    },
    problems,
  };
}

/** The run options in one line for the log: `dtype runtime default, cache {"calibrateShare":0.5}`. */
export function runOptionsText(settings: Settings): string {
  const parts = [`dtype ${settings.dtype || 'runtime default'}`];
  const json = (label: string, value: Record<string, unknown>): void => {
    if (Object.keys(value).length > 0) parts.push(`${label} ${JSON.stringify(value)}`);
  };
  json('cache', settings.cache as Record<string, unknown>);
  json('call args', settings.callArgs);
  json('inputs', settings.inputs);
  json('thresholds', settings.thresholds as Record<string, unknown>);
  return parts.join(', ');
}

/** The `cdit` section as the server's settings parser reads it (camelCase keys, no client-only keys). */
export function serverSettings(settings: Settings): Record<string, unknown> {
  return {
    interpreter: settings.interpreter,
    cpSizes: settings.cpSizes,
    tpSizes: settings.tpSizes,
    thresholds: settings.thresholds,
    target: settings.target,
    cacheDitPath: settings.cacheDitPath,
    debounceMs: settings.debounceMs,
    maxFileKb: settings.maxFileKb,
    diagnosticSeverity: settings.diagnosticSeverity,
  };
}

export interface VariableContext {
  workspaceFolder?: string;
  /** name -> path, for `${workspaceFolder:name}` */
  workspaceFolders?: Record<string, string>;
  userHome: string;
  env: Record<string, string | undefined>;
}

/**
 * Expands `${workspaceFolder}`, `${workspaceFolder:name}`, `${userHome}`, `${env:NAME}` and a
 * leading `~`. Unknown variables are left as they are (so the error names them).
 */
export function resolveVariables(value: string, ctx: VariableContext): string {
  let out = value.replace(/\$\{([^}]+)\}/g, (whole, name: string) => {
    if (name === 'workspaceFolder') return ctx.workspaceFolder ?? whole;
    if (name === 'userHome') return ctx.userHome;
    if (name.startsWith('workspaceFolder:')) {
      return ctx.workspaceFolders?.[name.slice('workspaceFolder:'.length)] ?? whole;
    }
    if (name.startsWith('env:')) return ctx.env[name.slice(4)] ?? '';
    return whole;
  });
  if (out === '~' || out.startsWith('~/')) out = ctx.userHome + out.slice(1);
  return out;
}

/**
 * The argument of `cdit.setParallelSizes` (the server's quick fix for a parallel degree the model
 * cannot take): which sizes setting, and the sizes to keep. Anything else is refused.
 */
export function parseSizesArgument(
  value: unknown,
): { setting: 'cpSizes' | 'tpSizes'; sizes: number[] } | undefined {
  if (!isRecord(value)) return undefined;
  const setting = value.setting;
  if (setting !== 'cpSizes' && setting !== 'tpSizes') return undefined;
  const parsed = sizes(value.sizes);
  return parsed ? { setting, sizes: parsed } : undefined;
}
