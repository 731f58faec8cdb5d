/**
 * Phase detail (webview): baseline and accelerated images side by side (waveform previews for
 * audio, a message for latents-only outputs), the amplified difference map the runtime wrote,
 * every metric with the thresholds, the final-latent comparison, the no-cache control and the
 * threshold calibration of a cache phase, and the command that reproduces the run.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { createPanel, onValidMessage, setHtml } from '../webview/panelBase';
import { parseDetailMessage } from '../webview/messages';
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
    this.disposables.push(
      onValidMessage(this.panel, log, parseDetailMessage, async (m) => {
        if (m.type === 'copy' && this.command) {
          await vscode.env.clipboard.writeText(this.command);
          void vscode.window.showInformationMessage('cdit: command copied.');
        } else if (m.type === 'openFolder') {
          await vscode.commands.executeCommand(
            'revealInExplorer',
            vscode.Uri.file(this.run.outputDir),
          );
        }
      }),
    );
  }

  private dispose(): void {
    if (DetailPanel.current === this) DetailPanel.current = undefined;
    for (const d of this.disposables) d.dispose();
  }
}
