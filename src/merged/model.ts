/**
 * What the merged-report table shows, as plain data and strings (no DOM): the columns
 * (a column per rank, or min/median/max past `spread_after` ranks, as
 * python_helper/syncfree/distributed/merge.py's `MergedSite.spread` says it in text),
 * each cell's text, the per-rank totals and the ranks that blocked least and most, and
 * where a site's file is in JupyterLab's file browser.
 */
import type { MergedReport, MergedSite, RankCount, RankTotals } from '../_merged';
import { formatMs, plural } from '../model';
import { isOneOff, rankCost } from '../sidebar/cost';

export type { MergedReport, MergedSite, RankCount, RankTotals } from '../_merged';

/** The MIME type of a merged report (python_helper/syncfree/distributed/display.py). */
export const MERGED_MIME_TYPE = 'application/vnd.syncfree.merged.v1+json';

/** A column of the table after the site's own columns. */
export interface IRankColumn {
  /** The header: "rank 0", or "min", "median", "max". */
  readonly label: string;
  /** The header's tooltip. */
  readonly title: string;
  /** A rank's own column (its rank), or one of the spread columns. */
  readonly rank: number | null;
  readonly spread: 'min' | 'median' | 'max' | 'blocked' | null;
}

/** Whether the table has a column per rank (up to `spread_after` ranks) or min/median/max. */
export function perRankColumns(report: MergedReport): boolean {
  return report.ranks.length <= report.spread_after;
}

export function rankColumns(report: MergedReport): IRankColumn[] {
  if (perRankColumns(report)) {
    return report.ranks.map(totals => ({
      label: `rank ${totals.rank}`,
      title: rankTitle(totals),
      rank: totals.rank,
      spread: null
    }));
  }
  const n = report.ranks.length;
  return [
    { label: 'min', title: `the fewest syncs a rank made here (of ${n} ranks)`, rank: null, spread: 'min' },
    { label: 'median', title: `the median over the ${n} ranks`, rank: null, spread: 'median' },
    { label: 'max', title: `the most syncs a rank made here (of ${n} ranks)`, rank: null, spread: 'max' },
    // Where the ranks measured their blocked time, the rank that waited longest stands out.
    ...(report.ranks.some(totals => totals.blocked_ms !== null)
      ? [
          {
            label: 'blocked',
            title: 'the least and the most time a rank was blocked here',
            rank: null,
            spread: 'blocked' as const
          }
        ]
      : [])
  ];
}

/** "rank 1 on node-a, exited with status 1". */
export function rankTitle(totals: RankTotals): string {
  const exit = totals.exit_code !== 0 ? `, exited with status ${totals.exit_code}` : '';
  return `rank ${totals.rank} on ${totals.hostname}${exit}`;
}

/** A count with its blocked time where measured: "×10", "×10 · 4.2 ms". */
export function countText(count: number, blockedMs: number | null): string {
  return blockedMs === null ? `×${count}` : `×${count} · ${formatMs(blockedMs)}`;
}

/** A rank and what it blocked at a site, as the ranks are compared there. */
export interface IRankBlocked {
  rank: number;
  ms: number;
}

/** The fewest and most syncs a rank made at a site (and which rank), and the median. */
export interface ISpread {
  min: RankCount;
  median: number;
  max: RankCount;
  /**
   * The ranks that blocked least and most here, over those that measured it: on a recurring
   * site by their blocked time after the first call where they measured it apart
   * (`afterFirstCall`), as the sites are ranked (cost.ts rankCost, merge.py `MergedSite.rank_cost`).
   */
  leastBlocked: IRankBlocked | null;
  mostBlocked: IRankBlocked | null;
  afterFirstCall: boolean;
}

/**
 * min/median/max as merge.py's `MergedSite.spread` takes them: on equal counts the lowest
 * rank is named, both for the min and for the max. `oneOff`: the site is paid once (its
 * phase), so its ranks are compared by their whole blocked time.
 */
export function spreadOf(rows: readonly RankCount[], oneOff = false): ISpread | null {
  if (rows.length === 0) {
    return null;
  }
  let min = rows[0];
  let max = rows[0];
  for (const row of rows) {
    if (row.count < min.count || (row.count === min.count && row.rank < min.rank)) {
      min = row;
    }
    if (row.count > max.count || (row.count === max.count && row.rank < max.rank)) {
      max = row;
    }
  }
  const measured = rows
    .filter(row => row.blocked_ms !== null)
    .map(row => ({ rank: row.rank, ms: rankCost(oneOff, row.blocked_ms, row.first_ms)! }));
  // Least: the lowest cost, the lowest rank on a tie; most: the highest, the lowest rank on a tie.
  const sorted = [...measured].sort((a, b) => a.ms - b.ms || a.rank - b.rank);
  const most = sorted.length ? sorted.filter(row => row.ms === sorted[sorted.length - 1].ms)[0] : null;
  return {
    min,
    median: median(rows.map(row => row.count)),
    max,
    leastBlocked: sorted[0] ?? null,
    mostBlocked: most,
    afterFirstCall: !oneOff && rows.some(row => row.first_ms !== undefined)
  };
}

/** The median (the mean of the two middle values for an even number), as Python's statistics.median. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** "×2 (rank 3)", a rank's count named by its rank (the spread columns). */
function namedCount(row: RankCount): string {
  return `×${row.count} (rank ${row.rank})`;
}

/** One cell of a site's rank columns: its text, and whether the rank never made the sync. */
export interface IRankCell {
  readonly text: string;
  readonly title: string;
  /** The rank made no sync here (a divergent site's other ranks). */
  readonly absent: boolean;
}

/** The cells of a site under `columns` (rankColumns). */
export function siteRankCells(site: MergedSite, columns: readonly IRankColumn[]): IRankCell[] {
  return rankCells(site.per_rank, columns, true, isOneOff(site.phase));
}

/** The totals row under `columns`: each rank's counted syncs (min/median/max past spread_after). */
export function totalsRankCells(report: MergedReport, columns: readonly IRankColumn[]): IRankCell[] {
  // Where the ranks timed first calls apart, they are compared by their recurring sites' time after
  // them (`recurring_ms`, as merge.py's extremes): the rest of their blocked time is paid once.
  const rows = report.ranks.map(t => {
    const row: RankCount = { rank: t.rank, count: t.counted, blocked_ms: t.blocked_ms };
    const recurring = t.recurring_ms;
    if (recurring !== undefined && recurring !== null && t.blocked_ms !== null) {
      row.first_ms = Math.max(t.blocked_ms - recurring, 0);
    }
    return row;
  });
  return rankCells(rows, columns, false);
}

/** `rows` under `columns`; with `site`, a rank that made no sync there is an absent cell ("—"). */
function rankCells(
  rows: readonly RankCount[],
  columns: readonly IRankColumn[],
  site: boolean,
  oneOff = false
): IRankCell[] {
  const byRank = new Map(rows.map(row => [row.rank, row]));
  const spread = columns.some(column => column.spread !== null) ? spreadOf(rows, oneOff) : null;
  const after = spread?.afterFirstCall ? ' after the first call' : '';
  return columns.map(column => {
    if (column.rank !== null) {
      const row = byRank.get(column.rank) ?? { rank: column.rank, count: 0, blocked_ms: null };
      if (site && row.count === 0) {
        return { text: '—', title: `rank ${column.rank} did not make this sync`, absent: true };
      }
      return { text: countText(row.count, row.blocked_ms), title: `rank ${row.rank}`, absent: false };
    }
    if (!spread) {
      return { text: '', title: '', absent: false };
    }
    if (column.spread === 'blocked') {
      const { leastBlocked: least, mostBlocked: most } = spread;
      if (!least || !most) {
        return { text: '—', title: 'not measured', absent: false };
      }
      return {
        text: `${formatMs(least.ms)} (rank ${least.rank}) – ${formatMs(most.ms)} (rank ${most.rank})`,
        title: spread.afterFirstCall ? `${column.title}, after the first call (which pays the warm-up)` : column.title,
        absent: false
      };
    }
    if (column.spread === 'median') {
      return { text: `×${formatNumber(spread.median)}`, title: 'the median over the ranks', absent: false };
    }
    const row = column.spread === 'min' ? spread.min : spread.max;
    const blocked = column.spread === 'min' ? spread.leastBlocked : spread.mostBlocked;
    const blockedText = blocked
      ? `; ${column.spread === 'min' ? 'least' : 'most'} blocked${after}: rank ${blocked.rank}, ${formatMs(blocked.ms)}`
      : '';
    return { text: namedCount(row), title: `${column.title}${blockedText}`, absent: site && row.count === 0 };
  });
}

function formatNumber(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

/** "examples/ddp_train.py:53", or "line 53" without a file. */
export function siteWhere(site: MergedSite): string {
  return site.file ? `${site.file}:${site.line}` : `line ${site.line}`;
}

/** "SF101 `.item()` waits for the GPU", or the rule code alone, or nothing. */
export function siteRule(site: MergedSite): string {
  if (!site.rule) {
    return '';
  }
  return site.title ? `${site.rule} ${site.title}` : site.rule;
}

/** What synced, with what sets the row apart: "`.item()` (predicted, in child processes, allowed)". */
export function siteWhat(report: MergedReport, site: MergedSite): string {
  const marks: string[] = [];
  if (site.predicted && !allPredicted(report)) {
    marks.push('predicted');
  }
  if (site.in_children) {
    marks.push('in child processes');
  }
  if (site.allowed) {
    marks.push('allowed');
  }
  return marks.length ? `${site.label} (${marks.join(', ')})` : site.label;
}

/**
 * The badge of a site paid once on every rank, and its tooltip, in the words of the notebook
 * card's (gutter/card.ts): "once" (setup, a final checkpoint) or "once: compiling"; null for a
 * recurring site. Such sites are ranked after the recurring ones.
 */
export function phaseMark(site: MergedSite): { text: string; title: string } | null {
  if (site.phase === 'compile') {
    return {
      text: 'once: compiling',
      title:
        'Synced while torch.compile compiled or autotuned: paid once, not every call; listed after the syncs made every step'
    };
  }
  if (site.phase === 'once') {
    return {
      text: 'once',
      title:
        'This line runs once per run (setup, a final checkpoint): paid once, not every step; listed after the syncs made every step'
    };
  }
  return null;
}

/**
 * The total's tooltip on a recurring site whose first calls were timed apart: "90.0 ms after
 * the first calls (what it is ranked by), 30.0 ms at them"; null otherwise.
 */
export function totalTitle(site: MergedSite): string | null {
  if (site.first_ms === undefined || site.blocked_ms === null || isOneOff(site.phase)) {
    return null;
  }
  const after = rankCost(false, site.blocked_ms, site.first_ms)!;
  return `${formatMs(after)} blocked after the first calls (what the sites are ranked by), ${formatMs(site.first_ms)} at the first calls (warm-up)`;
}

/** The divergent mark's tooltip: which ranks made the sync ("made on rank 0 only", "on ranks 0, 2 of 4"). */
export function divergentTitle(report: MergedReport, site: MergedSite): string {
  const made = site.per_rank.filter(row => row.count > 0).map(row => row.rank);
  const ranks = made.length === 1 ? `rank ${made[0]}` : `ranks ${made.join(', ')}`;
  return `Divergent: made on ${ranks} only, of ${plural(report.ranks.length, 'rank')}`;
}

export function allPredicted(report: MergedReport): boolean {
  return report.sites.length > 0 && report.sites.every(site => site.predicted);
}

/**
 * The headline: "syncfree · 2 ranks · NVIDIA H200", or without a GPU "syncfree · 2 ranks ·
 * predicted on the CPU (no CUDA device)", in plain words whatever the kernel side named
 * its CPU device.
 */
export function mergedHeadline(report: MergedReport): string {
  const device = report.mode === 'predict' ? 'predicted on the CPU (no CUDA device)' : report.device;
  return `syncfree · ${plural(report.world_size, 'rank')} · ${device}`;
}

/** "rank 0: 9 syncs, blocked 4.1 ms". */
function rankTotalsText(totals: RankTotals): string {
  const blocked = totals.blocked_ms !== null ? `, blocked ${formatMs(totals.blocked_ms)}` : '';
  return `rank ${totals.rank}: ${plural(totals.counted, 'sync')}${blocked}`;
}

/** "rank 1: 87.0 ms of 90.0 ms": a rank's recurring blocked time after the first calls, of its whole. */
function recurringText(totals: RankTotals): string {
  return `rank ${totals.rank}: ${formatMs(totals.recurring_ms)} of ${formatMs(totals.blocked_ms ?? 0)}`;
}

/**
 * "Most: rank 0: 9 syncs · least: rank 1: 8 syncs", or, where the ranks timed first calls apart
 * (merge.py compares them by `recurring_ms` then), "Waited longest at the lines that run every
 * step, after their first calls: rank 1: 87.0 ms of 90.0 ms · shortest: rank 0: 27.0 ms of 530 ms"; null when the
 * ranks did the same (merge.py `rank_lines` leaves the line out then too) or there are fewer than two.
 */
export function extremesText(report: MergedReport): string | null {
  const extremes = report.extremes;
  if (!extremes) {
    return null;
  }
  const least = report.ranks.find(t => t.rank === extremes.least);
  const most = report.ranks.find(t => t.rank === extremes.most);
  if (!least || !most) {
    return null;
  }
  if (typeof least.recurring_ms === 'number' && typeof most.recurring_ms === 'number') {
    if (least.recurring_ms === most.recurring_ms && least.counted === most.counted) {
      return null;
    }
    return `Waited longest at the lines that run every step, after their first calls: ${recurringText(most)} · shortest: ${recurringText(least)}`;
  }
  if (least.blocked_ms === most.blocked_ms && least.counted === most.counted) {
    return null;
  }
  return `Most: ${rankTotalsText(most)} · least: ${rankTotalsText(least)}`;
}

/**
 * The path in JupyterLab's file browser of a site's file: `path` is relative to the
 * kernel's working folder (display.py), where JupyterLab starts a notebook's kernel, so it
 * is resolved from the notebook's folder (`notebookPath`, relative to the server's root).
 * Null when it leaves the server's root or is not a relative path.
 */
export function fileBrowserPath(path: string, notebookPath: string): string | null {
  if (!path || path.startsWith('/') || /^[A-Za-z]:/.test(path)) {
    return null;
  }
  const parts = notebookPath.split('/').slice(0, -1);
  for (const part of path.split('/')) {
    if (part === '..') {
      if (parts.length === 0) {
        return null; // above the server's root: not a file the lab shows
      }
      parts.pop();
    } else if (part !== '.' && part !== '') {
      parts.push(part);
    }
  }
  return parts.length > 0 ? parts.join('/') : null;
}
