import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';
import { MAX_PLACEHOLDER_ROWS, SyncReportRenderer, headline, summaryRows } from '../mime';
import { MIME_TYPE } from '../tokens';
import { SiteRanking } from '../sidebar/ranking';
import { loopReport, report, site } from './fixtures';

/**
 * A stand-in for the browser's IntersectionObserver: nothing is near the viewport until
 * `reveal` says so (@jupyterlab/testing's shim never reports anything).
 */
class FakeIntersectionObserver {
  static instances: FakeIntersectionObserver[] = [];
  observed = new Set<Element>();

  constructor(
    private readonly _callback: IntersectionObserverCallback,
    readonly options: IntersectionObserverInit = {}
  ) {
    FakeIntersectionObserver.instances.push(this);
  }

  observe(target: Element): void {
    this.observed.add(target);
  }

  unobserve(target: Element): void {
    this.observed.delete(target);
  }

  disconnect(): void {
    this.observed.clear();
  }

  /** Report every observed element inside `root` as near the viewport. */
  static reveal(root: Element): void {
    for (const observer of FakeIntersectionObserver.instances) {
      const near = [...observer.observed].filter(target => root.contains(target));
      const entries = near.map(target => ({ target, isIntersecting: true }) as unknown as IntersectionObserverEntry);
      if (entries.length > 0) {
        observer._callback(entries, observer as unknown as IntersectionObserver);
      }
    }
  }
}

const shimObserver = window.IntersectionObserver;
beforeAll(() => {
  window.IntersectionObserver = FakeIntersectionObserver as unknown as typeof IntersectionObserver;
});
afterAll(() => {
  window.IntersectionObserver = shimObserver;
});

function renderHidden(data: unknown, actions = {}): SyncReportRenderer {
  const renderer = new SyncReportRenderer({ mimeType: MIME_TYPE } as IRenderMime.IRendererOptions, actions);
  void renderer.renderModel({ data: { [MIME_TYPE]: data } } as unknown as IRenderMime.IMimeModel);
  Widget.attach(renderer, document.body);
  return renderer;
}

/** Render a report in view: its site table is drawn. */
function render(data: unknown, actions = {}): SyncReportRenderer {
  const renderer = renderHidden(data, actions);
  FakeIntersectionObserver.reveal(renderer.node);
  return renderer;
}

describe('SyncReportRenderer', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('a predicted summary under the cell says there is no cost and has no column of dashes', () => {
    const predicted = report({
      mode: 'predict',
      totals: { syncs: 3, sites: 1, blocked_ms: null, wall_ms: 1 },
      sites: [site({ count: 3, blocked_ms: null, predicted: true })],
      findings: []
    });
    expect(headline(predicted)).toBe('syncfree: 3 predicted syncs at 1 site · no cost without a GPU');
    // Said once: a report whose note says it already (report.py's) is not told twice.
    const noted = { ...predicted, notes: ['no GPU, no cost: what a sync costs is measured only on a GPU'] };
    expect(headline(noted)).toBe('syncfree: 3 predicted syncs at 1 site');
    const node = render(predicted).node;
    expect(Array.from(node.querySelectorAll('thead th')).map(th => th.textContent)).toEqual([
      'line',
      'what',
      'count',
      'rule'
    ]);
    expect(Array.from(node.querySelectorAll('tbody td')).map(td => td.textContent)).toEqual([
      '3',
      '.item()',
      '×3',
      'SF101 .item() on a CUDA tensor'
    ]);
  });

  it('summarises the sites, most costly first: line, what, count, blocked', () => {
    const node = render(loopReport()).node;
    expect(node.querySelector('.jp-syncfree-title')!.textContent).toBe(
      'syncfree: 101 syncs at 2 sites, blocked 42.5 ms · NVIDIA H100'
    );
    const rows = Array.from(node.querySelectorAll('tbody tr')).map(r =>
      Array.from(r.querySelectorAll('td'))
        .slice(0, 4)
        .map(td => td.textContent)
    );
    expect(rows).toEqual([
      ['4', '.item()', '×100', '41.2 ms'],
      ['5', 'printing a tensor', '×1', '1.30 ms']
    ]);
  });

  it('names the library line and the earlier cell under a site, as text (issue 39)', () => {
    const r = loopReport();
    r.sites[0].library = {
      package: 'pkg',
      file: 'pkg/__init__.py',
      line: 12,
      function: 'check',
      text: 'if bool(x.any()):',
      rule: 'SF103'
    };
    r.sites[1].defined_in = {
      cell: 'In [3]',
      execution_count: 3,
      line: 2,
      text: 'return y.item() # <b>x</b>',
      function: 'helper'
    };
    const node = render(r).node;
    const where = Array.from(node.querySelectorAll('tbody tr')).map(row =>
      Array.from(row.querySelectorAll('.jp-syncfree-site-where')).map(div => div.textContent)
    );
    expect(where).toEqual([
      ['inside pkg/__init__.py:12 if bool(x.any()): SF103'],
      ['in helper(), defined in In [3] line 2: return y.item() # <b>x</b>']
    ]);
    expect(node.querySelector('b')).toBeNull();
  });

  it('opens the sidebar and jumps to a line', () => {
    const openSidebar = jest.fn();
    const jumpToLine = jest.fn();
    const node = render(loopReport(), { openSidebar, jumpToLine }).node;
    node.querySelector<HTMLButtonElement>('.jp-syncfree-open-sidebar')!.click();
    expect(openSidebar).toHaveBeenCalled();
    node.querySelectorAll<HTMLElement>('tbody tr')[1].click();
    expect(jumpToLine).toHaveBeenCalledWith(node, 5, null);
    // A row with a finding of its rule on its line goes to the call's column.
    node.querySelectorAll<HTMLElement>('tbody tr')[0].click();
    expect(jumpToLine).toHaveBeenLastCalledWith(node, 4, 13);
  });

  it('shows a malformed report as one line, with a console warning', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const node = render({ version: 1, sites: 'everything' }).node;
    expect(node.textContent).toMatch(/malformed/);
    expect(node.querySelector('table')).toBeNull();
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });

  it('sets report strings as text', () => {
    const evil = '<img src=x onerror="window.pwned=1">';
    const node = render(
      loopReport({ notes: [evil], sites: [site({ message: evil })], error: { type: evil, message: evil, line: 2 } })
    ).node;
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(evil);
  });
});

describe("sites past the cell's end (issue 39, 12c)", () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('are left out of the summary as the Syncs panel leaves them out, and the counts agree', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    // A crafted report: two of its three sites are on lines a 4-line cell does not have.
    const crafted = report({
      sites: [
        site({ line: 3, count: 2, blocked_ms: 0.4 }),
        site({ line: 40, count: 7, blocked_ms: 3 }),
        site({ line: 41, count: 5, blocked_ms: 1 })
      ],
      totals: { syncs: 14, sites: 3, blocked_ms: 4.4, wall_ms: 3 },
      findings: []
    });
    const node = render(crafted, { cellLines: () => ({ lineCount: 4 }) }).node;
    const rows = Array.from(node.querySelectorAll('tbody tr')).map(r => (r as HTMLElement).dataset.line);
    expect(rows).toEqual(['3']);
    expect(node.querySelector('.jp-syncfree-title')!.textContent).toBe(
      'syncfree: 2 syncs at 1 site, blocked 0.40 ms · NVIDIA H100'
    );
    expect(node.querySelector('.jp-syncfree-left-out')!.textContent).toBe(
      "2 sites on lines past the cell's end (line 40, 41) left out: this report does not match the cell"
    );
    const panel = new SiteRanking([{ cellId: 'abc', cellNumber: 1, report: crafted, previous: null, lineCount: 4 }]);
    expect(panel.flat().map(r => r.line)).toEqual([3]);
    expect([panel.totals().syncs, panel.totals().sites, panel.totals().blockedMs]).toEqual([2, 1, 0.4]);
    warn.mockRestore();
  });

  it('are all listed where the host cannot say which cell the summary is under', () => {
    const crafted = report({ sites: [site({ line: 3 }), site({ line: 40 })], findings: [] });
    const node = render(crafted).node;
    expect(node.querySelectorAll('tbody tr').length).toBe(2);
    expect(node.querySelector('.jp-syncfree-left-out')).toBeNull();
  });
});

describe('code spans', () => {
  it('become <code> elements in notes, errors, findings and rule titles: no raw backticks', () => {
    const node = render(
      loopReport({
        notes: ['`--mode error` stops at the first sync'],
        error: { type: 'RuntimeError', message: 'line 4: `.item()` synchronized', line: 4 },
        findings: [
          {
            rule: 'SF101',
            range: { line: 2, col: 0, end_line: 2, end_col: 4 },
            message: '`x.item()` waits for the GPU',
            certainty: 'certain',
            fix: null
          }
        ]
      })
    ).node;
    expect(node.textContent).not.toContain('`');
    expect(Array.from(node.querySelectorAll('code')).map(c => c.textContent)).toEqual(
      expect.arrayContaining(['--mode error', '.item()', 'x.item()'])
    );
    document.body.textContent = '';
  });
});

describe('a long report', () => {
  it('shows the most costly sites first and the rest on request', () => {
    const kind = (i: number) => `kind ${'abcdefghijklmnopqrst'[i]}`;
    const sites = Array.from({ length: 20 }, (_, i) =>
      site({ line: 1 + (i % 4), chain: [1 + (i % 4)], kind: 'other', label: kind(i), blocked_ms: i })
    );
    const node = render(loopReport({ sites })).node;
    const lines = () => Array.from(node.querySelectorAll('tbody tr td:nth-child(2)')).map(td => td.textContent);
    expect(lines()).toEqual([19, 18, 17, 16, 15, 14, 13, 12].map(kind));
    node.querySelector<HTMLButtonElement>('.jp-syncfree-more')!.click();
    expect(lines()).toHaveLength(20);
    document.body.textContent = '';
  });
});

describe('a summary away from the viewport', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('is a placeholder of about its height until it comes near, then draws', () => {
    const renderer = renderHidden(loopReport());
    const node = renderer.node;
    expect(node.querySelector('.jp-syncfree-title')).toBeNull();
    expect(node.querySelector('table')).toBeNull();
    // Empty, which the stylesheet sizes from the rows it will take: the headline, then
    // two rows and the table's header.
    expect(node.matches('.jp-syncfree-summary:empty')).toBe(true);
    expect(node.classList.contains('jp-syncfree-rows-5')).toBe(true);

    FakeIntersectionObserver.reveal(node);
    expect(node.matches('.jp-syncfree-summary:empty')).toBe(false);
    expect(node.querySelector('.jp-syncfree-title')!.textContent).toMatch(/^syncfree: 101 syncs/);
    expect(node.querySelectorAll('tbody tr')).toHaveLength(2);
    renderer.dispose();
  });

  it('says at once when its report is malformed', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const renderer = renderHidden({ version: 1, sites: 'no' });
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
    expect(renderer.node.matches(':empty')).toBe(false);
    expect(renderer.node.querySelector('.jp-syncfree-invalid')!.textContent).toMatch(/malformed/);
    renderer.dispose();
  });

  it('stops waiting when the summary is re-rendered or disposed', () => {
    const renderer = renderHidden(loopReport());
    const observed = () => FakeIntersectionObserver.instances.reduce((n, o) => n + o.observed.size, 0);
    expect(observed()).toBe(1);
    void renderer.renderModel({ data: { [MIME_TYPE]: loopReport() } } as unknown as IRenderMime.IMimeModel);
    expect(observed()).toBe(1);
    renderer.dispose();
    expect(observed()).toBe(0);
  });
});

// jest's module wrapper defines it (the test build has no Node types).
declare const __dirname: string;

describe('placeholder heights', () => {
  const { readFileSync } = jest.requireActual<{ readFileSync: (path: string, encoding: string) => string }>('fs');
  const css = readFileSync(`${__dirname}/../../style/base.css`, 'utf8');

  it('has a stylesheet rule for every row count a placeholder can take', () => {
    for (let rows = 1; rows <= MAX_PLACEHOLDER_ROWS; rows++) {
      // Whitespace as any formatter writes it.
      expect(css.replace(/\s+/g, ' ')).toContain(`.jp-syncfree-rows-${rows} { --jp-syncfree-rows: ${rows}; }`);
    }
  });

  it('counts the headline, notes, table and findings, up to the most', () => {
    expect(summaryRows(loopReport())).toBe(5);
    const long = loopReport({ sites: Array.from({ length: 30 }, (_, i) => site({ line: i + 1 })), notes: ['a', 'b'] });
    expect(summaryRows(long)).toBe(2 + 2 + 8 + 2);
    const huge = loopReport({ notes: Array.from({ length: 40 }, () => 'note') });
    expect(summaryRows(huge)).toBe(MAX_PLACEHOLDER_ROWS);
  });
});

describe('a summary in a notebook', () => {
  it("is watched against the notebook's scroll container, from when it is attached", () => {
    const scroller = document.createElement('div');
    scroller.className = 'jp-WindowedPanel-outer';
    document.body.appendChild(scroller);
    const renderer = new SyncReportRenderer({ mimeType: MIME_TYPE } as IRenderMime.IRendererOptions, {});
    void renderer.renderModel({ data: { [MIME_TYPE]: loopReport() } } as unknown as IRenderMime.IMimeModel);
    const watching = () => FakeIntersectionObserver.instances.filter(o => o.observed.has(renderer.node));
    // Not in the document yet: nothing to measure against.
    expect(watching()).toHaveLength(0);
    Widget.attach(renderer, scroller);
    expect(watching()).toHaveLength(1);
    expect(watching()[0].options.root).toBe(scroller);
    expect(watching()[0].options.rootMargin).toBe('1500px 0px');
    FakeIntersectionObserver.reveal(scroller);
    expect(renderer.node.querySelectorAll('tbody tr')).toHaveLength(2);
    expect(watching()).toHaveLength(0);
    renderer.dispose();
    document.body.textContent = '';
  });
});

describe('reading the report of an output model', () => {
  it('uses the stored bundle rather than the copy that `data` makes', () => {
    const stored = loopReport();
    const copy = jest.fn(() => ({ [MIME_TYPE]: JSON.parse(JSON.stringify(stored)) }));
    const model = {
      get data() {
        return copy();
      },
      toJSON: () => ({ output_type: 'display_data', data: { [MIME_TYPE]: stored }, metadata: {} })
    };
    const renderer = new SyncReportRenderer({ mimeType: MIME_TYPE } as IRenderMime.IRendererOptions, {});
    void renderer.renderModel(model as unknown as IRenderMime.IMimeModel);
    Widget.attach(renderer, document.body);
    FakeIntersectionObserver.reveal(renderer.node);
    expect(copy).not.toHaveBeenCalled();
    expect(renderer.node.querySelectorAll('tbody tr')).toHaveLength(2);
    renderer.dispose();
    document.body.textContent = '';
  });
});
