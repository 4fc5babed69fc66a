import type { SyncReport, SyncSite } from '../_report';
import { MarkerSource, weightOf } from '../gutter/lines';

/** One cell's report, as the sidebar ranks it. */
export interface IRankInput {
  cellId: string;
  /** 1-based position of the cell in the notebook. */
  cellNumber: number;
  report: SyncReport;
  /** The report of the cell's run before this one, if this session saw one. */
  previous: SyncReport | null;
  /** Lines in the cell now: sites past it (a hand-edited report) are left out. */
  lineCount?: number;
}

/** How a site changed since the previous run of its cell. */
export interface ISiteDelta {
  /** The previous run had no such site (same call chain and kind). */
  isNew: boolean;
  count: number;
  blockedMs: number | null;
}

/** One row of the sidebar: a sync site, or a static finding where nothing synced. */
export interface IRankedSite {
  cellId: string;
  cellNumber: number;
  line: number;
  /** What synced (the site's kind); `static` for a finding that did not run. */
  kind: string;
  rule: string | null;
  ruleTitle: string | null;
  count: number;
  blockedMs: number | null;
  source: MarkerSource;
  weight: 0 | 1 | 2;
  message: string;
  /** Null when the cell has no previous run to compare with. */
  delta: ISiteDelta | null;
}

export interface ISiteFilter {
  kind?: string | null;
  rule?: string | null;
}

/** The sites of one cell, for the grouped view. */
export interface ICellGroup {
  cellId: string;
  cellNumber: number;
  syncs: number;
  blockedMs: number | null;
  sites: IRankedSite[];
  /** Change of the cell's totals since its previous run; null without one. */
  delta: { syncs: number; blockedMs: number | null; fixed: number } | null;
}

export interface ISyncTotals {
  syncs: number;
  blockedMs: number | null;
  sites: number;
  cells: number;
}

/** The kind shown for static findings (they did not run, so they have no sync kind). */
export const STATIC_KIND = 'static';

function siteKey(site: SyncSite): string {
  return `${site.chain.join('>')}|${site.kind}`;
}

function ruleTitle(report: SyncReport, code: string | null): string | null {
  if (!code || !Object.prototype.hasOwnProperty.call(report.rules, code)) {
    return null;
  }
  return report.rules[code].title;
}

const warnedOutOfRange = new WeakSet<SyncReport>();

/**
 * The sites of every cell with the most costly first: by blocked time, then count,
 * then notebook order. Sites without a measured time rank after measured ones with the
 * same count; static findings (nothing ran) come last.
 */
export function rankSites(inputs: readonly IRankInput[], filter: ISiteFilter = {}): IRankedSite[] {
  const rows: IRankedSite[] = [];
  for (const input of inputs) {
    const { report, previous } = input;
    const inRange = (line: number) => {
      if (input.lineCount === undefined || (line >= 1 && line <= input.lineCount)) {
        return true;
      }
      if (!warnedOutOfRange.has(report)) {
        warnedOutOfRange.add(report);
        console.warn(`syncfree: a report in cell ${input.cellNumber} has line ${line} outside the cell; left out`);
      }
      return false;
    };
    const before = new Map<string, SyncSite>();
    for (const site of previous?.sites ?? []) {
      before.set(siteKey(site), site);
    }
    const siteLines = new Set<number>();
    for (const site of report.sites) {
      if (!inRange(site.line)) {
        continue;
      }
      siteLines.add(site.line);
      const old = previous ? before.get(siteKey(site)) : undefined;
      rows.push({
        cellId: input.cellId,
        cellNumber: input.cellNumber,
        line: site.line,
        kind: site.kind,
        rule: site.rule,
        ruleTitle: ruleTitle(report, site.rule),
        count: site.count,
        blockedMs: site.blocked_ms,
        source: site.predicted || report.mode === 'predict' ? 'predicted' : 'measured',
        weight: weightOf(site.count, site.blocked_ms),
        message: site.message,
        delta: previous
          ? {
              isNew: !old,
              count: site.count - (old?.count ?? 0),
              blockedMs:
                site.blocked_ms !== null && (!old || old.blocked_ms !== null)
                  ? site.blocked_ms - (old?.blocked_ms ?? 0)
                  : null
            }
          : null
      });
    }
    for (const finding of report.findings) {
      const line = finding.range.line;
      if (siteLines.has(line) || !inRange(line)) {
        continue;
      }
      rows.push({
        cellId: input.cellId,
        cellNumber: input.cellNumber,
        line,
        kind: STATIC_KIND,
        rule: finding.rule,
        ruleTitle: ruleTitle(report, finding.rule),
        count: 0,
        blockedMs: null,
        source: 'static',
        weight: 0,
        message: finding.message,
        delta: null
      });
    }
  }
  return (filter.kind || filter.rule ? rows.filter(row => matches(row, filter)) : rows).sort(compareSites);
}

function matches(row: IRankedSite, filter: ISiteFilter): boolean {
  return (!filter.kind || row.kind === filter.kind) && (!filter.rule || row.rule === filter.rule);
}

export function compareSites(a: IRankedSite, b: IRankedSite): number {
  const staticOrder = Number(a.source === 'static') - Number(b.source === 'static');
  return (
    staticOrder ||
    (b.blockedMs ?? -1) - (a.blockedMs ?? -1) ||
    b.count - a.count ||
    a.cellNumber - b.cellNumber ||
    a.line - b.line
  );
}

function sumBlocked(values: (number | null)[]): number | null {
  const measured = values.filter((v): v is number => v !== null);
  return measured.length > 0 ? measured.reduce((a, b) => a + b, 0) : null;
}

/** The ranked sites of each cell, cells ordered by their most costly site. */
export function groupByCell(sites: readonly IRankedSite[], inputs: readonly IRankInput[]): ICellGroup[] {
  const groups = new Map<string, ICellGroup>();
  const byCell = new Map(inputs.map(input => [input.cellId, input]));
  for (const site of sites) {
    let group = groups.get(site.cellId);
    if (!group) {
      group = { cellId: site.cellId, cellNumber: site.cellNumber, syncs: 0, blockedMs: null, sites: [], delta: null };
      groups.set(site.cellId, group);
    }
    group.sites.push(site);
  }
  for (const group of groups.values()) {
    group.syncs = group.sites.reduce((n, s) => n + s.count, 0);
    group.blockedMs = sumBlocked(group.sites.map(s => s.blockedMs));
    const input = byCell.get(group.cellId);
    if (input?.previous) {
      const now = input.report.totals;
      const then = input.previous.totals;
      const current = new Set(input.report.sites.map(siteKey));
      group.delta = {
        syncs: now.syncs - then.syncs,
        blockedMs: now.blocked_ms !== null && then.blocked_ms !== null ? now.blocked_ms - then.blocked_ms : null,
        fixed: input.previous.sites.filter(s => !current.has(siteKey(s))).length
      };
    }
  }
  // Sites are already ranked, so each group's first site is its most costly.
  return [...groups.values()];
}

/** Totals of the listed sites: syncs, blocked time, sites and cells. */
export function totalsOf(sites: readonly IRankedSite[]): ISyncTotals {
  const ran = sites.filter(s => s.source !== 'static');
  return {
    syncs: ran.reduce((n, s) => n + s.count, 0),
    blockedMs: sumBlocked(ran.map(s => s.blockedMs)),
    sites: ran.length,
    cells: new Set(sites.map(s => s.cellId)).size
  };
}

/** The kinds and rules present, for the sidebar's filters. */
export function filterChoices(inputs: readonly IRankInput[]): { kinds: string[]; rules: string[] } {
  const kinds = new Set<string>();
  const rules = new Set<string>();
  for (const { report } of inputs) {
    const siteLines = new Set(report.sites.map(s => s.line));
    for (const site of report.sites) {
      kinds.add(site.kind);
      if (site.rule) {
        rules.add(site.rule);
      }
    }
    for (const finding of report.findings) {
      rules.add(finding.rule);
      if (!siteLines.has(finding.range.line)) {
        kinds.add(STATIC_KIND);
      }
    }
  }
  return { kinds: [...kinds].sort(), rules: [...rules].sort() };
}
