/** The integration checklist view: phases in order with status; locked phases can be overridden. */
import * as vscode from 'vscode';
import type { ChecklistItem } from './model';

export class ChecklistTree implements vscode.TreeDataProvider<ChecklistItem | string> {
  private readonly emitter = new vscode.EventEmitter<undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private items: ChecklistItem[] = [];
  private header: string | undefined;

  update(items: ChecklistItem[], header: string | undefined): void {
    this.items = items;
    this.header = header;
    this.emitter.fire(undefined);
  }

  getChildren(element?: ChecklistItem | string): (ChecklistItem | string)[] {
    if (element) return [];
    if (this.items.length === 0) return [];
    return this.header ? [this.header, ...this.items] : this.items;
  }

  getTreeItem(element: ChecklistItem | string): vscode.TreeItem {
    if (typeof element === 'string') {
      const item = new vscode.TreeItem(element, vscode.TreeItemCollapsibleState.None);
      item.id = 'checklist:header';
      item.iconPath = new vscode.ThemeIcon('checklist');
      item.command = { command: 'cdit.openGateCheck', title: 'Open Gate Check' };
      return item;
    }
    const item = new vscode.TreeItem(element.phase.label, vscode.TreeItemCollapsibleState.None);
    item.id = `checklist:${element.phase.id}`;
    item.description = element.detail;
    item.tooltip = `${element.phase.label}: ${element.outcome} (${element.gate})\n${element.detail}`;
    let icon: vscode.ThemeIcon;
    if (element.outcome === 'passed')
      icon = new vscode.ThemeIcon('pass-filled', new vscode.ThemeColor('testing.iconPassed'));
    else if (element.outcome === 'not-applicable')
      icon = new vscode.ThemeIcon('circle-slash', new vscode.ThemeColor('disabledForeground'));
    else if (element.override)
      icon = new vscode.ThemeIcon('unlock', new vscode.ThemeColor('list.warningForeground'));
    else if (element.outcome === 'failed')
      icon = new vscode.ThemeIcon('error', new vscode.ThemeColor('testing.iconFailed'));
    else if (element.gate === 'locked')
      icon = new vscode.ThemeIcon('lock', new vscode.ThemeColor('disabledForeground'));
    else icon = new vscode.ThemeIcon('circle-large-outline');
    item.iconPath = icon;
    const offered = element.gate === 'available';
    item.contextValue =
      element.phase.id === 'cli'
        ? 'cdit.phase.cli'
        : offered
          ? 'cdit.phase.available'
          : element.gate === 'locked'
            ? 'cdit.phase.locked'
            : 'cdit.phase.done';
    if (item.contextValue === 'cdit.phase.available') {
      item.command = {
        command: 'cdit.checklist.verify',
        title: 'Verify This Phase',
        arguments: [element.phase.id],
      };
    }
    return item;
  }
}
