/**
 * The report model of the JupyterLab side: what a report's sites and findings mean, in
 * one place that the gutter, the card, the summary under the cell and the Syncs panel
 * all read (as JupyterLab's debugger keeps one BreakpointsModel for gutter and panel).
 * Pure functions over the report types, no DOM.
 */
import type { Finding, Rule, SyncReport, SyncSite } from './_report';

/** How a marked line or a row got there: a sync seen on a GPU, predicted on CPU, or static. */
export type MarkerSource = 'measured' | 'predicted' | 'static';

/** A site was predicted on CPU stand-ins rather than seen on a GPU. */
export function isPredicted(report: SyncReport, site: SyncSite): boolean {
  return site.predicted === true || report.mode === 'predict';
}

/** Where a site's evidence comes from. */
export function siteSource(report: SyncReport, site: SyncSite): MarkerSource {
  return isPredicted(report, site) ? 'predicted' : 'measured';
}

/** Every site of the report is predicted (so are its totals). */
export function allPredicted(report: SyncReport): boolean {
  return report.mode === 'predict' || (report.sites.length > 0 && report.sites.every(s => s.predicted === true));
}

/** A rule of the report by code, only if the report really carries it. */
export function ruleOf(report: SyncReport, code: string | null | undefined): Rule | null {
  if (!code || !Object.prototype.hasOwnProperty.call(report.rules, code)) {
    return null;
  }
  return report.rules[code];
}

/** The title of a rule of the report, or null. */
export function ruleTitle(report: SyncReport, code: string | null | undefined): string | null {
  return ruleOf(report, code)?.title ?? null;
}

/**
 * What synced, in the user's words (code in backticks). Reports carry it per site
 * (`label`, from python_helper/syncfree/kinds.py); older reports have only the kind,
 * and their message starts with the same label ("`.item()` synced 64x …").
 */
export function siteLabel(site: SyncSite): string {
  if (site.label) {
    return site.label;
  }
  const words = / (?:synced|would sync) /.exec(site.message);
  if (words && words.index > 0) {
    return site.message.slice(0, words.index);
  }
  return site.kind.replace(/_/g, ' ');
}

/** A label without its backticks, for places that cannot show code (an <option>). */
export function plainText(text: string): string {
  return text.replace(/`([^`\n]+)`/g, '$1');
}

/** The findings of a report on lines where nothing synced (they did not run). */
export function findingsWithoutSites(report: SyncReport): Finding[] {
  if (report.findings.length === 0) {
    return report.findings;
  }
  const siteLines = new Set(report.sites.map(s => s.line));
  return report.findings.filter(f => !siteLines.has(f.range.line));
}

/**
 * Costliest first: by blocked time (sites without a measured time after every measured
 * one), then count, then line. The summary, the panel and the card all order by it.
 */
export function compareCost(a: SyncSite, b: SyncSite): number {
  return (b.blocked_ms ?? -1) - (a.blocked_ms ?? -1) || b.count - a.count || a.line - b.line;
}

/** The sites, costliest first (a new array). */
export function costliestFirst(sites: readonly SyncSite[]): SyncSite[] {
  return [...sites].sort(compareCost);
}

/** Blocked time (ms) and count that make a site medium or heavy. */
const HEAVY = { blockedMs: 10, count: 100 };
const MEDIUM = { blockedMs: 1, count: 10 };

/** 0 light, 1 medium, 2 heavy: by blocked time where measured, else by count. */
export function weightOf(count: number, blockedMs: number | null): 0 | 1 | 2 {
  if (blockedMs !== null) {
    return blockedMs >= HEAVY.blockedMs ? 2 : blockedMs >= MEDIUM.blockedMs ? 1 : 0;
  }
  return count >= HEAVY.count ? 2 : count >= MEDIUM.count ? 1 : 0;
}

/** "0.42 ms", "1.89 ms", "41.2 ms", "312 ms", "1.3 s"; "—" when not measured. */
export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) {
    return '—';
  }
  if (ms >= 1000) {
    return `${(ms / 1000).toFixed(1)} s`;
  }
  if (ms >= 100) {
    return `${Math.round(ms)} ms`;
  }
  return `${ms.toFixed(ms >= 10 ? 1 : 2)} ms`;
}

/** "×50": how many times a site synced. */
export function formatCount(count: number): string {
  return `×${count}`;
}

/** "1 sync", "60 syncs", "60 predicted syncs". */
export function syncCountText(count: number, predicted = false): string {
  return `${count} ${predicted ? 'predicted ' : ''}sync${count === 1 ? '' : 's'}`;
}

/** "1 cell", "4 cells". */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}
