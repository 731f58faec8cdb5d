/** Choices offered before a run (pure): which devices, and which phases fit them. */
import type { PhaseSpec } from '../contract/verification';
import { CHECKLIST, phaseSpecs, type ChecklistPhaseId, type PlanChoices } from '../checklist/model';

export interface DeviceOption {
  label: string;
  description: string;
  device: 'cpu' | 'cuda';
  gpus: number;
}

export function deviceOptions(phases: readonly ChecklistPhaseId[]): DeviceOption[] {
  const out: DeviceOption[] = [];
  // every phase kind runs on CPU (gloo, docs/cpu-parallel.md): offered whenever a phase runs
  if (phases.some((id) => id !== 'cli')) {
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
  plan: PlanChoices = {},
): { specs: PhaseSpec[]; skipped: ChecklistPhaseId[] } {
  const specs: PhaseSpec[] = [];
  const skipped: ChecklistPhaseId[] = [];
  for (const id of ids) {
    if (id === 'cli') continue;
    const cpu = option.device === 'cpu';
    const found = phaseSpecs(id, option.gpus, cpu, plan);
    const world = Math.max(
      1,
      ...found.map((s) =>
        s.kind === 'hybrid'
          ? (s.cpSize ?? 2) * (s.tpSize ?? 2)
          : s.kind === 'cache' || s.kind === 'kernels' || s.kind === 'baseline'
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

/** A device choice of `verify --tune`; `parallel`: also the parallel points over every GPU. */
export interface TuneDeviceOption extends Omit<DeviceOption, 'gpus'> {
  parallel: boolean;
}

/**
 * Where to tune: the CPU smoke run the other run commands offer (smoke sizes; the runtime skips
 * torch.compile on CPU), one GPU (kernels and cache settings), or every visible GPU (the runtime
 * adds Ulysses, Ring and TP over all of them, and combines the fastest with the cache settings).
 */
export function tuneDeviceOptions(): TuneDeviceOption[] {
  const [cpu] = deviceOptions(['cache']).filter((o) => o.device === 'cpu');
  const out: TuneDeviceOption[] = [];
  if (cpu)
    out.push({
      label: cpu.label,
      device: cpu.device,
      description:
        'no GPU: attention backends and DBCache settings at the smoke-run sizes, no torch.compile',
      parallel: false,
    });
  out.push(
    {
      label: '1 GPU',
      description: 'attention backends × torch.compile, DBCache settings, then the best combined',
      device: 'cuda',
      parallel: false,
    },
    {
      label: 'Every visible GPU',
      description: 'as on 1 GPU, plus Ulysses, Ring and TP over all GPUs (with the best cache)',
      device: 'cuda',
      parallel: true,
    },
  );
  return out;
}
