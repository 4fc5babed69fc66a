/**
 * Issue 39: a site keeps its place in the cell's text, not its run's line number, through
 * what gives its editor no edit to map markers through (Move Cell, cut and paste, cut and
 * undo, a reopen after an edit), and runs are compared by what synced where in the code.
 */
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import { markerAtLine, reportFreshness, syncMarkerField, syncMarkers } from '../gutter/extension';
import { cardTitle } from '../gutter/card';
import { anchorReportLines, anchoredLines } from '../model';
import { SiteRanking } from '../sidebar/ranking';
import { DEFAULT_SYNC_MARKER_OPTIONS, deferStaleCheck, whenIdle } from '../gutter/extension';
import type { SyncReport } from '../tokens';
import { report, site } from './fixtures';

const RAN = [
  '%%syncfree',
  'x = torch.randn(8, device="cuda")',
  'for step in range(3):',
  '    y = x @ w',
  '    s = y.sum().item()',
  'print(s)'
].join('\n');

/** A report of RAN: `.item()` on line 5 inside the loop (chain [5]), with its text. */
function ranReport(withText = true): SyncReport {
  return report(
    {
      sites: [
        site({ line: 5, chain: [5], ...(withText ? { chain_text: ['s = y.sum().item()'] } : {}) }),
        site({
          line: 6,
          chain: [6],
          kind: 'print',
          rule: null,
          label: 'printing a tensor',
          ...(withText ? { chain_text: ['print(s)'] } : {})
        })
      ],
      findings: [
        {
          rule: 'SF101',
          range: { line: 5, col: 8, end_line: 5, end_col: 22 },
          message: '`.item()` waits for the GPU',
          certainty: 'certain',
          fix: null
        }
      ]
    },
    RAN
  );
}

/** The text after a line was typed above the `.item()` line (and saved, moved, reopened). */
const EDITED = RAN.replace('for step', '# a note\n# another\nfor step');

/** An editor made for the cell with its report already there: a moved, pasted or reopened cell. */
function reopened(text: string, r: SyncReport, defer = false): EditorView {
  const extensions = [syncMarkers({ report: r, options: DEFAULT_SYNC_MARKER_OPTIONS })];
  if (defer) {
    extensions.push(deferStaleCheck.of(whenIdle));
  }
  return new EditorView({ state: EditorState.create({ doc: text, extensions }) });
}

function markedLines(view: EditorView): number[] {
  const lines: number[] = [];
  for (let n = 1; n <= view.state.doc.lines; n++) {
    if (markerAtLine(view, n)) {
      lines.push(n);
    }
  }
  return lines;
}

describe('anchors (issue 39)', () => {
  it('an editor made for an edited cell marks the lines that ran, not the run line numbers', () => {
    for (const defer of [false, true]) {
      const view = reopened(EDITED, ranReport(), defer);
      expect(markedLines(view)).toEqual([7, 8]);
      expect(reportFreshness(view.state)).toBe('stale');
      expect(markerAtLine(view, 7)!.info.line).toBe(5);
      const highlighted = [...view.dom.querySelectorAll('.jp-syncfree-line')].map(l => l.textContent);
      expect(highlighted).toEqual(['    s = y.sum().item()', 'print(s)']);
      view.destroy();
    }
  });

  it('a line whose text is gone is not marked elsewhere and counts as deleted', () => {
    const view = reopened(EDITED.replace('    s = y.sum().item()', '    s = y.sum()'), ranReport());
    expect(markedLines(view)).toEqual([8]);
    expect([...view.state.field(syncMarkerField).deleted]).toEqual([5]);
    view.destroy();
  });

  it('two identical lines keep their order; a line without text moves with the one above', () => {
    const r = report(
      {
        sites: [
          site({ line: 2, chain: [2], chain_text: ['a.item()'] }),
          site({ line: 4, chain: [4], chain_text: ['a.item()'] })
        ],
        findings: []
      },
      'x\na.item()\nb\na.item()'
    );
    const lines = 'x\nnew\na.item()\nb\na.item()'.split('\n');
    const at = anchorReportLines(r, n => lines[n - 1], lines.length)!;
    expect([at(2), at(3), at(4)]).toEqual([3, 4, 5]);
  });

  it('the panel of a cell without an editor finds its lines by text and says it is out of date', () => {
    const r = ranReport();
    const { stale, currentLine } = anchoredLines(EDITED, r);
    expect(stale).toBe(true);
    const rows = new SiteRanking([
      { cellId: 'c', cellNumber: 1, report: r, previous: null, lineCount: 8, stale, currentLine }
    ]).flat();
    expect(rows.map(row => [row.line, row.currentLine, row.stale])).toEqual([
      [5, 7, true],
      [6, 8, true]
    ]);
    expect(anchoredLines(RAN, r)).toEqual({});
  });

  it('the card names the line the marker is on now', () => {
    const view = reopened(EDITED, ranReport());
    expect(cardTitle(markerAtLine(view, 7)!.info, 7)).toBe('Sync at line 7');
    view.destroy();
  });

  it('a run after a comment line was added above shows no change', () => {
    const before = ranReport();
    const after: SyncReport = {
      ...before,
      sites: before.sites.map(s => ({ ...s, line: s.line + 1, chain: s.chain.map(n => n + 1) }))
    };
    const ranking = new SiteRanking([{ cellId: 'c', cellNumber: 1, report: after, previous: before }]);
    expect(ranking.flat().map(row => row.delta?.isNew)).toEqual([false, false]);
    expect(ranking.groups()[0].delta).toEqual({ syncs: 0, blockedMs: 0, costMs: null, fixed: 0 });
  });
});
