/** Choices offered before a run (pure): which devices, and which phases fit them. */
import type { PhaseSpec } from '../contract/verification';
import { CHECKLIST, needsAccelerator, phaseSpecs, type ChecklistPhaseId } from '../checklist/model';

export interface DeviceOption {
  label: string;
  description: string;
  device: 'cpu' | 'cuda';
  gpus: number;
}

export function deviceOptions(phases: readonly ChecklistPhaseId[]): DeviceOption[] {
  const out: DeviceOption[] = [];
  // offered when at least one phase can run on CPU; the others are skipped (and named)
  if (phases.some((id) => id !== 'cli' && !needsAccelerator(id))) {
    out.push({
      label: 'CPU smoke run',
      description: 'no GPU: float32, few steps, small images; parallel phases on 2 gloo processes',
      device: 'cpu',
      gpus: 0,
    });
  }
  for (const gpus of [1, 2, 4, 8]) {
    out.push({
      label: `${gpus} GPU${gpus > 1 ? 's' : ''}`,
      description: 'bfloat16, the pipeline defaults',
      device: 'cuda',
      gpus,
    });
  }
  return out;
}

/** The phases of the checklist items that a device choice can run (cache first). */
export function specsFor(
  ids: readonly ChecklistPhaseId[],
  option: DeviceOption,
): { specs: PhaseSpec[]; skipped: ChecklistPhaseId[] } {
  const specs: PhaseSpec[] = [];
  const skipped: ChecklistPhaseId[] = [];
  for (const id of ids) {
    if (id === 'cli') continue;
    const cpu = option.device === 'cpu';
    if (cpu && needsAccelerator(id)) {
      skipped.push(id);
      continue;
    }
    const found = phaseSpecs(id, option.gpus, cpu);
    const world = Math.max(
      1,
      ...found.map((s) =>
        s.kind === 'hybrid'
          ? (s.cpSize ?? 2) * (s.tpSize ?? 2)
          : s.kind === 'cache'
            ? 1
            : (s.size ?? 2),
      ),
    );
    if (!cpu && world > option.gpus) {
      skipped.push(id);
      continue;
    }
    specs.push(...found);
  }
  return { specs, skipped };
}

export const ALL_PHASES: readonly ChecklistPhaseId[] = CHECKLIST.map((p) => p.id);
