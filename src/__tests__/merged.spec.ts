import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';
import {
  MERGED_MIME_TYPE,
  MergedReport,
  MergedSite,
  extremesText,
  median,
  rankColumns,
  fileBrowserPath,
  siteRankCells,
  spreadOf,
  totalsRankCells
} from '../merged/model';
import { MERGED_ROWS, MergedReportRenderer } from '../merged/renderer';

function mergedSite(line: number, counts: number[], extra: Partial<MergedSite> = {}): MergedSite {
  return {
    file: 'examples/ddp_train.py',
    line,
    chain: [['examples/ddp_train.py', line]],
    kind: 'item',
    rule: 'SF101',
    title: '`.item()` waits for the GPU',
    label: '`.item()`',
    predicted: true,
    allowed: false,
    in_children: false,
    count: counts.reduce((a, b) => a + b, 0),
    blocked_ms: null,
    divergent: counts.some(c => c === 0),
    per_rank: counts.map((count, rank) => ({ rank, count, blocked_ms: null })),
    path: 'examples/ddp_train.py',
    ...extra
  };
}

/** What python_helper/syncfree/distributed/display.py gives for examples/ddp_train.py on 2 ranks. */
function pairReport(
  sites: MergedSite[] = [
    mergedSite(53, [10, 10]),
    mergedSite(55, [2, 0], {
      kind: 'format',
      rule: 'SF202',
      title: 'Formatting a CUDA tensor into a string waits for the GPU',
      label: 'formatting a tensor'
    })
  ]
): MergedReport {
  const counted = (rank: number) => sites.reduce((n, s) => n + s.per_rank[rank].count, 0);
  return {
    version: 1,
    mode: 'predict',
    device: 'CPU stand-ins (no CUDA device)',
    world_size: 2,
    summary:
      '22 syncs on 2 of 2 ranks at 2 sites (predicted), ranked by count; 1 divergent site (made on some ranks only).',
    ranks: [0, 1].map(rank => ({
      rank,
      syncs: counted(rank),
      counted: counted(rank),
      blocked_ms: null,
      unattributed: 0,
      exit_code: 0,
      hostname: 'node-a'
    })),
    missing_ranks: [],
    extremes: { least: 1, most: 0 },
    totals: { syncs: 22, counted: 22, sites: sites.length, blocked_ms: null, divergent_sites: 1 },
    sites,
    notes: ['No CUDA device: syncs predicted on CPU stand-ins'],
    problems: [],
    spread_after: 4,
    truncated: 0,
    directory: null
  };
}

function render(data: unknown, actions = {}): HTMLElement {
  const renderer = new MergedReportRenderer({ mimeType: MERGED_MIME_TYPE } as IRenderMime.IRendererOptions, actions);
  void renderer.renderModel({ data: { [MERGED_MIME_TYPE]: data } } as unknown as IRenderMime.IMimeModel);
  // In a notebook the output is attached after it is rendered.
  Widget.attach(renderer, document.body);
  return renderer.node;
}

const texts = (nodes: NodeListOf<Element>) => [...nodes].map(n => n.textContent);

describe('the merged report model', () => {
  it('has a column per rank up to spread_after ranks, min/median/max past it', () => {
    const report = pairReport();
    expect(rankColumns(report).map(c => c.label)).toEqual(['rank 0', 'rank 1']);
    const six = { ...report, ranks: [0, 1, 2, 3, 4, 5].map(rank => ({ ...report.ranks[0], rank })) };
    expect(rankColumns(six).map(c => c.label)).toEqual(['min', 'median', 'max']);
    const site = mergedSite(53, [21, 20, 2, 20, 21, 20]);
    expect(siteRankCells(site, rankColumns(six)).map(c => c.text)).toEqual(['×2 (rank 2)', '×20', '×21 (rank 0)']);
  });

  it('names the lowest rank on equal counts and takes the median as Python does', () => {
    const spread = spreadOf([
      { rank: 3, count: 5, blocked_ms: 1.5 },
      { rank: 1, count: 5, blocked_ms: 9 },
      { rank: 2, count: 7, blocked_ms: null }
    ])!;
    expect([spread.min.rank, spread.max.rank, spread.median]).toEqual([1, 2, 5]);
    expect([spread.leastBlocked!.rank, spread.mostBlocked!.rank]).toEqual([3, 1]);
    expect(median([4, 1, 3, 2])).toBe(2.5);
  });

  it('marks the ranks that never made a divergent site, and totals each rank', () => {
    const report = pairReport();
    const columns = rankColumns(report);
    const cells = siteRankCells(report.sites[1], columns);
    expect(cells.map(c => [c.text, c.absent])).toEqual([
      ['×2', false],
      ['—', true]
    ]);
    expect(cells[1].title).toBe('rank 1 did not make this sync');
    expect(totalsRankCells(report, columns).map(c => c.text)).toEqual(['×12', '×10']);
  });

  it('names the ranks that did most and least, unless they did the same', () => {
    expect(extremesText(pairReport())).toBe('Most: rank 0: 12 syncs · least: rank 1: 10 syncs');
    expect(extremesText(pairReport([mergedSite(53, [10, 10])]))).toBeNull();
  });

  it("finds a site's file from the notebook's folder, never above the server's root", () => {
    expect(fileBrowserPath('examples/a.py', 'work/train.ipynb')).toBe('work/examples/a.py');
    expect(fileBrowserPath('a.py', 'train.ipynb')).toBe('a.py');
    expect(fileBrowserPath('../src/a.py', 'work/nb/train.ipynb')).toBe('work/src/a.py');
    expect(fileBrowserPath('./a.py', 'work/train.ipynb')).toBe('work/a.py');
    expect(fileBrowserPath('../a.py', 'train.ipynb')).toBeNull();
    expect(fileBrowserPath('../../etc/passwd', 'work/train.ipynb')).toBeNull();
    expect(fileBrowserPath('/etc/passwd', 'work/train.ipynb')).toBeNull();
    expect(fileBrowserPath('C:/lab/a.py', 'train.ipynb')).toBeNull();
    expect(fileBrowserPath('', 'train.ipynb')).toBeNull();
  });
});

describe('the merged report renderer', () => {
  it('shows each rank as a column, the divergent site marked and the per-rank totals', () => {
    const node = render(pairReport());
    expect(node.querySelector('.jp-syncfree-title')!.textContent).toBe(
      'syncfree · 2 ranks · predicted on the CPU (no CUDA device)'
    );
    expect(texts(node.querySelectorAll('thead th'))).toEqual(['where', 'what', 'rank 0', 'rank 1', 'total', 'rule']);
    const rows = node.querySelectorAll('tbody tr');
    expect(texts(rows[0].querySelectorAll('td'))).toEqual([
      'examples/ddp_train.py:53',
      '.item()',
      '×10',
      '×10',
      '×20',
      'SF101 .item() waits for the GPU'
    ]);
    expect(rows[0].classList.contains('jp-syncfree-divergent')).toBe(false);
    expect(rows[1].classList.contains('jp-syncfree-divergent')).toBe(true);
    const mark = rows[1].querySelector('.jp-syncfree-divergent-mark')!;
    expect(mark.textContent).toBe('divergent');
    expect((mark as HTMLElement).title).toBe('Divergent: made on rank 0 only, of 2 ranks');
    expect(texts(rows[1].querySelectorAll('td.jp-syncfree-num'))).toEqual(['×2', '—', '×2']);
    expect(texts(node.querySelectorAll('tfoot th, tfoot td'))).toEqual(['per rank', '×12', '×10', '×22', '']);
    expect(node.querySelector('.jp-syncfree-extremes')!.textContent).toBe(
      'Most: rank 0: 12 syncs · least: rank 1: 10 syncs'
    );
    expect(texts(node.querySelectorAll('.jp-syncfree-note'))).toEqual([
      'No CUDA device: syncs predicted on CPU stand-ins'
    ]);
  });

  it('cuts a long file name with an ellipsis and keeps it whole in the tooltip (issue 39)', () => {
    const file = `${'deep/'.repeat(800)}train.py`;
    const node = render(pairReport([mergedSite(3, [1, 1], { file })]));
    const place = node.querySelector<HTMLElement>('tbody td.jp-syncfree-where .jp-syncfree-where-text')!;
    expect(place.title).toBe(place.textContent);
    expect(place.textContent).toContain('train.py');
  });

  it('sets every string as text', () => {
    const hostile = '<img src=x onerror="window.pwned=1">';
    const report = pairReport([mergedSite(3, [1, 1], { label: hostile, file: hostile, title: hostile })]);
    report.notes = [hostile];
    report.problems = [hostile];
    report.summary = hostile;
    const node = render(report);
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(hostile);
  });

  it('ignores a malformed report with one line', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const node = render({ ...pairReport(), sites: 'nope' });
    expect(node.textContent).toBe(
      'syncfree: this merged report is malformed and was ignored (see the browser console).'
    );
    expect(warn).toHaveBeenCalledWith(expect.stringContaining('ignored a malformed merged report'));
    warn.mockRestore();
  });

  it('links a site to its line once the lab says it can open the file', async () => {
    const opened: [string, number][] = [];
    // As the lab's: the notebook holding the output says where its folder is, so the output must be in it.
    const locate = jest.fn(async (path: string, from: HTMLElement) =>
      from.isConnected && path.startsWith('examples/') ? `work/${path}` : null
    );
    const report = pairReport();
    report.sites[1].path = '../elsewhere/train.py';
    const node = render(report, { locate, openFile: (path: string, line: number) => opened.push([path, line]) });
    await Promise.resolve();
    await Promise.resolve();
    const links = node.querySelectorAll<HTMLButtonElement>('button.jp-syncfree-open-file');
    expect(texts(links)).toEqual(['examples/ddp_train.py:53']);
    expect(locate).toHaveBeenCalledWith('examples/ddp_train.py', node);
    links[0].click();
    expect(opened).toEqual([['work/examples/ddp_train.py', 53]]);
    // Outside what the lab can open: plain text.
    expect(node.querySelectorAll('tbody tr')[1].querySelector('td')!.textContent).toBe('examples/ddp_train.py:55');
  });

  it('shows the costliest sites first and the rest on request, linked as well', async () => {
    const sites = Array.from({ length: MERGED_ROWS + 3 }, (_, i) => mergedSite(i + 1, [1, 1]));
    const actions = { locate: async (path: string) => path, openFile: () => undefined };
    const node = render(pairReport(sites), actions);
    expect(node.querySelectorAll('tbody tr')).toHaveLength(MERGED_ROWS);
    node.querySelector<HTMLButtonElement>('.jp-syncfree-more')!.click();
    expect(node.querySelectorAll('tbody tr')).toHaveLength(MERGED_ROWS + 3);
    await Promise.resolve();
    await Promise.resolve();
    expect(node.querySelectorAll('button.jp-syncfree-open-file')).toHaveLength(MERGED_ROWS + 3);
  });
});

describe('a job of many ranks', () => {
  it('shows min, median and max with their ranks, and the least and most blocked rank', () => {
    const blocked = [4, 4.5, 40, 5, 4.2, 4.1];
    const site = mergedSite(53, [20, 20, 21, 20, 20, 2], {
      per_rank: [20, 20, 21, 20, 20, 2].map((count, rank) => ({ rank, count, blocked_ms: blocked[rank] })),
      blocked_ms: 61.8
    });
    const report = pairReport([site]);
    report.world_size = 6;
    report.ranks = blocked.map((ms, rank) => ({
      rank,
      syncs: site.per_rank[rank].count,
      counted: site.per_rank[rank].count,
      blocked_ms: ms,
      unattributed: 0,
      exit_code: 0,
      hostname: 'node-a'
    }));
    const node = render(report);
    expect(texts(node.querySelectorAll('thead th'))).toEqual([
      'where',
      'what',
      'min',
      'median',
      'max',
      'blocked',
      'total',
      'rule'
    ]);
    expect(texts(node.querySelectorAll('tbody td.jp-syncfree-num'))).toEqual([
      '×2 (rank 5)',
      '×20',
      '×21 (rank 2)',
      '4.00 ms (rank 0) – 40.0 ms (rank 2)',
      '×103 · 61.8 ms'
    ]);
    expect(texts(node.querySelectorAll('tfoot td.jp-syncfree-num'))[3]).toBe('4.00 ms (rank 0) – 40.0 ms (rank 2)');
  });

  it('compares the ranks of a recurring site by their blocked time after the first call, as merge.py does', () => {
    // Rank 0's first call pays 80 ms of warm-up; rank 3 waits longest at every further step.
    const rows = [0, 1, 2, 3, 4, 5].map(rank => ({
      rank,
      count: 10,
      blocked_ms: rank === 0 ? 89 : rank === 3 ? 38 : 11,
      first_ms: rank === 0 ? 80 : 2
    }));
    const site = mergedSite(3, [10, 10, 10, 10, 10, 10], { per_rank: rows, blocked_ms: 171, first_ms: 90 });
    const report = pairReport([site]);
    report.ranks = rows.map(row => ({ ...report.ranks[0], rank: row.rank, blocked_ms: row.blocked_ms }));
    const columns = rankColumns(report);
    const cells = siteRankCells(site, columns);
    expect(cells[3].text).toBe('9.00 ms (rank 0) – 36.0 ms (rank 3)');
    expect(cells[3].title).toBe(
      'the least and the most time a rank was blocked here, after the first call (which pays the warm-up)'
    );
    expect(cells[2].title).toContain('most blocked after the first call: rank 3, 36.0 ms');
    // A site paid once: by the whole of it (per_rank carries no first_ms then).
    const once = mergedSite(4, [1, 1, 1, 1, 1, 1], {
      phase: 'once',
      per_rank: rows.map(row => ({ rank: row.rank, count: 1, blocked_ms: row.blocked_ms })),
      blocked_ms: 171
    });
    expect(siteRankCells(once, columns)[3].text).toBe('11.0 ms (rank 1) – 89.0 ms (rank 0)');
  });
});

describe('ranks that timed their first calls apart', () => {
  it('are compared by their recurring sites after the first calls, as merge.py compares them', () => {
    // Rank 0 saved a checkpoint once (500 ms); rank 1 waited three times longer at every step.
    const report = pairReport([mergedSite(20, [10, 10])]);
    report.ranks = [
      { ...report.ranks[0], rank: 0, blocked_ms: 530, recurring_ms: 27 },
      { ...report.ranks[1], rank: 1, blocked_ms: 90, recurring_ms: 87 }
    ];
    report.extremes = { least: 0, most: 1 };
    expect(extremesText(report)).toBe(
      'Waited longest at the lines that run every step, after their first calls: rank 1: 87.0 ms of 90.0 ms · shortest: rank 0: 27.0 ms of 530 ms'
    );
    // Past spread_after ranks, the totals row's blocked column compares them the same way.
    const six = [0, 1, 2, 3, 4, 5].map(rank => ({
      ...report.ranks[0],
      rank,
      blocked_ms: rank === 0 ? 530 : 90,
      recurring_ms: rank === 0 ? 27 : rank === 4 ? 87 : 40
    }));
    const many = { ...report, ranks: six };
    const cells = totalsRankCells(many, rankColumns(many));
    expect(cells[3].text).toBe('27.0 ms (rank 0) – 87.0 ms (rank 4)');
    // Without them (predict mode, older reports): by the whole, as before.
    const old = { ...many, ranks: six.map(({ recurring_ms, ...rest }) => rest) };
    expect(totalsRankCells(old, rankColumns(old))[3].text).toBe('90.0 ms (rank 1) – 530 ms (rank 0)');
  });
});

describe('sites paid once', () => {
  it('are badged after the recurring ones, and a recurring total says what it is ranked by', () => {
    const measured = (count: number, blocked: number) => [0, 1].map(rank => ({ rank, count, blocked_ms: blocked }));
    const report = pairReport([
      mergedSite(20, [4, 4], { per_rank: measured(4, 60), blocked_ms: 120, first_ms: 30, predicted: false }),
      mergedSite(5, [1, 1], { per_rank: measured(1, 80), blocked_ms: 160, phase: 'once', predicted: false }),
      mergedSite(7, [1, 1], { per_rank: measured(1, 50), blocked_ms: 100, phase: 'compile', predicted: false })
    ]);
    const node = render(report);
    const rows = node.querySelectorAll('tbody tr');
    expect(rows[0].querySelector('.jp-syncfree-phase-mark')).toBeNull();
    const marks = [...node.querySelectorAll<HTMLElement>('.jp-syncfree-phase-mark')];
    expect(marks.map(mark => mark.textContent)).toEqual(['once', 'once: compiling']);
    expect(marks[0].title).toContain('paid once, not every step; listed after the syncs made every step');
    expect(texts(rows[1].querySelectorAll('td'))[1]).toBe('.item()once');
    const total = rows[0].querySelectorAll<HTMLElement>('td.jp-syncfree-num')[2];
    expect(total.textContent).toBe('×8 · 120 ms');
    expect(total.title).toBe(
      '90.0 ms blocked after the first calls (what the sites are ranked by), 30.0 ms at the first calls (warm-up)'
    );
    expect(rows[1].querySelectorAll<HTMLElement>('td.jp-syncfree-num')[2].title).toBe('');
  });
});
