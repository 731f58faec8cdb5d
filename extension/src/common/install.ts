/**
 * What to install into the interpreter, for what the user does (pure: no vscode import).
 *
 * - The language server (analysis, gate check, plan review, code generation) needs the base
 *   package only: `lsp_server` with pygls, lsprotocol and libcst (`pip install <bundled folder>`).
 * - A verification run (the one-click runs) also needs the `[runtime]` extra: torch, diffusers,
 *   transformers, cache-dit, einops, scikit-image (`pip install '<bundled folder>[runtime]'`, or
 *   `cdit-integrator[runtime]` when this build carries no Python package).
 *
 * The server refuses a run whose interpreter lacks the runtime with the error code
 * `runtime-missing` (with the missing packages, the interpreter and the requirement); the import
 * check at start reports the missing runtime packages too (`runtimeMissing`), for the status item.
 */

export type InstallNeed = 'server' | 'runtime';

export const PACKAGE_NAME = 'cdit-integrator';
export const RUNTIME_EXTRA = 'runtime';
export const RUNTIME_REQUIREMENT = `${PACKAGE_NAME}[${RUNTIME_EXTRA}]`;
/** The server's error code for a run (or a load test) without the runtime packages. */
export const RUNTIME_MISSING = 'runtime-missing';

/** Import names the server reports, as pip knows them. */
const DISTRIBUTIONS: Readonly<Record<string, string>> = {
  cache_dit: 'cache-dit',
  skimage: 'scikit-image',
};

export function distributionName(module: string): string {
  return DISTRIBUTIONS[module] ?? module;
}

/**
 * The pip requirement that provides `need`: the bundled package folder for the server, the same
 * folder with `[runtime]` for runs (else the published package with the extra); undefined when
 * nothing can be installed (no bundled package for the server).
 */
export function installRequirement(
  need: InstallNeed,
  bundledDir: string | undefined,
): string | undefined {
  if (need === 'server') return bundledDir;
  return bundledDir ? `${bundledDir}[${RUNTIME_EXTRA}]` : RUNTIME_REQUIREMENT;
}

/** What the import check (or the server) found for an interpreter; see `ImportCheck`. */
export interface InstalledParts {
  /** `lsp_server`, pygls and lsprotocol import */
  ok: boolean;
  /** runtime packages not found; undefined when not known (an older server package) */
  runtimeMissing?: readonly string[];
}

/**
 * What has to be installed before the user can do `action` in this interpreter, or undefined
 * when nothing is missing (or, for a run, when it is not known: the server then decides).
 * A run in an interpreter without the server gets the runtime extra, which brings both.
 */
export function missingFor(
  parts: InstalledParts | undefined,
  action: 'serve' | 'run',
): InstallNeed | undefined {
  if (!parts) return undefined;
  if (action === 'serve') return parts.ok ? undefined : 'server';
  if (!parts.ok) return 'runtime';
  return parts.runtimeMissing && parts.runtimeMissing.length > 0 ? 'runtime' : undefined;
}

/** The server's refusal of a run for a missing runtime. */
export interface RuntimeMissing {
  message: string;
  hint?: string;
  /** import names (torch, diffusers, cache_dit …) */
  missing: string[];
  /** the interpreter the run would use, as the server resolved it */
  interpreter?: string;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((x): x is string => typeof x === 'string') : [];
}

/** A `{error: {code: 'runtime-missing', …}}` reply as `RuntimeMissing`; undefined for others. */
export function runtimeMissing(reply: unknown): RuntimeMissing | undefined {
  if (!isRecord(reply) || !isRecord(reply.error)) return undefined;
  const e = reply.error;
  if (e.code !== RUNTIME_MISSING || typeof e.message !== 'string') return undefined;
  return {
    message: e.message,
    hint: typeof e.hint === 'string' && e.hint ? e.hint : undefined,
    missing: strings(e.missing),
    interpreter: typeof e.interpreter === 'string' && e.interpreter ? e.interpreter : undefined,
  };
}

export interface InstallOffer {
  need: InstallNeed;
  /** the interpreter pip runs in */
  python: string;
  /** what pip installs */
  requirement: string;
  /** the notification's text */
  prompt: string;
  /** its buttons, first the default */
  actions: string[];
}

export const INSTALL_ACTION = 'Install';
export const CHOOSE_INTERPRETER_ACTION = 'Choose Interpreter';
export const SHOW_LOGS_ACTION = 'Show Logs';

/**
 * The offer after a run was refused for a missing runtime: install `[runtime]` into the
 * interpreter the run uses (the server's, else the resolved one). Installing runs pip, so it is
 * offered only in a trusted workspace.
 */
export function runtimeInstallOffer(
  refusal: RuntimeMissing,
  context: { resolvedPython: string | undefined; bundledDir: string | undefined; trusted: boolean },
): InstallOffer {
  const python = refusal.interpreter ?? context.resolvedPython ?? 'python3';
  const requirement = installRequirement('runtime', context.bundledDir) ?? RUNTIME_REQUIREMENT;
  const names = refusal.missing.map(distributionName).join(', ');
  const what = context.bundledDir
    ? `the bundled package with its [${RUNTIME_EXTRA}] extra`
    : RUNTIME_REQUIREMENT;
  const prompt =
    `cdit: verification runs need the [${RUNTIME_EXTRA}] extra in ${python}` +
    (names ? ` (${names} not installed)` : '') +
    (context.trusted ? `. Install ${what} with pip?` : `: ${refusal.message}`);
  return {
    need: 'runtime',
    python,
    requirement,
    prompt,
    actions: [
      ...(context.trusted ? [INSTALL_ACTION] : []),
      CHOOSE_INTERPRETER_ACTION,
      SHOW_LOGS_ACTION,
    ],
  };
}

/** One line for the server status item: what a run would still need, or undefined. */
export function runtimeStatusNote(parts: InstalledParts | undefined): string | undefined {
  if (missingFor(parts, 'run') !== 'runtime' || !parts?.ok) return undefined;
  const names = (parts.runtimeMissing ?? []).map(distributionName).join(', ');
  return `verification runs need the [${RUNTIME_EXTRA}] extra (${names} not installed)`;
}
