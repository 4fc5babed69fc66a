import { Widget } from '@lumino/widgets';
import { ROWS_SHOWN, SyncsPanel, deltaText } from '../sidebar/panel';
import { IRankInput, ISiteFilter, SiteRanking, filterChoices } from '../sidebar/ranking';

const rankSites = (inputs: IRankInput[], filter?: ISiteFilter) => new SiteRanking(inputs, filter).flat();
import { loopReport, report, site } from './fixtures';

/** Three cells: a cheap one, a costly one, and one with only a static finding. */
function inputs(): IRankInput[] {
  return [
    {
      cellId: 'a',
      cellNumber: 1,
      report: report({ sites: [site({ line: 3, count: 2, blocked_ms: 0.4 })], findings: [] }),
      previous: null,
      lineCount: 4
    },
    { cellId: 'b', cellNumber: 2, report: loopReport(), previous: null, lineCount: 5 },
    {
      cellId: 'c',
      cellNumber: 3,
      report: report({ mode: 'static', sites: [] }),
      previous: null,
      lineCount: 4
    }
  ];
}

describe('rankSites', () => {
  it('ranks by blocked time, then count, with static findings last', () => {
    const ranked = rankSites(inputs());
    expect(ranked.map(r => `${r.cellId}:${r.line}:${r.source}`)).toEqual([
      'b:4:measured',
      'b:5:measured',
      'a:3:measured',
      'c:3:static'
    ]);
  });

  it('ranks by count when blocked time was not measured', () => {
    const r = report({
      sites: [site({ line: 2, count: 3, blocked_ms: null }), site({ line: 3, count: 30, blocked_ms: null })],
      findings: []
    });
    expect(rankSites([{ cellId: 'x', cellNumber: 1, report: r, previous: null }]).map(s => s.line)).toEqual([3, 2]);
  });

  it('filters by kind and by rule', () => {
    expect(rankSites(inputs(), { kind: 'print' }).map(r => r.line)).toEqual([5]);
    expect(rankSites(inputs(), { rule: 'SF101' }).map(r => r.cellId)).toEqual(['b', 'a', 'c']);
    expect(filterChoices(inputs())).toEqual({
      kinds: ['item', 'static', 'print'],
      rules: ['SF101'],
      kindLabels: { item: '.item()', print: 'printing a tensor', static: 'not run (static finding)' },
      ruleLabels: { SF101: 'SF101 .item() on a CUDA tensor' }
    });
  });

  it('compares each site with the previous run of its cell', () => {
    const before = loopReport({
      sites: [site({ line: 4, chain: [4], count: 100, blocked_ms: 50 })],
      totals: { syncs: 100, sites: 1, blocked_ms: 50, wall_ms: 70 }
    });
    const ranked = rankSites([{ cellId: 'b', cellNumber: 1, report: loopReport(), previous: before }]);
    expect(ranked[0].delta).toEqual({ isNew: false, count: 0, blockedMs: expect.closeTo(-8.8, 5) });
    expect(ranked[1].delta).toMatchObject({ isNew: true });
    expect(deltaText(ranked[0])).toBe('−8.80 ms');
    expect(deltaText(ranked[1])).toBe('new');
    const more = rankSites([
      {
        cellId: 'b',
        cellNumber: 1,
        report: loopReport({ sites: [site({ line: 4, chain: [4], count: 102, blocked_ms: 41.2 })] }),
        previous: loopReport()
      }
    ]);
    expect(deltaText(more[0])).toBe('+2 syncs');
    const [group] = new SiteRanking([{ cellId: 'b', cellNumber: 1, report: loopReport(), previous: before }]).groups();
    expect(group.delta).toEqual({ syncs: 1, blockedMs: expect.closeTo(-7.5, 5), fixed: 0 });
  });

  it('leaves out sites past the end of the cell, with one warning', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const r = report({ sites: [site({ line: 40 }), site({ line: 41 })], findings: [] });
    expect(rankSites([{ cellId: 'x', cellNumber: 1, report: r, previous: null, lineCount: 4 }])).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });

  it('groups by cell, costliest cell first, and totals the listed syncs', () => {
    const ranking = new SiteRanking(inputs());
    expect(ranking.groups().map(g => [g.cellId, g.syncs])).toEqual([
      ['b', 101],
      ['a', 2],
      ['c', 0]
    ]);
    expect(ranking.totals()).toEqual({
      syncs: 103,
      blockedMs: expect.closeTo(42.9, 5),
      sites: 3,
      cells: 3,
      predicted: false
    });
    expect(ranking.size).toBe(4);
  });

  describe('in a large notebook', () => {
    // 60 cells of 7 sites and 2 static findings, with ties in blocked time and count.
    const many: IRankInput[] = Array.from({ length: 60 }, (_, c) => ({
      cellId: `c${c}`,
      cellNumber: c + 1,
      previous: null,
      report: report({
        sites: Array.from({ length: 7 }, (_, i) =>
          site({
            line: i + 1,
            chain: [i + 1],
            count: 1 + ((c * 7 + i) % 5),
            blocked_ms: i === 6 ? null : ((c * 13 + i * 7) % 11) / 2
          })
        ),
        findings: [9, 8].map(line => ({ ...report().findings[0], range: { line, col: 0, end_line: line, end_col: 1 } }))
      })
    }));
    const key = (r: { cellId: string; line: number; source: string }) => `${r.cellId}:${r.line}:${r.source}`;

    /** The ranking as a plain sort of every row would give it. */
    function sorted(): string[] {
      const rows = many.flatMap(input => [
        ...input.report.sites.map(s => ({
          input,
          line: s.line,
          blocked: s.blocked_ms ?? -1,
          count: s.count,
          source: 'measured'
        })),
        ...input.report.findings.map(f => ({ input, line: f.range.line, blocked: -1, count: 0, source: 'static' }))
      ]);
      rows.sort(
        (a, b) =>
          Number(a.source === 'static') - Number(b.source === 'static') ||
          b.blocked - a.blocked ||
          b.count - a.count ||
          a.input.cellNumber - b.input.cellNumber ||
          a.line - b.line
      );
      return rows.map(r => key({ cellId: r.input.cellId, line: r.line, source: r.source }));
    }

    it('merges the cells into the same order as one sort of every row, up to any limit', () => {
      const ranking = new SiteRanking(many);
      const all = sorted();
      expect(ranking.size).toBe(60 * 9);
      expect(ranking.flat().map(key)).toEqual(all);
      for (const limit of [1, 7, 200, 419, 420, 421]) {
        expect(ranking.flat(limit).map(key)).toEqual(all.slice(0, limit));
      }
    });

    it('makes only the rows asked for, and cuts the last group short', () => {
      const ranking = new SiteRanking(many);
      const groups = ranking.groups(20);
      expect(groups.map(g => g.sites.length)).toEqual([9, 9, 2]);
      // Each group's totals are the whole cell's, whatever is drawn of it.
      const cell = many.find(input => input.cellId === groups[2].cellId)!;
      expect(groups[2].syncs).toBe(cell.report.sites.reduce((n, s) => n + s.count, 0));
      // The group order is that of the totals the group headers show.
      const shown = ranking.groups().map(g => [g.blockedMs ?? -1, g.syncs]);
      for (let i = 1; i < shown.length; i++) {
        expect(
          shown[i - 1][0] > shown[i][0] || (shown[i - 1][0] === shown[i][0] && shown[i - 1][1] >= shown[i][1])
        ).toBe(true);
      }
    });
  });
});

describe('SyncsPanel', () => {
  function panel(source: IRankInput[] | null, jump = jest.fn()) {
    const widget = new SyncsPanel({ jump });
    widget.source = source ? { title: 'demo.ipynb', inputs: () => source } : null;
    Widget.attach(widget, document.body);
    widget.render();
    return { widget, jump };
  }

  afterEach(() => {
    document.body.textContent = '';
  });

  it('says how to start when the notebook has no report', () => {
    const { widget } = panel([]);
    const text = widget.node.textContent!;
    expect(text).toContain('%load_ext syncfree');
    expect(text).toContain('%%syncfree');
    expect(text).toContain('toolbar button');
  });

  it('says to open a notebook when there is none', () => {
    expect(panel(null).widget.node.textContent).toContain('Open a notebook');
  });

  it('lists the sites grouped by cell with totals, and jumps on click and Enter', () => {
    const { widget, jump } = panel(inputs());
    const rows = widget.rows;
    expect(rows.map(r => `${r.dataset.cellId}:${r.dataset.line}`)).toEqual(['b:4', 'b:5', 'a:3', 'c:3']);
    expect(Array.from(widget.node.querySelectorAll('.jp-syncfree-sidebar-cell-name')).map(n => n.textContent)).toEqual([
      'Cell 2',
      'Cell 1',
      'Cell 3'
    ]);
    expect(widget.node.querySelector('[data-total="syncs"]')!.textContent).toBe('103 syncs');
    expect(widget.node.querySelector('[data-total="cells"]')!.textContent).toBe('3 cells');
    rows[0].click();
    expect(jump).toHaveBeenCalledWith('b', 4, 13);
    rows[2].dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(jump).toHaveBeenLastCalledWith('a', 3, null);
  });

  it('switches to a flat list and filters by kind', () => {
    const { widget } = panel(inputs());
    const group = widget.node.querySelector<HTMLInputElement>('[data-control="group"]')!;
    group.checked = false;
    group.dispatchEvent(new Event('change', { bubbles: true }));
    expect(widget.node.querySelector('.jp-syncfree-sidebar-cell')).toBeNull();
    expect(widget.rows[0].querySelector('.jp-syncfree-sidebar-where')!.textContent).toBe('cell 2:4');
    const kind = widget.node.querySelector<HTMLSelectElement>('[data-control="kind"]')!;
    kind.value = 'print';
    kind.dispatchEvent(new Event('change', { bubbles: true }));
    expect(widget.rows.map(r => r.dataset.line)).toEqual(['5']);
  });

  it('draws the first rows of a huge notebook and the rest on request', () => {
    const many: IRankInput[] = Array.from({ length: 30 }, (_, i) => ({
      cellId: `cell-${i}`,
      cellNumber: i + 1,
      report: report({
        sites: Array.from({ length: 20 }, (_, j) => site({ line: 1 + (j % 4), kind: `k${j}` })),
        findings: []
      }),
      previous: null
    }));
    const { widget } = panel(many);
    expect(widget.rows).toHaveLength(ROWS_SHOWN);
    widget.node.querySelector<HTMLButtonElement>('[data-action="expand"]')!.click();
    expect(widget.rows).toHaveLength(600);
  });

  it('filters by free text over labels, rules and messages, keeping the box focused', () => {
    const { widget } = panel(inputs());
    const box = widget.node.querySelector<HTMLInputElement>('[data-control="text"]')!;
    box.focus();
    const type = (value: string) => {
      box.value = value;
      box.dispatchEvent(new Event('input', { bubbles: true }));
    };
    type('PRINTING');
    expect(widget.rows.map(r => `${r.dataset.cellId}:${r.dataset.line}`)).toEqual(['b:5']);
    expect(document.activeElement).toBe(box);
    type('cuda tensor'); // the rule title of SF101
    expect(widget.rows.map(r => r.dataset.cellId)).toEqual(['b', 'a', 'c']);
    type('nothing like this');
    expect(widget.rows).toHaveLength(0);
    expect(widget.node.textContent).toContain('No sync matches these filters.');
  });

  it('sorts by a column header and says so with aria-sort', () => {
    const { widget } = panel(inputs());
    widget.groupByCell = false;
    widget.render();
    const header = (key: string) => widget.node.querySelector<HTMLElement>(`.jp-syncfree-sidebar-column-${key}`)!;
    expect(header('blocked').getAttribute('aria-sort')).toBe('descending');
    expect(header('location').getAttribute('aria-sort')).toBe('none');
    header('location').querySelector('button')!.click();
    expect(header('location').getAttribute('aria-sort')).toBe('ascending');
    expect(widget.rows.map(r => `${r.dataset.cellId}:${r.dataset.line}`)).toEqual(['a:3', 'b:4', 'b:5', 'c:3']);
    header('location').querySelector('button')!.click();
    expect(header('location').getAttribute('aria-sort')).toBe('descending');
    expect(widget.rows.map(r => `${r.dataset.cellId}:${r.dataset.line}`)).toEqual(['c:3', 'b:5', 'b:4', 'a:3']);
    header('count').querySelector('button')!.click();
    expect(widget.rows.map(r => `${r.dataset.cellId}:${r.dataset.line}`)).toEqual(['b:4', 'a:3', 'b:5', 'c:3']);
  });

  it('is one tab stop: arrows move, Left and Right collapse and expand a cell, Enter jumps', () => {
    const { widget, jump } = panel(inputs());
    const stops = () => Array.from(widget.node.querySelectorAll<HTMLElement>('[data-nav][tabindex="0"]'));
    expect(stops()).toHaveLength(1);
    const key = (key: string) =>
      (document.activeElement as HTMLElement).dispatchEvent(new KeyboardEvent('keydown', { key, bubbles: true }));
    stops()[0].focus();
    expect(document.activeElement!.textContent).toContain('Cell 2');
    key('ArrowDown');
    expect((document.activeElement as HTMLElement).dataset.line).toBe('4');
    expect(stops()).toEqual([document.activeElement]);
    key('Enter');
    expect(jump).toHaveBeenLastCalledWith('b', 4, 13);
    key('ArrowLeft'); // to the cell header
    key('ArrowLeft'); // collapse it
    expect(
      widget.node.querySelector('[data-cell-id="b"].jp-syncfree-sidebar-cell')!.getAttribute('aria-expanded')
    ).toBe('false');
    expect(widget.rows.map(r => r.dataset.cellId)).toEqual(['a', 'c']);
    expect(document.activeElement!.textContent).toContain('Cell 2'); // focus kept across the redraw
    key('ArrowRight');
    expect(widget.rows.map(r => r.dataset.cellId)).toEqual(['b', 'b', 'a', 'c']);
    key('End');
    expect((document.activeElement as HTMLElement).dataset.cellId).toBe('c');
    key('Home');
    expect(document.activeElement!.textContent).toContain('Cell 2');
    expect(stops()).toHaveLength(1);
  });

  it('collapses a cell group on a click on its header', () => {
    const { widget } = panel(inputs());
    widget.node.querySelector<HTMLElement>('[data-cell-id="a"].jp-syncfree-sidebar-cell')!.click();
    expect(widget.rows.map(r => r.dataset.cellId)).toEqual(['b', 'b', 'c']);
  });

  it('shows labels in user words, code as <code>, and predicted totals as such', () => {
    const predicted = report({
      mode: 'predict',
      sites: [site({ kind: 'mask_index', label: 'boolean-mask indexing', count: 60, blocked_ms: null })],
      findings: []
    });
    const { widget } = panel([{ cellId: 'p', cellNumber: 1, report: predicted, previous: null }]);
    expect(widget.node.textContent).not.toContain('mask_index');
    expect(widget.rows[0].querySelector('.jp-syncfree-sidebar-label')!.textContent).toBe('boolean-mask indexing');
    expect(widget.node.querySelector('.jp-syncfree-sidebar-totals')!.textContent).toBe('60 predicted syncs in 1 cell');
    const kindOptions = Array.from(widget.node.querySelectorAll('[data-control="kind"] option')).map(
      o => o.textContent
    );
    expect(kindOptions).toEqual(['all kinds', 'boolean-mask indexing']);
    document.body.textContent = '';
    const { widget: measured } = panel(inputs());
    expect(measured.rows[0].querySelector('.jp-syncfree-sidebar-label code')!.textContent).toBe('.item()');
    expect(measured.node.querySelector('.jp-syncfree-sidebar-totals')!.textContent).toBe(
      '103 syncs in 3 cells · 42.9 ms blocked'
    );
  });

  it('sets report strings as text', () => {
    const evil = '<img src=x onerror="window.pwned=1">';
    const { widget } = panel([
      { cellId: 'x', cellNumber: 1, report: report({ sites: [site({ message: evil })], findings: [] }), previous: null }
    ]);
    expect(widget.node.querySelector('img')).toBeNull();
    expect(widget.rows[0].title).toContain(evil);
  });
});
