/** The integration checklist view: phases in order with status; locked phases can be overridden. */
import * as vscode from 'vscode';
import { checklistIcon, type ChecklistItem } from './model';

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
    item.tooltip = `${element.phase.label}: ${element.outcome.replace('-', ' ')} (${element.gate})\n${element.detail}`;
    const icon = checklistIcon(element);
    item.iconPath = new vscode.ThemeIcon(
      icon.icon,
      icon.color ? new vscode.ThemeColor(icon.color) : undefined,
    );
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
