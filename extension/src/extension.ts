/**
 * cdit-integrator: activation and wiring. UI and process management only; every analysis,
 * plan and generated file comes from the Python language server.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Middleware } from 'vscode-languageclient/node';
import { CHECKLIST, checklist, isChecklistPhaseId, type ChecklistPhaseId } from './checklist/model';
import { ChecklistTree } from './checklist/tree';
import { Logger } from './common/logger';
import { PythonExtension } from './common/python';
import { sameResolution } from './common/interpreter';
import { ServerController, readSettings } from './common/server';
import { parseSizesArgument, runOptionsText } from './common/settings';
import { IntegrationState } from './common/state';
import { StatusItems } from './common/status';
import { cditPath, fileKind } from './common/workspace';
import { isRecord } from './contract/guards';
import { GateCheckPanel } from './gatecheck/panel';
import { generateIntegration } from './plan/generate';
import { PlanPanel } from './plan/panel';
import { DetailPanel } from './results/detail';
import { markdownReport, reproduceCommand } from './results/format';
import { ResultsStore, type RunEntry } from './results/store';
import { ResultsTree } from './results/tree';
import {
  ALL_PHASES,
  deviceOptions,
  specsFor,
  tuneDeviceOptions,
  type DeviceOption,
} from './runs/picks';
import { tuneOptions } from './runs/request';
import { Runner } from './runs/runner';
import { SERVER_COMMANDS } from './common/serverCommands';
import { GLOSSARY_COMMAND, openGlossary } from './common/glossary';

let controller: ServerController | undefined;

/** A code-lens call of a server command: `[{uri, className}]` and nothing else. */
function isLensCall(args: unknown[]): boolean {
  const first = args[0];
  if (!isRecord(first) || typeof first.uri !== 'string') return false;
  return Object.keys(first).every((k) => k === 'uri' || k === 'className');
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = new Logger('cdit-integrator');
  context.subscriptions.push(log);
  log.info(
    `cdit-integrator ${String((context.extension.packageJSON as { version?: unknown }).version)} activating (VS Code ${vscode.version})`,
  );

  const state = new IntegrationState();
  const store = new ResultsStore(state.root);
  context.subscriptions.push(state, store);

  // Server commands invoked from code lenses go to the client's flows (gate check, plan review,
  // preview, run pickers); the extension's own calls use executeCommand requests directly.
  const middleware: Middleware = {
    executeCommand: async (command, args, next) => {
      if (isLensCall(args)) {
        if (command === SERVER_COMMANDS.generate)
          return vscode.commands.executeCommand('cdit.generateIntegration');
        if (command === SERVER_COMMANDS.runVerification)
          return vscode.commands.executeCommand('cdit.verifyPhase');
        if (command === SERVER_COMMANDS.analyzeFile)
          return vscode.commands.executeCommand(
            state.gatePassed ? 'cdit.reviewPlan' : 'cdit.openGateCheck',
          );
      }
      return next(command, args) as unknown;
    },
    provideCodeActions: async (document, range, ctx, token, next) => {
      const actions = await next(document, range, ctx, token);
      if (!actions || state.gatePassed) return actions;
      for (const action of actions) {
        if (
          action instanceof vscode.CodeAction &&
          action.title.startsWith('cdit:') &&
          !action.disabled
        ) {
          action.disabled = { reason: 'complete the gate check first ("cdit: Open Gate Check")' };
        }
      }
      return actions;
    },
  };

  const python = new PythonExtension();
  const server = new ServerController(context, log, python, middleware);
  controller = server;
  const status = new StatusItems(server);
  const runner = new Runner(server, store, state, log);
  context.subscriptions.push(status, runner, { dispose: () => void server.dispose() });

  const resultsTree = new ResultsTree(store);
  const checklistTree = new ChecklistTree();
  context.subscriptions.push(
    vscode.window.createTreeView('cdit.results', {
      treeDataProvider: resultsTree,
      showCollapseAll: true,
    }),
    vscode.window.createTreeView('cdit.checklist', { treeDataProvider: checklistTree }),
  );

  const refreshChecklist = async (): Promise<void> => {
    if (!state.stored.exists || !state.root) {
      checklistTree.update([], undefined);
      return;
    }
    const a = state.answers;
    let cli: 'generated' | 'missing' | 'not-applicable' = 'not-applicable';
    if (a.targetKind === 'cache-dit-checkout')
      cli =
        (await fileKind(cditPath(state.root, 'generated.json'))) === 'file'
          ? 'generated'
          : 'missing';
    const results = store.runs.filter((r) => !r.live).map((r) => r.result);
    const items = checklist({ results, overrides: state.stored.overrides, cli });
    const header = state.gatePassed
      ? `Gate check passed: ${a.transformerClass} → ${a.targetPath}`
      : 'Gate check not passed — open it';
    checklistTree.update(items, header);
  };
  state.onDidChange(() => void refreshChecklist());
  store.onDidChange(() => void refreshChecklist());
  runner.onDidFinish((result) => {
    status.showRun(result);
    void state.reload();
  });

  const planDeps = { context, state, server, log };
  const pickDevice = async (
    ids: readonly ChecklistPhaseId[],
  ): Promise<DeviceOption | undefined> => {
    const options = deviceOptions(ids);
    const picked = await vscode.window.showQuickPick(
      options.map((o) => ({ label: o.label, description: o.description, option: o })),
      { title: 'cdit: where to run', placeHolder: 'CPU smoke run, or the number of GPUs' },
    );
    return picked?.option;
  };
  const runPhases = async (ids: readonly ChecklistPhaseId[], title: string): Promise<void> => {
    const option = await pickDevice(ids);
    if (!option) return;
    const plan = await state.approvedPlan();
    const { specs, skipped } = specsFor(ids, option, {
      ulyssesAnything: plan?.contextParallel?.ulyssesAnything === true,
    });
    if (skipped.length)
      void vscode.window.showInformationMessage(
        `cdit: skipped on ${option.label}: ${skipped.join(', ')} (needs more or other devices).`,
      );
    if (specs.length === 0) return;
    await runner.run(specs, option.device, `${title} (${option.label})`);
  };

  const register = (id: string, fn: (...args: unknown[]) => unknown): void => {
    context.subscriptions.push(vscode.commands.registerCommand(id, fn));
  };
  register('cdit.restartServer', () => server.restart('restart command'));
  register('cdit.setParallelSizes', async (arg) => {
    const parsed = parseSizesArgument(arg);
    if (!parsed) return;
    await vscode.workspace
      .getConfiguration('cdit')
      .update(parsed.setting, parsed.sizes, vscode.ConfigurationTarget.Workspace);
    void vscode.window.showInformationMessage(
      `cdit: the pre-flight checks now consider ${parsed.setting === 'cpSizes' ? 'CP' : 'TP'} sizes ${parsed.sizes.join(', ')} (workspace setting cdit.${parsed.setting}).`,
    );
  });
  register('cdit.showLogs', () => log.show());
  register(GLOSSARY_COMMAND, (arg) => openGlossary(vscode, context.extensionPath, arg));
  register('cdit.installServer', () => server.installBundled());
  register('cdit.installRuntime', () => server.install('runtime'));
  register('cdit.openGateCheck', () => {
    if (!state.root)
      return vscode.window.showWarningMessage(
        'cdit: open a folder first; the gate check is stored in the workspace.',
      );
    GateCheckPanel.show({ context, state, server, log, onSaved: refreshChecklist });
    return undefined;
  });
  register('cdit.reviewPlan', () => {
    if (!state.gatePassed) {
      void vscode.window.showInformationMessage(
        'cdit: complete the gate check first; the plan is built from its answers.',
      );
      GateCheckPanel.show({ context, state, server, log, onSaved: refreshChecklist });
      return;
    }
    PlanPanel.show(planDeps);
  });
  register('cdit.generateIntegration', async () => {
    const ok = await generateIntegration(planDeps);
    if (ok) await refreshChecklist();
  });
  register('cdit.verifySmoke', () => runner.run([{ kind: 'cache' }], 'cpu', 'CPU smoke run'));
  register('cdit.verifyAll', () => runPhases(ALL_PHASES, 'verify all'));
  register('cdit.verifyTune', async () => {
    const picked = await vscode.window.showQuickPick(
      tuneDeviceOptions().map((o) => ({ label: o.label, description: o.description, option: o })),
      {
        title: 'cdit: where to tune (verify --tune)',
        placeHolder: 'CPU smoke run, one GPU, or every visible GPU',
      },
    );
    if (!picked) return;
    const { option } = picked;
    const { settings } = readSettings();
    await runner.run([], option.device, `tune (${option.label})`, {
      tune: tuneOptions(settings.tune.budgetS, option.parallel),
    });
  });
  register('cdit.verifyPhase', async () => {
    const results = store.runs.filter((r) => !r.live).map((r) => r.result);
    const items = checklist({
      results,
      overrides: state.stored.overrides,
      cli: 'not-applicable',
    }).filter((i) => i.phase.id !== 'cli');
    const picked = await vscode.window.showQuickPick(
      items.map((i) => ({
        label: i.phase.label,
        description: i.gate === 'locked' ? `locked — ${i.detail}` : i.detail,
        id: i.phase.id,
        locked: i.gate === 'locked',
      })),
      { title: 'cdit: verify which phase?' },
    );
    if (!picked) return;
    if (picked.locked) {
      const choice = await vscode.window.showWarningMessage(
        `cdit: "${picked.label}" is locked: the earlier phases have not passed. Override the gate (recorded)?`,
        'Override…',
      );
      if (choice) await vscode.commands.executeCommand('cdit.checklist.override', picked.id);
      return;
    }
    await runPhases([picked.id], picked.label);
  });
  register('cdit.checklist.verify', async (id) => {
    if (!isChecklistPhaseId(id)) return;
    await runPhases([id], CHECKLIST.find((p) => p.id === id)?.label ?? id);
  });
  register('cdit.checklist.override', async (id) => {
    if (!isChecklistPhaseId(id) || !state.stored.exists) return;
    const label = CHECKLIST.find((p) => p.id === id)?.label ?? id;
    const reason = await vscode.window.showInputBox({
      title: `Override the gate of "${label}"`,
      prompt:
        'Why may this phase run before the earlier ones passed? (recorded in .cdit/integration.json)',
      validateInput: (v) =>
        v.trim().length < 5 ? 'give a reason (5 characters at least)' : undefined,
    });
    if (!reason) return;
    await state.save({
      ...state.stored,
      overrides: [
        ...state.stored.overrides,
        { phase: id, reason: reason.trim(), at: new Date().toISOString() },
      ],
    });
    log.info(`checklist: gate of ${id} overridden: ${reason.trim()}`);
  });
  register('cdit.cancelRun', () => runner.cancel());
  register('cdit.refreshResults', () => store.reload());
  register('cdit.exportResults', async (node) => {
    const run =
      (isRecord(node) && isRecord(node.run) ? (node.run as unknown as RunEntry) : undefined) ??
      store.latestFinished;
    if (!run)
      return vscode.window.showInformationMessage('cdit: no finished verification run to export.');
    const python = server.resolution?.python ?? 'python3';
    const text = markdownReport(
      run.result,
      run.requestPath ? reproduceCommand(python, run.requestPath, state.root) : undefined,
    );
    await vscode.env.clipboard.writeText(text);
    const doc = await vscode.workspace.openTextDocument({ language: 'markdown', content: text });
    await vscode.window.showTextDocument(doc, { preview: true });
    void vscode.window.showInformationMessage('cdit: results table copied to the clipboard.');
    return undefined;
  });
  register('cdit.showPhaseDetail', (runId, phaseName) => {
    if (typeof runId !== 'string' || typeof phaseName !== 'string') return;
    const run = store.find(runId);
    if (!run)
      return vscode.window.showWarningMessage(`cdit: run ${runId} is not in the history any more.`);
    DetailPanel.show(
      context,
      log,
      run,
      phaseName,
      server.resolution?.python ?? 'python3',
      state.root,
    );
    return undefined;
  });

  // Restarts: interpreter setting, the Python extension's environment, workspace trust.
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('cdit.interpreter'))
        void server.restart('cdit.interpreter changed');
      else if (e.affectsConfiguration('cdit')) {
        // the run options (cdit.cache, cdit.dtype …) are read at each run; the log says when
        // a change arrived and what the next run will use
        const { settings, problems } = readSettings();
        for (const p of problems) log.warn(p);
        log.info(`cdit settings changed; runs use ${runOptionsText(settings)}`);
        void server.notifyConfigurationChanged();
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void server.restart('workspace trusted')),
  );
  const envSub = await python.onDidChange(() => {
    if (!server.resolution?.dependsOnActiveInterpreter) return;
    void server.resolve().then((next) => {
      if (!sameResolution(server.resolution, next))
        void server.restart('the Python extension changed the active environment');
    });
  });
  if (envSub) context.subscriptions.push(envSub);

  void vscode.commands.executeCommand('setContext', 'cdit.runActive', false);
  await state.reload();
  await store.reload();
  status.showRun(store.latestFinished?.result);
  await refreshChecklist();
  void server.restart('activation');
  log.info(
    `workspace: ${state.root ?? '(none)'}; ${state.stored.exists ? `gate check ${state.gatePassed ? 'passed' : 'not passed'}` : 'no gate check yet'}; ${path.basename(state.root ?? '')}`,
  );
}

export async function deactivate(): Promise<void> {
  await controller?.dispose();
  controller = undefined;
}
