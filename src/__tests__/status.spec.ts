import { Widget } from '@lumino/widgets';
import { notebookTotals, notebookTotalsText } from '../model';
import { SyncsStatus, badgeCount, badgeText } from '../sidebar/status';
import { loopReport, report, site } from './fixtures';

describe('notebook totals', () => {
  it('sums syncs and blocked time and says when everything was predicted', () => {
    const measured = notebookTotals([{ report: loopReport() }, { report: report() }]);
    expect(measured).toEqual({
      syncs: 102,
      blockedMs: expect.closeTo(43, 5),
      costMs: null,
      predicted: false,
      cells: 2,
      notRun: 0
    });
    expect(notebookTotalsText(measured)).toBe('102 syncs · 43.0 ms blocked');
    const predicted = notebookTotals([
      {
        report: report({
          mode: 'predict',
          totals: { syncs: 60, sites: 1, blocked_ms: null, wall_ms: 1 },
          sites: [site({ count: 60, blocked_ms: null })]
        })
      }
    ]);
    expect(notebookTotalsText(predicted)).toBe('60 predicted syncs');
    const staticOnly = notebookTotals([
      { report: report({ mode: 'static', sites: [], totals: { syncs: 0, sites: 0, blocked_ms: null, wall_ms: 0 } }) }
    ]);
    expect(notebookTotalsText(staticOnly)).toBe('1 likely sync (did not run)');
    expect(badgeCount(staticOnly)).toBe(1);
  });

  it('badges the tab with the count, shortened past 999', () => {
    expect(badgeCount(null)).toBeNull();
    expect(badgeText(7)).toBe('7');
    expect(badgeText(1234)).toBe('1.2k');
    expect(badgeText(64000)).toBe('64k');
  });

  it('shows the totals in the status bar and opens the panel on a click', () => {
    const open = jest.fn();
    const item = new SyncsStatus(open);
    Widget.attach(item, document.body);
    const changes = jest.fn();
    item.activeChanged.connect(changes);
    expect(item.active).toBe(false);
    item.totals = notebookTotals([{ report: loopReport() }]);
    expect(item.active).toBe(true);
    expect(changes).toHaveBeenCalledTimes(1);
    expect(item.node.textContent).toBe('Syncs: 101 syncs · 42.5 ms blocked');
    item.node.click();
    expect(open).toHaveBeenCalled();
    // Predicted on CPU: counts, and the title says why there is no cost.
    item.totals = notebookTotals([
      { report: report({ mode: 'predict', totals: { syncs: 2, sites: 1, blocked_ms: null, wall_ms: 1 } }) }
    ]);
    expect(item.node.textContent).toBe('Syncs: 2 predicted syncs');
    expect(item.node.title).toBe(
      'Syncs: 2 predicted syncs in 1 cell (no GPU: no cost). Click to open the Syncs panel.'
    );
    item.totals = null;
    expect(item.active).toBe(false);
    expect(changes).toHaveBeenCalledTimes(2);
    Widget.detach(item);
  });
});
