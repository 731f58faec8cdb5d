"""The use cases, shared by the language server's features and the `cdit-integrate` CLI.

Each takes and returns typed values and fails with `cdit_runtime.contract.ProblemError` (one
`Problem`: code, message, hint, path, line); the callers only translate: the CLI to its output
and exit code, a feature to its LSP result (`ProblemError.error_json` on the wire).

* `analyze`: a transformer source file -> `AnalysisResult` (`analyze_source`);
* `plan`: gate-check answers + the analysis -> an IntegrationPlan and its problems
  (`build_plan`);
* `generate`: a plan -> the changed files and the manifest (`generate_files`);
* `verify`: a VerificationRequest checked and completed with the thresholds
  (`check_request`), and what an interpreter lacks to run it (`missing_runtime`);
* `problems`: the errors of the layers below as `Problem`s.

Nothing here imports pygls or lsprotocol; code generation (libcst) is imported only when used.
"""
