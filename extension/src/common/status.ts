/** Language status items: the server's state and the last verification run. */
import * as vscode from 'vscode';
import type { VerificationResult } from '../contract/verification';
import { formatTime, runTally } from '../results/format';
import { runtimeStatusNote } from './install';
import type { ServerController } from './server';

export class StatusItems implements vscode.Disposable {
  private readonly server: vscode.LanguageStatusItem;
  private readonly lastRun: vscode.LanguageStatusItem;

  constructor(private readonly controller: ServerController) {
    const selector: vscode.DocumentSelector = [
      { language: 'python' },
      { pattern: '**/.cdit/*.json' },
    ];
    this.server = vscode.languages.createLanguageStatusItem('cdit.server', selector);
    this.server.name = 'cdit language server';
    this.server.command = { title: 'Show Logs', command: 'cdit.showLogs' };
    this.lastRun = vscode.languages.createLanguageStatusItem('cdit.lastRun', selector);
    this.lastRun.name = 'cdit last verification';
    this.lastRun.command = { title: 'Show Results', command: 'cdit.results.focus' };
    this.lastRun.text = 'cdit: no verification run yet';
    controller.onDidChangeState(() => this.updateServer());
    this.updateServer();
  }

  private updateServer(): void {
    const c = this.controller;
    const python = c.resolution?.python ?? '';
    this.server.busy = c.state === 'starting';
    switch (c.state) {
      case 'running': {
        this.server.text = '$(check) cdit';
        this.server.detail = `language server running (${python})`;
        this.server.severity = vscode.LanguageStatusSeverity.Information;
        // analysis and generation work; runs would still need the [runtime] extra
        const runtime = runtimeStatusNote(c.importCheck);
        if (runtime) {
          this.server.detail += `; ${runtime}`;
          this.server.command = { title: 'Install Runtime', command: 'cdit.installRuntime' };
          return;
        }
        break;
      }
      case 'starting':
        this.server.text = '$(sync~spin) cdit';
        this.server.detail = 'starting the language server';
        this.server.severity = vscode.LanguageStatusSeverity.Information;
        break;
      case 'needs-install':
        this.server.text = '$(warning) cdit';
        this.server.detail = `lsp_server does not import in ${python}`;
        this.server.severity = vscode.LanguageStatusSeverity.Error;
        this.server.command = { title: 'Install', command: 'cdit.installServer' };
        return;
      case 'failed':
        this.server.text = '$(error) cdit';
        this.server.detail = c.detail || 'the language server failed';
        this.server.severity = vscode.LanguageStatusSeverity.Error;
        break;
      default:
        this.server.text = '$(circle-slash) cdit';
        this.server.detail = 'language server stopped';
        this.server.severity = vscode.LanguageStatusSeverity.Warning;
    }
    this.server.command = { title: 'Show Logs', command: 'cdit.showLogs' };
  }

  showRun(result: VerificationResult | undefined): void {
    if (!result) return;
    const { passed, judged, notExercised } = runTally(result);
    this.lastRun.text =
      `cdit: last run ${passed}/${judged} passed` +
      (notExercised ? `, ${notExercised} not exercised` : '');
    this.lastRun.detail = `${result.status} ${formatTime(result.startedAt)}`;
    this.lastRun.severity =
      passed === judged && !result.error
        ? vscode.LanguageStatusSeverity.Information
        : vscode.LanguageStatusSeverity.Warning;
  }

  dispose(): void {
    this.server.dispose();
    this.lastRun.dispose();
  }
}
