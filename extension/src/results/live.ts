/**
 * Live run state from progress events (pure): pending phases, then each event applied. A tune
 * (`request.tune`) replaces the request's phases with its grid in the runtime, so phases the
 * request did not name are added as their events and the intermediate results.json arrive.
 */
import type {
  PhaseResult,
  PhaseSpec,
  ProgressEvent,
  VerificationRequest,
  VerificationResult,
} from '../contract/verification';

export function phaseId(spec: PhaseSpec): string {
  if (spec.name) return spec.name;
  // single-process kinds (the runtime's SINGLE_KINDS) are named by their kind
  if (spec.kind === 'baseline' || spec.kind === 'kernels' || spec.kind === 'cache')
    return spec.kind;
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

/**
 * The kind of a phase known only by its id (a tune's grid point before results.json names it):
 * the tune's names are `kernels-…`, `cache-…`, `tuned-…` (cache on other kernels) and
 * `parallel-<kind>-<n>…`; anything else by the runtime's default ids (`ulysses-2`, `tp-4-cache`).
 */
export function kindFromId(id: string): PhaseResult['kind'] {
  const parallel = /^(?:parallel-)?(ulysses|ring|uaa|tp_tep|tp|vae_p|hybrid)\b/.exec(id);
  if (parallel) return parallel[1] as PhaseResult['kind'];
  if (id === 'baseline') return 'baseline';
  if (id.startsWith('kernels')) return 'kernels';
  return 'cache';
}

/** Applies one progress event to a live result (pure, returns a copy). */
export function applyEvent(result: VerificationResult, event: ProgressEvent): VerificationResult {
  const next: VerificationResult = {
    ...result,
    phases: (result.phases ?? []).map((p) => ({ ...p })),
  };
  let phase = event.phase ? (next.phases ?? []).find((p) => p.name === event.phase) : undefined;
  // a phase the request did not name (a tune's grid): add it when it starts or reports
  if (
    !phase &&
    event.phase &&
    (event.event === 'phase_started' || event.event === 'step' || event.event === 'phase_finished')
  ) {
    phase = { name: event.phase, kind: kindFromId(event.phase), status: 'pending' };
    next.phases = [...(next.phases ?? []), phase];
  }
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
 * between phases, so it can lag behind the events). The file's phase list and order win (a tune
 * replaces the request's phases with its grid); live phases the file does not list yet follow.
 */
export function mergeLive(live: VerificationResult, disk: VerificationResult): VerificationResult {
  const liveByName = new Map((live.phases ?? []).map((p) => [p.name, p]));
  const onDisk = new Set((disk.phases ?? []).map((p) => p.name));
  const phases = (disk.phases ?? []).map((d) => {
    if (d.status !== 'pending' && d.status !== 'running') return d;
    const l = liveByName.get(d.name);
    return l ? { ...l, kind: d.kind } : d;
  });
  return {
    ...disk,
    status: live.status,
    phases: [...phases, ...(live.phases ?? []).filter((p) => !onDisk.has(p.name))],
  };
}
