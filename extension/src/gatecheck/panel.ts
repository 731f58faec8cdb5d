/**
 * The gate-check questionnaire (webview). Prefills are offered as suggestions the user confirms;
 * "Check" validates every field (with the reason); "Save" stores the answers in
 * `.cdit/integration.json`, only when the check passed for exactly these answers.
 *
 * Its "Pipeline call arguments" section edits the run configuration stored with the answers
 * (`run`: call arguments and file inputs, passed on every verification run): prefilled and
 * validated against the pipeline's `__call__` signature from the server's analysis
 * (`pipeline.callSignature`, see callArgs.ts).
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { Logger } from '../common/logger';
import { readSettings, type ServerController } from '../common/server';
import type { IntegrationState } from '../common/state';
import { fileKind, readJson, readText } from '../common/workspace';
import type { AnalysisReport, CallSignature } from '../contract/analysis';
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
  type PipelineCandidate,
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
import {
  RUNTIME_SUPPLIED,
  callHints,
  emptyCallValidation,
  pickSignature,
  prefillRows,
  rowsFromRunConfig,
  rowsKey,
  runConfigFromRows,
  validateCallRows,
  type CallRows,
  type CallValidation,
  type RunConfig,
} from './callArgs';

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
  // the latest `seq` of the answers the webview sent (echoed in every state)
  private seq = 0;
  private suggestions: Suggestion[] = [];
  private validation: ValidationResult = emptyResult();
  private validatedDigest: string | undefined;
  private busy = '';
  private saved = false;
  /** the "Pipeline call arguments" rows, the signature they are checked against, the verdicts */
  private call: CallRows;
  private signature: CallSignature | undefined;
  private signatureNote = '';
  /** sources + class of the signature whose required parameters were added as rows */
  private prefilledKey: string | undefined;
  private callValidation: CallValidation = emptyCallValidation();
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
    this.call = rowsFromRunConfig(deps.state.stored.run);
    this.callValidation = emptyCallValidation(this.call);
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
        else {
          await this.loadSignature();
          this.post();
        }
        return;
      case 'edit':
        if (message.seq !== undefined) this.seq = Math.max(this.seq, message.seq);
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        if (message.call) this.call = message.call;
        this.saved = false;
        return;
      case 'check':
        if (message.seq !== undefined) this.seq = Math.max(this.seq, message.seq);
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        if (message.call) this.call = message.call;
        await this.check();
        return;
      case 'save':
        if (message.seq !== undefined) this.seq = Math.max(this.seq, message.seq);
        this.answers = message.answers;
        this.confirmed = new Set(message.confirmed);
        if (message.call) this.call = message.call;
        await this.save();
        return;
      case 'browse':
        await this.browse(message.field);
        return;
      case 'browseInput':
        await this.browseInput(message.index);
        return;
      case 'reviewPlan':
        await vscode.commands.executeCommand('cdit.reviewPlan');
        return;
      case 'fix':
        await this.applyFix(message.field, message.index);
        return;
    }
  }

  /** What a check is valid for: the answers and the call-argument rows. */
  private digest(): string {
    return `${answersDigest(this.answers)}:${rowsKey(this.call)}`;
  }

  private passed(): boolean {
    return this.validation.passed && this.callValidation.passed;
  }

  /** The `cdit.callArgs` / `cdit.inputs` settings: the rows win over them per name. */
  private settingsRun(): RunConfig {
    const { settings } = readSettings();
    return { callArgs: settings.callArgs, inputs: settings.inputs };
  }

  private post(): void {
    const root = this.deps.state.root ?? '';
    const base = this.settingsRun();
    const sig = this.signature;
    void this.panel.webview.postMessage({
      type: 'state',
      seq: this.seq,
      answers: this.answers,
      confirmed: [...this.confirmed],
      suggestions: this.suggestions,
      validation: { ...this.validation, passed: this.passed() },
      checkedCurrent: this.validatedDigest === this.digest(),
      busy: this.busy,
      saved: this.saved,
      root,
      trusted: vscode.workspace.isTrusted,
      call: {
        rows: this.call,
        validation: this.callValidation,
        hints: callHints(sig, this.call, base),
        note: this.signatureNote,
        signature: sig
          ? {
              className: sig.className,
              definedIn: sig.definedIn,
              where: `${root ? toWorkspaceRelative(sig.path, root) : sig.path}:${sig.line}`,
              acceptsVarKeyword: sig.acceptsVarKeyword,
              varKeyword: sig.varKeyword,
              names: sig.parameters
                .filter((p) => p.kind === 'positional_or_keyword' || p.kind === 'keyword_only')
                .map((p) => p.name),
            }
          : null,
        supplied: Object.keys(RUNTIME_SUPPLIED),
        base,
      },
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
      let pipelineCandidates: PipelineCandidate[] | undefined;
      if (!index && transformerClass && this.deps.server.running) {
        const reply = await this.deps.server.execute<{ candidates?: PipelineCandidate[] }>(
          SERVER_COMMANDS.pipelineCandidates,
          { className: transformerClass },
        );
        if (!isServerError(reply) && Array.isArray(reply.candidates))
          pipelineCandidates = reply.candidates;
      }
      this.suggestions = suggestions({
        root,
        modelDir,
        modelIndex,
        transformerConfig,
        openFile,
        definedIn,
        pipelineCandidates,
        proposedRegisterName: proposed,
        defaultTarget: settings.target,
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
      // the server refuses it in an untrusted workspace (nothing of the workspace is imported)
      loadCheck: (sources) => server.execute(SERVER_COMMANDS.loadCheck, { sources }),
    };
  }

  /**
   * A fix offered with a field's error, looked up in this panel's own validation by field and
   * index (the page names which, never what): set the field, or run the server command, whose
   * edit opens in the Refactor Preview.
   */
  private async applyFix(field: FieldId, index: number): Promise<void> {
    const fix = this.validation?.fields[field]?.fixes?.[index];
    if (!fix) return;
    if (fix.kind === 'setField') {
      this.answers = { ...this.answers, [fix.field]: fix.value };
      this.confirmed.add(fix.field);
      this.saved = false;
      await this.check();
      return;
    }
    const [argument] = fix.arguments;
    const reply = await this.deps.server.execute(
      fix.command,
      typeof argument === 'object' && argument !== null
        ? (argument as Record<string, unknown>)
        : {},
    );
    if (isServerError(reply)) {
      void vscode.window.showErrorMessage(`cdit: ${fix.label}: ${reply.error.message}`);
      return;
    }
    // an applied edit leaves its files dirty in the editor; the load check imports them from
    // disk, so save what the fix changed (and only that)
    await saveEdited(reply);
    await this.check();
  }

  /**
   * The pipeline's `__call__` signature, from the server's analysis of the transformer source
   * with the pipeline source (answers, else their suggestions); the first time a signature is
   * known for these sources, its required parameters become rows to fill.
   */
  private async loadSignature(): Promise<void> {
    const root = this.root();
    const pick = (field: FieldId): string =>
      this.answers[field].trim() || this.suggestions.find((s) => s.field === field)?.value || '';
    const transformer = pick('transformerSource');
    const pipeline = pick('pipelineSource');
    const pipelineClass = pick('pipelineClass');
    const local = pick('localPath');
    this.signature = undefined;
    if (!pipeline) {
      this.signatureNote =
        'No pipeline source file: call arguments are not checked against its __call__.';
      return;
    }
    if (!transformer) {
      this.signatureNote = 'Give the transformer source: the pipeline is analysed with it.';
      return;
    }
    if (!(await this.deps.server.whenRunning(30_000))) {
      this.signatureNote = `The language server is ${this.deps.server.state}: the pipeline's __call__ is not known.`;
      return;
    }
    const modelIndex = local ? path.join(toAbsolute(local, root), 'model_index.json') : undefined;
    const reply = await this.deps.server.execute<AnalysisReport>(SERVER_COMMANDS.analyzeFile, {
      uri: vscode.Uri.file(toAbsolute(transformer, root)).toString(),
      pipelinePath: toAbsolute(pipeline, root),
      modelIndexPath:
        modelIndex && (await fileKind(modelIndex)) === 'file' ? modelIndex : undefined,
    });
    if (isServerError(reply)) {
      this.signatureNote = `The pipeline's __call__ is not known: ${reply.error.message}`;
      return;
    }
    this.signature = pickSignature(reply, pipelineClass);
    if (!this.signature) {
      this.signatureNote = `${pipeline} defines no class with a __call__.`;
      return;
    }
    const sig = this.signature;
    this.signatureNote =
      pipelineClass && sig.className !== pipelineClass
        ? `${pipelineClass} is not defined in ${pipeline}; showing ${sig.className}.__call__.`
        : '';
    const key = [transformer, pipeline, sig.className].join('|');
    if (key !== this.prefilledKey) {
      this.prefilledKey = key;
      const { rows, added } = prefillRows(this.call, sig, this.settingsRun());
      this.call = rows;
      if (added.length > 0) {
        this.saved = false;
        this.deps.log.info(
          `gate check: ${sig.className}.__call__ requires ${added.join(', ')} (added as rows to fill)`,
        );
      }
    }
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
      try {
        await this.loadSignature();
      } catch (e) {
        this.signature = undefined;
        this.signatureNote = `The pipeline's __call__ is not known: ${e instanceof Error ? e.message : String(e)}`;
      }
      this.callValidation = await validateCallRows(
        this.call,
        this.signature,
        { root: this.root(), kind: fileKind },
        this.settingsRun(),
      );
      this.validatedDigest = this.digest();
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
    if (this.validatedDigest !== this.digest() || !this.passed()) {
      await this.check();
    }
    if (!this.passed()) {
      void vscode.window.showWarningMessage(
        'cdit: the gate check has not passed; fix the fields and call arguments marked ✗ first.',
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
    const run = runConfigFromRows(this.call, rel);
    this.answers = normalized;
    this.call = rowsFromRunConfig(run);
    this.callValidation = await validateCallRows(
      this.call,
      this.signature,
      { root, kind: fileKind },
      this.settingsRun(),
    );
    this.validatedDigest = this.digest();
    await this.deps.state.save({
      answers: normalized,
      gate: { passed: true, checkedAt: new Date().toISOString(), confirmed: [...this.confirmed] },
      overrides: this.deps.state.stored.overrides,
      run,
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

  /** A file for the call-argument input row `index` (the page sets it without re-rendering). */
  private async browseInput(index: number): Promise<void> {
    const root = this.root();
    const row = this.call.inputs[index];
    if (!row) return;
    const picked = await vscode.window.showOpenDialog({
      canSelectFiles: true,
      canSelectFolders: false,
      canSelectMany: false,
      defaultUri: vscode.Uri.file(row.path ? toAbsolute(row.path, root) : root),
      title: `File loaded into ${row.name || 'the call argument'}`,
    });
    const first = picked?.[0];
    if (!first) return;
    const value = toWorkspaceRelative(first.fsPath, root);
    const current = this.call.inputs[index];
    if (!current) return;
    this.call = {
      args: this.call.args,
      inputs: this.call.inputs.map((r, i) => (i === index ? { ...r, path: value } : r)),
    };
    this.saved = false;
    void this.panel.webview.postMessage({ type: 'setInputPath', index, value });
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

/** Saves the files a server command's applied edit changed (`{applied, files: [{path}]}`). */
async function saveEdited(reply: unknown): Promise<void> {
  if (!reply || typeof reply !== 'object') return;
  const { applied, files } = reply as { applied?: unknown; files?: unknown };
  if (applied !== true || !Array.isArray(files)) return;
  for (const f of files) {
    const file = f && typeof f === 'object' ? (f as { path?: unknown }).path : undefined;
    if (typeof file !== 'string') continue;
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.fsPath === file);
    if (doc?.isDirty) await doc.save();
  }
}
