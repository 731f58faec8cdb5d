/** The workspace's integration state: stored gate check, approved plan, and change events. */
import * as vscode from 'vscode';
import type { IntegrationPlan } from '../contract/analysis';
import { isRecord } from '../contract/guards';
import type { GateAnswers, StoredIntegration } from '../gatecheck/answers';
import { EMPTY_ANSWERS } from '../gatecheck/answers';
import {
  PLAN_FILE,
  cditPath,
  loadIntegration,
  readJson,
  saveIntegration,
  workspaceRoot,
  writeJson,
} from './workspace';

export class IntegrationState implements vscode.Disposable {
  readonly root: string | undefined = workspaceRoot();
  stored: StoredIntegration & { exists: boolean } = {
    answers: { ...EMPTY_ANSWERS },
    overrides: [],
    exists: false,
  };
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChange = this.emitter.event;
  private readonly watcher: vscode.FileSystemWatcher | undefined;

  constructor() {
    if (this.root) {
      this.watcher = vscode.workspace.createFileSystemWatcher(
        new vscode.RelativePattern(this.root, '.cdit/{integration,plan}.json'),
      );
      const reload = (): void => void this.reload();
      this.watcher.onDidChange(reload);
      this.watcher.onDidCreate(reload);
      this.watcher.onDidDelete(reload);
    }
  }

  get gatePassed(): boolean {
    return this.stored.exists && this.stored.gate?.passed === true;
  }

  get answers(): GateAnswers {
    return this.stored.answers;
  }

  async reload(): Promise<void> {
    if (!this.root) return;
    this.stored = await loadIntegration(this.root);
    this.emitter.fire();
  }

  async save(stored: StoredIntegration): Promise<void> {
    if (!this.root) throw new Error('no workspace folder is open');
    await saveIntegration(this.root, stored);
    this.stored = { ...stored, exists: true };
    this.emitter.fire();
  }

  async approvedPlan(): Promise<IntegrationPlan | undefined> {
    if (!this.root) return undefined;
    const data = await readJson(cditPath(this.root, PLAN_FILE));
    return isRecord(data) && isRecord(data.cache) && isRecord(data.model)
      ? (data as unknown as IntegrationPlan)
      : undefined;
  }

  async savePlan(plan: IntegrationPlan): Promise<void> {
    if (!this.root) throw new Error('no workspace folder is open');
    await writeJson(cditPath(this.root, PLAN_FILE), plan);
    this.emitter.fire();
  }

  dispose(): void {
    this.watcher?.dispose();
    this.emitter.dispose();
  }
}
