/**
 * Phase detail (webview): baseline and accelerated images side by side (waveform previews for
 * audio, a message for latents-only outputs), the amplified difference map the runtime wrote,
 * every metric with the thresholds, the final-latent comparison, the no-cache control and the
 * threshold calibration of a cache phase, the `verify --tune` section of a tune run (scatter plot,
 * points, recommendation with Copy buttons), and the command that reproduces the run.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { createPanel, onValidMessage, setHtml } from '../webview/panelBase';
import { parseDetailMessage, type CopyTarget } from '../webview/messages';
import { calibratedCacheSettings, type NextAction } from './causes';
import { detailState } from './detailState';
import { reproduceCommand } from './format';
import type { RunEntry } from './store';

export class DetailPanel {
  private static current: DetailPanel | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private command = '';

  static show(
    context: vscode.ExtensionContext,
    log: Logger,
    run: RunEntry,
    phaseName: string,
    python: string,
    root: string | undefined,
  ): void {
    if (DetailPanel.current) DetailPanel.current.panel.dispose();
    DetailPanel.current = new DetailPanel(context, log, run, phaseName, python, root);
  }

  private readonly panel: vscode.WebviewPanel;

  private constructor(
    context: vscode.ExtensionContext,
    log: Logger,
    private readonly run: RunEntry,
    phaseName: string,
    python: string,
    root: string | undefined,
  ) {
    const outputDir = vscode.Uri.file(run.outputDir);
    const spec = {
      viewType: 'cdit.phaseDetail',
      title: `cdit: ${phaseName} (${run.id})`,
      script: 'detail.js',
      body: '<main id="app"></main>',
      resourceRoots: [outputDir],
    };
    this.panel = createPanel(context, spec, vscode.ViewColumn.Active);
    this.command = run.requestPath ? reproduceCommand(python, run.requestPath, root) : '';
    const state = detailState(run, phaseName, this.command, (rel) =>
      this.panel.webview.asWebviewUri(vscode.Uri.file(path.resolve(run.outputDir, rel))).toString(),
    );
    setHtml(context, this.panel, { ...spec, state });
    this.panel.onDidDispose(() => this.dispose(), null, this.disposables);
    const tune = 'missing' in state ? null : state.tune;
    const copies: Record<CopyTarget, { text: string; what: string }> = {
      reproduce: { text: this.command, what: 'command' },
      tunePython: { text: tune?.python ?? '', what: 'Python snippet' },
      tuneCli: { text: tune?.cli ?? '', what: 'command line' },
    };
    const parse = (raw: unknown): ReturnType<typeof parseDetailMessage> =>
      parseDetailMessage(raw, tune?.phases ?? []);
    this.disposables.push(
      onValidMessage(this.panel, log, parse, async (m) => {
        if (m.type === 'copy') {
          const copy = copies[m.text];
          if (!copy.text) return;
          await vscode.env.clipboard.writeText(copy.text);
          void vscode.window.showInformationMessage(`cdit: ${copy.what} copied.`);
        } else if (m.type === 'openPhase') {
          await vscode.commands.executeCommand('cdit.showPhaseDetail', this.run.id, m.phase);
        } else if (m.type === 'openFolder') {
          await vscode.commands.executeCommand(
            'revealInExplorer',
            vscode.Uri.file(this.run.outputDir),
          );
        } else if (m.type === 'next') {
          await runNextStep(m.action, this.run.outputDir);
        }
      }),
    );
  }

  private dispose(): void {
    if (DetailPanel.current === this) DetailPanel.current = undefined;
    for (const d of this.disposables) d.dispose();
  }
}

/** The next step of a cause (`causes.ts`), by its fixed id. */
async function runNextStep(action: NextAction, outputDir: string): Promise<void> {
  const settings = (query: string): Thenable<unknown> =>
    vscode.commands.executeCommand('workbench.action.openSettings', query);
  switch (action) {
    case 'openGateCheck':
      await vscode.commands.executeCommand('cdit.openGateCheck');
      return;
    case 'reviewPlan':
      await vscode.commands.executeCommand('cdit.reviewPlan');
      return;
    case 'verifyOnGpus':
      await vscode.commands.executeCommand('cdit.verifyAll');
      return;
    case 'cacheSettings':
      await settings('cdit.cache');
      return;
    case 'calibrateCache': {
      // the workspace's own setting (the folder's .vscode/settings.json), then the smoke run
      const config = vscode.workspace.getConfiguration('cdit');
      const value = calibratedCacheSettings(config.inspect('cache')?.workspaceValue);
      await config.update('cache', value, vscode.ConfigurationTarget.Workspace);
      await vscode.commands.executeCommand('cdit.verifySmoke');
      return;
    }
    case 'tuneSettings':
      await settings('cdit.tune');
      return;
    case 'runSettings':
      await settings('cdit.');
      return;
    case 'openLogs': {
      const logs = vscode.Uri.file(path.join(outputDir, 'logs'));
      let names: string[] = [];
      try {
        names = (await vscode.workspace.fs.readDirectory(logs))
          .map(([name]) => name)
          .filter((name) => name.endsWith('.log'))
          .sort();
      } catch {
        void vscode.window.showWarningMessage(`cdit: ${logs.fsPath} has no logs.`);
        return;
      }
      const pick =
        names.length === 1
          ? names[0]
          : await vscode.window.showQuickPick(names, { title: 'Rank logs' });
      if (pick) await vscode.window.showTextDocument(vscode.Uri.joinPath(logs, pick));
      return;
    }
  }
}
