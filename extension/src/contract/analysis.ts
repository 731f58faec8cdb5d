/**
 * The parts of the server's documents the UI reads: the analysis JSON (`cdit-integrate analyze
 * --json`, DESIGN.md "stable contract") and the IntegrationPlan (cdit_runtime/contract/plan.py).
 * Only fields the extension uses are typed; extra keys are allowed on both documents.
 */

import type { PlanDocument } from './plan';

export interface Evidence {
  message: string;
  path: string;
  line: number;
}

export interface Diagnostic extends Evidence {
  severity: 'error' | 'warning' | 'info';
  code: string;
}

export interface BlockListAnalysis {
  attr: string;
  blockClass: string;
  forwardPattern: string | null;
  signaturePattern?: string | null;
  confidence: number;
  evidence: Evidence[];
  alternatives?: string[];
  blockCount?: number | null;
}

export interface PatchReason {
  kind: string;
  message: string;
  line: number;
  path?: string;
  active?: boolean;
}

export interface TransformerAnalysis {
  className: string;
  line: number;
  isDiffusersModel: boolean;
  blockLists: BlockListAnalysis[];
  patchFunctor: { needed: boolean; reasons: PatchReason[] };
  separateCfg: { value: boolean | null; evidence: Evidence[]; confidence?: number };
  contextParallel: {
    approach: string;
    plan: Record<string, unknown>;
    evidence?: Evidence[];
    attentionMask: {
      present: boolean;
      reorderNeeded: boolean;
      sources: Evidence[];
      /** forward's mask parameters the blocks receive */
      params?: string[];
      /** forward builds a joint mask itself */
      builtInForward?: boolean;
      /** where the mask is permuted into all-to-all order (null: not placed, CP refused) */
      reorderPlan?: { list: string; mask: string; streams: string[]; line: number } | null;
      /** masks split with a stream that is split where every block receives it */
      withStream?: (Evidence & { list: string; mask: string; stream: string; params: string[] })[];
    };
    uaaRecommended: boolean;
    /** attention that calls SDPA itself: the generated module routes it through cache-dit */
    sdpaRoutes?: (Evidence & { class: string; owner: 'processor' | 'module'; names: string[] })[];
    /** an input axis split at the root that some lists hold in the batch and others attend over */
    factorised?: {
      param: string;
      axis: number;
      rank: number;
      gatherAxis: number;
      routed: string[];
      local: string[];
      tables: [string, number][];
      guards: [string, number][];
    };
    warnings: Diagnostic[];
  };
  tensorParallel: {
    attentionStrategy: string;
    layers: Record<string, string>;
    shardDivAttrs: string[];
    warnings: Diagnostic[];
    strategyReasons?: string[];
    alternatives?: Record<string, unknown>;
    layerReasons?: Record<string, string>;
    components?: {
      textEncoders?: { component: string; class: string; supported: boolean }[];
      vaes?: { component: string; class: string; supported: boolean }[];
    } | null;
  };
  registry?: {
    cacheDitVersion?: string | null;
    existingAdapter?: string | null;
    proposedName?: string | null;
    /** the name the cache-dit checkout target accepts; null: none can (see the reason) */
    checkoutName?: string | null;
    checkoutNameReason?: string;
    shadowedBy?: string[];
    notes?: string[];
    warnings?: string[];
  };
  diagnostics: Diagnostic[];
}

/** A `__call__` parameter of the pipeline (lsp_server/analysis/pipeline/call_signature.py). */
export interface CallParameter {
  name: string;
  kind:
    'positional_only' | 'positional_or_keyword' | 'var_positional' | 'keyword_only' | 'var_keyword';
  annotation: string | null;
  hasDefault: boolean;
  /** the default as JSON when `defaultIsLiteral` (module constants resolved), else null */
  default: unknown;
  defaultText: string | null;
  defaultIsLiteral: boolean;
  /** no default (never self, *args or **kwargs) */
  required: boolean;
  role: 'resolution' | 'frames' | 'duration' | 'steps' | 'guidance' | 'input' | null;
  inputKind: 'image' | 'video' | 'audio' | 'mask' | null;
  line: number;
}

/** `if <condition>: raise ...` on call parameters, in `__call__` or a checker it calls. */
export interface CallCheck {
  params: string[];
  condition: string;
  message: string | null;
  method: string;
  /** parameter values that skip the check (`{"use_resolution_binning": false}`) */
  avoid: Record<string, unknown> | null;
  path: string;
  line: number;
}

export interface CallSignature {
  className: string;
  /** the class whose `__call__` it is (a base class when inherited) */
  definedIn: string;
  isPipeline?: boolean;
  path: string;
  line: number;
  acceptsVarKeyword: boolean;
  varKeyword: string | null;
  varPositional: string | null;
  parameters: CallParameter[];
  required: string[];
  checks: CallCheck[];
}

export interface AnalysisReport {
  schemaVersion: number;
  source: { path: string; sha256: string };
  pipeline?: {
    path: string;
    /** the pipeline class's `__call__` (model_index.json `_class_name`, else the first) */
    callSignature?: CallSignature | null;
    /** the other classes of the file with a `__call__` */
    otherCallSignatures?: CallSignature[];
  } | null;
  transformers: TransformerAnalysis[];
}

/** The IntegrationPlan and its parts: generated from the plan's JSON schema (`plan.ts`). */
export type { PlanBlockList } from './plan';
export type IntegrationPlan = PlanDocument;

export const FORWARD_PATTERNS = [
  'Pattern_0',
  'Pattern_1',
  'Pattern_2',
  'Pattern_3',
  'Pattern_4',
  'Pattern_5',
] as const;
