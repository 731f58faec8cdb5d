/**
 * Which Python runs the language server, and how every Python process is started (pure:
 * dependencies are passed in).
 *
 * Strategy, first that works:
 *   1. the `cdit.interpreter` setting (variables expanded; relative to the workspace folder);
 *   2. the Python extension's active environment for the workspace, when it is installed;
 *   3. `python3` on PATH.
 * A configured interpreter that does not exist is reported and the next step is tried, so a stale
 * setting never leaves the user without a server.
 *
 * In an untrusted workspace an interpreter chosen by the workspace could run its code before the
 * server does anything (a `.venv` inside it, a `sitecustomize` in its site-packages): only the
 * user's own `cdit.interpreter` (user settings) or `python3` on PATH are used, the Python
 * extension's choice is not, and an interpreter inside a workspace folder is refused.
 */
import * as path from 'node:path';
import { resolveVariables, type VariableContext } from './settings';

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface InterpreterResolution {
  /** absolute path (or the bare command when nothing better was found) */
  python: string;
  source: InterpreterSource;
  /** true when the choice follows the Python extension's active environment (restart on change) */
  dependsOnActiveInterpreter: boolean;
  /** why an earlier step was skipped, for the log */
  notes: string[];
  /** set when no interpreter may be started (untrusted workspace): why; `python` is not used */
  refused?: string;
}

export interface InterpreterInputs {
  configured: string;
  variables: VariableContext;
  /** the Python extension's active environment path, if the extension is installed */
  activeEnvironment: string | undefined;
  isExecutableFile: (file: string) => boolean;
  /** `which`: an absolute path for a bare command name, or undefined */
  which: (command: string) => string | undefined;
  /** `vscode.workspace.isTrusted`; untrusted: see the module comment (default: trusted) */
  trusted?: boolean;
  /** the workspace folders' paths, for refusing interpreters inside them when untrusted */
  workspaceFolders?: readonly string[];
  /** `fs.realpathSync` (symbolic links resolved); identity when not given */
  realpath?: (file: string) => string;
}

export function resolveInterpreter(inputs: InterpreterInputs): InterpreterResolution {
  const notes: string[] = [];
  const untrusted = inputs.trusted === false;
  const insideWorkspace = (file: string): string | undefined =>
    untrusted ? workspaceFolderOf(file, inputs.workspaceFolders ?? [], inputs.realpath) : undefined;
  const configured = inputs.configured.trim();
  if (configured) {
    const expanded = resolveVariables(configured, inputs.variables);
    const bare = !expanded.includes('/') && !expanded.includes('\\');
    const candidate = absoluteCandidate(expanded, inputs);
    // `which` only returns executables; a path has to be checked
    if (candidate && (bare || inputs.isExecutableFile(candidate))) {
      const folder = insideWorkspace(candidate);
      if (!folder)
        return { python: candidate, source: 'setting', dependsOnActiveInterpreter: false, notes };
      notes.push(
        `cdit.interpreter ${candidate} is inside the workspace folder ${folder}; ` +
          'not used in an untrusted workspace',
      );
    } else {
      notes.push(
        `cdit.interpreter "${configured}" ${expanded === configured ? '' : `(${expanded}) `}` +
          'was not found or is not executable; trying the next interpreter',
      );
    }
  }
  const active = inputs.activeEnvironment?.trim();
  if (active && untrusted) {
    notes.push(
      `the Python extension's environment ${active} is not used in an untrusted workspace ` +
        '(set cdit.interpreter in your user settings to choose one)',
    );
  } else if (active) {
    if (inputs.isExecutableFile(active)) {
      return {
        python: active,
        source: 'python-extension',
        dependsOnActiveInterpreter: true,
        notes,
      };
    }
    notes.push(`the Python extension's environment ${active} is not an executable file`);
  }
  const fallback = inputs.which('python3');
  if (!fallback) notes.push('python3 is not on PATH');
  const folder = fallback ? insideWorkspace(fallback) : undefined;
  return {
    python: fallback ?? 'python3',
    source: 'default',
    // A Python extension installed later (or an environment selected later) should take over.
    dependsOnActiveInterpreter: true,
    notes,
    ...(folder && {
      refused:
        `python3 on PATH is ${fallback ?? ''}, inside the workspace folder ${folder}: no ` +
        'interpreter is started in an untrusted workspace; set cdit.interpreter in your user ' +
        'settings or trust the workspace',
    }),
  };
}

/** The workspace folder `file` lies in (as given or with links resolved), if any. */
export function workspaceFolderOf(
  file: string,
  folders: readonly string[],
  realpath: (file: string) => string = (f) => f,
): string | undefined {
  const safeReal = (p: string): string => {
    try {
      return realpath(p);
    } catch {
      return p;
    }
  };
  const candidates = new Set([path.resolve(file), safeReal(path.resolve(file))]);
  for (const folder of folders) {
    for (const root of new Set([path.resolve(folder), safeReal(path.resolve(folder))])) {
      for (const c of candidates) {
        const rel = path.relative(root, c);
        if (rel === '' || (rel.split(path.sep)[0] !== '..' && !path.isAbsolute(rel))) return folder;
      }
    }
  }
  return undefined;
}

/** What `inspect('interpreter')` gives: the value at each settings scope. */
export interface SettingScopes {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/**
 * The `cdit.interpreter` value to use: the effective one in a trusted workspace; in an untrusted
 * one only the user's (a workspace's own settings must not pick the program that runs).
 */
export function interpreterSetting(
  effective: string,
  scopes: SettingScopes | undefined,
  trusted: boolean,
): string {
  if (trusted) return effective;
  const user = scopes?.globalValue;
  return typeof user === 'string' ? user.trim() : '';
}

function absoluteCandidate(value: string, inputs: InterpreterInputs): string | undefined {
  if (path.isAbsolute(value)) return path.normalize(value);
  if (value.includes('/') || value.includes('\\')) {
    const base = inputs.variables.workspaceFolder;
    return base ? path.resolve(base, value) : undefined;
  }
  return inputs.which(value);
}

/** Equality used to decide whether an interpreter change needs a restart. */
export function sameResolution(
  a: InterpreterResolution | undefined,
  b: InterpreterResolution,
): boolean {
  return a !== undefined && a.python === b.python && a.source === b.source;
}

/**
 * The `python -m pip install` command line for a requirement: the bundled package folder, or
 * that folder with `[runtime]` (see `install.ts`).
 */
export function installCommand(
  python: string,
  requirement: string,
): { command: string; args: string[] } {
  return {
    command: python,
    args: ['-m', 'pip', 'install', '--disable-pip-version-check', requirement],
  };
}

/** How a Python process is started: program, arguments, working directory, environment. */
export interface PythonLaunch {
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string | undefined>;
}

/**
 * Every Python process the extension starts (import check, language server, pip) runs in
 * `neutralDir` (a private folder of the extension, never the workspace) with `PYTHONSAFEPATH=1`
 * (Python 3.11+: neither the working directory nor a script's folder goes on `sys.path`), so a
 * `pygls.py` or `sitecustomize.py` in the workspace is never imported.
 */
export function pythonLaunch(
  python: string,
  args: readonly string[],
  neutralDir: string,
  env: Record<string, string | undefined>,
  extraEnv: Record<string, string> = {},
): PythonLaunch {
  return {
    command: python,
    args: [...args],
    cwd: neutralDir,
    env: { ...env, ...extraEnv, PYTHONSAFEPATH: '1' },
  };
}

/**
 * The check run in the interpreter: does the server package import, and from where; and which
 * packages of the `[runtime]` extra verification runs would miss (found, not imported).
 */
export const IMPORT_CHECK_SCRIPT = [
  'import json, sys',
  'try:',
  '    import lsp_server, pygls, lsprotocol',
  '    out = {"ok": True, "python": sys.version.split()[0], "location": lsp_server.__file__}',
  '    try:',
  '        from lsp_server.runtime_deps import missing_runtime_modules',
  '        out["runtimeMissing"] = missing_runtime_modules()',
  '    except Exception:',
  '        pass',
  '    print(json.dumps(out))',
  'except Exception as exc:',
  '    print(json.dumps({"ok": False, "python": sys.version.split()[0], "error": f"{type(exc).__name__}: {exc}"}))',
].join('\n');

export interface ImportCheck {
  ok: boolean;
  python?: string;
  location?: string;
  error?: string;
  /** runtime packages (import names) not found; undefined when the check could not tell */
  runtimeMissing?: string[];
}

/** Reads the check's stdout; anything unexpected becomes a failed check with the text. */
export function parseImportCheck(
  stdout: string,
  stderr: string,
  exitCode: number | null,
): ImportCheck {
  const line = stdout.trim().split('\n').pop() ?? '';
  try {
    const data: unknown = JSON.parse(line);
    if (
      typeof data === 'object' &&
      data !== null &&
      typeof (data as { ok?: unknown }).ok === 'boolean'
    ) {
      const d = data as Record<string, unknown>;
      return {
        ok: d.ok === true,
        python: typeof d.python === 'string' ? d.python : undefined,
        location: typeof d.location === 'string' ? d.location : undefined,
        error: typeof d.error === 'string' ? d.error : undefined,
        runtimeMissing: Array.isArray(d.runtimeMissing)
          ? d.runtimeMissing.filter((m): m is string => typeof m === 'string')
          : undefined,
      };
    }
  } catch {
    // fall through
  }
  const detail = (stderr.trim() || stdout.trim()).split('\n').slice(-3).join(' ');
  return {
    ok: false,
    error: `the interpreter exited with ${exitCode ?? 'a signal'}${detail ? `: ${detail}` : ''}`,
  };
}
