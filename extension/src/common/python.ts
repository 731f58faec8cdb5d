/**
 * The Python extension's active environment (ms-python.python `environments` API), when that
 * extension is installed. Everything is optional: without it the interpreter comes from the
 * `cdit.interpreter` setting or `python3`.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';

interface EnvironmentPath {
  path: string;
}

interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath | undefined;
  onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
}

function environmentsApi(exports: unknown): PythonEnvironmentsApi | undefined {
  if (typeof exports !== 'object' || exports === null) return undefined;
  const envs = (exports as { environments?: unknown }).environments;
  if (typeof envs !== 'object' || envs === null) return undefined;
  const api = envs as Partial<PythonEnvironmentsApi>;
  return typeof api.getActiveEnvironmentPath === 'function'
    ? (api as PythonEnvironmentsApi)
    : undefined;
}

export class PythonExtension {
  private api: PythonEnvironmentsApi | undefined;

  async activeEnvironment(resource: vscode.Uri | undefined): Promise<string | undefined> {
    const api = await this.load();
    try {
      return api?.getActiveEnvironmentPath(resource)?.path;
    } catch {
      return undefined;
    }
  }

  async onDidChange(listener: () => void): Promise<vscode.Disposable | undefined> {
    const api = await this.load();
    return api?.onDidChangeActiveEnvironmentPath?.(() => listener());
  }

  private async load(): Promise<PythonEnvironmentsApi | undefined> {
    if (this.api) return this.api;
    const extension = vscode.extensions.getExtension('ms-python.python');
    if (!extension) return undefined;
    try {
      const exports: unknown = extension.isActive ? extension.exports : await extension.activate();
      this.api = environmentsApi(exports);
    } catch {
      this.api = undefined;
    }
    return this.api;
  }
}

export function isExecutableFile(file: string): boolean {
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function which(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}
