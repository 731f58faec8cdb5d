/**
 * Run history: every `.cdit/runs/<id>/results.json` in the workspace (newest first), plus runs in
 * progress, whose phases are updated from the server's `cdit/runProgress` events.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import { isVerificationResult } from '../contract/guards';
import type {
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../contract/verification';
import { applyEvent, mergeLive, pendingResult } from './live';
import { CDIT_DIR, RUNS_DIR, cditPath, fileKind, readJson } from '../common/workspace';

export interface RunEntry {
  /** folder name under .cdit/runs */
  id: string;
  outputDir: string;
  result: VerificationResult;
  requestPath?: string;
  live: boolean;
  /** the server's run id while it runs */
  serverRunId?: string;
}

export class ResultsStore implements vscode.Disposable {
  private entries: RunEntry[] = [];
  private readonly live = new Map<string, RunEntry>();
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChange = this.emitter.event;
  private readonly watcher: vscode.FileSystemWatcher | undefined;
  private reloadTimer: NodeJS.Timeout | undefined;

  constructor(private readonly root: string | undefined) {
    if (root) {
      this.watcher = vscode.workspace.createFileSystemWatcher(
        new vscode.RelativePattern(root, `${CDIT_DIR}/${RUNS_DIR}/*/results.json`),
      );
      const schedule = (): void => this.scheduleReload();
      this.watcher.onDidChange(schedule);
      this.watcher.onDidCreate(schedule);
      this.watcher.onDidDelete(schedule);
    }
  }

  /** Newest first; runs in progress come first. */
  get runs(): RunEntry[] {
    const finished = this.entries.filter((e) => !this.live.has(e.outputDir));
    return [...this.live.values(), ...finished];
  }

  get latestFinished(): RunEntry | undefined {
    return this.entries.find((e) => !this.live.has(e.outputDir));
  }

  find(id: string): RunEntry | undefined {
    return this.runs.find((r) => r.id === id);
  }

  startLive(request: VerificationRequest, requestPath: string, serverRunId: string): RunEntry {
    const entry: RunEntry = {
      id: path.basename(request.outputDir),
      outputDir: request.outputDir,
      result: pendingResult(request),
      requestPath,
      live: true,
      serverRunId,
    };
    this.live.set(entry.outputDir, entry);
    this.emitter.fire();
    return entry;
  }

  updateLive(serverRunId: string, event: ProgressEvent): RunEntry | undefined {
    const entry = [...this.live.values()].find((e) => e.serverRunId === serverRunId);
    if (!entry) return undefined;
    entry.result = applyEvent(entry.result, event);
    this.emitter.fire();
    // the runtime rewrites results.json after every phase: take the measured numbers from it.
    // It lists every phase before the first one starts, those the request did not name too (a
    // tune's grid), so a phase start brings in the whole list (and the progress its total).
    if (event.event === 'phase_finished' || event.event === 'phase_started')
      void this.mergeFromDisk(entry);
    return entry;
  }

  private async mergeFromDisk(entry: RunEntry): Promise<void> {
    const data = await readJson(path.join(entry.outputDir, 'results.json'));
    if (!isVerificationResult(data) || !this.live.has(entry.outputDir)) return;
    entry.result = mergeLive(entry.result, data);
    this.emitter.fire();
  }

  liveByServerId(serverRunId: string): RunEntry | undefined {
    return [...this.live.values()].find((e) => e.serverRunId === serverRunId);
  }

  get activeRuns(): RunEntry[] {
    return [...this.live.values()];
  }

  async finishLive(
    serverRunId: string,
    result: VerificationResult | null,
  ): Promise<RunEntry | undefined> {
    const entry = this.liveByServerId(serverRunId);
    if (!entry) return undefined;
    this.live.delete(entry.outputDir);
    await this.reload();
    const stored = this.entries.find((e) => e.outputDir === entry.outputDir);
    if (stored) return stored;
    // no results.json (the run failed before writing one): keep what we know
    const final: RunEntry = {
      ...entry,
      live: false,
      result: result ?? {
        ...entry.result,
        status: entry.result.status === 'running' ? 'failed' : entry.result.status,
      },
    };
    this.entries.unshift(final);
    this.emitter.fire();
    return final;
  }

  private scheduleReload(): void {
    if (this.reloadTimer) clearTimeout(this.reloadTimer);
    this.reloadTimer = setTimeout(() => void this.reload(), 300);
  }

  async reload(): Promise<void> {
    if (!this.root) return;
    const dir = cditPath(this.root, RUNS_DIR);
    let names: [string, vscode.FileType][] = [];
    try {
      names = await vscode.workspace.fs.readDirectory(vscode.Uri.file(dir));
    } catch {
      names = [];
    }
    const entries: RunEntry[] = [];
    for (const [name, type] of names) {
      if (!(type & vscode.FileType.Directory)) continue;
      const outputDir = path.join(dir, name);
      const data = await readJson(path.join(outputDir, 'results.json'));
      if (!isVerificationResult(data)) continue;
      const requestPath = path.join(outputDir, 'request.json');
      entries.push({
        id: name,
        outputDir,
        result: data,
        requestPath: (await fileKind(requestPath)) === 'file' ? requestPath : undefined,
        live: false,
      });
    }
    entries.sort(
      (a, b) => (b.result.startedAt ?? 0) - (a.result.startedAt ?? 0) || b.id.localeCompare(a.id),
    );
    this.entries = entries;
    this.emitter.fire();
  }

  dispose(): void {
    this.watcher?.dispose();
    this.emitter.dispose();
    if (this.reloadTimer) clearTimeout(this.reloadTimer);
  }
}
