/**
 * Messages between the webviews and the extension (pure). Everything a webview posts is checked
 * here before the extension acts on it: known type, known field ids, strings of bounded length.
 * A message that fails the check is dropped (and logged by the caller).
 */
import { isRecord } from '../contract/guards';
import type { FieldId, GateAnswers } from '../gatecheck/answers';
import { EMPTY_ANSWERS, FIELD_IDS, isFieldId } from '../gatecheck/answers';
import type { CallRows } from '../gatecheck/callArgs';
import { MAX_NAME, MAX_ROWS, MAX_VALUE } from '../gatecheck/callArgs';
import type { PlanChoices } from '../plan/review';
import { FORWARD_PATTERNS } from '../contract/analysis';
import { NEXT_ACTIONS, type NextAction } from '../results/causes';

const MAX_TEXT = 4096;

function text(value: unknown): value is string {
  return typeof value === 'string' && value.length <= MAX_TEXT;
}

export function parseAnswers(value: unknown): GateAnswers | undefined {
  if (!isRecord(value)) return undefined;
  const out: GateAnswers = { ...EMPTY_ANSWERS };
  for (const id of FIELD_IDS) {
    const v = value[id];
    if (!text(v)) return undefined;
    if (id === 'targetKind') {
      if (v !== 'standalone' && v !== 'cache-dit-checkout') return undefined;
      out.targetKind = v;
    } else out[id] = v;
  }
  return out;
}

/**
 * The form's pipeline call-argument rows: at most MAX_ROWS of each kind, names and paths up to
 * MAX_NAME characters, values (JSON text, checked later) up to MAX_VALUE.
 */
export function parseCallRows(value: unknown): CallRows | undefined {
  if (!isRecord(value) || !Array.isArray(value.args) || !Array.isArray(value.inputs))
    return undefined;
  if (value.args.length > MAX_ROWS || value.inputs.length > MAX_ROWS) return undefined;
  const short = (v: unknown): v is string => typeof v === 'string' && v.length <= MAX_NAME;
  const args: CallRows['args'] = [];
  for (const r of value.args) {
    if (!isRecord(r) || !short(r.name) || typeof r.value !== 'string') return undefined;
    if (r.value.length > MAX_VALUE) return undefined;
    args.push({ name: r.name, value: r.value });
  }
  const inputs: CallRows['inputs'] = [];
  for (const r of value.inputs) {
    if (!isRecord(r) || !short(r.name) || !text(r.path)) return undefined;
    inputs.push({ name: r.name, path: r.path });
  }
  return { args, inputs };
}

/** `call`: the call-argument rows, when the page sent them (absent: unchanged). */
export type GateMessage =
  | { type: 'ready' }
  | { type: 'edit'; answers: GateAnswers; confirmed: FieldId[]; call?: CallRows; seq?: number }
  | { type: 'check'; answers: GateAnswers; confirmed: FieldId[]; call?: CallRows; seq?: number }
  | { type: 'save'; answers: GateAnswers; confirmed: FieldId[]; call?: CallRows; seq?: number }
  | { type: 'browse'; field: FieldId }
  | { type: 'browseInput'; index: number }
  | { type: 'fix'; field: FieldId; index: number }
  | { type: 'reviewPlan' };

export function parseGateMessage(raw: unknown): GateMessage | undefined {
  if (!isRecord(raw) || typeof raw.type !== 'string') return undefined;
  switch (raw.type) {
    case 'ready':
    case 'reviewPlan':
      return { type: raw.type };
    case 'edit':
    case 'check':
    case 'save': {
      const answers = parseAnswers(raw.answers);
      const confirmed =
        raw.confirmed === undefined ? [] : Array.isArray(raw.confirmed) ? raw.confirmed : undefined;
      if (!answers || !confirmed || !confirmed.every(isFieldId)) return undefined;
      // `seq`: the webview's count of the answers it sent, echoed back in every state so that
      // a state computed before an edit arrived cannot overwrite that edit in the webview
      const seq =
        typeof raw.seq === 'number' && Number.isInteger(raw.seq) && raw.seq >= 0
          ? { seq: raw.seq }
          : {};
      const message = { type: raw.type, answers, confirmed: [...new Set(confirmed)], ...seq };
      if (raw.call === undefined) return message;
      const call = parseCallRows(raw.call);
      return call ? { ...message, call } : undefined;
    }
    case 'fix':
      return isFieldId(raw.field) &&
        typeof raw.index === 'number' &&
        Number.isInteger(raw.index) &&
        raw.index >= 0 &&
        raw.index < 8
        ? { type: 'fix', field: raw.field, index: raw.index }
        : undefined;
    case 'browseInput':
      return typeof raw.index === 'number' &&
        Number.isInteger(raw.index) &&
        raw.index >= 0 &&
        raw.index < MAX_ROWS
        ? { type: 'browseInput', index: raw.index }
        : undefined;
    case 'browse':
      return isFieldId(raw.field) &&
        (raw.field === 'localPath' ||
          raw.field === 'pipelineSource' ||
          raw.field === 'transformerSource' ||
          raw.field === 'targetPath')
        ? { type: 'browse', field: raw.field }
        : undefined;
    default:
      return undefined;
  }
}

export type PlanMessage =
  | { type: 'ready' }
  | { type: 'choices'; choices: PlanChoices }
  | { type: 'approve'; choices: PlanChoices }
  | { type: 'open'; path: string; line: number }
  | { type: 'generate' };

export function parseChoices(value: unknown): PlanChoices | undefined {
  if (!isRecord(value) || !isRecord(value.forwardPatterns)) return undefined;
  const forwardPatterns: Record<string, string> = {};
  for (const [attr, pattern] of Object.entries(value.forwardPatterns)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(attr)) return undefined;
    if (typeof pattern !== 'string' || !(FORWARD_PATTERNS as readonly string[]).includes(pattern))
      return undefined;
    forwardPatterns[attr] = pattern;
  }
  const flags = [
    'hasSeparateCfg',
    'patchFunctor',
    'cpEnabled',
    'ulyssesAnything',
    'tpEnabled',
  ] as const;
  for (const f of flags) if (typeof value[f] !== 'boolean') return undefined;
  if (typeof value.tpStrategy !== 'string' || !/^[a-z_]{0,40}$/.test(value.tpStrategy))
    return undefined;
  return {
    forwardPatterns,
    hasSeparateCfg: value.hasSeparateCfg as boolean,
    patchFunctor: value.patchFunctor as boolean,
    cpEnabled: value.cpEnabled as boolean,
    ulyssesAnything: value.ulyssesAnything as boolean,
    tpEnabled: value.tpEnabled as boolean,
    tpStrategy: value.tpStrategy,
  };
}

export function parsePlanMessage(
  raw: unknown,
  linkTargets: readonly string[],
): PlanMessage | undefined {
  if (!isRecord(raw) || typeof raw.type !== 'string') return undefined;
  switch (raw.type) {
    case 'ready':
    case 'generate':
      return { type: raw.type };
    case 'choices':
    case 'approve': {
      const choices = parseChoices(raw.choices);
      return choices ? { type: raw.type, choices } : undefined;
    }
    case 'open':
      // only places the review itself links to
      if (
        text(raw.path) &&
        linkTargets.includes(raw.path) &&
        typeof raw.line === 'number' &&
        Number.isInteger(raw.line) &&
        raw.line >= 1
      ) {
        return { type: 'open', path: raw.path, line: raw.line };
      }
      return undefined;
    default:
      return undefined;
  }
}

/** What the detail view's Copy buttons copy: the extension copies its own text, never the page's. */
export type CopyTarget = 'reproduce' | 'tunePython' | 'tuneCli';
const COPY_TARGETS: readonly string[] = ['reproduce', 'tunePython', 'tuneCli'];

export type DetailMessage =
  | { type: 'ready' }
  | { type: 'copy'; text: CopyTarget }
  | { type: 'openFolder' }
  | { type: 'openPhase'; phase: string }
  | { type: 'next'; action: NextAction };

/** `phases`: the run's phases the page may open (the tune table links to them). */
export function parseDetailMessage(
  raw: unknown,
  phases: readonly string[] = [],
): DetailMessage | undefined {
  if (!isRecord(raw) || typeof raw.type !== 'string') return undefined;
  if (raw.type === 'ready' || raw.type === 'openFolder') return { type: raw.type };
  if (raw.type === 'copy' && typeof raw.text === 'string' && COPY_TARGETS.includes(raw.text))
    return { type: 'copy', text: raw.text as CopyTarget };
  if (raw.type === 'openPhase' && text(raw.phase) && phases.includes(raw.phase))
    return { type: 'openPhase', phase: raw.phase };
  if (raw.type === 'next' && typeof raw.action === 'string') {
    const action = NEXT_ACTIONS.find((a) => a === raw.action);
    if (action) return { type: 'next', action };
  }
  return undefined;
}
