/**
 * The language server's `workspace/executeCommand` ids (lsp_server/features/commands.py) and its
 * custom notification. The client registers server commands as editor commands, so they live
 * under `cdit.lsp.` apart from the extension's own `cdit.*` commands. A unit test reads the
 * Python module and checks these ids against it.
 */
export const SERVER_COMMANDS = {
  analyzeFile: 'cdit.lsp.analyzeFile',
  buildPlan: 'cdit.lsp.buildPlan',
  generate: 'cdit.lsp.generate',
  runVerification: 'cdit.lsp.runVerification',
  cancelRun: 'cdit.lsp.cancelRun',
  /** `{sources, timeoutS?}`: import the sources in a subprocess as a run does (trusted only) */
  loadCheck: 'cdit.lsp.loadCheck',
  /** `{uri, apply?}`: a copied module's relative imports made absolute (previewed edit) */
  rewriteImports: 'cdit.lsp.rewriteImports',
  /** `{className}`: `{candidates}`, installed diffusers pipelines taking the transformer class */
  pipelineCandidates: 'cdit.lsp.pipelineCandidates',
} as const;

/** `{"runId", "event"}` per runtime progress event, then `{"runId", "done": true, ...}`. */
export const RUN_PROGRESS = 'cdit/runProgress';
