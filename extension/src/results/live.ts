/** Live run state from progress events (pure): pending phases, then each event applied. */
import type {
  PhaseResult,
  PhaseSpec,
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../contract/verification';

export function phaseId(spec: PhaseSpec): string {
  if (spec.name) return spec.name;
  if (spec.kind === 'baseline' || spec.kind === 'cache') return spec.kind;
  if (spec.kind === 'hybrid') return `hybrid-u${spec.cpSize ?? 2}-tp${spec.tpSize ?? 2}`;
  if (spec.kind === 'vae_p') return `vae_p-${spec.vaeBase ?? 'tp'}${spec.size ?? 2}`;
  return `${spec.kind}-${spec.size ?? 2}${spec.cache ? '-cache' : ''}`;
}

/** A placeholder result for a run that has just started (phases pending). */
export function pendingResult(request: VerificationRequest): VerificationResult {
  return {
    status: 'running',
    outputDir: request.outputDir,
    phases: (request.phases ?? []).map((p): PhaseResult => ({
      name: phaseId(p),
      kind: p.kind,
      status: 'pending',
    })),
    startedAt: Date.now() / 1000,
  };
}

/** Applies one progress event to a live result (pure, returns a copy). */
export function applyEvent(result: VerificationResult, event: ProgressEvent): VerificationResult {
  const next: VerificationResult = {
    ...result,
    phases: (result.phases ?? []).map((p) => ({ ...p })),
  };
  const phase = event.phase ? (next.phases ?? []).find((p) => p.name === event.phase) : undefined;
  switch (event.event) {
    case 'phase_started':
      if (phase) phase.status = 'running';
      break;
    case 'step':
      if (phase) {
        phase.status = 'running';
        phase.notes = [`step ${event.step ?? '?'}/${event.total ?? '?'}`];
      }
      break;
    case 'phase_finished':
      if (phase) {
        phase.status = (event.status as PhaseResult['status'] | null | undefined) ?? 'ok';
        phase.verdict = (event.verdict as PhaseResult['verdict'] | null | undefined) ?? null;
        phase.verdictReason = event.message ?? '';
        phase.notes = [];
      }
      break;
    case 'error':
      if (phase && event.error) phase.error = event.error;
      else if (event.error) next.error = event.error;
      break;
    case 'run_finished':
      next.status =
        (event.status as VerificationResult['status'] | null | undefined) ?? 'completed';
      break;
    default:
      break;
  }
  return next;
}

/**
 * A live result updated with the runtime's intermediate results.json: phases it has finished take
 * the file's numbers; phases still pending or running keep the live state (the file is written
 * between phases, so it can lag behind the events).
 */
export function mergeLive(live: VerificationResult, disk: VerificationResult): VerificationResult {
  const finished = new Map(
    (disk.phases ?? [])
      .filter((p) => p.status !== 'pending' && p.status !== 'running')
      .map((p) => [p.name, p]),
  );
  return {
    ...disk,
    status: live.status,
    phases: (live.phases ?? []).map((p) => finished.get(p.name) ?? p),
  };
}
