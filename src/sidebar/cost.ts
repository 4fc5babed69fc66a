/**
 * What a sync site costs and how the Syncs panel ranks it: a port of
 * `syncfree.capture.sites.rank_key` (python_helper/syncfree/capture/sites.py), the key that
 * `syncfree.watch`, `syncfree run` and the notebook summary rank by, so the panel lists the
 * same order as the reports. Recurring sites come first, by what they cost (`cost_ms`: the
 * GPU time their syncs lose, measured on a GPU; issue 37), then by their blocked time after
 * the first call (the total less `first_ms`: the first call pays the warm-up), then by count;
 * one-off sites (phase `once` or `compile`) after them, the same way with their whole blocked
 * time. Sites without a cost after those with one. Without times (predict mode): by count.
 */

/** A site's phase (report.schema.json SyncSite.phase); absent means recurring. */
export type SitePhase = 'once' | 'compile' | 'recurring';

/** Paid once, not every step: the line runs once, or torch.compile compiled. */
export function isOneOff(phase: SitePhase | null | undefined): boolean {
  return (phase ?? 'recurring') !== 'recurring';
}

/** Python's round(x, 3), enough for the blocked times a report carries (3 decimals). */
function round3(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/**
 * A site's blocked time after its first call (never below 0: both are rounded); null when
 * nothing was timed. sites.py `steady_ms`.
 */
export function steadyMs(blockedMs: number | null, firstMs: number | null | undefined): number | null {
  if (blockedMs === null) {
    return null;
  }
  return round3(Math.max(blockedMs - (firstMs ?? 0), 0));
}

/**
 * What a site is ranked by within its phase: a one-off site's whole blocked time, a recurring
 * one's time after the first call; null without times.
 */
export function rankCost(oneOff: boolean, blockedMs: number | null, firstMs: number | null | undefined): number | null {
  return oneOff ? blockedMs : steadyMs(blockedMs, firstMs);
}

/**
 * `[one_off, cost_ms is None, -cost_ms, -blocked cost, -count]`, compared in order, smaller
 * first (a Python tuple).
 */
export type RankKey = readonly [
  oneOff: boolean,
  noCost: boolean,
  negCostMs: number,
  negBlocked: number,
  negCount: number
];

/**
 * sites.py `rank_key(one_off, blocked_ms, first_ms, count)`. One difference, where the
 * Python never looks: a run is timed throughout or not at all, so `rank_key` takes an
 * untimed site's cost as 0; the panel lists cells of different runs side by side (a GPU
 * kernel's saved reports and a CPU kernel's predictions), and puts an untimed site after
 * every timed one of its phase (model.ts compareCost, which the card and the notebook summary use, goes through this key too). Among
 * sites that are all timed, or all untimed, the order is the Python's.
 */
export function rankKey(
  oneOff: boolean,
  blockedMs: number | null,
  firstMs: number | null | undefined,
  count: number,
  costMs: number | null = null
): RankKey {
  return [oneOff, costMs === null, -(costMs ?? 0), -(rankCost(oneOff, blockedMs, firstMs) ?? -1), -count];
}

/** Two keys as Python compares tuples: negative when `a` ranks first, 0 for a tie. */
export function compareRankKeys(a: RankKey, b: RankKey): number {
  return Number(a[0]) - Number(b[0]) || Number(a[1]) - Number(b[1]) || a[2] - b[2] || a[3] - b[3] || a[4] - b[4];
}

/** The fields of a report site (or a row made of one) that its rank depends on. */
export interface IRankedCost {
  phase?: SitePhase | null;
  blocked_ms: number | null;
  first_ms?: number | null;
  count: number;
  /** GPU time lost to the site's syncs (report.schema.json SyncSite.cost_ms); null or absent: not measured. */
  cost_ms?: number | null;
}

/** The rank key of a report site. */
export function siteRankKey(site: IRankedCost): RankKey {
  return rankKey(isOneOff(site.phase), site.blocked_ms, site.first_ms, site.count, site.cost_ms ?? null);
}
