import { Widget } from '@lumino/widgets';
import { renderSyncCard } from '../gutter/card';
import { markerLines } from '../gutter/lines';
import { libraryText, librarySwitch } from '../library';
import { SyncsPanel } from '../sidebar/panel';
import { report, site } from './fixtures';
import type { SyncReport } from '../tokens';

// A sync inside an installed package (issue 21): the user's line 3 called trainer.train(),
// the Trainer's own line checked the loss. The text is hostile on purpose: it must stay text.
const LIBRARY = {
  package: 'transformers',
  file: 'transformers/trainer.py',
  line: 1919,
  function: 'Trainer._run_epoch',
  text: 'if torch.isnan(loss) or "<img src=x onerror=alert(1)>":',
  rule: 'SF103',
  entry: {
    code: 'SFL101',
    title: "The transformers Trainer checks each step's loss for NaN/Inf on the CPU",
    how_often: 'every training step',
    switch: 'TrainingArguments(logging_nan_inf_filter=False)'
  }
};

function libraryReport(): SyncReport {
  const r = report({
    sites: [
      site({
        kind: 'python_bool',
        count: 16,
        rule: 'SF700',
        label: 'truth value of a tensor',
        message: 'truth value of a tensor synced 16x inside transformers',
        library: LIBRARY
      })
    ]
  });
  r.rules.SF103 = { ...r.rules.SF101, code: 'SF103', title: 'A Python condition on a CUDA tensor' };
  r.rules.SF700 = { ...r.rules.SF101, code: 'SF700', title: 'A library call reads tensor values' };
  return r;
}

describe('library lines', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('reads as one line of text, with the switch apart', () => {
    expect(libraryText(LIBRARY)).toBe(`inside transformers/trainer.py:1919 \`${LIBRARY.text}\` SF103`);
    expect(librarySwitch(LIBRARY)).toBe(
      'Switch: TrainingArguments(logging_nan_inf_filter=False) (every training step, SFL101)'
    );
    expect(librarySwitch({ ...LIBRARY, entry: undefined })).toBeNull();
  });

  it('the card shows the library line under the user line, its rule and its switch, as text', () => {
    const r = libraryReport();
    const marker = markerLines(r, 5).find(m => m.line === 3)!;
    const card = renderSyncCard(
      { marker, report: r, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    const line = card.querySelector('.jp-syncfree-card-library-line')!;
    expect(line.textContent).toBe(`inside transformers/trainer.py:1919 ${LIBRARY.text} SF103`);
    expect(line.querySelector('code')!.textContent).toBe(LIBRARY.text);
    expect(card.querySelector('img')).toBeNull();
    expect(card.querySelector('.jp-syncfree-card-library-switch')!.textContent).toContain(
      'TrainingArguments(logging_nan_inf_filter=False)'
    );
    // The rules of both lines are explained: the user's (a library call) and the library's.
    const codes = Array.from(card.querySelectorAll('.jp-syncfree-card-rule-code')).map(n => n.textContent);
    expect(codes).toEqual(expect.arrayContaining(['SF700', 'SF103']));
  });

  it('a site without a library line has none', () => {
    const r = report();
    const marker = markerLines(r, 5).find(m => m.line === 3)!;
    const card = renderSyncCard(
      { marker, report: r, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    expect(card.querySelector('.jp-syncfree-card-library')).toBeNull();
  });

  it('the card marks a site paid once, or while torch.compile compiled', () => {
    for (const [phase, badge] of [
      ['once', 'once'],
      ['compile', 'once: compiling']
    ] as const) {
      const r = report({ sites: [site({ phase })] });
      const marker = markerLines(r, 5).find(m => m.line === 3)!;
      const card = renderSyncCard(
        { marker, report: r, stale: false, showLibraryFrames: true },
        { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
      );
      expect(card.querySelector('.jp-syncfree-card-phase')!.textContent).toBe(badge);
    }
    const r = report();
    const marker = markerLines(r, 5).find(m => m.line === 3)!;
    const card = renderSyncCard(
      { marker, report: r, stale: false, showLibraryFrames: true },
      { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
    );
    expect(card.querySelector('.jp-syncfree-card-phase')).toBeNull();
  });

  it("the card shows a recurring site's first call apart from the rest, and not a one-off's", () => {
    const cardOf = (r: SyncReport) =>
      renderSyncCard(
        { marker: markerLines(r, 5).find(m => m.line === 3)!, report: r, stale: false, showLibraryFrames: true },
        { plan: jest.fn(), apply: jest.fn(), close: jest.fn() }
      );
    const warm = report({ sites: [site({ count: 20, blocked_ms: 98.247, first_ms: 98.0 })] });
    expect(cardOf(warm).querySelector('.jp-syncfree-card-first')!.textContent).toBe(
      'first sync 98.0 ms, then 0.013 ms per sync ×19'
    );
    const once = report({ sites: [site({ count: 16, blocked_ms: 120, first_ms: 4, phase: 'once' })] });
    expect(cardOf(once).querySelector('.jp-syncfree-card-first')).toBeNull();
    const single = report({ sites: [site({ count: 1, blocked_ms: 5, first_ms: 5 })] });
    expect(cardOf(single).querySelector('.jp-syncfree-card-first')).toBeNull();
    // Predict mode and reports written before first_ms: nothing to split.
    expect(cardOf(report()).querySelector('.jp-syncfree-card-first')).toBeNull();
  });

  it('the Syncs panel shows where inside the package, the whole line and switch in its title', () => {
    const widget = new SyncsPanel({ jump: jest.fn() });
    const input = { cellId: 'abc', cellNumber: 1, report: libraryReport(), previous: null };
    widget.source = { title: 'demo.ipynb', inputs: () => [input] };
    Widget.attach(widget, document.body);
    widget.render();
    const library = widget.node.querySelector('.jp-syncfree-sidebar-library') as HTMLElement;
    expect(library.textContent).toBe('inside transformers/trainer.py:1919');
    expect(library.title).toContain('TrainingArguments(logging_nan_inf_filter=False)');
    expect(widget.node.querySelector('img')).toBeNull();
  });
});
