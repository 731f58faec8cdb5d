/** The results sidebar: run → phase → metrics, verdicts coloured; a phase opens the detail view. */
import * as vscode from 'vscode';
import type { PhaseResult } from '../contract/verification';
import { phaseMetrics, phaseSummary, runLabel, verdictStyle } from './format';
import type { ResultsStore, RunEntry } from './store';

type Node =
  | { kind: 'run'; run: RunEntry }
  | { kind: 'phase'; run: RunEntry; phase: PhaseResult }
  | { kind: 'metric'; run: RunEntry; phase: PhaseResult; label: string; value: string };

export class ResultsTree implements vscode.TreeDataProvider<Node> {
  private readonly emitter = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;

  constructor(private readonly store: ResultsStore) {
    store.onDidChange(() => this.emitter.fire(undefined));
  }

  getChildren(node?: Node): Node[] {
    if (!node) return this.store.runs.map((run) => ({ kind: 'run', run }));
    if (node.kind === 'run')
      return (node.run.result.phases ?? []).map((phase) => ({
        kind: 'phase',
        run: node.run,
        phase,
      }));
    if (node.kind === 'phase') {
      return phaseMetrics(node.phase).map((m) => ({
        kind: 'metric',
        run: node.run,
        phase: node.phase,
        label: m.label,
        value: m.value,
      }));
    }
    return [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === 'run') {
      const r = node.run.result;
      const item = new vscode.TreeItem(
        runLabel(r) || node.run.id,
        vscode.TreeItemCollapsibleState.Expanded,
      );
      item.id = `run:${node.run.outputDir}`;
      const model =
        typeof r.model?.transformerClass === 'string' ? r.model.transformerClass : undefined;
      item.description = [model, r.environment?.device].filter(Boolean).join(' · ');
      item.contextValue = 'cdit.run';
      const icon =
        r.status === 'running' ? 'sync~spin' : r.status === 'completed' ? 'history' : 'error';
      const color = r.status === 'failed' ? new vscode.ThemeColor('testing.iconFailed') : undefined;
      item.iconPath = new vscode.ThemeIcon(icon, color);
      item.tooltip = new vscode.MarkdownString(
        `**${node.run.id}**\n\n${r.outputDir}${r.error ? `\n\n${r.error.code}: ${r.error.message}` : ''}`,
      );
      return item;
    }
    if (node.kind === 'phase') {
      const style = verdictStyle(node.phase);
      const item = new vscode.TreeItem(node.phase.name, vscode.TreeItemCollapsibleState.Collapsed);
      item.id = `phase:${node.run.outputDir}:${node.phase.name}`;
      item.description =
        node.phase.status === 'running' && node.phase.notes?.[0]
          ? `running · ${node.phase.notes[0]}`
          : phaseSummary(node.phase);
      item.iconPath = new vscode.ThemeIcon(style.icon, new vscode.ThemeColor(style.color));
      item.contextValue = `cdit.phase.${style.label}`;
      item.tooltip = node.phase.verdictReason || node.phase.error?.message || style.label;
      // a finished phase has its images and numbers even while the rest of the run goes on
      if (node.phase.status !== 'pending' && node.phase.status !== 'running') {
        item.command = {
          command: 'cdit.showPhaseDetail',
          title: 'Show Phase Detail',
          arguments: [node.run.id, node.phase.name],
        };
      }
      return item;
    }
    const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
    item.id = `metric:${node.run.outputDir}:${node.phase.name}:${node.label}`;
    item.description = node.value;
    item.tooltip = `${node.label}: ${node.value}`;
    return item;
  }
}
