/** The workspace's `.cdit/` folder: gate-check answers, the approved plan, run history. */
import * as path from 'node:path';
import * as vscode from 'vscode';
import { fromStored, toStored, type StoredIntegration } from '../gatecheck/answers';

export const CDIT_DIR = '.cdit';
export const INTEGRATION_FILE = 'integration.json';
export const PLAN_FILE = 'plan.json';
export const RUNS_DIR = 'runs';

export function workspaceRoot(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

export function cditPath(root: string, ...parts: string[]): string {
  return path.join(root, CDIT_DIR, ...parts);
}

export async function readJson(file: string): Promise<unknown> {
  try {
    const bytes = await vscode.workspace.fs.readFile(vscode.Uri.file(file));
    return JSON.parse(Buffer.from(bytes).toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

export async function writeJson(file: string, data: unknown): Promise<void> {
  await vscode.workspace.fs.createDirectory(vscode.Uri.file(path.dirname(file)));
  await vscode.workspace.fs.writeFile(
    vscode.Uri.file(file),
    Buffer.from(JSON.stringify(data, null, 2) + '\n', 'utf8'),
  );
}

export async function fileKind(p: string): Promise<'file' | 'dir' | undefined> {
  try {
    const st = await vscode.workspace.fs.stat(vscode.Uri.file(p));
    if (st.type & vscode.FileType.Directory) return 'dir';
    if (st.type & vscode.FileType.File) return 'file';
    return undefined;
  } catch {
    return undefined;
  }
}

export async function readText(p: string): Promise<string | undefined> {
  try {
    return Buffer.from(await vscode.workspace.fs.readFile(vscode.Uri.file(p))).toString('utf8');
  } catch {
    return undefined;
  }
}

/** The stored gate check (answers, record, checklist overrides); empty when there is none. */
export async function loadIntegration(
  root: string,
): Promise<StoredIntegration & { exists: boolean }> {
  const data = await readJson(cditPath(root, INTEGRATION_FILE));
  return { ...fromStored(data), exists: data !== undefined };
}

export async function saveIntegration(root: string, stored: StoredIntegration): Promise<void> {
  await writeJson(cditPath(root, INTEGRATION_FILE), toStored(stored, root));
}
