/**
 * The plan review (webview): what the analysis decided and why, before any file is written.
 * The user changes choices where the analysis offers alternatives and approves; the approved plan
 * (with the approval in `provenance.approval`) is stored in `.cdit/plan.json` and is what
 * "Generate Integration" generates from.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { readSettings, type ServerController } from '../common/server';
import type { IntegrationState } from '../common/state';
import { fileKind } from '../common/workspace';
import type { AnalysisReport, IntegrationPlan } from '../contract/analysis';
import { isServerError } from '../contract/guards';
import { answersDigest, serverAnswers, toAbsolute } from '../gatecheck/answers';
import type { RunConfig } from '../gatecheck/callArgs';
import { mergeRunConfig } from '../runs/request';
import { createPanel, onValidMessage } from '../webview/panelBase';
import { parsePlanMessage, type PlanMessage } from '../webview/messages';
import {
  answersWithChoices,
  applyChoices,
  approvedPlan,
  defaultChoices,
  readApproval,
  reviewModel,
  staleReason,
  type PlanChoices,
  type ReviewModel,
} from './review';
import { SERVER_COMMANDS } from '../common/serverCommands';

export interface PlanDeps {
  context: vscode.ExtensionContext;
  state: IntegrationState;
  server: ServerController;
  log: Logger;
}

interface DryRun {
  files?: { path: string; created: boolean }[];
  review?: string[];
  warnings?: string[];
}

/** The analysis of the gate check's transformer, with its pipeline, config and model index. */
export async function analyzeIntegration(
  deps: PlanDeps,
): Promise<AnalysisReport | { error: { code: string; message: string; hint?: string } }> {
  const root = deps.state.root ?? '';
  const a = deps.state.answers;
  const abs = (p: string): string | undefined => (p ? toAbsolute(p, root) : undefined);
  const local = abs(a.localPath);
  const config = local ? path.join(local, 'transformer', 'config.json') : undefined;
  const index = local ? path.join(local, 'model_index.json') : undefined;
  const run = runCall(deps);
  return deps.server.execute<AnalysisReport>(SERVER_COMMANDS.analyzeFile, {
    uri: vscode.Uri.file(toAbsolute(a.transformerSource, root)).toString(),
    className: a.transformerClass,
    pipelinePath: abs(a.pipelineSource),
    configPath: config && (await fileKind(config)) === 'file' ? config : undefined,
    modelIndexPath: index && (await fileKind(index)) === 'file' ? index : undefined,
    ...(run ? { call: { arguments: run.callArgs, inputs: Object.keys(run.inputs) } } : {}),
  });
}

/**
 * How the verification runs call the pipeline (settings and gate check merged, as the runner
 * does), or undefined when they pass nothing beyond the defaults: the analysis and the plan
 * decide `has_separate_cfg` for this call.
 */
function runCall(deps: PlanDeps): RunConfig | undefined {
  const run = mergeRunConfig(readSettings().settings, deps.state.stored.run);
  const called = Object.keys(run.callArgs).length > 0 || Object.keys(run.inputs).length > 0;
  return called ? run : undefined;
}

/** Builds the plan for the stored answers and `choices` (the server decides CP/TP details). */
export async function buildPlan(
  deps: PlanDeps,
  choices: PlanChoices | undefined,
): Promise<{ plan: IntegrationPlan } | { errors: string[] }> {
  const root = deps.state.root ?? '';
  const a = deps.state.answers;
  const transformer = toAbsolute(a.transformerSource, root);
  const configExists = a.localPath
    ? (await fileKind(path.join(toAbsolute(a.localPath, root), 'transformer', 'config.json'))) ===
      'file'
    : false;
  const run = runCall(deps);
  const answers = {
    ...answersWithChoices(serverAnswers(a, root, configExists), choices),
    ...(run ? { run } : {}),
  };
  // the server analyses open documents with the gate check's pipeline and config
  await vscode.workspace.openTextDocument(vscode.Uri.file(transformer));
  const reply = await deps.server.execute<{
    plan?: IntegrationPlan;
    errors?: { path: string; message: string }[];
  }>(SERVER_COMMANDS.buildPlan, {
    uri: vscode.Uri.file(transformer).toString(),
    answers,
  });
  if (isServerError(reply))
    return {
      errors: [`${reply.error.message}${reply.error.hint ? ` (${reply.error.hint})` : ''}`],
    };
  if (reply.errors && reply.errors.length > 0)
    return { errors: reply.errors.map((e) => `${e.path}: ${e.message}`) };
  if (!reply.plan) return { errors: ['the server returned no plan'] };
  return { plan: reply.plan };
}

export class PlanPanel {
  private static current: PlanPanel | undefined;
  private readonly panel: vscode.WebviewPanel;
  private readonly disposables: vscode.Disposable[] = [];
  private choices: PlanChoices | undefined;
  private plan: IntegrationPlan | undefined;
  private analysis: AnalysisReport | undefined;
  private model: ReviewModel | undefined;
  private errors: string[] = [];
  private busy = '';

  static show(deps: PlanDeps): PlanPanel {
    if (PlanPanel.current) {
      PlanPanel.current.panel.reveal();
      void PlanPanel.current.load();
      return PlanPanel.current;
    }
    PlanPanel.current = new PlanPanel(deps);
    return PlanPanel.current;
  }

  private constructor(private readonly deps: PlanDeps) {
    this.panel = createPanel(deps.context, {
      viewType: 'cdit.planReview',
      title: 'cdit: Integration Plan',
      script: 'plan.js',
      body: '<main id="app" aria-live="polite"><h1>Integration plan</h1><p>Loading…</p></main>',
    });
    this.panel.onDidDispose(() => this.dispose(), null, this.disposables);
    this.disposables.push(
      onValidMessage(
        this.panel,
        deps.log,
        (raw) => parsePlanMessage(raw, this.model?.linkTargets ?? []),
        (m) => this.onMessage(m),
      ),
    );
  }

  private async onMessage(message: PlanMessage): Promise<void> {
    switch (message.type) {
      case 'ready':
        await this.load();
        return;
      case 'choices':
        this.choices = message.choices;
        await this.load();
        return;
      case 'approve':
        this.choices = message.choices;
        await this.approve();
        return;
      case 'open': {
        const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(message.path));
        const line = Math.max(0, message.line - 1);
        await vscode.window.showTextDocument(doc, {
          viewColumn: vscode.ViewColumn.One,
          selection: new vscode.Range(line, 0, line, 0),
          preview: true,
        });
        return;
      }
      case 'generate':
        await vscode.commands.executeCommand('cdit.generateIntegration');
        return;
    }
  }

  private post(approval?: { at: string; stale?: string }): void {
    void this.panel.webview.postMessage({
      type: 'state',
      model: this.model ?? null,
      errors: this.errors,
      busy: this.busy,
      approval: approval ?? null,
      trusted: vscode.workspace.isTrusted,
    });
  }

  async load(): Promise<void> {
    if (!this.deps.state.gatePassed) {
      this.errors = [
        'The gate check has not passed yet: complete it first ("cdit: Open Gate Check").',
      ];
      this.model = undefined;
      this.post();
      return;
    }
    this.busy = 'Analysing and building the plan…';
    this.post();
    try {
      if (!(await this.deps.server.whenRunning(60_000))) {
        this.errors = [`the language server is ${this.deps.server.state}`];
        return;
      }
      const analysis = await analyzeIntegration(this.deps);
      if (isServerError(analysis)) {
        this.errors = [`analysis: ${analysis.error.message}`];
        return;
      }
      this.analysis = analysis;
      const stored = await this.deps.state.approvedPlan();
      const approval = readApproval(stored);
      const digest = answersDigest(this.deps.state.answers);
      if (!this.choices && approval && !staleReason(approval, analysis.source.sha256, digest))
        this.choices = approval.choices;
      const built = await buildPlan(this.deps, this.choices);
      if ('errors' in built) {
        this.errors = built.errors;
        this.model = undefined;
        return;
      }
      const transformer = analysis.transformers.find(
        (t) => t.className === built.plan.model.transformerClass,
      );
      this.choices ??= defaultChoices(built.plan, transformer);
      this.plan = applyChoices(built.plan, this.choices);
      const dry = await this.deps.server.execute<DryRun>(SERVER_COMMANDS.generate, {
        uri: vscode.Uri.file(
          toAbsolute(this.deps.state.answers.transformerSource, this.deps.state.root ?? ''),
        ).toString(),
        plan: this.plan,
        apply: false,
      });
      const dryRun: DryRun | undefined = isServerError(dry) ? undefined : dry;
      this.errors =
        isServerError(dry) && dry.error.code !== 'up-to-date'
          ? [`generation check: ${dry.error.message}`]
          : [];
      this.model = reviewModel(this.plan, analysis, dryRun, this.choices);
      if (isServerError(dry) && dry.error.code === 'up-to-date')
        this.model.generatorNotes.unshift(
          'The generated code is up to date: generating again changes nothing.',
        );
    } finally {
      this.busy = '';
      const stored = await this.deps.state.approvedPlan();
      const approval = readApproval(stored);
      const stale = approval
        ? staleReason(
            approval,
            this.analysis?.source.sha256,
            answersDigest(this.deps.state.answers),
          )
        : undefined;
      const same =
        approval &&
        this.choices &&
        JSON.stringify(approval.choices) === JSON.stringify(this.choices);
      this.post(approval && same ? { at: approval.approvedAt, stale } : undefined);
    }
  }

  private async approve(): Promise<void> {
    await this.load();
    if (!this.plan || !this.choices || this.errors.length > 0) {
      void vscode.window.showWarningMessage('cdit: the plan has problems; it was not approved.');
      return;
    }
    const approval = {
      approvedAt: new Date().toISOString(),
      analysisSha256: this.analysis?.source.sha256 ?? null,
      answersDigest: answersDigest(this.deps.state.answers),
      choices: this.choices,
    };
    await this.deps.state.savePlan(approvedPlan(this.plan, approval));
    this.deps.log.info('integration plan approved (.cdit/plan.json)');
    this.post({ at: approval.approvedAt });
    void vscode.window
      .showInformationMessage(
        'cdit: plan approved — stored in .cdit/plan.json.',
        'Generate Integration',
      )
      .then((c) => {
        if (c) void vscode.commands.executeCommand('cdit.generateIntegration');
      });
  }

  private dispose(): void {
    PlanPanel.current = undefined;
    for (const d of this.disposables) d.dispose();
  }
}
