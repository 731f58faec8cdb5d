/**
 * The gate-check questionnaire (webview). Prefills are offered as suggestions the user confirms;
 * "Check" validates every field (with the reason); "Save" stores the answers in
 * `.cdit/integration.json`, only when the check passed for exactly these answers.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { readSettings, type ServerController } from '../common/server';
import type { IntegrationState } from '../common/state';
import { fileKind, readJson, readText } from '../common/workspace';
import type { AnalysisReport } from '../contract/analysis';
import { isServerError } from '../contract/guards';
import { createPanel, onValidMessage } from '../webview/panelBase';
import { parseGateMessage, type GateMessage } from '../webview/messages';
import {
  FIELDS,
  answersDigest,
  classesDefined,
  suggestions,
  toAbsolute,
  toWorkspaceRelative,
  type FieldId,
  type GateAnswers,
  type Suggestion,
} from './answers';
import {
  emptyResult,
  validate,
  type AnalysisSummary,
  type ValidationDeps,
  type ValidationResult,
} from './validate';
import { SERVER_COMMANDS } from '../common/serverCommands';

const EXCLUDE =
  '**/{.git,.venv,venv,env,node_modules,site-packages,__pycache__,build,dist,.cdit}/**';

export interface GateCheckDeps {
  context: vscode.ExtensionContext;
  state: IntegrationState;
  server: ServerController;
  log: Logger;
  /** called after the answers were saved with a passing check */
  onSaved: () => Promise<void>;
}

export class GateCheckPanel {
  private static current: GateCheckPanel | undefined;
  private answers: GateAnswers;
  private confirmed = new Set<FieldId>();
  private suggestions: Suggestion[] = [];
  private validation: ValidationResult = emptyResult();
  private validatedDigest: string | undefined;
  private busy = '';
  private saved = false;
  private readonly disposables: vscode.Disposable[] = [];

  static show(deps: GateCheckDeps): GateCheckPanel {
    if (GateCheckPanel.current) {
      GateCheckPanel.current.panel.reveal();
      return GateCheckPanel.current;
    }
    GateCheckPanel.current = new GateCheckPanel(deps);
    return GateCheckPanel.current;
  }

  private readonly panel: vscode.WebviewPanel;

  private constructor(private readonly deps: GateCheckDeps) {
    this.answers = { ...deps.state.answers };
    this.confirmed = new Set(deps.state.stored.gate?.confirmed ?? []);
    this.saved = deps.state.gatePassed;
    this.panel = createPanel(deps.context, {
      viewType: 'cdit.gateCheck',
      title: 'cdit: Gate Check',
      script: 'gatecheck.js',
      body: '<main id="app" aria-live="polite"><h1>Gate check</h1><p>Loading…</p></main>',
      state: { fields: FIELDS },
    });
    this.panel.onDidDispose(() => this.dispose(), null, this.disposables);
    this.disposables.push(
      onValidMessage(this.panel, deps.log, parseGateMessage, (m) => this.onMessage(m)),
    );
  }

  private async onMessage(message: GateMessage): Promise<void> {
    switch (message.type) {
      case 'ready':
        this.post();
        await this.prefill();
        if (this.deps.state.stored.exists) await this.check();
        return;
      case 'edit':
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        this.saved = false;
        return;
      case 'check':
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        await this.check();
        return;
      case 'save':
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        await this.save();
        return;
      case 'browse':
        await this.browse(message.field);
        return;
      case 'reviewPlan':
        await vscode.commands.executeCommand('cdit.reviewPlan');
        return;
    }
  }

  private post(): void {
    const root = this.deps.state.root ?? '';
    const digest = answersDigest(this.answers);
    void this.panel.webview.postMessage({
      type: 'state',
      answers: this.answers,
      confirmed: [...this.confirmed],
      suggestions: this.suggestions,
      validation: this.validation,
      checkedCurrent: this.validatedDigest === digest,
      busy: this.busy,
      saved: this.saved,
      root,
      trusted: vscode.workspace.isTrusted,
    });
  }

  private root(): string {
    const root = this.deps.state.root;
    if (!root) throw new Error('open a folder first: the gate check is stored in the workspace');
    return root;
  }

  /** Suggestions from model_index.json, the transformer's config.json and the open file. */
  private async prefill(): Promise<void> {
    const root = this.root();
    this.busy = 'Looking for model_index.json and the model sources…';
    this.post();
    try {
      const found = await vscode.workspace.findFiles('**/model_index.json', EXCLUDE, 20);
      const modelIndexFile = found.map((u) => u.fsPath).sort((a, b) => a.length - b.length)[0];
      const modelDir = modelIndexFile ? path.dirname(modelIndexFile) : undefined;
      const modelIndex = modelIndexFile ? await readJson(modelIndexFile) : undefined;
      const transformerConfig = modelDir
        ? await readJson(path.join(modelDir, 'transformer', 'config.json'))
        : undefined;

      let openFile: { path: string; transformerClasses: string[] } | undefined;
      const editor = vscode.window.activeTextEditor;
      if (
        editor &&
        editor.document.languageId === 'python' &&
        editor.document.uri.scheme === 'file' &&
        (await this.deps.server.whenRunning(30_000))
      ) {
        const reply = await this.deps.server.execute<AnalysisReport>(SERVER_COMMANDS.analyzeFile, {
          uri: editor.document.uri.toString(),
        });
        if (!isServerError(reply) && Array.isArray(reply.transformers)) {
          openFile = {
            path: editor.document.uri.fsPath,
            transformerClasses: reply.transformers.map((t) => t.className),
          };
        }
      }

      const wanted = new Set<string>();
      const index = modelIndex as Record<string, unknown> | undefined;
      if (index && typeof index._class_name === 'string') wanted.add(index._class_name);
      const entry = index?.transformer;
      if (Array.isArray(entry) && typeof entry[1] === 'string') wanted.add(entry[1]);
      const config = transformerConfig as Record<string, unknown> | undefined;
      if (config && typeof config._class_name === 'string') wanted.add(config._class_name);
      const definedIn: Record<string, string> = {};
      if (wanted.size > 0) {
        const files = await vscode.workspace.findFiles('**/*.py', EXCLUDE, 2000);
        for (const file of files.sort((a, b) => a.fsPath.length - b.fsPath.length)) {
          const text = await readText(file.fsPath);
          if (!text || text.length > 2_000_000) continue;
          for (const cls of classesDefined(text))
            if (wanted.has(cls) && !definedIn[cls]) definedIn[cls] = file.fsPath;
          if ([...wanted].every((c) => definedIn[c])) break;
        }
      }

      const { settings } = readSettings();
      let proposed: string | undefined;
      const transformerClass =
        [...wanted].find((c) => c !== (index?._class_name as string | undefined)) ??
        openFile?.transformerClasses[0];
      const sourceForAnalysis = (transformerClass && definedIn[transformerClass]) ?? openFile?.path;
      if (sourceForAnalysis && this.deps.server.running) {
        const reply = await this.deps.server.execute<AnalysisSummary>(SERVER_COMMANDS.analyzeFile, {
          uri: vscode.Uri.file(sourceForAnalysis).toString(),
        });
        if (!isServerError(reply)) {
          const t =
            reply.transformers.find((x) => x.className === transformerClass) ??
            reply.transformers[0];
          proposed = t?.registry?.proposedName ?? undefined;
        }
      }
      this.suggestions = suggestions({
        root,
        modelDir,
        modelIndex,
        transformerConfig,
        openFile,
        definedIn,
        proposedRegisterName: proposed,
        defaultTarget: settings.target === 'checkout' ? 'cache-dit-checkout' : 'standalone',
        cacheDitPath: settings.cacheDitPath,
      });
    } finally {
      this.busy = '';
      this.post();
    }
  }

  private validationDeps(): ValidationDeps {
    const server = this.deps.server;
    return {
      root: this.root(),
      kind: fileKind,
      readText,
      analyze: (file) =>
        server.execute<AnalysisSummary>(SERVER_COMMANDS.analyzeFile, {
          uri: vscode.Uri.file(file).toString(),
        }),
      buildPlan: (file, answers) =>
        server.execute(SERVER_COMMANDS.buildPlan, {
          uri: vscode.Uri.file(file).toString(),
          answers,
        }),
      dryRun: (file, answers) =>
        server.execute(SERVER_COMMANDS.generate, {
          uri: vscode.Uri.file(file).toString(),
          answers,
          apply: false,
        }),
    };
  }

  private async check(): Promise<void> {
    this.busy = 'Checking…';
    this.post();
    try {
      if (!(await this.deps.server.whenRunning(60_000))) {
        this.validation = emptyResult();
        this.validation.general.push(
          `the language server is ${this.deps.server.state}: the source checks need it (see "cdit: Show Logs")`,
        );
      } else {
        this.validation = await validate(this.answers, this.validationDeps());
      }
      this.validatedDigest = answersDigest(this.answers);
      const proposed = this.validation.proposedRegisterName;
      if (
        proposed &&
        !this.suggestions.some((s) => s.field === 'registerName' && s.value === proposed)
      ) {
        this.suggestions.push({
          field: 'registerName',
          value: proposed,
          source: 'analysis',
          reason: 'derived from the class names (prefixes both)',
        });
      }
    } finally {
      this.busy = '';
      this.post();
    }
  }

  private async save(): Promise<void> {
    if (this.validatedDigest !== answersDigest(this.answers) || !this.validation.passed) {
      await this.check();
    }
    if (!this.validation.passed) {
      void vscode.window.showWarningMessage(
        'cdit: the gate check has not passed; fix the fields marked ✗ first.',
      );
      return;
    }
    const root = this.root();
    const rel = (p: string): string => toWorkspaceRelative(p, root);
    const a = this.answers;
    const normalized: GateAnswers = {
      ...a,
      localPath: rel(a.localPath),
      pipelineSource: rel(a.pipelineSource),
      transformerSource: rel(a.transformerSource),
      targetPath: rel(a.targetPath),
    };
    this.answers = normalized;
    this.validatedDigest = answersDigest(normalized);
    await this.deps.state.save({
      answers: normalized,
      gate: { passed: true, checkedAt: new Date().toISOString(), confirmed: [...this.confirmed] },
      overrides: this.deps.state.stored.overrides,
    });
    this.saved = true;
    this.post();
    this.deps.log.info(
      `gate check passed; answers stored in ${path.join(root, '.cdit', 'integration.json')}`,
    );
    // the server re-reads the gate check's sources (pipeline, config) for its open transformer
    // analyses when a document is saved
    await this.deps.server.notifySaved(
      vscode.Uri.file(toAbsolute(normalized.transformerSource, root)),
    );
    await this.deps.onSaved();
    void vscode.window
      .showInformationMessage(
        'cdit: gate check passed — answers saved to .cdit/integration.json.',
        'Review Plan',
      )
      .then((choice) => {
        if (choice) void vscode.commands.executeCommand('cdit.reviewPlan');
      });
  }

  private async browse(field: FieldId): Promise<void> {
    const root = this.root();
    const folder =
      field === 'localPath' ||
      (field === 'targetPath' && this.answers.targetKind === 'cache-dit-checkout');
    if (field === 'targetPath' && this.answers.targetKind === 'standalone') {
      const uri = await vscode.window.showSaveDialog({
        defaultUri: vscode.Uri.file(path.join(root, 'model_cdit.py')),
        filters: { Python: ['py'] },
        title: 'Standalone module to generate',
      });
      if (uri) this.setField(field, toWorkspaceRelative(uri.fsPath, root));
      return;
    }
    const picked = await vscode.window.showOpenDialog({
      canSelectFiles: !folder,
      canSelectFolders: folder,
      canSelectMany: false,
      defaultUri: vscode.Uri.file(root),
      filters: folder ? undefined : { Python: ['py'] },
      title: FIELDS.find((f) => f.id === field)?.label,
    });
    const first = picked?.[0];
    if (first) this.setField(field, toWorkspaceRelative(first.fsPath, root));
  }

  private setField(field: FieldId, value: string): void {
    if (field === 'targetKind') return;
    this.answers = { ...this.answers, [field]: value };
    this.saved = false;
    void this.panel.webview.postMessage({ type: 'setField', field, value });
  }

  private dispose(): void {
    GateCheckPanel.current = undefined;
    for (const d of this.disposables) d.dispose();
  }
}
