import Ajv, { ValidateFunction } from 'ajv';
import { MERGED_SCHEMA } from '../_merged';
import type { MergedReport } from './model';

let validator: ValidateFunction | null = null;

/**
 * Check a merged report found in a notebook (possibly hand-edited, old or hostile)
 * against python_helper/syncfree/distributed/merged.schema.json, embedded at build time
 * by scripts/gen-types.mjs. Returns the report, or null with a console warning: a bad
 * report is ignored, it never breaks the notebook (as reports.ts does for cell reports).
 */
export function parseMerged(data: unknown): MergedReport | null {
  if (typeof data === 'object' && data !== null) {
    // An output's stored bundle is the same object until the output is replaced: checked once.
    if (!checked.has(data)) {
      checked.set(data, parseUnchecked(data));
    }
    return checked.get(data)!;
  }
  return parseUnchecked(data);
}

const checked = new WeakMap<object, MergedReport | null>();

function parseUnchecked(data: unknown): MergedReport | null {
  let value = data;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      console.warn('syncfree: ignored a merged report: not JSON');
      return null;
    }
  }
  if (!validator) {
    validator = new Ajv({ allErrors: false, strict: false }).compile(MERGED_SCHEMA as unknown as object);
  }
  if (!validator(value)) {
    const first = validator.errors?.[0];
    const detail = first ? `${first.instancePath || '/'} ${first.message ?? ''}` : 'invalid';
    console.warn(`syncfree: ignored a malformed merged report: ${detail}`);
    return null;
  }
  return value as MergedReport;
}
