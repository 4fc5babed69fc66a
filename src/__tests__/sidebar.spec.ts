import { Widget } from '@lumino/widgets';
import { ROWS_SHOWN, SyncsPanel, deltaText } from '../sidebar/panel';
import { IRankInput, ISiteFilter, SiteRanking, filterChoices } from '../sidebar/ranking';
import { RankKey, compareRankKeys, rankKey, steadyMs } from '../sidebar/cost';

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
      kindLabels: { item: '.item()', print: 'printing a tensor', static: 'did not run (found in the code)' },
      ruleLabels: { SF101: 'SF101 .item() on a CUDA tensor' }
    });
  });

  it('compares each site with the previous run of its cell', () => {
    const before = loopReport({
      sites: [site({ line: 4, chain: [4], count: 100, blocked_ms: 50 })],
      totals: { syncs: 100, sites: 1, blocked_ms: 50, wall_ms: 70 }
    });
    const ranked = rankSites([{ cellId: 'b', cellNumber: 1, report: loopReport(), previous: before }]);
    expect(ranked[0].delta).toEqual({ isNew: false, count: 0, blockedMs: expect.closeTo(-8.8, 5), costMs: null });
    expect(ranked[1].delta).toMatchObject({ isNew: true });
    expect(deltaText(ranked[0])).toBe('−8.80 ms blocked');
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
    expect(group.delta).toEqual({ syncs: 1, blockedMs: expect.closeTo(-7.5, 5), costMs: null, fixed: 0 });
    // Where both runs measured the cost (issue 37), the change is in GPU time lost.
    const costed = (cost: number) =>
      loopReport({ sites: [site({ line: 4, chain: [4], count: 100, blocked_ms: 41.2, cost_ms: cost })] });
    const cheaper = rankSites([{ cellId: 'b', cellNumber: 1, report: costed(0.5), previous: costed(2) }]);
    expect(deltaText(cheaper[0])).toBe('−1.50 ms GPU time');
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
      costMs: null,
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

/*
 * The panel ranks as the reports do: python_helper/syncfree/capture/sites.py rank_key, the
 * cases of tests/test_sites.py::test_rank_key_puts_the_cost_after_the_first_call_first and
 * the keys the Python gives (printed by `rank_key(*args)`).
 */
describe('rankKey, a port of sites.py rank_key', () => {
  type Args = [boolean, number | null, number | null, number];
  // [one_off, blocked_ms, first_ms, count] -> the Python's key (no cost_ms: not measured).
  const timed: [Args, RankKey][] = [
    [
      [false, 100.99, 100.0, 100],
      [false, true, -0, -0.99, -100]
    ],
    [
      [false, 100.0, 1.0, 100],
      [false, true, -0, -99.0, -100]
    ],
    [
      [true, 150.0, 40.0, 16],
      [true, true, -0, -150.0, -16]
    ],
    [
      [false, 5.0, null, 2],
      [false, true, -0, -5.0, -2]
    ],
    [
      [false, 2.0, 3.5, 4],
      [false, true, -0, -0.0, -4]
    ],
    [
      [false, 103.0, 100.0, 3],
      [false, true, -0, -3.0, -3]
    ],
    [
      [true, 0.3, null, 1],
      [true, true, -0, -0.3, -1]
    ]
  ];
  const sortedBy = (keys: RankKey[]) =>
    keys
      .map((key, i) => ({ key, i }))
      .sort((a, b) => compareRankKeys(a.key, b.key) || a.i - b.i)
      .map(k => k.i);

  it('gives the keys the Python gives to timed sites', () => {
    for (const [args, key] of timed) {
      const ported = rankKey(...args);
      expect(ported[0]).toBe(key[0]);
      expect(ported[1]).toBe(key[1]);
      expect(ported[2]).toBeCloseTo(0, 9);
      expect(ported[3]).toBeCloseTo(key[3], 9);
      expect(ported[4]).toBe(key[4]);
    }
    expect(steadyMs(103.0, 100.0)).toBe(3.0);
    expect(steadyMs(2.0, 3.5)).toBe(0);
    expect(steadyMs(0.1 + 0.2, 0.1)).toBe(0.2); // rounded to 3 decimals, as round(x, 3)
    expect(steadyMs(null, null)).toBeNull();
  });

  it('ranks the cost after the first call first, one-off sites after every recurring one', () => {
    const warmUp = rankKey(false, 100.99, 100.0, 100); // 100 ms once, then 0.01 ms per call
    const perStep = rankKey(false, 100.0, 1.0, 100); // 1 ms every step
    const moduleMove = rankKey(true, 150.0, 40.0, 16); // paid once
    expect(sortedBy([moduleMove, warmUp, perStep])).toEqual([2, 1, 0]);
    expect(sortedBy(timed.map(([args]) => rankKey(...args)))).toEqual(sortedBy(timed.map(([, key]) => key)));
  });

  it('ranks by cost (GPU time lost) first where measured, blocked time second (issue 37)', () => {
    // The Python's keys: (one_off, cost_ms is None, -cost_ms, -blocked cost, -count).
    expect([...rankKey(false, 59.6, null, 100, 0.47)]).toEqual([false, false, -0.47, -59.6, -100]);
    const endOfStep = rankKey(false, 59.6, null, 100, 0.47); // blocked long, costs little
    const maskIndex = rankKey(false, 10.0, null, 100, 1.73); // blocked less, costs more
    const unmeasured = rankKey(false, 500.0, null, 100); // a child process's: no cost
    expect(sortedBy([endOfStep, unmeasured, maskIndex])).toEqual([2, 0, 1]);
    // Recurring before one-off, whatever the cost.
    expect(compareRankKeys(rankKey(false, 1, null, 1, 0.01), rankKey(true, 1, null, 1, 50))).toBeLessThan(0);
  });

  it('ranks by count without times (predict mode), recurring first', () => {
    const untimed: Args[] = [
      [false, null, null, 3],
      [true, null, null, 16],
      [false, null, null, 7]
    ];
    expect(compareRankKeys(rankKey(false, null, null, 7), rankKey(false, null, null, 3))).toBeLessThan(0);
    expect(sortedBy(untimed.map(args => rankKey(...args)))).toEqual([2, 0, 1]);
    // Where the Python never looks (its runs are timed throughout or not at all): an untimed
    // site of another cell's run after every timed one of its phase.
    expect(compareRankKeys(rankKey(false, 0, null, 1), rankKey(false, null, null, 500))).toBeLessThan(0);
    expect(compareRankKeys(rankKey(false, null, null, 500), rankKey(true, 9, null, 1))).toBeLessThan(0);
  });
});

/** A notebook's cells after a measured run: warm-up, per-step and one-off syncs. */
function phasedInputs(): IRankInput[] {
  const cell = (cellId: string, cellNumber: number, sites: ReturnType<typeof site>[]): IRankInput => ({
    cellId,
    cellNumber,
    previous: null,
    lineCount: 9,
    report: report({ sites, findings: [] })
  });
  return [
    // A 150 ms module move, paid once, in a cell of its own.
    cell('setup', 1, [
      site({
        line: 2,
        chain: [2],
        kind: 'copy',
        label: 'a copy to the GPU',
        count: 16,
        blocked_ms: 150,
        first_ms: 40,
        phase: 'once'
      })
    ]),
    cell('train', 2, [
      // 100 ms at the first call, then 0.01 ms per call.
      site({ line: 4, chain: [4], count: 100, blocked_ms: 100.99, first_ms: 100 }),
      // 1 ms every step, 50 steps.
      site({
        line: 5,
        chain: [5],
        kind: 'nonzero',
        label: '`torch.nonzero`',
        count: 50,
        blocked_ms: 50,
        first_ms: 1
      }),
      // A checkpoint saved once at the end.
      site({
        line: 7,
        chain: [7],
        kind: 'copy',
        label: 'a copy to the host',
        count: 30,
        blocked_ms: 120,
        first_ms: 5,
        phase: 'once'
      })
    ])
  ];
}

describe('the Syncs panel ranks as the reports do (first call, once)', () => {
  const key = (r: { cellId: string; line: number }) => `${r.cellId}:${r.line}`;

  it('ranks recurring sites by their time after the first call, one-off ones after them', () => {
    const ranking = new SiteRanking(phasedInputs());
    expect(ranking.flat().map(key)).toEqual(['train:5', 'train:4', 'setup:2', 'train:7']);
    // The cell where something recurs first, though the setup cell blocked longer in all.
    const groups = ranking.groups();
    expect(groups.map(g => [g.cellId, g.sites.map(s => s.line)])).toEqual([
      ['train', [5, 4, 7]],
      ['setup', [2]]
    ]);
    expect(groups[0]).toMatchObject({ oneOff: false, rankMs: 49.99, once: { sites: 1, syncs: 30, blockedMs: 120 } });
    expect(groups[1]).toMatchObject({ oneOff: true, rankMs: 150 });
    expect(ranking.onceTotals()).toEqual({ sites: 2, syncs: 46, blockedMs: 270, costMs: null });
    const [perStep, warmUp] = ranking.flat();
    expect(warmUp.firstCall).toBe('first sync 100 ms, then 0.010 ms per sync ×99');
    expect(perStep.firstCall).toBe('first sync 1.00 ms, then 1.00 ms per sync ×49');
    expect(ranking.flat().find(r => r.line === 7)!.firstCall).toBeNull(); // paid once: no split
  });

  it('ranks predicted sites by count, recurring first', () => {
    const predicted = report({
      mode: 'predict',
      sites: [
        site({ line: 2, chain: [2], kind: 'copy', count: 16, blocked_ms: null, phase: 'once' }),
        site({ line: 4, chain: [4], count: 3, blocked_ms: null }),
        site({ line: 5, chain: [5], kind: 'nonzero', count: 7, blocked_ms: null })
      ],
      findings: []
    });
    const ranking = new SiteRanking([{ cellId: 'p', cellNumber: 1, report: predicted, previous: null }]);
    expect(ranking.flat().map(r => r.line)).toEqual([5, 4, 2]);
    expect(ranking.flat(Infinity, { key: 'count', descending: true }).map(r => r.line)).toEqual([5, 4, 2]);
  });

  it('keeps a column sort the user picked, recurring rows before one-off ones by count or time', () => {
    const ranking = new SiteRanking(phasedInputs());
    expect(ranking.flat(Infinity, { key: 'count', descending: true }).map(key)).toEqual([
      'train:4',
      'train:5',
      'train:7',
      'setup:2'
    ]);
    expect(ranking.flat(Infinity, { key: 'blocked', descending: false }).map(key)).toEqual([
      'train:4',
      'train:5',
      'train:7',
      'setup:2'
    ]);
    // Sorted by place, the phases mix (each row says "once" itself).
    expect(ranking.flat(Infinity, { key: 'location', descending: false }).map(key)).toEqual([
      'setup:2',
      'train:4',
      'train:5',
      'train:7'
    ]);
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

  it('lists the syncs paid once under their own heading, and a first call under the blocked time', () => {
    const { widget } = panel(phasedInputs());
    const drawn = () =>
      Array.from(widget.node.querySelector('.jp-syncfree-sidebar-list')!.children)
        .slice(1) // the column headers
        .map(node =>
          node.classList.contains('jp-syncfree-sidebar-row')
            ? `${(node as HTMLElement).dataset.cellId}:${(node as HTMLElement).dataset.line}`
            : node.classList.contains('jp-syncfree-sidebar-once')
              ? `once: ${node.querySelector('.jp-syncfree-sidebar-once-totals')!.textContent}`
              : `cell ${(node as HTMLElement).dataset.cellId}`
        );
    expect(drawn()).toEqual([
      'cell train',
      'train:5',
      'train:4',
      'once: 30 syncs · 120 ms blocked',
      'train:7',
      'cell setup',
      'once: 16 syncs · 150 ms blocked',
      'setup:2'
    ]);
    const heading = widget.node.querySelector('.jp-syncfree-sidebar-once')!;
    expect(heading.querySelector('.jp-syncfree-sidebar-once-name')!.textContent).toBe('Once (setup, compilation)');
    expect(heading.getAttribute('data-nav')).toBeNull(); // the arrow keys go from row to row
    const warmUp = widget.rows[1];
    const blocked = warmUp.querySelector<HTMLElement>('.jp-syncfree-sidebar-blocked')!;
    expect(blocked.firstChild!.textContent).toBe('101 ms');
    expect(blocked.querySelector('.jp-syncfree-sidebar-first')!.textContent).toBe('first 100 ms');
    expect(blocked.title).toContain('first sync 100 ms, then 0.010 ms per sync ×99');
    expect(warmUp.title).toContain('first sync 100 ms, then 0.010 ms per sync ×99');
    const once = widget.rows[2];
    expect(once.querySelector('.jp-syncfree-sidebar-phase')).toBeNull(); // its heading says so
    expect(once.querySelector('.jp-syncfree-sidebar-first')).toBeNull();
    expect(once.title).toContain('once: the line runs once');
    expect(
      widget.node.querySelector('[data-cell-id="train"] .jp-syncfree-sidebar-cell-totals')!.getAttribute('title')
    ).toBe('ranked by 50.0 ms blocked after the first calls; 30 syncs paid once (setup, compilation), 120 ms blocked');

    // Flat: one heading over every cell's one-off rows, after every recurring row.
    widget.groupByCell = false;
    widget.render();
    expect(drawn()).toEqual(['train:5', 'train:4', 'once: 46 syncs · 270 ms blocked', 'setup:2', 'train:7']);
    // A column the user picks: by place, no heading (the rows say "once" themselves) ...
    widget.node.querySelector<HTMLElement>('[data-sort="location"]')!.click();
    expect(drawn()).toEqual(['setup:2', 'train:4', 'train:5', 'train:7']);
    expect(widget.rows.map(r => r.querySelector('.jp-syncfree-sidebar-phase')?.textContent ?? '')).toEqual([
      'once',
      '',
      '',
      'once'
    ]);
    // ... by count, recurring first whichever way, under the heading again.
    widget.node.querySelector<HTMLElement>('[data-sort="count"]')!.click();
    expect(drawn()).toEqual(['train:4', 'train:5', 'once: 46 syncs · 270 ms blocked', 'train:7', 'setup:2']);
    widget.node.querySelector<HTMLElement>('[data-sort="count"]')!.click();
    expect(drawn()).toEqual(['train:5', 'train:4', 'once: 46 syncs · 270 ms blocked', 'setup:2', 'train:7']);
  });

  it('ranks predicted rows by count, recurring first, and says it sorts by count', () => {
    const predicted = report({
      mode: 'predict',
      sites: [
        site({ line: 2, chain: [2], kind: 'to_device', count: 16, blocked_ms: null, phase: 'once' }),
        site({ line: 4, chain: [4], count: 3, blocked_ms: null }),
        site({ line: 5, chain: [5], kind: 'to_host', count: 16, blocked_ms: null, phase: 'compile' })
      ],
      findings: []
    });
    const { widget } = panel([{ cellId: 'p', cellNumber: 1, report: predicted, previous: null }]);
    expect(widget.rows.map(r => r.dataset.line)).toEqual(['4', '2', '5']);
    const heading = widget.node.querySelector('.jp-syncfree-sidebar-once')!;
    expect(heading.nextElementSibling).toBe(widget.rows[1]);
    expect(heading.querySelector('.jp-syncfree-sidebar-once-totals')!.textContent).toBe('32 syncs');
    expect(widget.rows[2].title).toContain('once: torch.compile compiling');
    expect(widget.node.querySelector('.jp-syncfree-sidebar-column-count')!.getAttribute('aria-sort')).toBe(
      'descending'
    );
    // Sorted by rule: no heading, each row paid once says so under its count.
    widget.sort = { key: 'rule', descending: false };
    widget.render();
    expect(widget.node.querySelector('.jp-syncfree-sidebar-once')).toBeNull();
    const compiling = widget.rows.find(r => r.dataset.line === '5')!;
    expect(compiling.querySelector('.jp-syncfree-sidebar-count .jp-syncfree-sidebar-phase')!.textContent).toBe(
      'compiling'
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
