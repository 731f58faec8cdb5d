/**
 * One-click verification runs: builds the VerificationRequest from the gate check, writes it to
 * `.cdit/runs/<id>/request.json` (the reproduce command points at it), starts it through the
 * server (`cdit.runVerification`), shows progress with step counts and Cancel, and feeds the
 * `cdit/runProgress` events into the results store. Refused in untrusted workspaces. A tune run
 * (`verify --tune`) is the same run with `request.tune`: the runtime chooses its phases.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { readSettings, type ServerController } from '../common/server';
import { runOptionsText } from '../common/settings';
import type { IntegrationState } from '../common/state';
import { cditPath, fileKind, writeJson } from '../common/workspace';
import {
  isServerError,
  parseRunProgress,
  parseTuneReport,
  type RunProgress,
  type ServerError,
} from '../contract/guards';
import type { PhaseSpec, TuneOptions, VerificationResult } from '../contract/verification';
import { toAbsolute } from '../gatecheck/answers';
import { runTally, verdictText } from '../results/format';
import type { ResultsStore } from '../results/store';
import { buildRequest, mergeRunConfig, runFolderName, type RunChoice } from './request';
import { RUN_PROGRESS, SERVER_COMMANDS } from '../common/serverCommands';
import { runtimeMissing } from '../common/install';

interface Active {
  progress: vscode.Progress<{ message?: string; increment?: number }>;
  done: () => void;
  phases: number;
  finished: number;
  /** percent reported so far (a tune's phase count grows as the runtime names its grid) */
  reported: number;
}

export class Runner implements vscode.Disposable {
  private readonly active = new Map<string, Active>();
  /** events that arrived before `cdit.runVerification` answered with the run id */
  private readonly early = new Map<string, RunProgress[]>();
  private readonly finishedEmitter = new vscode.EventEmitter<VerificationResult | undefined>();
  readonly onDidFinish = this.finishedEmitter.event;

  constructor(
    private readonly server: ServerController,
    private readonly store: ResultsStore,
    private readonly state: IntegrationState,
    private readonly log: Logger,
  ) {
    server.onNotification(RUN_PROGRESS, (params) => void this.onProgress(params));
    // a server that stops ends its runs (their processes are in its session): close the progress
    server.onDidChangeState(() => {
      if (server.state === 'running' || server.state === 'starting') return;
      for (const [runId, active] of this.active) {
        active.done();
        this.log.warn(`run ${runId}: the language server stopped (${server.state}) while it ran`);
        void this.store.finishLive(runId, null);
      }
      this.active.clear();
      void vscode.commands.executeCommand('setContext', 'cdit.runActive', false);
    });
  }

  /** Checks everything a run needs; returns why not, after telling the user. */
  private async preflight(): Promise<boolean> {
    if (!vscode.workspace.isTrusted) {
      void vscode.window
        .showWarningMessage(
          'cdit: verification runs import and execute the model code, so they are refused in an untrusted workspace. Trust the workspace to run them.',
          'Manage Workspace Trust',
        )
        .then((c) => c && vscode.commands.executeCommand('workbench.trust.manage'));
      return false;
    }
    if (!this.state.gatePassed) {
      void vscode.window
        .showWarningMessage(
          'cdit: complete the gate check before running a verification.',
          'Open Gate Check',
        )
        .then((c) => c && vscode.commands.executeCommand('cdit.openGateCheck'));
      return false;
    }
    const root = this.state.root ?? '';
    const a = this.state.answers;
    if (
      a.targetKind === 'standalone' &&
      (await fileKind(toAbsolute(a.targetPath, root))) !== 'file'
    ) {
      void vscode.window
        .showWarningMessage(
          `cdit: ${a.targetPath} does not exist yet: generate the integration first.`,
          'Generate Integration',
        )
        .then((c) => c && vscode.commands.executeCommand('cdit.generateIntegration'));
      return false;
    }
    if (!(await this.server.whenRunning(60_000))) {
      void vscode.window
        .showErrorMessage(
          `cdit: the language server is ${this.server.state}; see the log.`,
          'Show Logs',
        )
        .then((c) => c && this.log.show());
      return false;
    }
    return true;
  }

  /**
   * Starts a run of `phases` (after the baseline), or with `extra.tune` a tune (the runtime
   * replaces the phases with its grid). Resolves once the server accepted it.
   */
  async run(
    phases: PhaseSpec[],
    device: 'cpu' | 'cuda',
    title: string,
    extra: { tune?: TuneOptions } = {},
  ): Promise<string | undefined> {
    if (!(await this.preflight())) return undefined;
    const root = this.state.root ?? '';
    const { settings } = readSettings();
    // the gate check's call arguments and inputs win over the settings, per name
    const call = mergeRunConfig(settings, this.state.stored.run);
    const choice: RunChoice = {
      phases,
      device,
      smoke: settings.smokeRun,
      options: {
        dtype: settings.dtype,
        cache: settings.cache,
        callArgs: call.callArgs,
        inputs: call.inputs,
        thresholds: settings.thresholds,
      },
      tune: extra.tune,
    };
    const folder = runFolderName(new Date());
    const outputDir = cditPath(root, 'runs', folder);
    const request = buildRequest(this.state.answers, choice, root, outputDir);
    const requestPath = path.join(outputDir, 'request.json');
    await writeJson(requestPath, request);
    const what = request.tune
      ? `tune (time box ${request.tune.budgetS ?? '-'} s${request.tune.parallel === false ? ', no parallel points' : ''})`
      : (request.phases?.map((p) => p.kind).join(', ') ?? '');
    this.log.info(`verification ${folder}: ${what} on ${device}; ${runOptionsText(settings)}`);
    if (this.state.stored.run)
      this.log.info(
        `verification ${folder}: call arguments ${JSON.stringify(request.extraCallKwargs ?? {})}, ` +
          `inputs ${JSON.stringify(request.inputs ?? {})} (the gate check's over cdit.callArgs / cdit.inputs)`,
      );
    const start = (): Promise<{ runId: string; progressToken?: string | null } | ServerError> =>
      this.server.execute(SERVER_COMMANDS.runVerification, { request });
    let reply = await start();
    // the interpreter lacks the [runtime] extra: offer to install it there, then ask again
    const refusal = runtimeMissing(reply);
    if (refusal) {
      if (!(await this.server.offerRuntimeInstall(refusal))) return undefined;
      reply = await start();
    }
    if (isServerError(reply)) {
      this.log.error(`verification refused: ${reply.error.code}: ${reply.error.message}`);
      void vscode.window.showErrorMessage(
        `cdit: verification refused: ${reply.error.message}${reply.error.hint ? ` — ${reply.error.hint}` : ''}`,
      );
      return undefined;
    }
    const runId = reply.runId;
    this.store.startLive(request, requestPath, runId);
    void vscode.commands.executeCommand('setContext', 'cdit.runActive', true);
    void vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `cdit: ${title}`,
        cancellable: true,
      },
      (progress, token) => {
        token.onCancellationRequested(() => void this.cancel(runId));
        return new Promise<void>((resolve) => {
          this.active.set(runId, {
            progress,
            done: resolve,
            phases: request.phases?.length ?? 1,
            finished: 0,
            reported: 0,
          });
          progress.report({ message: 'starting (importing torch, loading the pipeline)…' });
          for (const early of this.early.get(runId) ?? []) void this.onProgress(early);
          this.early.delete(runId);
        });
      },
    );
    void vscode.commands.executeCommand('cdit.results.focus');
    return runId;
  }

  async cancel(runId?: string): Promise<void> {
    const ids = runId
      ? [runId]
      : this.store.activeRuns.map((r) => r.serverRunId).filter((x): x is string => !!x);
    for (const id of ids) {
      this.log.info(`cancelling ${id}`);
      const reply = await this.server.execute(SERVER_COMMANDS.cancelRun, { runId: id });
      if (isServerError(reply)) this.log.warn(`cancel ${id}: ${reply.error.message}`);
    }
  }

  private async onProgress(raw: unknown): Promise<void> {
    const message = parseRunProgress(raw);
    if (!message) {
      this.log.warn(`ignored an invalid ${RUN_PROGRESS} notification`);
      return;
    }
    const active = this.active.get(message.runId);
    if (!active && !this.store.liveByServerId(message.runId)) {
      const list = this.early.get(message.runId) ?? [];
      list.push(message);
      this.early.set(message.runId, list);
      return;
    }
    if ('event' in message) {
      const e = message.event;
      const entry = this.store.updateLive(message.runId, e);
      if (!active) return;
      active.phases = Math.max(active.phases, entry?.result.phases?.length ?? 0);
      if (e.event === 'step' && e.phase)
        active.progress.report({ message: `${e.phase}: step ${e.step ?? '?'}/${e.total ?? '?'}` });
      else if (e.event === 'phase_started' && e.phase)
        active.progress.report({ message: `${e.phase}: running` });
      else if (e.event === 'phase_finished' && e.phase) {
        active.finished += 1;
        const percent = Math.min(100, (100 * active.finished) / Math.max(1, active.phases));
        const increment = Math.max(0, percent - active.reported);
        active.reported += increment;
        active.progress.report({
          message: `${e.phase}: ${verdictText(e.verdict ?? e.status ?? 'done')}`,
          increment,
        });
      } else if (e.event === 'launch_started' && e.message)
        active.progress.report({ message: e.message });
      else if (e.event === 'error' && e.error)
        this.log.warn(`run ${message.runId}: ${e.error.code}: ${e.error.message}`);
      return;
    }
    // final report
    this.active.delete(message.runId);
    active?.done();
    const entry = await this.store.finishLive(message.runId, message.result);
    if (this.store.activeRuns.length === 0)
      void vscode.commands.executeCommand('setContext', 'cdit.runActive', false);
    const result = entry?.result ?? message.result ?? undefined;
    if (message.stderrTail?.length)
      this.log.error(`run ${message.runId} stderr:\n${message.stderrTail.join('\n')}`);
    this.finishedEmitter.fire(result);
    if (message.cancelled) {
      void vscode.window.showInformationMessage('cdit: verification cancelled.');
      return;
    }
    if (!result) {
      void vscode.window
        .showErrorMessage(
          `cdit: the verification ended without results (exit code ${message.exitCode ?? '?'}); see the log.`,
          'Show Logs',
        )
        .then((c) => c && this.log.show());
      return;
    }
    const { passed, judged, notExercised } = runTally(result);
    const tune = parseTuneReport(result.tune);
    let summary = result.error
      ? `${result.status}: ${result.error.message}`
      : `${result.status}, ${passed}/${judged} phase(s) passed` +
        (notExercised
          ? `, ${notExercised} not exercised (no step cached, or nothing split: see the phase detail)`
          : '');
    if (tune)
      summary += tune.recommended
        ? `; tune recommends ${tune.recommended}`
        : '; tune: no configuration passed and beat the baseline';
    this.log.info(`verification ${entry?.id ?? message.runId}: ${summary}`);
    if (tune) {
      // a tune explores settings that may fail: the recommendation is the outcome
      const show = tune.recommended
        ? vscode.window.showInformationMessage
        : vscode.window.showWarningMessage;
      const phases = result.phases ?? [];
      const open =
        phases.find((p) => p.name === tune.recommended) ??
        phases.find((p) => p.kind === 'baseline');
      void show(`cdit: ${summary}.`, 'Show Tune').then(
        (c) =>
          c &&
          (entry && open
            ? vscode.commands.executeCommand('cdit.showPhaseDetail', entry.id, open.name)
            : vscode.commands.executeCommand('cdit.results.focus')),
      );
      return;
    }
    const show =
      passed === judged && !result.error
        ? vscode.window.showInformationMessage
        : vscode.window.showWarningMessage;
    void show(`cdit: verification ${summary}.`, 'Show Results').then(
      (c) => c && vscode.commands.executeCommand('cdit.results.focus'),
    );
  }

  dispose(): void {
    this.finishedEmitter.dispose();
    for (const a of this.active.values()) a.done();
    this.active.clear();
  }
}
