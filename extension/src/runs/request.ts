/**
 * Gate-check answers + the user's choices -> a VerificationRequest (pure). The request is the
 * runtime's contract (cdit_runtime/contract.py); the server checks it again before running.
 */
import type { PhaseSpec, VerificationRequest } from '../contract/verification';
import type { GateAnswers } from '../gatecheck/answers';
import { toAbsolute } from '../gatecheck/answers';
import type { SmokeRun } from '../common/settings';

export interface RunChoice {
  /** phases besides the baseline, which always runs first */
  phases: PhaseSpec[];
  /** 'cpu': a smoke run (float32, few steps, small images); 'cuda': real sizes, bfloat16 */
  device: 'cpu' | 'cuda';
  smoke: SmokeRun;
}

export function buildRequest(
  answers: GateAnswers,
  choice: RunChoice,
  workspaceRoot: string,
  outputDir: string,
): VerificationRequest {
  const abs = (p: string): string => toAbsolute(p, workspaceRoot);
  const sourceFiles = [answers.transformerSource, answers.pipelineSource]
    .filter((p) => p.trim() !== '')
    .map(abs)
    .filter((p) => p === workspaceRoot || p.startsWith(workspaceRoot + '/'));
  const phases: PhaseSpec[] = [
    { kind: 'baseline' },
    ...choice.phases.filter((p) => p.kind !== 'baseline'),
  ];
  const request: VerificationRequest = {
    schemaVersion: 1,
    model: {
      source: 'local',
      path: abs(answers.localPath),
      pipelineClass: answers.pipelineClass || null,
      sourceFiles: [...new Set(sourceFiles)],
    },
    integration:
      answers.targetKind === 'standalone'
        ? { kind: 'standalone', path: abs(answers.targetPath) }
        : { kind: 'checkout', path: abs(answers.targetPath) },
    outputDir,
    phases,
    device: choice.device,
    dtype: choice.device === 'cpu' ? 'float32' : 'bfloat16',
  };
  if (choice.device === 'cpu') {
    request.steps = choice.smoke.steps;
    request.height = choice.smoke.height;
    request.width = choice.smoke.width;
  }
  return request;
}

/** A run id that sorts by time: `20261129-203112`. */
export function runFolderName(now: Date): string {
  const pad = (n: number): string => String(n).padStart(2, '0');
  return (
    `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}-` +
    `${pad(now.getHours())}${pad(now.getMinutes())}${pad(now.getSeconds())}`
  );
}
