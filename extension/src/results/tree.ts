/**
 * The results sidebar: run → phase → its no-cache control and metrics, verdicts coloured (amber:
 * a cache phase that cached no step); a phase opens the detail view. A `verify --tune` run has a
 * first child `tune: recommended <phase>` that opens the detail view with the tune's plot.
 */
import * as vscode from 'vscode';
import { parseTuneReport } from '../contract/guards';
import type { PhaseResult, TuneReport } from '../contract/verification';
import {
  phaseKindLabel,
  phaseRows,
  phaseSummary,
  phaseTooltip,
  runLabel,
  runStyle,
  tuneSummary,
  verdictStyle,
  type PhaseRow,
} from './format';
import type { ResultsStore, RunEntry } from './store';

type Node =
  | { kind: 'run'; run: RunEntry }
  | { kind: 'tune'; run: RunEntry; tune: TuneReport }
  | { kind: 'phase'; run: RunEntry; phase: PhaseResult }
  | { kind: 'row'; run: RunEntry; phase: PhaseResult; row: PhaseRow };

export class ResultsTree implements vscode.TreeDataProvider<Node> {
  private readonly emitter = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;

  constructor(private readonly store: ResultsStore) {
    store.onDidChange(() => this.emitter.fire(undefined));
  }

  getChildren(node?: Node): Node[] {
    if (!node) return this.store.runs.map((run) => ({ kind: 'run', run }));
    if (node.kind === 'run') {
      const phases: Node[] = (node.run.result.phases ?? []).map((phase) => ({
        kind: 'phase',
        run: node.run,
        phase,
      }));
      const tune = parseTuneReport(node.run.result.tune);
      return tune ? [{ kind: 'tune', run: node.run, tune }, ...phases] : phases;
    }
    if (node.kind === 'phase')
      return phaseRows(node.phase).map((row) => ({
        kind: 'row',
        run: node.run,
        phase: node.phase,
        row,
      }));
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
      const style = runStyle(r);
      item.iconPath = new vscode.ThemeIcon(
        style.icon,
        style.color ? new vscode.ThemeColor(style.color) : undefined,
      );
      item.tooltip = new vscode.MarkdownString(
        `**${node.run.id}**\n\n${r.outputDir}${r.error ? `\n\n${r.error.code}: ${r.error.message}` : ''}`,
      );
      return item;
    }
    if (node.kind === 'tune') {
      const { label, description } = tuneSummary(node.tune);
      const item = new vscode.TreeItem(label, vscode.TreeItemCollapsibleState.None);
      item.id = `tune:${node.run.outputDir}`;
      item.description = description;
      item.contextValue = node.tune.recommended ? 'cdit.tune.recommended' : 'cdit.tune.none';
      item.iconPath = new vscode.ThemeIcon(
        'graph',
        new vscode.ThemeColor(node.tune.recommended ? 'charts.purple' : 'descriptionForeground'),
      );
      item.tooltip = [
        `${label} (${description})`,
        'Opens the tune plot (latency against PSNR), the points and the recommendation.',
        ...(node.tune.notes ?? []),
      ].join('\n');
      const phases = node.run.result.phases ?? [];
      const open =
        phases.find((p) => p.name === node.tune.recommended) ??
        phases.find((p) => p.kind === 'baseline') ??
        phases[0];
      if (open)
        item.command = {
          command: 'cdit.showPhaseDetail',
          title: 'Show Tune',
          arguments: [node.run.id, open.name],
        };
      return item;
    }
    if (node.kind === 'phase') {
      const style = verdictStyle(node.phase);
      // a failed no-cache control is the reason of the verdict: show it without a click
      const open = node.phase.control?.verdict === 'fail';
      const item = new vscode.TreeItem(
        node.phase.name,
        open ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed,
      );
      item.id = `phase:${node.run.outputDir}:${node.phase.name}`;
      item.description =
        node.phase.status === 'running' && node.phase.notes?.[0]
          ? `running · ${node.phase.notes[0]}`
          : phaseSummary(node.phase);
      item.iconPath = new vscode.ThemeIcon(style.icon, new vscode.ThemeColor(style.color));
      item.contextValue = `cdit.phase.${style.label}`;
      item.tooltip = `${phaseTooltip(node.phase)}\nkind: ${phaseKindLabel(node.phase.kind)}`;
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
    const { row } = node;
    const item = new vscode.TreeItem(row.label, vscode.TreeItemCollapsibleState.None);
    item.id = `${row.kind}:${node.run.outputDir}:${node.phase.name}:${row.label}`;
    item.description = row.value;
    if (row.kind === 'control' && row.style) {
      item.iconPath = new vscode.ThemeIcon(row.style.icon, new vscode.ThemeColor(row.style.color));
      item.contextValue = `cdit.control.${row.style.label}`;
      item.tooltip =
        'The integration with caching disabled must reproduce the baseline; otherwise it ' +
        `changes the math itself.\n${row.value}` +
        (node.phase.control?.reason ? `\n${node.phase.control.reason}` : '');
    } else item.tooltip = `${row.label}: ${row.value}`;
    return item;
  }
}
