/**
 * Issue 37, the notebook side: where the GPU measured what a sync costs (the GPU time it
 * loses), the card leads with it, markers weigh by it, the Syncs panel ranks and compares
 * by it; without it (predict mode) the panel ranks by count and says so in one line.
 */
import { Widget } from '@lumino/widgets';
import { renderSyncCard } from '../gutter/card';
import { headline } from '../mime';
import { markerLines } from '../gutter/lines';
import { costText, notebookTotals, notebookTotalsText, weightOf } from '../model';
import { SyncsPanel } from '../sidebar/panel';
import { IRankInput } from '../sidebar/ranking';
import type { SyncReport } from '../tokens';
import { loopReport, report, site } from './fixtures';

/** Line 4 blocked long but costs little; line 5 blocked little but costs more. */
function costed(): SyncReport {
  const base = loopReport();
  return {
    ...base,
    totals: { ...base.totals, cost_ms: 173.5, gpu_busy_ms: 6200, gpu_idle_ms: 200 },
    sites: [
      { ...base.sites[0], cost_ms: 0.5, cost_each_ms: 0.005, cost_share: 0.0001 },
      { ...base.sites[1], count: 100, cost_ms: 173, cost_each_ms: 1.73, cost_share: 0.027 }
    ]
  };
}

function panel(inputs: IRankInput[]): SyncsPanel {
  const widget = new SyncsPanel({ jump: jest.fn() });
  widget.source = { title: 'demo.ipynb', inputs: () => inputs };
  Widget.attach(widget, document.body);
  widget.render();
  return widget;
}

const input = (r: SyncReport): IRankInput => ({ cellId: 'a', cellNumber: 1, report: r, previous: null });

describe('cost (issue 37)', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('the card leads with the cost, blocked time second', () => {
    const r = costed();
    const marker = markerLines(r, 5).find(m => m.line === 5)!;
    const card = renderSyncCard(
      { marker, report: r, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    const cost = card.querySelector('.jp-syncfree-card-cost')!;
    expect(cost.textContent).toBe(
      "costs ≈ 1.73 ms of GPU time each time it runs (173 ms in all), 2.7 % of the cell's GPU time"
    );
    const blocked = card.querySelector('.jp-syncfree-card-blocked')!;
    expect(cost.compareDocumentPosition(blocked) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
    expect(blocked.textContent).toMatch(/^blocked 1.30 ms/);
  });

  it('markers weigh by cost where measured', () => {
    const [line4, line5] = markerLines(costed(), 5);
    expect([line4.weight, line5.weight]).toEqual([0, 1]);
    expect(weightOf(1, 50, 0.2, null)).toBe(0);
    expect(costText(site())).toBeNull();
  });

  it('the panel ranks and totals by cost, and shows the cost column', () => {
    const widget = panel([input(costed())]);
    expect(widget.rows.map(row => row.dataset.line)).toEqual(['5', '4']);
    expect(widget.node.querySelector('[data-total="cost"]')!.textContent).toBe('174 ms GPU time lost');
    expect(widget.node.querySelector('[data-sort="blocked"]')!.textContent).toMatch(/^Cost/);
    expect(widget.rows[0].querySelector('[data-cost]')!.textContent).toBe('173 ms');
    expect(widget.node.querySelector('.jp-syncfree-sidebar-no-cost')).toBeNull();
  });

  it('the summary under the cell and the cell header lead with the cost', () => {
    expect(headline(costed())).toBe(
      'syncfree: 101 syncs at 2 sites, 174 ms GPU time lost (blocked 42.5 ms) · NVIDIA H100'
    );
    const widget = panel([input(costed())]);
    expect(widget.node.querySelector('.jp-syncfree-sidebar-cell-totals')!.textContent).toBe(
      '200 syncs · 174 ms GPU time lost'
    );
  });

  it('without a GPU, ranks by count and says there is no cost, with no number', () => {
    const predicted = report({
      mode: 'predict',
      sites: [site({ blocked_ms: null, predicted: true })],
      findings: []
    });
    const widget = panel([input(predicted)]);
    const note = widget.node.querySelector('.jp-syncfree-sidebar-no-cost')!;
    expect(note.textContent).toBe('No cost without a GPU: ranked by count.');
    expect(widget.node.querySelector('[data-cost]')).toBeNull();
    expect(widget.node.querySelector('[data-sort="blocked"]')).toBeNull();
  });
  it('says which cells count less than ran: a child process left no report', () => {
    const lost = report({ mode: 'predict', sites: [site({ blocked_ms: null, predicted: true })], findings: [] });
    lost.lost_children = ['child process Doomed (pid 42) ended without a report (killed): its syncs are not counted'];
    const widget = panel([input(report()), { ...input(lost), cellId: 'b', cellNumber: 3 }]);
    const line = widget.node.querySelector('.jp-syncfree-sidebar-lost')!;
    expect(line.textContent).toBe(
      'Not every sync is counted: a child process of cell 3 ended without a report (killed).'
    );
    expect(line.getAttribute('title')).toBe(
      'Cell 3: child process Doomed (pid 42) ended without a report (killed): its syncs are not counted'
    );
    expect(panel([input(report())]).node.querySelector('.jp-syncfree-sidebar-lost')).toBeNull();
  });

  it('the heading of the syncs paid once leads with their cost; without a GPU it has counts only', () => {
    const r = costed();
    r.sites = [
      ...r.sites,
      {
        ...site({ line: 2, chain: [2], kind: 'to_device', count: 16, blocked_ms: 150, phase: 'once' }),
        cost_ms: 3.2,
        cost_each_ms: 0.2,
        cost_share: 0.0005
      }
    ];
    const widget = panel([input(r)]);
    const heading = widget.node.querySelector('.jp-syncfree-sidebar-once')!;
    expect(heading.querySelector('.jp-syncfree-sidebar-once-totals')!.textContent).toBe(
      '16 syncs · 3.20 ms GPU time lost'
    );
    expect(heading.getAttribute('title')).toContain('by what they cost');
    // Ranked by cost: the header says nothing of a ranking by blocked time.
    const totals = widget.node.querySelector('.jp-syncfree-sidebar-cell-totals')!;
    expect(totals.getAttribute('title')).toBe('16 syncs paid once (setup, compilation), 3.20 ms GPU time lost');
    document.body.textContent = '';

    const predicted = report({
      mode: 'predict',
      sites: [
        site({ line: 2, chain: [2], kind: 'to_device', count: 16, blocked_ms: null, phase: 'once' }),
        site({ line: 3, count: 3, blocked_ms: null })
      ],
      findings: []
    });
    const plain = panel([input(predicted)]);
    expect(plain.node.querySelector('.jp-syncfree-sidebar-once-totals')!.textContent).toBe('16 syncs');
    expect(plain.node.querySelector('.jp-syncfree-sidebar-cell-totals')!.textContent).toBe('19 predicted syncs');
    expect(plain.node.querySelector('.jp-syncfree-sidebar-list')!.textContent).not.toMatch(/\d ms|blocked|lost/);
  });

  it('the change between runs of a cell is by cost where both runs measured it', () => {
    const before = costed();
    const after = costed();
    after.totals = { ...after.totals, syncs: 99, cost_ms: 100.5 };
    after.sites = [after.sites[0], { ...after.sites[1], count: 98, cost_ms: 100 }];
    const widget = panel([{ ...input(after), previous: before }]);
    expect(widget.node.querySelector('.jp-syncfree-sidebar-cell .jp-syncfree-sidebar-delta')!.textContent).toBe(
      '−2 syncs, −73.0 ms GPU time vs previous run'
    );
  });

  it("a predicted row beside measured ones shows no cost and says why; the card's line totals lead with cost", () => {
    const predicted = report({ mode: 'predict', sites: [site({ blocked_ms: null, predicted: true })], findings: [] });
    const widget = panel([input(costed()), { cellId: 'p', cellNumber: 2, report: predicted, previous: null }]);
    const row = widget.rows.find(r => r.dataset.cellId === 'p')!;
    const cost = row.querySelector('.jp-syncfree-sidebar-blocked')!;
    expect(cost.textContent).toBe('—');
    expect(cost.getAttribute('title')).toBe('Predicted without a GPU: no cost, nothing timed');

    const r = costed();
    r.sites = [...r.sites, { ...site({ line: 5, chain: [5], count: 4, blocked_ms: 2 }), cost_ms: 0.8 }];
    const marker = markerLines(r, 5).find(m => m.line === 5)!;
    const card = renderSyncCard(
      { marker, report: r, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    expect(card.querySelector('.jp-syncfree-card-total')!.textContent).toBe('×104 · 174 ms GPU time lost');
    const guessed = report({
      mode: 'predict',
      sites: [
        site({ blocked_ms: null, predicted: true }),
        site({ kind: 'print', label: 'printing a tensor', blocked_ms: null, predicted: true })
      ],
      findings: []
    });
    const plainCard = renderSyncCard(
      { marker: markerLines(guessed, 4)[0], report: guessed, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    expect(plainCard.querySelector('.jp-syncfree-card-total')!.textContent).toBe('×2');
    expect(Array.from(plainCard.querySelectorAll('.jp-syncfree-card-blocked')).map(n => n.textContent)).toEqual([
      'no cost without a GPU',
      'no cost without a GPU'
    ]);
  });

  it('the status bar leads with the cost where measured', () => {
    const totals = notebookTotals([{ report: costed() }, { report: report() }]);
    expect(notebookTotalsText(totals)).toBe('102 syncs · 174 ms GPU time lost');
  });
});
