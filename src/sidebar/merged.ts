/**
 * A distributed job's merged rank report in the Syncs panel (issue 39): its sites are in
 * the job's scripts (file:line), not in a cell, so the panel lists them as a group of their
 * own under the cell whose output shows the report, naming each file and line; a row goes
 * nowhere (the file is not a cell). Its syncs count in the panel's totals.
 */
import type { MergedReport, MergedSite } from '../_merged';
import type { Rule, SyncReport, SyncSite } from '../tokens';
import type { IRankInput } from './ranking';

/** The rank input of a merged report shown in cell `cellNumber` (`cellId`: the cell model's id). */
export function mergedRankInput(merged: MergedReport, cellId: string, cellNumber: number): IRankInput {
  const files = new Map<SyncSite, string>();
  const rules: Record<string, Rule> = {};
  const sites = merged.sites.map(from => {
    const site: SyncSite = {
      line: from.line,
      kind: from.kind,
      count: from.count,
      blocked_ms: from.blocked_ms,
      chain: [from.line],
      frames: [],
      rule: from.rule,
      message: '',
      label: from.label,
      predicted: from.predicted,
      ...(from.phase ? { phase: from.phase } : {}),
      ...(from.first_ms !== undefined ? { first_ms: from.first_ms } : {})
    };
    files.set(site, siteFile(from));
    if (from.rule && from.title) {
      // Only the title is read (the panel's rule chip); the merged report carries no more.
      rules[from.rule] = { code: from.rule, title: from.title } as Rule;
    }
    return site;
  });
  const predicted = sites.length > 0 && sites.every(site => site.predicted);
  const report: SyncReport = {
    version: 1,
    cell_id: null,
    source_hash: '',
    mode: predicted ? 'predict' : 'warn',
    device: { kind: predicted ? 'predict' : 'cuda', name: merged.device, torch: null },
    totals: {
      syncs: sites.reduce((sum, site) => sum + site.count, 0),
      sites: sites.length,
      blocked_ms: merged.totals.blocked_ms,
      wall_ms: 0
    },
    sites,
    findings: [],
    rules,
    truncated: { sites: merged.truncated > 0, findings: false, frames: false }
  };
  const ranks = merged.ranks.length;
  return {
    cellId: `${cellId}#merged`,
    cellNumber,
    report,
    previous: null,
    title: `Cell ${cellNumber}: merged report, ${ranks} rank${ranks === 1 ? '' : 's'}`,
    fileOf: site => files.get(site) ?? null
  };
}

/** The file a merged site names: as the lab would open it, else as the rank saw it. */
function siteFile(site: MergedSite): string {
  return site.path ?? site.file ?? '?';
}

/** "train.py", or a long name cut to `max` characters with an ellipsis (the whole one goes in the tooltip). */
export function shortFile(file: string, max = 32): string {
  const name = file.split('/').pop() || file;
  return name.length > max ? `${name.slice(0, max - 1)}…` : name;
}
