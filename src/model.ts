/**
 * The report model of the JupyterLab side: what a report's sites and findings mean, in
 * one place that the gutter, the card, the summary under the cell and the Syncs panel
 * all read (as JupyterLab's debugger keeps one BreakpointsModel for gutter and panel).
 * Pure functions over the report types, no DOM.
 */
import type { Finding, Rule, SyncReport, SyncSite } from './_report';
import { compareRankKeys, siteRankKey } from './sidebar/cost';

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

/**
 * The site's message says more than its label and numbers (which the UI writes itself,
 * formatted one way): false for the recorder's own "<label> synced 64x, blocked 1.9 ms"
 * and "<label> would sync 2x (predicted on CPU)", true for any other wording.
 */
export function messageAddsToLabel(site: Pick<SyncSite, 'message'>): boolean {
  return site.message !== '' && !/^.+? (?:synced|would sync) \d+x\b/.test(site.message);
}

/** A label without its backticks, for places that cannot show code (an <option>). */
export function plainText(text: string): string {
  return text.replace(/`([^`\n]+)`/g, '$1');
}

/**
 * The line a finding is shown on: the line of a site of its rule within the finding's
 * range, when the finding spans lines (a chained call split over two lines syncs on the
 * line of its `.item()`, the statement starts a line above: one call, one marker);
 * otherwise its own first line.
 */
export function findingLine(report: SyncReport, finding: Finding, siteLines?: ReadonlySet<number>): number {
  const { line, end_line: endLine } = finding.range;
  if (endLine <= line || (siteLines ?? new Set(report.sites.map(s => s.line))).has(line)) {
    return line;
  }
  let found: number | null = null;
  for (const site of report.sites) {
    if (
      site.rule === finding.rule &&
      site.line > line &&
      site.line <= endLine &&
      (found === null || site.line < found)
    ) {
      found = site.line;
    }
  }
  return found ?? line;
}

/**
 * The 0-based column of the call that synced on a site's line: where a finding of the
 * site's rule (or, failing that, any finding) starts on that line; null when no finding
 * starts there (then the line's first character that is not blank is the place to go).
 */
export function siteColumn(report: SyncReport, site: SyncSite): number | null {
  let any: number | null = null;
  for (const finding of report.findings) {
    if (finding.range.line !== site.line) {
      continue;
    }
    if (finding.rule === site.rule) {
      return finding.range.col;
    }
    any = any ?? finding.range.col;
  }
  return any;
}

/** The lines where the report's sites synced. */
export function siteLinesOf(report: SyncReport): Set<number> {
  return new Set(report.sites.map(s => s.line));
}

/**
 * The findings of a report on lines where nothing synced (they did not run). A line
 * that ran never counts as "did not run", nor does a finding whose call synced on a
 * later line of its own range (see `findingLine`).
 */
export function findingsWithoutSites(report: SyncReport): Finding[] {
  if (report.findings.length === 0) {
    return report.findings;
  }
  const siteLines = siteLinesOf(report);
  return report.findings.filter(f => !siteLines.has(findingLine(report, f, siteLines)));
}

/**
 * Costliest first: by blocked time (sites without a measured time after every measured
 * one), then count, then line. The summary, the panel and the card all order by it.
 */
export function compareCost(a: SyncSite, b: SyncSite): number {
  // The reports' rank key (sites.py rank_key, ported in sidebar/cost.ts): recurring sites by
  // their blocked time after the first call, one-off ones after them; then by line.
  return compareRankKeys(siteRankKey(a), siteRankKey(b)) || a.line - b.line;
}

/** The sites, costliest first (a new array). */
export function costliestFirst(sites: readonly SyncSite[]): SyncSite[] {
  return [...sites].sort(compareCost);
}

/**
 * Cost (share of the run's GPU time, or ms where there is no share), blocked time (ms)
 * and count that make a site medium or heavy.
 */
const HEAVY = { costShare: 0.05, costMs: 10, blockedMs: 10, count: 100 };
const MEDIUM = { costShare: 0.01, costMs: 1, blockedMs: 1, count: 10 };

/**
 * 0 light, 1 medium, 2 heavy: by cost where the GPU measured it (issue 37: the GPU time
 * its syncs lose, as a share of the run's GPU time where known), else by blocked time where
 * measured, else by count.
 */
export function weightOf(
  count: number,
  blockedMs: number | null,
  costMs: number | null = null,
  costShare: number | null = null
): 0 | 1 | 2 {
  if (costShare !== null) {
    return costShare >= HEAVY.costShare ? 2 : costShare >= MEDIUM.costShare ? 1 : 0;
  }
  if (costMs !== null) {
    return costMs >= HEAVY.costMs ? 2 : costMs >= MEDIUM.costMs ? 1 : 0;
  }
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

/** The totals of a notebook's reports: the status bar and the Syncs tab's badge. */
export interface INotebookTotals {
  /** Syncs seen or predicted, over every report. */
  syncs: number;
  /** Blocked time over the reports that measured it; null when none did. */
  blockedMs: number | null;
  /** GPU time lost to syncs (issue 37) over the reports that measured it; null when none did. */
  costMs?: number | null;
  /** Every report with syncs predicted them (no GPU). */
  predicted: boolean;
  /** Cells with a report. */
  cells: number;
  /** Static findings on lines where nothing synced (they did not run). */
  notRun: number;
}

export function notebookTotals(reports: readonly { report: SyncReport }[]): INotebookTotals {
  let syncs = 0;
  let blocked: number | null = null;
  let cost: number | null = null;
  let predicted = true;
  let notRun = 0;
  for (const { report } of reports) {
    syncs += report.totals.syncs;
    if (report.totals.blocked_ms !== null) {
      blocked = (blocked ?? 0) + report.totals.blocked_ms;
    }
    const reportCost = report.totals.cost_ms;
    if (reportCost !== null && reportCost !== undefined) {
      cost = (cost ?? 0) + reportCost;
    }
    if (report.totals.syncs > 0 && !allPredicted(report)) {
      predicted = false;
    }
    notRun += findingsWithoutSites(report).length;
  }
  return {
    syncs,
    blockedMs: blocked,
    costMs: cost,
    predicted: predicted && syncs > 0,
    cells: reports.length,
    notRun
  };
}

/**
 * "103 syncs · 1.73 ms GPU time lost" where the GPU measured the cost (issue 37), else
 * "103 syncs · 42.9 ms blocked"; "60 predicted syncs" (no GPU, no cost); "3 likely syncs
 * (did not run)".
 */
export function notebookTotalsText(totals: INotebookTotals): string {
  if (totals.syncs === 0) {
    return totals.notRun > 0
      ? `${totals.notRun} likely sync${totals.notRun === 1 ? '' : 's'} (did not run)`
      : 'no syncs';
  }
  const cost = totals.costMs ?? null;
  const time =
    cost !== null
      ? ` · ${formatMs(cost)} GPU time lost`
      : totals.blockedMs !== null
        ? ` · ${formatMs(totals.blockedMs)} blocked`
        : '';
  return `${syncCountText(totals.syncs, totals.predicted)}${time}`;
}

/**
 * The text of each report line the report knows, as it ran (sites' `chain_text`,
 * report.schema.json): what a site's line is found by once the cell was edited, moved,
 * cut and pasted or reopened (issue 39). Empty for reports written before it.
 */
export function reportLineTexts(report: SyncReport): ReadonlyMap<number, string> {
  let texts = lineTextCache.get(report);
  if (!texts) {
    texts = new Map();
    for (const site of report.sites) {
      const chainText = site.chain_text;
      if (chainText && chainText.length === site.chain.length) {
        site.chain.forEach((line, i) => texts!.set(line, chainText[i]));
      }
    }
    lineTextCache.set(report, texts);
  }
  return texts;
}

const lineTextCache = new WeakMap<SyncReport, Map<number, string>>();

/** Where a report's lines are in the cell's text now; null for a line that cannot be found. */
export type LineAnchors = (line: number) => number | null;

/** A line of the text as `chain_text` holds it (stripped, cut at 200 characters). */
function anchorText(text: string): string {
  return text.trim().slice(0, 200);
}

/**
 * Whether the cell's lines still hold, at the report's line numbers, the text that ran
 * there (as far as the report knows it: `reportLineTexts`). True for a report that
 * knows no text (written before `chain_text`).
 */
export function reportLinesInPlace(report: SyncReport, lineAt: (line: number) => string, lineCount: number): boolean {
  for (const [line, text] of reportLineTexts(report)) {
    if (line > lineCount || anchorText(lineAt(line)) !== text) {
      return false;
    }
  }
  return true;
}

/**
 * Where the report's lines are now in a cell's text that changed since the run, found by
 * the text each line had when it ran (issue 39: a line typed above, Move Cell, cut and
 * paste, a reopen of a notebook saved after an edit). Lines are matched in order, each to
 * the nearest line with its text after the one before it, so that two identical lines
 * keep their order; a line whose text is nowhere is lost (null: "out of date"). A line the
 * report has no text for (a static finding's) moves with the nearest matched line above
 * it (below it, when none is above). Null when the report knows no line text (older
 * reports): then only edits seen in the editor can move its lines.
 */
export function anchorReportLines(
  report: SyncReport,
  lineAt: (line: number) => string,
  lineCount: number
): LineAnchors | null {
  const texts = reportLineTexts(report);
  if (texts.size === 0) {
    return null;
  }
  const where = new Map<string, number[]>();
  for (let n = 1; n <= lineCount; n++) {
    const text = anchorText(lineAt(n));
    const list = where.get(text);
    if (list) {
      list.push(n);
    } else {
      where.set(text, [n]);
    }
  }
  const known = [...texts.keys()].sort((a, b) => a - b);
  const found = new Map<number, number | null>();
  const used = new Set<number>();
  let previous = 0;
  let shift = 0;
  for (const line of known) {
    const candidates = (where.get(texts.get(line)!) ?? []).filter(n => !used.has(n));
    const expected = line + shift;
    const nearest = (list: number[]) =>
      list.reduce<number | null>(
        (best, n) => (best === null || Math.abs(n - expected) < Math.abs(best - expected) ? n : best),
        null
      );
    const at = nearest(candidates.filter(n => n > previous)) ?? nearest(candidates);
    found.set(line, at);
    if (at !== null) {
      used.add(at);
      previous = at;
      shift = at - line;
    }
  }
  return line => {
    if (found.has(line)) {
      return found.get(line)!;
    }
    // No text for this line: it moves with the nearest matched line above it (or below).
    let by: number | null = null;
    for (const k of known) {
      const at = found.get(k);
      if (at === null || at === undefined) {
        continue;
      }
      if (k < line || by === null) {
        by = at - k;
      }
      if (k > line) {
        break;
      }
    }
    const at = by === null ? null : line + by;
    return at !== null && at >= 1 && at <= lineCount ? at : null;
  };
}

/**
 * Where the report lines of a cell are in its text (`source`), for a cell without an
 * editor to follow its edits (a windowed notebook's, a notebook reopened after an edit),
 * found by the text they ran with (`anchorReportLines`): `stale` when a line that ran
 * holds other text now; nothing when every line is in place.
 */
export function anchoredLines(source: string, report: SyncReport): { stale?: boolean; currentLine?: LineAnchors } {
  const lines = source.split('\n');
  const lineAt = (n: number) => lines[n - 1] ?? '';
  if (reportLinesInPlace(report, lineAt, lines.length)) {
    return {};
  }
  return { stale: true, currentLine: anchorReportLines(report, lineAt, lines.length) ?? undefined };
}

/**
 * "in helper(), defined in In [3] line 8: `return y.item()`": where a sync inside a
 * function from an earlier notebook cell happened (output.py defined_in_text; the site's
 * line and chain are the calling cell's); null for any other site.
 */
export function definedInText(site: SyncSite): string | null {
  const at = site.defined_in;
  if (!at) {
    return null;
  }
  const text = `in ${at.function}(), defined in ${at.cell} line ${at.line}`;
  return at.text ? `${text}: \`${at.text}\`` : text;
}

/** "2.7 %": a share (0..1) as a percentage; "under 0.1 %" for a share that rounds to none but is not none. */
export function formatShare(share: number): string {
  const pct = share * 100;
  if (pct > 0 && pct < 0.05) {
    return 'under 0.1 %';
  }
  return `${pct >= 10 ? Math.round(pct) : pct.toFixed(1)} %`;
}

/**
 * "costs ≈ 1.73 ms of GPU time each time it runs, 2.7 % of the cell's GPU time": what a
 * site's syncs cost, the GPU time they lose (issue 37; report.schema.json SyncSite.cost_ms,
 * measured from the GPU's own timestamps). Null when not measured: never a guess.
 */
export function costText(site: Pick<SyncSite, 'cost_ms' | 'cost_each_ms' | 'cost_share' | 'count'>): string | null {
  const total = site.cost_ms ?? null;
  if (total === null) {
    return null;
  }
  const each = site.cost_each_ms ?? (site.count > 0 ? total / site.count : null);
  let text =
    site.count > 1 && each !== null
      ? `costs ≈ ${formatMs(each)} of GPU time each time it runs (${formatMs(total)} in all)`
      : `costs ≈ ${formatMs(total)} of GPU time`;
  if (site.cost_share !== null && site.cost_share !== undefined) {
    text += `, ${formatShare(site.cost_share)} of the cell's GPU time`;
  }
  return text;
}

/**
 * The lines of the cell a report belongs to, as it is now: how many there are and, once
 * it was edited, where the report's lines went (`anchoredLines`, the editor's markers).
 */
export interface ICellLines {
  lineCount: number;
  /** Where a report line is now; null when it is gone. Without it, lines are as they ran. */
  currentLine?: LineAnchors;
}

/**
 * Whether a report line is a line of its cell: within the cell's lines, or found
 * elsewhere in the edited cell by its text. A line past the cell's end is not (a
 * hand-edited or crafted report): the summary under the cell and the Syncs panel both
 * leave its sites out. Without `cell` (a host that cannot say), every line is.
 */
export function lineInCell(line: number, cell: ICellLines | null | undefined): boolean {
  if (!cell || (line >= 1 && line <= cell.lineCount)) {
    return true;
  }
  return line >= 1 && cell.currentLine !== undefined && cell.currentLine(line) !== null;
}

/** The report's sites on lines of the cell (`lineInCell`), and those left out. */
export function sitesInCell(
  report: SyncReport,
  cell: ICellLines | null | undefined
): { sites: SyncSite[]; leftOut: SyncSite[] } {
  if (!cell) {
    return { sites: report.sites, leftOut: [] };
  }
  const sites: SyncSite[] = [];
  const leftOut: SyncSite[] = [];
  for (const site of report.sites) {
    (lineInCell(site.line, cell) ? sites : leftOut).push(site);
  }
  return leftOut.length === 0 ? { sites: report.sites, leftOut } : { sites, leftOut };
}
