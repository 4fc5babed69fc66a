import {
  allPredicted,
  compareCost,
  costliestFirst,
  findingsWithoutSites,
  formatCount,
  formatMs,
  isPredicted,
  messageAddsToLabel,
  plainText,
  ruleOf,
  ruleTitle,
  siteLabel,
  siteSource,
  syncCountText,
  weightOf
} from '../model';
import { markerLines } from '../gutter/lines';
import { SiteRanking } from '../sidebar/ranking';
import { loopReport, report, site } from './fixtures';

describe('the report model', () => {
  it('calls a site predicted when it says so or the report ran in predict mode', () => {
    const measured = report();
    expect(isPredicted(measured, site())).toBe(false);
    expect(isPredicted(measured, site({ predicted: true }))).toBe(true);
    expect(isPredicted(report({ mode: 'predict' }), site())).toBe(true);
    expect(siteSource(report({ mode: 'predict' }), site())).toBe('predicted');
    expect(allPredicted(report({ mode: 'predict' }))).toBe(true);
    expect(allPredicted(report({ sites: [site({ predicted: true }), site({ line: 4, predicted: true })] }))).toBe(true);
    expect(allPredicted(report({ sites: [site({ predicted: true }), site({ line: 4 })] }))).toBe(false);
  });

  it('finds rules only when the report carries them', () => {
    const r = report();
    expect(ruleOf(r, 'SF101')!.code).toBe('SF101');
    expect(ruleTitle(r, 'SF101')).toBe('.item() on a CUDA tensor');
    expect(ruleOf(r, 'toString')).toBeNull();
    expect(ruleTitle(r, null)).toBeNull();
  });

  it('labels sites in user words, never with the internal kind id', () => {
    expect(siteLabel(site({ kind: 'mask_index', label: 'boolean-mask indexing' }))).toBe('boolean-mask indexing');
    // A report written before labels: the message starts with the label.
    const old = site({ kind: 'python_bool', message: 'truth value of a tensor synced 3x', label: undefined });
    expect(siteLabel(old)).toBe('truth value of a tensor');
    const predicted = site({
      kind: 'tensor_from_python',
      message: 'tensor built from Python data would sync 2x (predicted on CPU)',
      label: undefined
    });
    expect(siteLabel(predicted)).toBe('tensor built from Python data');
    expect(siteLabel(site({ kind: 'mask_index', message: '', label: undefined }))).toBe('mask index');
    expect(plainText('`.item()` and `x[m]`')).toBe('.item() and x[m]');
  });

  it('knows when a message only repeats the label and numbers', () => {
    expect(messageAddsToLabel(site({ message: '`.item()` synced 50x, blocked 1.9 ms' }))).toBe(false);
    expect(messageAddsToLabel(site({ message: 'truth value of a tensor would sync 2x (predicted on CPU)' }))).toBe(
      false
    );
    expect(messageAddsToLabel(site({ message: 'x[mask] synced: its size depends on the mask' }))).toBe(true);
    expect(messageAddsToLabel(site({ message: '' }))).toBe(false);
  });

  it('keeps findings only on lines where nothing synced', () => {
    const r = loopReport();
    expect(findingsWithoutSites(r)).toEqual([]);
    const moved = loopReport({ sites: [site({ line: 5, chain: [5] })] });
    expect(findingsWithoutSites(moved).map(f => f.range.line)).toEqual([4]);
  });

  it('orders costliest first, unmeasured sites after every measured one', () => {
    const sites = [
      site({ line: 1, count: 500, blocked_ms: null }),
      site({ line: 2, count: 1, blocked_ms: 0 }),
      site({ line: 3, count: 2, blocked_ms: 5 }),
      site({ line: 4, count: 9, blocked_ms: 5 }),
      site({ line: 5, count: 3, blocked_ms: null })
    ];
    expect(costliestFirst(sites).map(s => s.line)).toEqual([4, 3, 2, 1, 5]);
    expect(compareCost(sites[0], sites[4])).toBeLessThan(0);
  });

  it('ranks as the reports do: a first call or a one-off site does not outrank a per-step sync', () => {
    const sites = [
      site({ line: 1, count: 20, blocked_ms: 100.2, first_ms: 100 }),
      site({ line: 2, count: 20, blocked_ms: 20 }),
      site({ line: 3, count: 1, blocked_ms: 150, phase: 'once' })
    ];
    expect(costliestFirst(sites).map(s => s.line)).toEqual([2, 1, 3]);
  });

  it('orders the summary, the panel and the card the same way', () => {
    const r = report({
      sites: [
        site({ line: 1, count: 500, blocked_ms: null }),
        site({ line: 2, count: 1, blocked_ms: 0 }),
        site({ line: 3, count: 2, blocked_ms: 5 })
      ],
      findings: []
    });
    const panel = new SiteRanking([{ cellId: 'a', cellNumber: 1, report: r, previous: null }]).flat().map(s => s.line);
    expect(panel).toEqual(costliestFirst(r.sites).map(s => s.line));
  });

  it('formats numbers one way everywhere', () => {
    expect([0.4213, 1.891, 41.23, 312.4, 1890].map(formatMs)).toEqual([
      '0.42 ms',
      '1.89 ms',
      '41.2 ms',
      '312 ms',
      '1.9 s'
    ]);
    expect(formatMs(null)).toBe('—');
    expect(formatCount(50)).toBe('×50');
    expect(syncCountText(1)).toBe('1 sync');
    expect(syncCountText(60, true)).toBe('60 predicted syncs');
  });

  it('weighs by blocked time where measured, else by count', () => {
    expect([weightOf(1, 0.1), weightOf(1, 2), weightOf(1, 50), weightOf(500, null), weightOf(3, null)]).toEqual([
      0, 1, 2, 2, 0
    ]);
    const markers = markerLines(loopReport(), 5);
    expect(markers.map(m => m.weight)).toEqual([2, 1]);
  });
});
