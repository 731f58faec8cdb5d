/** Shared webview plumbing: CSP page from media files, validated incoming messages, disposal. */
import * as vscode from 'vscode';
import { nonce, page } from './html';
import type { Logger } from '../common/logger';

export interface PanelSpec {
  viewType: string;
  title: string;
  script: string;
  body: string;
  /** extra folders the page may load images from (run output folders) */
  resourceRoots?: vscode.Uri[];
  state?: unknown;
}

export function createPanel(
  context: vscode.ExtensionContext,
  spec: PanelSpec,
  column = vscode.ViewColumn.Active,
): vscode.WebviewPanel {
  const media = vscode.Uri.joinPath(context.extensionUri, 'extension', 'media');
  const panel = vscode.window.createWebviewPanel(spec.viewType, spec.title, column, {
    enableScripts: true,
    retainContextWhenHidden: true,
    localResourceRoots: [media, ...(spec.resourceRoots ?? [])],
  });
  panel.iconPath = vscode.Uri.joinPath(media, 'cdit.svg');
  setHtml(context, panel, spec);
  return panel;
}

export function setHtml(
  context: vscode.ExtensionContext,
  panel: vscode.WebviewPanel,
  spec: PanelSpec,
): void {
  const media = vscode.Uri.joinPath(context.extensionUri, 'extension', 'media');
  const webview = panel.webview;
  webview.html = page({
    cspSource: webview.cspSource,
    nonce: nonce(),
    title: spec.title,
    scripts: [webview.asWebviewUri(vscode.Uri.joinPath(media, spec.script)).toString()],
    styles: [webview.asWebviewUri(vscode.Uri.joinPath(media, 'common.css')).toString()],
    body: spec.body,
    state: spec.state,
  });
}

/** Routes only messages that pass `parse`; anything else is logged and dropped. */
export function onValidMessage<T>(
  panel: vscode.WebviewPanel,
  log: Logger,
  parse: (raw: unknown) => T | undefined,
  handle: (message: T) => Promise<void> | void,
): vscode.Disposable {
  return panel.webview.onDidReceiveMessage(async (raw: unknown) => {
    const message = parse(raw);
    if (message === undefined) {
      log.warn(
        `${panel.viewType}: dropped an invalid message from the webview: ${JSON.stringify(raw).slice(0, 200)}`,
      );
      return;
    }
    try {
      await handle(message);
    } catch (error) {
      log.error(`${panel.viewType}: handling a message failed`, error);
      void vscode.window.showErrorMessage(
        `cdit: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  });
}
