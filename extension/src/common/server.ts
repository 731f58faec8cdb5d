/**
 * The language server process: interpreter resolution, the import check, the offer to install
 * the bundled Python package, start/stop through vscode-languageclient, serialized restarts,
 * and typed `workspace/executeCommand` calls that return errors as data.
 */
import * as cp from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  DidSaveTextDocumentNotification,
  ExecuteCommandRequest,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  type LanguageClientOptions,
  type Middleware,
  type ServerOptions,
} from 'vscode-languageclient/node';
import {
  IMPORT_CHECK_SCRIPT,
  installCommand,
  interpreterSetting,
  parseImportCheck,
  pythonLaunch,
  resolveInterpreter,
  type ImportCheck,
  type InterpreterResolution,
  type PythonLaunch,
} from './interpreter';
import {
  CHOOSE_INTERPRETER_ACTION,
  INSTALL_ACTION,
  installRequirement,
  runtimeInstallOffer,
  runtimeStatusNote,
  SHOW_LOGS_ACTION,
  type InstallNeed,
  type RuntimeMissing,
} from './install';
import type { Logger } from './logger';
import { isExecutableFile, type PythonExtension, which } from './python';
import { SerialRestarter } from './restart';
import { parseSettings, serverSettings, type Settings } from './settings';
import type { ServerError } from '../contract/guards';
import { isServerError } from '../contract/guards';
import { GLOSSARY_COMMAND } from './glossary';

export const CLIENT_ID = 'cdit';
export const CLIENT_NAME = 'cdit-integrator';
export const SERVER_MODULE = 'lsp_server';
const IMPORT_CHECK_TIMEOUT_MS = 60_000;

export type ServerState = 'stopped' | 'starting' | 'running' | 'needs-install' | 'failed';

export function workspaceFolder(): vscode.WorkspaceFolder | undefined {
  return vscode.workspace.workspaceFolders?.[0];
}

export function readSettings(): { settings: Settings; problems: string[] } {
  const folder = workspaceFolder();
  return parseSettings(vscode.workspace.getConfiguration('cdit', folder?.uri));
}

/** A private, empty folder of the extension: the working directory of its Python processes. */
function neutralDirectory(context: vscode.ExtensionContext): string {
  const dir = path.join(context.globalStorageUri.fsPath, 'python-cwd');
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    return dir;
  } catch {
    return fs.mkdtempSync(path.join(os.tmpdir(), 'cdit-python-'));
  }
}

function run(
  launch: PythonLaunch,
  timeoutMs: number,
  onLine?: (line: string) => void,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let child: cp.ChildProcess;
    try {
      child = cp.spawn(launch.command, launch.args, {
        cwd: launch.cwd,
        env: launch.env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (error) {
      resolve({ code: null, stdout: '', stderr: String(error) });
      return;
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const feed = (chunk: Buffer, which: 'out' | 'err'): void => {
      const text = chunk.toString('utf8');
      if (which === 'out') stdout += text;
      else stderr += text;
      if (onLine) for (const line of text.split(/\r?\n/)) if (line.trim()) onLine(line);
    };
    child.stdout?.on('data', (c: Buffer) => feed(c, 'out'));
    child.stderr?.on('data', (c: Buffer) => feed(c, 'err'));
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ code: null, stdout, stderr: stderr + String(error) });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export class ServerController implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly restarter = new SerialRestarter((reasons) => this.restartNow(reasons));
  private readonly stateEmitter = new vscode.EventEmitter<void>();
  readonly onDidChangeState = this.stateEmitter.event;
  private readonly handlers: [string, (params: unknown) => void][] = [];
  private offeredInstallFor: string | undefined;
  state: ServerState = 'stopped';
  detail = '';
  resolution: InterpreterResolution | undefined;
  importCheck: ImportCheck | undefined;
  private neutralDir: string | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: Logger,
    private readonly python: PythonExtension,
    private readonly middleware: Middleware,
  ) {}

  /** Requests a (re)start; concurrent requests collapse into at most one more restart. */
  restart(reason: string): Promise<void> {
    this.log.info(`restart requested: ${reason}`);
    return this.restarter.request(reason);
  }

  /** Registers a notification handler that survives restarts. */
  onNotification(method: string, handler: (params: unknown) => void): void {
    this.handlers.push([method, handler]);
    this.client?.onNotification(method, handler);
  }

  get running(): boolean {
    return this.state === 'running' && this.client !== undefined;
  }

  /** Waits (up to `timeoutMs`) for a running server. */
  async whenRunning(timeoutMs = 60_000): Promise<boolean> {
    if (this.running) return true;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        sub.dispose();
        resolve(this.running);
      }, timeoutMs);
      const sub = this.onDidChangeState(() => {
        if (this.state === 'running' || this.state === 'failed' || this.state === 'needs-install') {
          clearTimeout(timer);
          sub.dispose();
          resolve(this.running);
        }
      });
    });
  }

  /** `workspace/executeCommand` with one argument object; failures come back as `{error}`. */
  async execute<T>(command: string, argument: Record<string, unknown>): Promise<T | ServerError> {
    const client = this.client;
    if (!client || this.state !== 'running') {
      return {
        error: {
          code: 'server-not-running',
          message: `the cdit language server is ${this.state}${this.detail ? ` (${this.detail})` : ''}`,
          hint: 'run "cdit: Restart Language Server" or see "cdit: Show Logs"',
        },
      };
    }
    try {
      const reply: unknown = await client.sendRequest(ExecuteCommandRequest.type, {
        command,
        arguments: [argument],
      });
      if (reply === null || reply === undefined)
        return { error: { code: 'empty-reply', message: `${command} returned nothing` } };
      return reply as T;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.log.error(`${command} failed`, error);
      return { error: { code: 'request-failed', message } };
    }
  }

  /** The server's WorkspaceEdit JSON as a VS Code edit (change annotations become edit metadata). */
  async asWorkspaceEdit(edit: unknown): Promise<vscode.WorkspaceEdit | undefined> {
    if (!this.client) return undefined;
    return this.client.protocol2CodeConverter.asWorkspaceEdit(
      edit as Parameters<LanguageClient['protocol2CodeConverter']['asWorkspaceEdit']>[0],
    );
  }

  /** Tells the server the `cdit` settings changed; it pulls them with workspace/configuration. */
  async notifyConfigurationChanged(): Promise<void> {
    if (!this.client || this.state !== 'running') return;
    await this.client.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
  }

  /** Tells the server a file was saved (it then re-analyses open transformer files). */
  async notifySaved(uri: vscode.Uri): Promise<void> {
    if (!this.client || this.state !== 'running') return;
    await this.client.sendNotification(DidSaveTextDocumentNotification.type, {
      textDocument: { uri: uri.toString() },
    });
  }

  /** Where the bundled Python package is: `dist/python` in a VSIX, the repository in development. */
  bundledPackageDir(): string | undefined {
    for (const candidate of [
      this.context.asAbsolutePath(path.join('dist', 'python')),
      this.context.extensionPath,
    ]) {
      if (
        fs.existsSync(path.join(candidate, 'pyproject.toml')) &&
        fs.existsSync(path.join(candidate, SERVER_MODULE))
      )
        return candidate;
    }
    return undefined;
  }

  /** Installs the bundled package into the resolved interpreter, then restarts. */
  installBundled(): Promise<boolean> {
    return this.install('server');
  }

  /**
   * Installs what `need` asks for (see `install.ts`): the bundled package for the server (then
   * restarts it), or the package with its `[runtime]` extra for runs (no restart: each run is a
   * new process). `python`: the interpreter the server named for a run; else the resolved one.
   */
  async install(need: InstallNeed, python?: string): Promise<boolean> {
    const resolution = this.resolution ?? (await this.resolve());
    const dir = this.bundledPackageDir();
    const requirement = installRequirement(need, dir);
    if (!requirement) {
      void vscode.window.showErrorMessage(
        'cdit: this build carries no bundled Python package (dist/python).',
      );
      return false;
    }
    if (!vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage(
        'cdit: installing runs pip in the selected interpreter; trust the workspace first.',
      );
      return false;
    }
    if (!python && resolution.refused) {
      void vscode.window.showErrorMessage(`cdit: ${resolution.refused}`);
      return false;
    }
    const target = python ?? resolution.python;
    const { command, args } = installCommand(target, requirement);
    const launch = pythonLaunch(command, args, this.pythonCwd(), process.env);
    this.log.info(`installing (${need}): ${command} ${args.join(' ')}`);
    this.log.show();
    const what =
      need === 'runtime'
        ? 'the verification runtime (torch, diffusers, cache-dit …)'
        : 'cdit-integrator';
    const result = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `cdit: installing ${what} into ${target}`,
      },
      () => run(launch, 30 * 60_000, (line) => this.log.info(`pip: ${line}`)),
    );
    if (result.code !== 0) {
      this.log.error(`pip install failed (exit ${result.code ?? 'signal'})`);
      void vscode.window
        .showErrorMessage(
          `cdit: pip install failed (exit ${result.code ?? 'signal'}); see the log.`,
          SHOW_LOGS_ACTION,
        )
        .then((c) => c && this.log.show());
      return false;
    }
    if (need === 'runtime') {
      this.log.info(`the [runtime] extra is installed in ${target}`);
      if (target === resolution.python) await this.recheck(resolution.python);
      return true;
    }
    this.offeredInstallFor = undefined;
    await this.restart('bundled package installed');
    return this.running;
  }

  /**
   * A run was refused because its interpreter lacks the `[runtime]` extra: offers to install it
   * there. Resolves true once it is installed (the caller then asks again).
   */
  async offerRuntimeInstall(refusal: RuntimeMissing): Promise<boolean> {
    this.log.warn(`verification refused: ${refusal.message}`);
    const offer = runtimeInstallOffer(refusal, {
      resolvedPython: this.resolution?.python,
      bundledDir: this.bundledPackageDir(),
      trusted: vscode.workspace.isTrusted,
    });
    if (this.importCheck && offer.python === this.resolution?.python) {
      this.importCheck = { ...this.importCheck, runtimeMissing: refusal.missing };
      this.stateEmitter.fire();
    }
    const choice = await vscode.window.showWarningMessage(offer.prompt, ...offer.actions);
    if (choice === INSTALL_ACTION) return this.install(offer.need, offer.python);
    if (choice === CHOOSE_INTERPRETER_ACTION)
      await vscode.commands.executeCommand('workbench.action.openSettings', 'cdit.interpreter');
    else if (choice === SHOW_LOGS_ACTION) this.log.show();
    return false;
  }

  /** Runs the import check again (after an install) and updates `importCheck`. */
  private async recheck(python: string): Promise<void> {
    const check = await run(
      pythonLaunch(python, ['-c', IMPORT_CHECK_SCRIPT], this.pythonCwd(), process.env),
      IMPORT_CHECK_TIMEOUT_MS,
    );
    const parsed = parseImportCheck(check.stdout, check.stderr, check.code);
    if (parsed.ok && this.resolution?.python === python) {
      this.importCheck = parsed;
      this.stateEmitter.fire();
    }
  }

  async resolve(): Promise<InterpreterResolution> {
    const { settings, problems } = readSettings();
    for (const p of problems) this.log.warn(p);
    const folder = workspaceFolder();
    const trusted = vscode.workspace.isTrusted;
    const folders: Record<string, string> = {};
    for (const f of vscode.workspace.workspaceFolders ?? []) folders[f.name] = f.uri.fsPath;
    const scopes = vscode.workspace.getConfiguration('cdit', folder?.uri).inspect('interpreter');
    return resolveInterpreter({
      configured: interpreterSetting(settings.interpreter, scopes, trusted),
      variables: {
        workspaceFolder: folder?.uri.fsPath,
        workspaceFolders: folders,
        userHome: os.homedir(),
        env: process.env,
      },
      // untrusted: the Python extension's choice is not asked for (resolveInterpreter skips it)
      activeEnvironment: trusted ? await this.python.activeEnvironment(folder?.uri) : undefined,
      isExecutableFile,
      which,
      trusted,
      workspaceFolders: Object.values(folders),
      realpath: (f) => fs.realpathSync(f),
    });
  }

  /** The working directory of every Python process (never the workspace). */
  private pythonCwd(): string {
    this.neutralDir ??= neutralDirectory(this.context);
    return this.neutralDir;
  }

  private setState(state: ServerState, detail = ''): void {
    this.state = state;
    this.detail = detail;
    this.stateEmitter.fire();
  }

  private async restartNow(reasons: readonly string[]): Promise<void> {
    this.log.info(`(re)starting the language server (${reasons.join('; ')})`);
    await this.stopClient();
    this.setState('starting');
    const resolution = await this.resolve();
    this.resolution = resolution;
    for (const note of resolution.notes) this.log.warn(note);
    const trusted = vscode.workspace.isTrusted;
    if (resolution.refused) {
      this.log.error(resolution.refused);
      this.setState('failed', resolution.refused);
      void vscode.window
        .showErrorMessage(`cdit: ${resolution.refused}`, 'Show Logs')
        .then((c) => c && this.log.show());
      return;
    }
    this.log.info(
      `interpreter: ${resolution.python} (from ${resolution.source})` +
        (trusted ? '' : '; untrusted workspace: analysis only, nothing from the workspace runs'),
    );

    const cwd = this.pythonCwd();
    const check = await run(
      pythonLaunch(resolution.python, ['-c', IMPORT_CHECK_SCRIPT], cwd, process.env),
      IMPORT_CHECK_TIMEOUT_MS,
    );
    this.importCheck = parseImportCheck(check.stdout, check.stderr, check.code);
    if (!this.importCheck.ok) {
      const why = this.importCheck.error ?? 'unknown error';
      this.log.error(`${SERVER_MODULE} does not import in ${resolution.python}: ${why}`);
      this.setState('needs-install', why);
      this.offerInstall(resolution.python, why);
      return;
    }
    this.log.info(
      `${SERVER_MODULE} imports from ${this.importCheck.location ?? '?'} (Python ${this.importCheck.python ?? '?'})`,
    );
    const runtimeNote = runtimeStatusNote(this.importCheck);
    if (runtimeNote)
      this.log.info(
        `${runtimeNote}; a run offers to install it (or "cdit: Install the Verification Runtime")`,
      );

    const { settings } = readSettings();
    const server = pythonLaunch(resolution.python, ['-m', SERVER_MODULE], cwd, process.env, {
      PYTHONUNBUFFERED: '1',
    });
    const serverOptions: ServerOptions = {
      command: server.command,
      args: server.args,
      options: { cwd: server.cwd, env: server.env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file', language: 'python' }],
      outputChannel: this.log.channel,
      traceOutputChannel: this.log.channel,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      // Server markdown (hovers) may run one command: the glossary links.
      markdown: { isTrusted: { enabledCommands: [GLOSSARY_COMMAND] } },
      initializationOptions: {
        settings: serverSettings(settings),
        workspaceTrusted: trusted,
      },
      middleware: this.middleware,
    };
    const client = new LanguageClient(CLIENT_ID, CLIENT_NAME, serverOptions, clientOptions);
    for (const [method, handler] of this.handlers) client.onNotification(method, handler);
    client.onDidChangeState((e: { oldState: State; newState: State }) => {
      if (e.newState === State.Stopped && this.client === client && this.state === 'running') {
        this.log.error('the language server stopped');
        this.setState('failed', 'the server process stopped');
      }
    });
    this.client = client;
    try {
      await client.start();
      this.setState('running', resolution.python);
      this.log.info('language server running');
    } catch (error) {
      this.log.error('the language server failed to start', error);
      this.setState('failed', error instanceof Error ? error.message : String(error));
      void vscode.window
        .showErrorMessage('cdit: the language server failed to start.', 'Show Logs')
        .then((c) => c && this.log.show());
    }
  }

  private offerInstall(python: string, why: string): void {
    if (this.offeredInstallFor === python) return;
    this.offeredInstallFor = python;
    const canInstall = this.bundledPackageDir() !== undefined;
    const actions = [
      ...(canInstall ? [INSTALL_ACTION] : []),
      CHOOSE_INTERPRETER_ACTION,
      SHOW_LOGS_ACTION,
    ];
    void vscode.window
      .showErrorMessage(
        `cdit: the language server (${SERVER_MODULE}) does not import in ${python}: ${why}`,
        ...actions,
      )
      .then(async (choice) => {
        if (choice === INSTALL_ACTION) await vscode.commands.executeCommand('cdit.installServer');
        else if (choice === CHOOSE_INTERPRETER_ACTION)
          await vscode.commands.executeCommand('workbench.action.openSettings', 'cdit.interpreter');
        else if (choice === SHOW_LOGS_ACTION) this.log.show();
      });
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    try {
      if (client.isRunning()) await client.stop(5000);
    } catch (error) {
      this.log.warn(`stopping the language server: ${String(error)}`);
    }
    try {
      await client.dispose(2000);
    } catch {
      // already stopped
    }
    this.setState('stopped');
  }

  async dispose(): Promise<void> {
    await this.stopClient();
    this.stateEmitter.dispose();
  }
}

export { isServerError };
