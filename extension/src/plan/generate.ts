/**
 * "Generate Integration": the server computes the files from the approved plan and returns a
 * WorkspaceEdit whose edits need confirmation, so VS Code shows its refactor preview before
 * anything is written; accepted files are saved.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import { isServerError } from '../contract/guards';
import { answersDigest, toAbsolute } from '../gatecheck/answers';
import { readApproval, staleReason } from './review';
import { analyzeIntegration, type PlanDeps } from './panel';
import { SERVER_COMMANDS } from '../common/serverCommands';

interface GenerateReply {
  edit: unknown;
  files: { path: string; created: boolean }[];
  review?: string[];
  warnings?: string[];
}

export async function generateIntegration(deps: PlanDeps): Promise<boolean> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window
      .showWarningMessage(
        'cdit: generating writes code into this workspace, which is not trusted. Trust it first (Manage Workspace Trust).',
        'Manage Workspace Trust',
      )
      .then((c) => {
        if (c) void vscode.commands.executeCommand('workbench.trust.manage');
      });
    return false;
  }
  if (!deps.state.gatePassed) {
    void vscode.window
      .showWarningMessage('cdit: complete the gate check before generating.', 'Open Gate Check')
      .then((c) => {
        if (c) void vscode.commands.executeCommand('cdit.openGateCheck');
      });
    return false;
  }
  if (!(await deps.server.whenRunning(60_000))) {
    void vscode.window
      .showErrorMessage(
        `cdit: the language server is ${deps.server.state}; see the log.`,
        'Show Logs',
      )
      .then((c) => c && deps.log.show());
    return false;
  }
  const plan = await deps.state.approvedPlan();
  const approval = readApproval(plan);
  if (!plan || !approval) {
    void vscode.window
      .showInformationMessage('cdit: review and approve the integration plan first.', 'Review Plan')
      .then((c) => {
        if (c) void vscode.commands.executeCommand('cdit.reviewPlan');
      });
    await vscode.commands.executeCommand('cdit.reviewPlan');
    return false;
  }
  const analysis = await analyzeIntegration(deps);
  const stale = staleReason(
    approval,
    isServerError(analysis) ? undefined : analysis.source.sha256,
    answersDigest(deps.state.answers),
  );
  if (stale) {
    void vscode.window
      .showWarningMessage(`cdit: ${stale}; review the plan again.`, 'Review Plan')
      .then((c) => {
        if (c) void vscode.commands.executeCommand('cdit.reviewPlan');
      });
    return false;
  }
  const root = deps.state.root ?? '';
  const uri = vscode.Uri.file(toAbsolute(deps.state.answers.transformerSource, root));
  const reply = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: 'cdit: generating the integration…' },
    () =>
      deps.server.execute<GenerateReply>(SERVER_COMMANDS.generate, {
        uri: uri.toString(),
        plan,
        apply: false,
      }),
  );
  if (isServerError(reply)) {
    if (reply.error.code === 'up-to-date') {
      void vscode.window.showInformationMessage(`cdit: ${reply.error.message}`);
      return true;
    }
    void vscode.window.showErrorMessage(
      `cdit: generation failed: ${reply.error.message}${reply.error.hint ? ` — ${reply.error.hint}` : ''}`,
    );
    return false;
  }
  const edit = await deps.server.asWorkspaceEdit(reply.edit);
  if (!edit) return false;
  deps.log.info(
    `generate: ${reply.files.map((f) => `${f.created ? 'create' : 'update'} ${f.path}`).join(', ')}`,
  );
  // The edits carry a change annotation that needs confirmation: VS Code opens the refactor
  // preview and resolves once the user applied or discarded it.
  void vscode.window.showInformationMessage(
    'cdit: review the generated files in the Refactor Preview, tick the ones to write, then Apply.',
  );
  const applied = await vscode.workspace.applyEdit(edit, { isRefactoring: true });
  if (!applied) {
    void vscode.window.showInformationMessage('cdit: generation discarded; nothing was written.');
    return false;
  }
  const uris = new Map<string, vscode.Uri>();
  for (const [u] of edit.entries()) uris.set(u.toString(), u);
  for (const f of reply.files)
    uris.set(vscode.Uri.file(f.path).toString(), vscode.Uri.file(f.path));
  for (const u of uris.values()) {
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === u.toString());
    if (doc?.isDirty) await doc.save();
  }
  for (const w of reply.warnings ?? []) deps.log.warn(`generate: ${w}`);
  for (const r of reply.review ?? []) deps.log.info(`generate (review): ${r}`);
  const names = reply.files.map((f) => path.basename(f.path)).join(', ');
  const first = reply.files.find((f) => f.path.endsWith('.py'));
  void vscode.window
    .showInformationMessage(`cdit: generated ${names}.`, ...(first ? ['Open'] : []))
    .then(async (c) => {
      if (c && first) await vscode.window.showTextDocument(vscode.Uri.file(first.path));
    });
  return true;
}
