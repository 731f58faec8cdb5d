/**
 * Phase detail (webview): baseline and accelerated images side by side, the amplified difference
 * map the runtime wrote, every metric with the thresholds, and the command that reproduces the
 * run from a terminal.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { createPanel, onValidMessage, setHtml } from '../webview/panelBase';
import { parseDetailMessage } from '../webview/messages';
import { phaseMetrics, reproduceCommand, thresholdText, verdictStyle } from './format';
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
    const phase = (run.result.phases ?? []).find((p) => p.name === phaseName);
    const baseline = (run.result.phases ?? []).find((p) => p.kind === 'baseline');
    const outputDir = vscode.Uri.file(run.outputDir);
    const spec = {
      viewType: 'cdit.phaseDetail',
      title: `cdit: ${phaseName} (${run.id})`,
      script: 'detail.js',
      body: '<main id="app"></main>',
      resourceRoots: [outputDir],
    };
    this.panel = createPanel(context, spec, vscode.ViewColumn.Active);
    const image = (rel: string | undefined): string | null => {
      if (!rel || rel.endsWith('.npy')) return null;
      return this.panel.webview
        .asWebviewUri(vscode.Uri.file(path.resolve(run.outputDir, rel)))
        .toString();
    };
    this.command = run.requestPath ? reproduceCommand(python, run.requestPath, root) : '';
    const style = phase ? verdictStyle(phase) : undefined;
    const state = phase
      ? {
          run: run.id,
          phase: phase.name,
          kind: phase.kind,
          verdict: style?.label ?? '',
          verdictReason: phase.verdictReason ?? '',
          metrics: phaseMetrics(phase),
          thresholds: thresholdText(run.result.thresholds),
          images: {
            baseline: image(baseline?.images?.output),
            output: phase.kind === 'baseline' ? null : image(phase.images?.output),
            diff: image(phase.images?.diff),
          },
          cacheStats: (phase.cacheStats ?? []).map(
            (c) =>
              `${c.blocks}: cached steps ${c.cachedSteps?.length ? c.cachedSteps.join(', ') : 'none'}`,
          ),
          notes: phase.notes ?? [],
          error: phase.error
            ? {
                code: phase.error.code,
                message: phase.error.message,
                hint: phase.error.hint ?? '',
                traceback: phase.error.traceback ?? '',
              }
            : null,
          command: this.command,
          outputDir: run.outputDir,
          config: JSON.stringify(phase.config ?? {}),
        }
      : { missing: phaseName };
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
