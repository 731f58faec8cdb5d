/** The extension's log: one LogOutputChannel ("cdit-integrator"), shared with the language client. */
import * as vscode from 'vscode';

export class Logger implements vscode.Disposable {
  readonly channel: vscode.LogOutputChannel;

  constructor(name: string) {
    this.channel = vscode.window.createOutputChannel(name, { log: true });
  }

  info(message: string): void {
    this.channel.info(message);
    this.echo('info', message);
  }

  warn(message: string): void {
    this.channel.warn(message);
    this.echo('warn', message);
  }

  error(message: string, error?: unknown): void {
    const detail =
      error instanceof Error
        ? `: ${error.stack ?? error.message}`
        : error === undefined
          ? ''
          : `: ${typeof error === 'string' ? error : JSON.stringify(error)}`;
    this.channel.error(message + detail);
    this.echo('error', message + detail);
  }

  debug(message: string): void {
    this.channel.debug(message);
  }

  show(): void {
    this.channel.show(true);
  }

  dispose(): void {
    this.channel.dispose();
  }

  /** Under CI the log also goes to the extension host's console (it ends up in test logs). */
  private echo(level: string, message: string): void {
    if (process.env.CI === 'true' || process.env.CDIT_LOG_CONSOLE === '1') {
      // eslint-disable-next-line no-console
      console.log(`[cdit ${level}] ${message}`);
    }
  }
}
