import type { Finding, LibraryLine, SyncReport, SyncSite } from '../_report';
import {
  MarkerSource,
  findingLine,
  findingsWithoutSites,
  isPredicted,
  lineInCell,
  plainText,
  ruleTitle,
  siteColumn,
  siteLabel,
  siteLinesOf,
  siteSource,
  weightOf
} from '../model';
import { firstCallText } from '../gutter/card';
import { RankKey, SitePhase, compareRankKeys, isOneOff, rankCost, rankKey, siteRankKey } from './cost';

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
  /**
   * Where a line of the report is now, once the cell was edited (the gutter's markers
   * follow edits): the current 1-based line, or null when that line was deleted.
   * Without it, report lines are taken as they are.
   */
  currentLine?: (line: number) => number | null;
  /** The cell text differs from what ran (the report is out of date). */
  stale?: boolean;
  /** The group's name when it is not the cell's own report ("Cell 3: merged report, 2 ranks"). */
  title?: string;
  /** The file a site is in when it is not in the cell (a merged rank report's scripts): rows go nowhere. */
  fileOf?: (site: SyncSite) => string | null;
}

/** How a site changed since the previous run of its cell. */
export interface ISiteDelta {
  /** The previous run had no such site (same call chain and kind). */
  isNew: boolean;
  count: number;
  blockedMs: number | null;
  /** Change of the GPU time lost (issue 37), where both runs measured it; else null. */
  costMs: number | null;
}

/** One row of the sidebar: a sync site, or a static finding where nothing synced. */
export interface IRankedSite {
  cellId: string;
  cellNumber: number;
  /** The line in the report (the text that ran). */
  line: number;
  /** The file of that line when it is not the cell's (a merged rank report); absent for cells. */
  file?: string | null;
  /** Where that line is now in the cell (moved by edits); null when it was deleted. */
  currentLine: number | null;
  /** The 0-based column of the call on that line, when a finding says where it starts. */
  column: number | null;
  /** The cell was edited since the run: the row is out of date. */
  stale: boolean;
  /** What synced (the site's kind); `static` for a finding that did not run. */
  kind: string;
  /**
   * What the row is, in the user's words (code in backticks): the site's label, or for a
   * finding that did not run its rule's title.
   */
  label: string;
  rule: string | null;
  ruleTitle: string | null;
  count: number;
  blockedMs: number | null;
  /** GPU time the site's syncs lose, in all and per sync, and its share of the run's GPU time (issue 37); null unmeasured. */
  costMs: number | null;
  costEachMs: number | null;
  costShare: number | null;
  source: MarkerSource;
  weight: 0 | 1 | 2;
  message: string;
  /** Null when the cell has no previous run to compare with. */
  delta: ISiteDelta | null;
  /** Where inside an installed package the sync happened, under this line (issue 21). */
  library?: LibraryLine | null;
  /** When its syncs are paid: every step (`recurring`), or once (`once`, `compile`). */
  phase: SitePhase;
  /** Blocked time of the site's first sync, its first call (part of `blockedMs`); null untimed. */
  firstMs: number | null;
  /**
   * "first sync 98.0 ms, then 0.013 ms per sync ×19" for a recurring site with a first call
   * and more syncs after it (the card's words); null otherwise.
   */
  firstCall: string | null;
}

export interface ISiteFilter {
  kind?: string | null;
  rule?: string | null;
  /** Free text: rows whose label, kind, rule, rule title or message contain it (any case). */
  text?: string | null;
}

/** The sortable columns of the panel. */
export type SortKey = 'location' | 'what' | 'count' | 'blocked' | 'rule';

/** A column and a direction; the default is costliest first (blocked time, descending). */
export interface ISiteSort {
  key: SortKey;
  descending: boolean;
}

export const DEFAULT_SORT: ISiteSort = { key: 'blocked', descending: true };

/** The direction a column sorts in when first clicked (numbers: largest first). */
export function firstDirection(key: SortKey): boolean {
  return key === 'count' || key === 'blocked';
}

/** Syncs paid once (setup, compilation): how many, what they cost and their blocked time. */
export interface IOnceTotals {
  sites: number;
  syncs: number;
  blockedMs: number | null;
  /** GPU time they lose (issue 37), over the sites that measured it; null when none did. */
  costMs: number | null;
}

/** The sites of one cell, for the grouped view. */
export interface ICellGroup {
  cellId: string;
  cellNumber: number;
  /** The group's name when it is not the cell's own report (IRankInput.title). */
  title?: string;
  syncs: number;
  blockedMs: number | null;
  /**
   * What the cell is ranked by (cost.ts rankKey, as `syncfree run` ranks a row of several
   * sites): its recurring sites' blocked time after their first calls; or, when nothing in
   * it recurs, the whole blocked time of its one-off sites. Null untimed.
   */
  rankMs: number | null;
  /** GPU time the cell's listed syncs lose (issue 37): what it is ranked by first; null unmeasured. */
  costMs: number | null;
  /** Nothing in the cell recurs: its syncs are all paid once (or it has only static findings). */
  oneOff: boolean;
  /** Every listed site of the cell was predicted on CPU (no GPU: no cost). */
  predicted: boolean;
  /** The cell's listed syncs paid once; null when it has none. */
  once: IOnceTotals | null;
  sites: IRankedSite[];
  /** Change of the cell's totals since its previous run; null without one. */
  delta: { syncs: number; blockedMs: number | null; costMs: number | null; fixed: number } | null;
}

export interface ISyncTotals {
  syncs: number;
  blockedMs: number | null;
  /** GPU time lost over the listed sites that measured it (issue 37); null when none did. */
  costMs: number | null;
  sites: number;
  cells: number;
  /** Every listed site was predicted on CPU (none seen on a GPU). */
  predicted: boolean;
}

/** The kind shown for static findings (they did not run, so they have no sync kind). */
export const STATIC_KIND = 'static';

/**
 * What a site is across runs of its cell: what synced where in the code, the text of its
 * chain lines (`chain_text`) and its kind, so that a line added above it changes nothing
 * (issue 39); by line numbers for reports written before `chain_text`.
 */
function siteKey(site: SyncSite): string {
  const where = site.chain_text && site.chain_text.length === site.chain.length ? site.chain_text : site.chain;
  return `${JSON.stringify(where)}|${site.kind}`;
}

const warnedOutOfRange = new WeakSet<SyncReport>();

/** A cell's rows before they are drawn: its report's own objects, ranked within the cell. */
interface ICellEntry {
  input: IRankInput;
  /** The sites in range that pass the filter, most costly first (cost.ts rankKey). */
  sites: SyncSite[];
  /** The rank key of each of `sites`, in the same order. */
  keys: RankKey[];
  /** Static findings on lines where nothing synced, in range and passing the filter. */
  findings: Finding[];
  /** The previous run's sites by call chain and kind, made when a row needs it. */
  before: Map<string, SyncSite> | null;
}

/**
 * The sites of every cell with the most costly first, as `syncfree run` and the notebook
 * summary rank them (cost.ts rankKey, a port of sites.py rank_key): recurring sites by
 * their blocked time after the first call, then count; the one-off ones (the line runs
 * once, or torch.compile compiled) after every recurring one, by their whole blocked time,
 * then count; then notebook order. Without times (predict mode), by count. Sites without a
 * measured time rank after measured ones of their phase; static findings (nothing ran) come
 * last.
 *
 * Rows are made only for what is drawn: each cell's sites are ranked within the cell
 * (their report's own objects), the flat list merges the cells' rankings up to the
 * rows asked for, and totals are summed from the reports. The Syncs panel of a
 * notebook of 500 reports with 20 sites each draws 200 rows of 10,000 sites.
 */
export class SiteRanking {
  constructor(inputs: readonly IRankInput[], filter: ISiteFilter = {}) {
    const kind = filter.kind || null;
    const rule = filter.rule || null;
    const text = filter.text?.trim().toLowerCase() || null;
    // The parts are made only when there is text to look for (10,000 sites are ranked
    // on every redraw of a large notebook's panel).
    const matchesText = (report: SyncReport, parts: () => (string | null | undefined)[]) => {
      if (!text) {
        return true;
      }
      const words = parts();
      return words.some(part => part && part.toLowerCase().includes(text)) || ruleMatches(report, words[1], text);
    };
    for (const input of inputs) {
      const { report } = input;
      const cellLines =
        input.lineCount === undefined ? null : { lineCount: input.lineCount, currentLine: input.currentLine };
      const inRange = (line: number) => {
        // As the summary under the cell decides (model.ts sitesInCell): the two list the same sites.
        if (lineInCell(line, cellLines)) {
          return true;
        }
        if (!warnedOutOfRange.has(report)) {
          warnedOutOfRange.add(report);
          console.warn(`syncfree: a report in cell ${input.cellNumber} has line ${line} outside the cell; left out`);
        }
        return false;
      };
      const siteLines = new Set<number>();
      const sites: SyncSite[] = [];
      for (const site of report.sites) {
        if (!inRange(site.line)) {
          continue;
        }
        siteLines.add(site.line);
        if (
          (!kind || site.kind === kind) &&
          (!rule || site.rule === rule) &&
          matchesText(report, () => [plainText(siteLabel(site)), site.rule, site.kind, site.message])
        ) {
          sites.push(site);
        }
      }
      const findings: Finding[] = [];
      if (!kind || kind === STATIC_KIND) {
        for (const finding of findingsWithoutSites(report)) {
          if (
            inRange(finding.range.line) &&
            (!rule || finding.rule === rule) &&
            matchesText(report, () => ['not run', finding.rule, STATIC_KIND, finding.message])
          ) {
            findings.push(finding);
          }
        }
      }
      if (sites.length + findings.length > 0) {
        // Each site's key made once (10,000 sites are ranked on every redraw).
        const keyed = sites.map(site => ({ site, key: siteRankKey(site) }));
        keyed.sort((a, b) => compareRankKeys(a.key, b.key) || a.site.line - b.site.line);
        // Stable: findings on one line keep the report's order.
        findings.sort((a, b) => a.range.line - b.range.line);
        this._entries.push({
          input,
          sites: keyed.map(k => k.site),
          keys: keyed.map(k => k.key),
          findings,
          before: null
        });
        this._size += sites.length + findings.length;
      }
    }
  }

  /** How many rows there are in all (sites and static findings). */
  get size(): number {
    return this._size;
  }

  /** Totals of the listed sites: syncs, blocked time, sites and cells. */
  totals(): ISyncTotals {
    let syncs = 0;
    let blocked: number | null = null;
    let cost: number | null = null;
    let sites = 0;
    let predicted = true;
    for (const entry of this._entries) {
      for (const site of entry.sites) {
        syncs += site.count;
        if (site.blocked_ms !== null) {
          blocked = (blocked ?? 0) + site.blocked_ms;
        }
        if (site.cost_ms !== null && site.cost_ms !== undefined) {
          cost = (cost ?? 0) + site.cost_ms;
        }
        predicted = predicted && isPredicted(entry.input.report, site);
      }
      sites += entry.sites.length;
    }
    return {
      syncs,
      blockedMs: blocked,
      costMs: cost,
      sites,
      cells: this._entries.length,
      predicted: predicted && sites > 0
    };
  }

  /** The listed syncs paid once (setup, compilation), over every cell; null when none. */
  onceTotals(): IOnceTotals | null {
    return onceTotalsOf(this._entries.flatMap(entry => entry.sites));
  }

  /**
   * The first `limit` rows across cells, most costly first, or in the order of another
   * column (`sort`: every row is made and sorted, as asked by a click on a header).
   */
  flat(limit = Infinity, sort: ISiteSort = DEFAULT_SORT): IRankedSite[] {
    if (!isDefaultSort(sort)) {
      const all = this._entries.flatMap(entry => this._rowsOf(entry));
      return all.sort((a, b) => compareRows(a, b, sort)).slice(0, limit);
    }
    const rows: IRankedSite[] = [];
    // Merge the cells' rankings: a heap of cells by their next site.
    const next = new Map<ICellEntry, number>();
    const heap: ICellEntry[] = [];
    const before = (a: ICellEntry, b: ICellEntry) => compareHeads(a, next.get(a)!, b, next.get(b)!) < 0;
    const up = (i: number) => {
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!before(heap[i], heap[parent])) {
          break;
        }
        [heap[i], heap[parent]] = [heap[parent], heap[i]];
        i = parent;
      }
    };
    const down = (i: number) => {
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let best = i;
        if (left < heap.length && before(heap[left], heap[best])) {
          best = left;
        }
        if (right < heap.length && before(heap[right], heap[best])) {
          best = right;
        }
        if (best === i) {
          break;
        }
        [heap[i], heap[best]] = [heap[best], heap[i]];
        i = best;
      }
    };
    for (const entry of this._entries) {
      if (entry.sites.length > 0) {
        next.set(entry, 0);
        heap.push(entry);
        up(heap.length - 1);
      }
    }
    while (heap.length > 0 && rows.length < limit) {
      const entry = heap[0];
      const index = next.get(entry)!;
      rows.push(this._siteRow(entry, entry.sites[index]));
      if (index + 1 < entry.sites.length) {
        next.set(entry, index + 1);
      } else {
        heap[0] = heap[heap.length - 1];
        heap.pop();
      }
      down(0);
    }
    // Static findings last, in notebook order.
    const byCell = [...this._entries].sort((a, b) => a.input.cellNumber - b.input.cellNumber);
    for (const entry of byCell) {
      for (const finding of entry.findings) {
        if (rows.length >= limit) {
          return rows;
        }
        rows.push(this._findingRow(entry, finding));
      }
    }
    return rows;
  }

  /**
   * The cells, costliest first (cost.ts rankKey over each cell's sites, as `syncfree run`
   * ranks a row of several: the recurring ones' blocked time after their first calls, then
   * syncs; cells where nothing recurs after the others), each with its rows, most costly
   * first: `limit` rows in all, the last group cut short.
   */
  groups(limit = Infinity, sort: ISiteSort = DEFAULT_SORT): ICellGroup[] {
    if (!isDefaultSort(sort)) {
      return this._sortedGroups(limit, sort);
    }
    const totals = new Map(this._entries.map(entry => [entry, groupTotals(entry)]));
    const ordered = [...this._entries].sort(
      (a, b) => compareGroups(totals.get(a)!, totals.get(b)!, DEFAULT_SORT) || a.input.cellNumber - b.input.cellNumber
    );
    const groups: ICellGroup[] = [];
    let budget = limit;
    for (const entry of ordered) {
      if (budget <= 0) {
        break;
      }
      const sites: IRankedSite[] = [];
      for (const site of entry.sites) {
        if (sites.length >= budget) {
          break;
        }
        sites.push(this._siteRow(entry, site));
      }
      for (const finding of entry.findings) {
        if (sites.length >= budget) {
          break;
        }
        sites.push(this._findingRow(entry, finding));
      }
      budget -= entry.sites.length + entry.findings.length;
      groups.push({ ...totals.get(entry)!, sites });
    }
    return groups;
  }

  /**
   * The cells' rows sorted by a column; cells by the totals their headers show (count,
   * blocked) or in notebook order.
   */
  private _sortedGroups(limit: number, sort: ISiteSort): ICellGroup[] {
    const sorted = this._entries.map(entry => ({
      entry,
      totals: groupTotals(entry),
      rows: this._rowsOf(entry).sort((a, b) => compareRows(a, b, sort))
    }));
    if (sort.key === 'count' || sort.key === 'blocked') {
      sorted.sort(
        (a, b) => compareGroups(a.totals, b.totals, sort) || a.entry.input.cellNumber - b.entry.input.cellNumber
      );
    } else {
      sorted.sort((a, b) => a.entry.input.cellNumber - b.entry.input.cellNumber);
    }
    const groups: ICellGroup[] = [];
    let budget = limit;
    for (const { totals, rows } of sorted) {
      if (budget <= 0) {
        break;
      }
      groups.push({ ...totals, sites: rows.slice(0, budget) });
      budget -= rows.length;
    }
    return groups;
  }

  /** Every row of a cell (its sites, then its findings). */
  private _rowsOf(entry: ICellEntry): IRankedSite[] {
    return [
      ...entry.sites.map(site => this._siteRow(entry, site)),
      ...entry.findings.map(f => this._findingRow(entry, f))
    ];
  }

  private _siteRow(entry: ICellEntry, site: SyncSite): IRankedSite {
    const { input } = entry;
    const { report, previous } = input;
    let delta: ISiteDelta | null = null;
    if (previous) {
      if (!entry.before) {
        entry.before = new Map(previous.sites.map(old => [siteKey(old), old]));
      }
      const old = entry.before.get(siteKey(site));
      const cost = site.cost_ms ?? null;
      const oldCost = old ? (old.cost_ms ?? null) : 0;
      delta = {
        isNew: !old,
        count: site.count - (old?.count ?? 0),
        blockedMs:
          site.blocked_ms !== null && (!old || old.blocked_ms !== null)
            ? site.blocked_ms - (old?.blocked_ms ?? 0)
            : null,
        costMs: cost !== null && oldCost !== null ? cost - oldCost : null
      };
    }
    const file = input.fileOf?.(site);
    return {
      cellId: input.cellId,
      cellNumber: input.cellNumber,
      line: site.line,
      ...(file !== undefined ? { file } : {}),
      currentLine: input.currentLine ? input.currentLine(site.line) : site.line,
      column: siteColumn(report, site),
      stale: input.stale ?? false,
      kind: site.kind,
      label: siteLabel(site),
      rule: site.rule,
      ruleTitle: ruleTitle(report, site.rule),
      count: site.count,
      blockedMs: site.blocked_ms,
      costMs: site.cost_ms ?? null,
      costEachMs: site.cost_each_ms ?? null,
      costShare: site.cost_share ?? null,
      source: siteSource(report, site),
      weight: weightOf(site.count, site.blocked_ms, site.cost_ms ?? null, site.cost_share ?? null),
      message: site.message,
      delta,
      library: site.library ?? null,
      phase: site.phase ?? 'recurring',
      firstMs: site.first_ms ?? null,
      firstCall: firstCallText(site)
    };
  }

  private _findingRow(entry: ICellEntry, finding: Finding): IRankedSite {
    const { input } = entry;
    return {
      cellId: input.cellId,
      cellNumber: input.cellNumber,
      line: finding.range.line,
      currentLine: input.currentLine ? input.currentLine(finding.range.line) : finding.range.line,
      column: finding.range.col,
      stale: input.stale ?? false,
      kind: STATIC_KIND,
      label: ruleTitle(input.report, finding.rule) ?? finding.rule,
      rule: finding.rule,
      ruleTitle: ruleTitle(input.report, finding.rule),
      count: 0,
      blockedMs: null,
      costMs: null,
      costEachMs: null,
      costShare: null,
      source: 'static',
      weight: 0,
      message: finding.message,
      delta: null,
      phase: 'recurring',
      firstMs: null,
      firstCall: null
    };
  }

  private _entries: ICellEntry[] = [];
  private _size = 0;
}

/** The sites at `i` and `j` of two cells: costliest first (cost.ts rankKey), then cell, then line. */
function compareHeads(a: ICellEntry, i: number, b: ICellEntry, j: number): number {
  return (
    compareRankKeys(a.keys[i], b.keys[j]) ||
    a.input.cellNumber - b.input.cellNumber ||
    a.sites[i].line - b.sites[j].line
  );
}

/**
 * Where a row goes when sorted by count or blocked time, in either direction: recurring
 * syncs, then those paid once (under their own heading), then static findings (did not run).
 */
export function rowBand(row: Pick<IRankedSite, 'source' | 'phase'>): 0 | 1 | 2 {
  return row.source === 'static' ? 2 : isOneOff(row.phase) ? 1 : 0;
}

/** A row's rank key (cost.ts rankKey), as its site's. */
function rowRankKey(row: IRankedSite): RankKey {
  return rankKey(isOneOff(row.phase), row.blockedMs, row.firstMs, row.count, row.costMs);
}

/** The rule's title contains the text (the rule code is the second searched part). */
function ruleMatches(report: SyncReport, code: string | null | undefined, text: string): boolean {
  const title = ruleTitle(report, code);
  return title !== null && plainText(title).toLowerCase().includes(text);
}

/** Two rows by a column other than the default ranking, ties by cell then line. */
export function compareRows(a: IRankedSite, b: IRankedSite, sort: ISiteSort): number {
  const where = a.cellNumber - b.cellNumber || (a.currentLine ?? a.line) - (b.currentLine ?? b.line);
  if (sort.key === 'count' || sort.key === 'blocked') {
    // Recurring syncs first whichever way: one paid once is not weighed against one paid every step.
    const band = rowBand(a) - rowBand(b);
    if (band !== 0) {
      return band;
    }
  }
  let by = 0;
  switch (sort.key) {
    case 'location':
      by = where;
      break;
    case 'what':
      by = plainText(a.label).localeCompare(plainText(b.label));
      break;
    case 'count':
      by = a.count - b.count || compareRankKeys(rowRankKey(b), rowRankKey(a));
      break;
    case 'blocked':
      // Descending, the ranking (cost.ts rankKey): a recurring row by its time after the first call.
      by = compareRankKeys(rowRankKey(b), rowRankKey(a));
      break;
    case 'rule':
      by = (a.rule ?? '~').localeCompare(b.rule ?? '~');
      break;
  }
  return (sort.descending ? -by : by) || where;
}

/**
 * Two cells: those where something recurs first, whichever way; then by the cost they
 * are ranked by (`rankMs`: descending, the rank key of a row of several sites) then
 * syncs, or syncs then that cost (count); cells with no measured time after those with
 * one. 0 for ties.
 */
function compareGroups(
  a: Pick<ICellGroup, 'syncs' | 'rankMs' | 'oneOff' | 'costMs'>,
  b: Pick<ICellGroup, 'syncs' | 'rankMs' | 'oneOff' | 'costMs'>,
  sort: ISiteSort
): number {
  const band = Number(a.oneOff) - Number(b.oneOff);
  if (band !== 0) {
    return band;
  }
  // What the GPU measured a cell's syncs cost leads (issue 37); its blocked time second.
  const cost = (a.costMs ?? -1) - (b.costMs ?? -1) || (a.rankMs ?? -1) - (b.rankMs ?? -1);
  const syncs = a.syncs - b.syncs;
  const by = sort.key === 'count' ? syncs || cost : cost || syncs;
  return sort.descending ? -by : by;
}

/** The syncs paid once among `sites`; null when none is. */
function onceTotalsOf(sites: readonly SyncSite[]): IOnceTotals | null {
  let count = 0;
  let syncs = 0;
  let blocked: number | null = null;
  let cost: number | null = null;
  for (const site of sites) {
    if (isOneOff(site.phase)) {
      count += 1;
      syncs += site.count;
      if (site.blocked_ms !== null) {
        blocked = (blocked ?? 0) + site.blocked_ms;
      }
      if (site.cost_ms !== null && site.cost_ms !== undefined) {
        cost = (cost ?? 0) + site.cost_ms;
      }
    }
  }
  return count > 0 ? { sites: count, syncs, blockedMs: blocked, costMs: cost } : null;
}

/** A cell's totals over its listed sites, and their change since its previous run. */
function groupTotals(entry: ICellEntry): Omit<ICellGroup, 'sites'> {
  const { input } = entry;
  let syncs = 0;
  let blocked: number | null = null;
  // As `syncfree run` makes a row of several sites (cli/run_script.py _rows): paid once only
  // when every site is; what was paid once in it (recurring sites' first calls, one-off sites
  // whole) is left out of what it is ranked by.
  let first: number | null = null;
  let oneOff = true;
  let cost: number | null = null;
  let predicted = entry.sites.length > 0;
  for (const site of entry.sites) {
    syncs += site.count;
    predicted = predicted && isPredicted(input.report, site);
    if (site.cost_ms !== null && site.cost_ms !== undefined) {
      cost = (cost ?? 0) + site.cost_ms;
    }
    if (site.blocked_ms !== null) {
      blocked = (blocked ?? 0) + site.blocked_ms;
    }
    const once = isOneOff(site.phase);
    oneOff = oneOff && once;
    const paidOnce = once ? site.blocked_ms : (site.first_ms ?? null);
    if (paidOnce !== null) {
      first = (first ?? 0) + paidOnce;
    }
  }
  const rankMs = rankCost(oneOff, blocked, first);
  let delta: ICellGroup['delta'] = null;
  if (input.previous) {
    const now = input.report.totals;
    const then = input.previous.totals;
    const current = new Set(input.report.sites.map(siteKey));
    delta = {
      syncs: now.syncs - then.syncs,
      blockedMs: now.blocked_ms !== null && then.blocked_ms !== null ? now.blocked_ms - then.blocked_ms : null,
      costMs:
        now.cost_ms !== null && now.cost_ms !== undefined && then.cost_ms !== null && then.cost_ms !== undefined
          ? now.cost_ms - then.cost_ms
          : null,
      fixed: input.previous.sites.filter(s => !current.has(siteKey(s))).length
    };
  }
  return {
    cellId: input.cellId,
    cellNumber: input.cellNumber,
    ...(input.title !== undefined ? { title: input.title } : {}),
    syncs,
    blockedMs: blocked,
    rankMs,
    costMs: cost,
    oneOff,
    predicted,
    once: onceTotalsOf(entry.sites),
    delta
  };
}

function isDefaultSort(sort: ISiteSort): boolean {
  return sort.key === DEFAULT_SORT.key && sort.descending === DEFAULT_SORT.descending;
}

/** What the sidebar's filters offer: kinds and rules present, each with its words. */
export interface IFilterChoices {
  kinds: string[];
  rules: string[];
  /** Kind -> label (plain text, no backticks): the kind filter shows these. */
  kindLabels: Record<string, string>;
  /** Rule code -> "SF101 .item() on a CUDA tensor". */
  ruleLabels: Record<string, string>;
}

/** The kinds and rules present, for the sidebar's filters. */
export function filterChoices(inputs: readonly IRankInput[]): IFilterChoices {
  const kinds = new Map<string, string>();
  const rules = new Map<string, string>();
  const addRule = (report: SyncReport, code: string) => {
    if (!rules.has(code)) {
      const title = ruleTitle(report, code);
      rules.set(code, title ? `${code} ${plainText(title)}` : code);
    }
  };
  for (const { report } of inputs) {
    const siteLines = siteLinesOf(report);
    for (const site of report.sites) {
      if (!kinds.has(site.kind)) {
        kinds.set(site.kind, plainText(siteLabel(site)));
      }
      if (site.rule) {
        addRule(report, site.rule);
      }
    }
    for (const finding of report.findings) {
      addRule(report, finding.rule);
      if (!siteLines.has(findingLine(report, finding, siteLines))) {
        kinds.set(STATIC_KIND, 'did not run (found in the code)');
      }
    }
  }
  const kindList = [...kinds.keys()].sort((a, b) => kinds.get(a)!.localeCompare(kinds.get(b)!));
  return {
    kinds: kindList,
    rules: [...rules.keys()].sort(),
    kindLabels: Object.fromEntries(kinds),
    ruleLabels: Object.fromEntries(rules)
  };
}
