/**
 * Issue 26 (the notebook reviewed again in Chromium), the parts that are pure logic:
 * markers that come back with the report's text, deleted lines, the line a multi-line
 * finding is shown on, rewrites on an edited cell, group order, and the summary's words.
 */
import { history, undo } from '@codemirror/commands';
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import { markerAtLine, setSyncReport, syncMarkerField, syncMarkers } from '../gutter/extension';
import { markerLines } from '../gutter/lines';
import { errorText, headline, SyncReportRenderer } from '../mime';
import { findingLine, findingsWithoutSites, siteColumn } from '../model';
import { landingColumn } from '../positions';
import { LINE_CHANGED_REASON, STALE_REASON, planRewriteIn, rewritableFindings } from '../rewrite';
import { IRankInput, SiteRanking } from '../sidebar/ranking';
import { SyncsPanel } from '../sidebar/panel';
import { Widget } from '@lumino/widgets';
import { CELL, LOOP_CELL, loopReport, report, site } from './fixtures';
import type { SyncReport } from '../tokens';

function editor(text: string, r: SyncReport): EditorView {
  const view = new EditorView({ state: EditorState.create({ doc: text, extensions: [history(), syncMarkers()] }) });
  view.dispatch({ effects: setSyncReport.of(r) });
  return view;
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

describe('markers come back whenever the text is the report’s again', () => {
  it('after a marked line is deleted and the deletion undone', () => {
    const view = editor(CELL, report());
    expect(markedLines(view)).toEqual([3]);
    const line = view.state.doc.line(3);
    // The whole line, from the end of the line above (as a selection of the line does).
    view.dispatch({ changes: { from: line.from - 1, to: line.to }, userEvent: 'delete' });
    expect(markedLines(view)).toEqual([]);
    expect(view.state.field(syncMarkerField).stale).toBe(true);
    expect([...view.state.field(syncMarkerField).deleted]).toEqual([3]);
    undo(view);
    expect(view.state.doc.toString()).toBe(CELL);
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
    expect(view.state.field(syncMarkerField).deleted.size).toBe(0);
    expect(view.dom.querySelectorAll('.jp-syncfree-line')).toHaveLength(1);
  });

  it('a marked line emptied and joined to the line above is deleted, not moved there', () => {
    const view = editor(CELL, report());
    const line = view.state.doc.line(3);
    view.dispatch({ changes: { from: line.from, to: line.to }, userEvent: 'delete' });
    expect(markedLines(view)).toEqual([3]); // an empty line 3 still holds it
    view.dispatch({ changes: { from: line.from - 1, to: line.from }, userEvent: 'delete.backward' });
    expect(markedLines(view)).toEqual([]);
    expect([...view.state.field(syncMarkerField).deleted]).toEqual([3]);
    undo(view);
    expect(view.state.doc.toString()).toBe(CELL);
    expect(markedLines(view)).toEqual([3]);
  });

  it('after the whole text is cut and the same text pasted back', () => {
    const view = editor(CELL, report());
    view.dispatch({ changes: { from: 0, to: view.state.doc.length }, userEvent: 'delete.cut' });
    expect(markedLines(view)).toEqual([]);
    view.dispatch({ changes: { from: 0, insert: CELL }, userEvent: 'input.paste' });
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
  });

  it('after the text is replaced by itself in one edit', () => {
    const view = editor(CELL, report());
    view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: CELL }, userEvent: 'input.paste' });
    expect(markedLines(view)).toEqual([3]);
  });
});

describe('a finding split over lines is shown on the line that ran', () => {
  const SPLIT = ['%%syncfree', 'x = torch.ones(3, device="cuda")', 'y = (x.sum()', '     .item())'].join('\n');
  const split = report(
    {
      sites: [site({ line: 4, chain: [4] })],
      findings: [
        {
          rule: 'SF101',
          range: { line: 3, col: 5, end_line: 4, end_col: 12 },
          message: '`x.sum() .item()` copies the value to the CPU',
          certainty: 'certain',
          fix: null
        }
      ]
    },
    SPLIT
  );

  it('one marker, with the finding, on the line of the sync: no "did not run" ring', () => {
    expect(findingLine(split, split.findings[0])).toBe(4);
    const markers = markerLines(split, 4);
    expect(markers.map(m => [m.line, m.source, m.findings.length])).toEqual([[4, 'measured', 1]]);
    expect(findingsWithoutSites(split)).toEqual([]);
  });

  it('a finding of another rule over that line still did not run', () => {
    const other = { ...split, sites: [site({ line: 4, chain: [4], rule: 'SF201', kind: 'print' })] };
    expect(findingLine(other, other.findings[0])).toBe(3);
    expect(findingsWithoutSites(other)).toHaveLength(1);
  });
});

describe('rewrites on an edited cell', () => {
  const fix = loopReport().findings[0].fix!;

  const shown = loopReport();

  function edited(change: (view: EditorView) => void): EditorView {
    const view = editor(LOOP_CELL, shown);
    change(view);
    return view;
  }

  it('apply when the edits left the rewrite’s lines alone, at their new place', () => {
    const view = edited(v => v.dispatch({ changes: { from: 0, insert: '# a note\n' } }));
    expect(view.state.field(syncMarkerField).stale).toBe(true);
    const plan = planRewriteIn(view.state, shown, fix);
    expect(plan.ok).toBe(true);
    if (plan.ok) {
      expect(plan.preview.firstLine).toBe(5);
      view.dispatch({ changes: plan.changes });
      expect(view.state.doc.line(5).text).toBe('    total += model(x).sum().detach()');
    }
  });

  it('are refused, with the reason, when the rewrite’s line changed', () => {
    const view = edited(v => v.dispatch({ changes: { from: v.state.doc.line(4).to, insert: '  # edited' } }));
    expect(planRewriteIn(view.state, shown, fix)).toEqual({ ok: false, reason: LINE_CHANGED_REASON });
  });

  it('are refused when the report’s text is not known (opened already edited)', () => {
    const view = editor(LOOP_CELL + '\n# later', shown);
    expect(planRewriteIn(view.state, shown, fix)).toEqual({ ok: false, reason: STALE_REASON });
  });

  it('a rewrite on a finding split over lines belongs to the marked line', () => {
    const r = loopReport({
      findings: [{ ...loopReport().findings[0], range: { line: 3, col: 0, end_line: 4, end_col: 34 } }]
    });
    expect(rewritableFindings(r, 4)).toHaveLength(1);
    expect(rewritableFindings(r, 3)).toHaveLength(0);
  });
});

describe('the Syncs panel orders cell groups by what their headers show', () => {
  const cell = (cellId: string, cellNumber: number, counts: number[], blocked: number[] | null): IRankInput => ({
    cellId,
    cellNumber,
    previous: null,
    report: report({
      sites: counts.map((count, i) =>
        site({ line: i + 2, chain: [i + 2], count, blocked_ms: blocked ? blocked[i] : null, kind: `k${i}` })
      ),
      findings: []
    })
  });
  // One site of 2 syncs (5 ms) against three of 1 sync (3 ms each): 2 syncs, 5 ms vs 3 syncs, 9 ms.
  const inputs = [cell('two', 1, [2], [5]), cell('three', 2, [1, 1, 1], [3, 3, 3])];

  it('by count: the 3-sync cell above the 2-sync one', () => {
    const groups = new SiteRanking(inputs).groups(Infinity, { key: 'count', descending: true });
    expect(groups.map(g => [g.cellId, g.syncs])).toEqual([
      ['three', 3],
      ['two', 2]
    ]);
  });

  it('by blocked time, the default too: 9 ms above 5 ms', () => {
    expect(new SiteRanking(inputs).groups().map(g => g.cellId)).toEqual(['three', 'two']);
    const ascending = new SiteRanking(inputs).groups(Infinity, { key: 'blocked', descending: false });
    expect(ascending.map(g => g.cellId)).toEqual(['two', 'three']);
  });
});

describe('the Syncs panel', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  function panel(source: () => IRankInput[], options: { watching?: () => boolean } = {}) {
    const jump = jest.fn();
    const widget = new SyncsPanel({ jump, ...options });
    widget.source = { title: 'demo.ipynb', inputs: source };
    Widget.attach(widget, document.body);
    widget.render();
    return { widget, jump };
  }

  const input = (r: SyncReport, overrides: Partial<IRankInput> = {}): IRankInput => ({
    cellId: 'a',
    cellNumber: 1,
    report: r,
    previous: null,
    ...overrides
  });

  it('says "N of M" while a filter hides rows', () => {
    const { widget } = panel(() => [input(loopReport())]);
    const count = widget.node.querySelector('.jp-syncfree-sidebar-filter-count')!;
    expect(count.textContent).toBe('');
    const box = widget.node.querySelector<HTMLInputElement>('[data-control="text"]')!;
    box.value = 'print';
    box.dispatchEvent(new Event('input', { bubbles: true }));
    expect(count.textContent).toBe('1 of 2');
  });

  it('sorts predicted syncs (no blocked time) by count, and says so in the header', () => {
    const predicted = report({
      mode: 'predict',
      sites: [
        site({ line: 2, chain: [2], count: 1, blocked_ms: null }),
        site({ line: 3, chain: [3], count: 9, blocked_ms: null, kind: 'print' })
      ],
      findings: []
    });
    const { widget } = panel(() => [input(predicted)]);
    expect(widget.node.querySelector('.jp-syncfree-sidebar-column-count')!.getAttribute('aria-sort')).toBe(
      'descending'
    );
    // Nothing was timed: no column of dashes in the narrow panel (issue 39).
    expect(widget.node.querySelector('.jp-syncfree-sidebar-column-blocked')).toBeNull();
    expect(widget.node.querySelector('.jp-syncfree-sidebar-blocked')).toBeNull();
    expect(widget.rows.map(row => row.dataset.line)).toEqual(['3', '2']);
  });

  it('forgets a kind filter once no report has that kind (after Clear)', () => {
    let current = [input(loopReport())];
    const { widget } = panel(() => current);
    const kind = widget.node.querySelector<HTMLSelectElement>('[data-control="kind"]')!;
    kind.value = 'print';
    kind.dispatchEvent(new Event('change', { bubbles: true }));
    expect(widget.rows).toHaveLength(1);
    current = [];
    widget.render();
    current = [input(report())];
    widget.render();
    expect(widget.rows).toHaveLength(1);
    expect(widget.rows[0].dataset.line).toBe('3');
    expect(Array.from(kind.options).map(o => o.value)).toEqual(['', 'item']);
  });

  it('a row whose line was deleted says so and goes nowhere', () => {
    const { widget, jump } = panel(() => [
      input(loopReport(), { stale: true, currentLine: l => (l === 4 ? null : l) })
    ]);
    const row = widget.rows.find(r => r.dataset.reportLine === '4')!;
    expect(row.querySelector('.jp-syncfree-sidebar-where')!.textContent).toBe('4 (deleted)');
    expect(row.title).toContain('line 4 was deleted since this run');
    row.click();
    row.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(jump).not.toHaveBeenCalled();
  });

  it('while watching, the empty panel does not ask to load the extension', () => {
    const { widget } = panel(() => [], { watching: () => true });
    expect(widget.node.textContent).toContain('Watch mode is on');
    expect(widget.node.textContent).not.toContain('%load_ext');
  });
});

describe('words of the summary and the jumps', () => {
  it('says the error line once', () => {
    expect(
      errorText({
        type: 'RuntimeError',
        line: 5,
        message: 'line 5: `.item()` synced; --mode error stops at the first sync'
      })
    ).toBe('RuntimeError (line 5): `.item()` synced; --mode error stops at the first sync');
    expect(errorText({ type: 'ValueError', line: null, message: 'boom' })).toBe('ValueError: boom');
  });

  it('does not say "(predicted)" on every row of an all-predicted report', () => {
    const predicted = loopReport({ mode: 'predict' });
    const renderer = new SyncReportRenderer({ mimeType: 'x', sanitizer: {} as never, resolver: null } as never, {});
    void renderer.renderModel({ data: { x: predicted } } as never);
    expect(headline(predicted)).toContain('predicted');
    expect(renderer.node.textContent).not.toContain('(predicted)');
  });

  it('lands on the call, else where the code starts', () => {
    expect(siteColumn(loopReport(), loopReport().sites[0])).toBe(13);
    expect(siteColumn(loopReport(), loopReport().sites[1])).toBeNull();
    expect(landingColumn('    total += x', 13)).toBe(13);
    expect(landingColumn('    print(total)', null)).toBe(4);
    expect(landingColumn('   ', null)).toBe(0);
  });
});
