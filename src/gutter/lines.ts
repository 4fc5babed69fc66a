import type { Finding, SyncReport, SyncSite } from '../tokens';
import { MarkerSource, findingLine, siteLinesOf, siteSource, weightOf } from '../model';

export type { MarkerSource } from '../model';

/** Everything reported on one cell line. */
export interface ILineMarker {
  /** 1-based cell line. */
  line: number;
  source: MarkerSource;
  /** 0 light, 1 medium, 2 heavy: the marker's look. */
  weight: 0 | 1 | 2;
  count: number;
  blockedMs: number | null;
  /** GPU time the line's syncs lose (issue 37), and its share of the run's GPU time; null unmeasured. */
  costMs: number | null;
  costShare: number | null;
  sites: SyncSite[];
  findings: Finding[];
}

export interface IMarkerOptions {
  /** Hide sites whose measured blocked time is under this (ms); 0 shows all. */
  thresholdMs: number;
  /** Mark lines that only have static findings. */
  showStatic: boolean;
}

export const DEFAULT_MARKER_OPTIONS: IMarkerOptions = { thresholdMs: 0, showStatic: true };

/**
 * The lines to mark for a report, in line order. Lines outside `1..lineCount` are
 * dropped with a console warning (a report from a hand-edited notebook may carry them).
 */
export function markerLines(
  report: SyncReport,
  lineCount: number,
  options: IMarkerOptions = DEFAULT_MARKER_OPTIONS
): ILineMarker[] {
  const byLine = new Map<number, ILineMarker>();
  const inRange = (line: number) => {
    if (line >= 1 && line <= lineCount) {
      return true;
    }
    console.warn(`syncfree: report line ${line} is outside the cell (1..${lineCount}); not marked`);
    return false;
  };
  for (const site of report.sites) {
    const blocked = site.blocked_ms ?? null;
    if (blocked !== null && options.thresholdMs > 0 && blocked < options.thresholdMs) {
      continue;
    }
    if (!inRange(site.line)) {
      continue;
    }
    const source: MarkerSource = siteSource(report, site);
    let marker = byLine.get(site.line);
    if (!marker) {
      marker = {
        line: site.line,
        source,
        weight: 0,
        count: 0,
        blockedMs: null,
        costMs: null,
        costShare: null,
        sites: [],
        findings: []
      };
      byLine.set(site.line, marker);
    } else if (marker.source !== 'measured' && source === 'measured') {
      marker.source = 'measured';
    }
    marker.sites.push(site);
    marker.count += site.count;
    if (blocked !== null) {
      marker.blockedMs = (marker.blockedMs ?? 0) + blocked;
    }
    if (site.cost_ms !== null && site.cost_ms !== undefined) {
      marker.costMs = (marker.costMs ?? 0) + site.cost_ms;
    }
    if (site.cost_share !== null && site.cost_share !== undefined) {
      marker.costShare = (marker.costShare ?? 0) + site.cost_share;
    }
  }
  const siteLines = report.findings.length > 0 ? siteLinesOf(report) : undefined;
  for (const finding of report.findings) {
    const line = findingLine(report, finding, siteLines);
    const marker = byLine.get(line);
    if (marker) {
      marker.findings.push(finding);
    } else if (options.showStatic && inRange(line)) {
      byLine.set(line, {
        line,
        source: 'static',
        weight: 0,
        count: 0,
        blockedMs: null,
        costMs: null,
        costShare: null,
        sites: [],
        findings: [finding]
      });
    }
  }
  const markers = [...byLine.values()].sort((a, b) => a.line - b.line);
  for (const marker of markers) {
    marker.weight =
      marker.source === 'static' ? 0 : weightOf(marker.count, marker.blockedMs, marker.costMs, marker.costShare);
  }
  return markers;
}
