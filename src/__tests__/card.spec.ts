import { history, undo } from '@codemirror/commands';
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import { ISyncCardActions, dependencyText, renderSyncCard } from '../gutter/card';
import { setMarkerOptions, setSyncReport, syncMarkers } from '../gutter/extension';
import { markerLines } from '../gutter/lines';
import { cardOf, openSyncCard, showSyncCardAtCursor, syncCard, syncCardField, toggleSyncCard } from '../gutter/tooltip';
import { planRewrite } from '../rewrite';
import { LOOP_CELL, loopReport, report, site } from './fixtures';

function actions(overrides: Partial<ISyncCardActions> = {}): ISyncCardActions {
  return {
    plan: fix => planRewrite(LOOP_CELL, loopReport(), fix),
    apply: jest.fn(() => ({ ok: true as const })),
    close: jest.fn(),
    ...overrides
  };
}

function cardFor(
  line: number,
  r = loopReport(),
  options: { stale?: boolean; showLibraryFrames?: boolean } = {},
  act = actions()
) {
  const marker = markerLines(r, 5).find(m => m.line === line)!;
  return renderSyncCard(
    { marker, report: r, stale: options.stale ?? false, showLibraryFrames: options.showLibraryFrames ?? true },
    act
  );
}

const text = (node: Element, selector: string) => Array.from(node.querySelectorAll(selector)).map(n => n.textContent);

describe('renderSyncCard', () => {
  it('says what synced, how often, for how long, and the library frames', () => {
    const card = cardFor(4);
    expect(card.querySelector('.jp-syncfree-card-title')!.textContent).toBe('Sync at line 4');
    expect(text(card, '.jp-syncfree-card-kind')).toEqual(['.item()']);
    expect(card.querySelector('.jp-syncfree-card-kind code')!.textContent).toBe('.item()');
    // The label and the numbers replace the message (which rounds its own way).
    expect(card.querySelector('.jp-syncfree-card-site .jp-syncfree-card-message')).toBeNull();
    expect(text(card, '.jp-syncfree-card-count')).toEqual(['×100']);
    expect(text(card, '.jp-syncfree-card-blocked')).toEqual(['blocked 41.2 ms']);
    expect(text(card, '.jp-syncfree-card-frames li')).toEqual(['…/site-packages/torch/_tensor.py:1042 in item']);
  });

  it('hides library frames when the setting is off', () => {
    expect(cardFor(4, loopReport(), { showLibraryFrames: false }).querySelector('.jp-syncfree-card-frames')).toBeNull();
  });

  it('shows the call chain from the outer cell line to the sync', () => {
    const r = loopReport({ sites: [site({ line: 4, chain: [2, 3, 4] })] });
    expect(text(cardFor(4, r), '.jp-syncfree-card-chain')).toEqual(['cell lines 2 → 3 → 4']);
  });

  it('names the chain lines where they are now after edits moved them (issue 39)', () => {
    const r = loopReport({ sites: [site({ line: 4, chain: [2, 3, 4] })] });
    const marker = markerLines(r, 5).find(m => m.line === 4)!;
    const card = (anchors: (line: number) => number | null) =>
      renderSyncCard({ marker, line: 6, report: r, stale: true, showLibraryFrames: true, anchors }, actions());
    expect(
      text(
        card(line => line + 2),
        '.jp-syncfree-card-chain'
      )
    ).toEqual(['cell lines 4 → 5 → 6']);
    expect(
      text(
        card(line => (line === 3 ? null : line + 2)),
        '.jp-syncfree-card-chain'
      )
    ).toEqual(['cell lines 4 → ? → 6']);
  });

  it('says what the CPU waits for by the rule category, not one remedy for every rule (issue 39)', () => {
    const rule = loopReport().rules.SF101;
    const words = (category: string, dependency: 'true' | 'false' = 'true') =>
      dependencyText({ ...rule, category, dependency });
    expect(words('Dynamic output shapes')).toBe(
      'True dependency: the CPU needs the size of the result before it can go on. The fix below avoids or defers it.'
    );
    expect(words('Library calls that sync inside')).toMatch(/^True dependency: the library reads a value/);
    expect(words('Data-dependent control flow')).not.toMatch(/hot loop|batch it/);
    expect(words('Explicit synchronization', 'false')).toBe(
      'False dependency: nothing after it needs the GPU to have finished; the wait can go.'
    );
    expect(words('Explicit synchronization', 'false')).not.toContain('value');
  });

  it('names the earlier cell and line of a function the line called (issue 39)', () => {
    const r = loopReport({
      sites: [
        site({
          line: 4,
          chain: [4],
          defined_in: { cell: 'In [3]', execution_count: 3, line: 2, text: 'return y.item()', function: 'helper' }
        })
      ]
    });
    expect(text(cardFor(4, r), '.jp-syncfree-card-defined')).toEqual([
      'in helper(), defined in In [3] line 2: return y.item()'
    ]);
  });

  it('shows the catalog entry: why, the dependency, and the before/after example', () => {
    const card = cardFor(4);
    expect(card.querySelector('.jp-syncfree-card-rule-title')!.textContent).toBe('.item() on a CUDA tensor');
    expect(card.querySelector('.jp-syncfree-card-dependency-false')!.textContent).toMatch(/^False dependency/);
    expect(card.querySelector('.jp-syncfree-card-why')!.textContent).toBe('The CPU needs the value.');
    expect(text(card, '.jp-syncfree-card-examples pre')).toEqual(['s += y.sum().item()', 's += y.sum()']);
  });

  it('offers the rewrite with a preview, the review reason, and applies it on click', () => {
    const act = actions();
    const card = cardFor(4, loopReport(), {}, act);
    const review = card.querySelector('.jp-syncfree-card-review')!;
    expect(review.textContent).toContain('total becomes a tensor');
    expect(review.querySelector('code')!.textContent).toBe('total');
    expect(text(card, '.jp-syncfree-card-del')).toEqual(['  4 -     total += model(x).sum().item()']);
    expect(text(card, '.jp-syncfree-card-add')).toEqual(['    +     total += model(x).sum().detach()']);
    card.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!.click();
    expect(act.apply).toHaveBeenCalledWith(loopReport().findings[0].fix);
    expect(act.close).toHaveBeenCalled();
  });

  it('says why when applying is refused, and stays open', () => {
    const act = actions({ apply: jest.fn(() => ({ ok: false as const, reason: 'The cell changed.' })) });
    const card = cardFor(4, loopReport(), {}, act);
    card.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!.click();
    expect(card.querySelector('.jp-syncfree-card-status')!.textContent).toBe('The cell changed.');
    expect(act.close).not.toHaveBeenCalled();
  });

  it('has no Apply button on a line without a mechanical rewrite', () => {
    expect(cardFor(5).querySelector('.jp-syncfree-card-apply')).toBeNull();
  });

  it('marks a stale card; a rewrite that cannot apply is disabled before the click, with the reason', () => {
    const reason = 'The lines of this rewrite changed since this report was made.';
    const act = actions({ plan: () => ({ ok: false as const, reason }) });
    const card = cardFor(4, loopReport(), { stale: true }, act);
    expect(card.querySelector('.jp-syncfree-card-stale')).not.toBeNull();
    expect(card.querySelector('.jp-syncfree-card-diff')).toBeNull();
    const button = card.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!;
    expect(button.disabled).toBe(true);
    const status = card.querySelector('.jp-syncfree-card-status')!;
    expect(status.textContent).toBe(reason);
    expect(button.getAttribute('aria-describedby')).toBe(status.id);
    button.click();
    expect(act.apply).not.toHaveBeenCalled();
  });

  it('on a stale card, a rewrite whose lines are unchanged keeps its preview and applies', () => {
    const act = actions();
    const card = cardFor(4, loopReport(), { stale: true }, act);
    expect(text(card, '.jp-syncfree-card-add')).toEqual(['    +     total += model(x).sum().detach()']);
    const button = card.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!;
    expect(button.disabled).toBe(false);
    button.click();
    expect(act.apply).toHaveBeenCalled();
  });

  it('says the totals of a line in the header only when it has several sites', () => {
    expect(cardFor(4).querySelector('.jp-syncfree-card-total')).toBeNull();
    const r = loopReport({
      sites: [site({ line: 4, chain: [4], count: 3 }), site({ line: 4, chain: [4], kind: 'print', count: 2 })]
    });
    expect(text(cardFor(4, r), '.jp-syncfree-card-total')).toEqual(['×5 · blocked 1.00 ms']);
  });

  it('describes static findings that did not run', () => {
    const r = report({ sites: [] });
    const card = renderSyncCard(
      { marker: markerLines(r, 4)[0], report: r, stale: false, showLibraryFrames: true },
      actions()
    );
    expect(card.querySelector('.jp-syncfree-card-title')!.textContent).toBe('Likely sync at line 3 (did not run)');
    expect(card.querySelector('.jp-syncfree-card-finding')!.textContent).toContain('copies the value to the host');
  });

  it('closes on Escape', () => {
    const act = actions();
    const card = cardFor(4, loopReport(), {}, act);
    card.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
    expect(act.close).toHaveBeenCalled();
  });

  it('sets every report string as text', () => {
    const evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>';
    const base = loopReport();
    const r = loopReport({
      sites: [
        site({ line: 4, chain: [4], message: evil, thread: evil, frames: [{ file: evil, line: 1, name: evil }] })
      ],
      rules: {
        SF101: { ...base.rules.SF101, title: evil, why: evil, fix: evil, example_before: evil, example_after: evil }
      },
      findings: [{ ...base.findings[0], message: evil, fix: { ...base.findings[0].fix!, title: evil, reason: evil } }]
    });
    const card = cardFor(4, r);
    expect(card.querySelector('img')).toBeNull();
    expect(card.querySelector('script')).toBeNull();
    expect(card.textContent).toContain(evil);
    expect((window as any).pwned).toBeUndefined();
  });
});

describe('the card in an editor', () => {
  function editor(doc = LOOP_CELL): EditorView {
    const view = new EditorView({
      state: EditorState.create({ doc, extensions: [history(), syncMarkers(), syncCard()] }),
      parent: document.body
    });
    view.dispatch({ effects: [setMarkerOptions.of({ showLibraryFrames: true }), setSyncReport.of(loopReport())] });
    return view;
  }

  afterEach(() => {
    document.body.textContent = '';
  });

  it('opens from a marker click and closes on a second click', () => {
    const view = editor();
    toggleSyncCard(view, 4);
    expect(view.state.field(syncCardField)?.pinned).toBe(true);
    expect(cardOf(view)?.querySelector('.jp-syncfree-card-title')?.textContent).toBe('Sync at line 4');
    toggleSyncCard(view, 4);
    expect(view.state.field(syncCardField)).toBeNull();
    view.destroy();
  });

  it('opens at the cursor from the keyboard and takes the focus', () => {
    const view = editor();
    view.dispatch({ selection: { anchor: view.state.doc.line(2).from } });
    expect(showSyncCardAtCursor(view)).toBe(false);
    view.dispatch({ selection: { anchor: view.state.doc.line(4).from + 2 } });
    expect(showSyncCardAtCursor(view)).toBe(true);
    const card = cardOf(view)!;
    expect(document.activeElement).toBe(card);
    view.destroy();
  });

  it('applies the rewrite from the card as one undoable edit, then closes', () => {
    const view = editor();
    toggleSyncCard(view, 4);
    cardOf(view)!.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!.click();
    expect(view.state.doc.line(4).text).toBe('    total += model(x).sum().detach()');
    expect(view.state.field(syncCardField)).toBeNull();
    undo(view);
    expect(view.state.doc.toString()).toBe(LOOP_CELL);
    view.destroy();
  });

  it('refuses in the card when the cell was edited since the report', () => {
    const view = editor(LOOP_CELL + '\n# later edit');
    toggleSyncCard(view, 4);
    const card = cardOf(view)!;
    expect(card.querySelector('.jp-syncfree-card-stale')).not.toBeNull();
    card.querySelector<HTMLButtonElement>('.jp-syncfree-card-apply')!.click();
    expect(card.querySelector('.jp-syncfree-card-status')!.textContent).toMatch(/changed since this report/);
    expect(view.state.doc.toString()).toBe(LOOP_CELL + '\n# later edit');
    view.destroy();
  });

  it('closes when the cell is edited or the report replaced', () => {
    const view = editor();
    view.dispatch({ effects: openSyncCard.of({ line: 4, pinned: true }) });
    view.dispatch({ changes: { from: 0, insert: '#' } });
    expect(view.state.field(syncCardField)).toBeNull();
    view.dispatch({ effects: openSyncCard.of({ line: 4, pinned: true }) });
    view.dispatch({ effects: setSyncReport.of(null) });
    expect(view.state.field(syncCardField)).toBeNull();
    view.destroy();
  });
});

describe('Escape in the editor', () => {
  it('closes an open card and is handled; without a card it is left to JupyterLab', () => {
    const view = new EditorView({
      state: EditorState.create({ doc: LOOP_CELL, extensions: [syncMarkers(), syncCard()] }),
      parent: document.body
    });
    view.dispatch({ effects: setSyncReport.of(loopReport()) });
    toggleSyncCard(view, 4);
    const escape = () => {
      const event = new KeyboardEvent('keydown', { key: 'Escape', keyCode: 27, bubbles: true, cancelable: true });
      view.contentDOM.dispatchEvent(event);
      return event.defaultPrevented;
    };
    expect(escape()).toBe(true);
    expect(view.state.field(syncCardField)).toBeNull();
    expect(escape()).toBe(false);
    view.destroy();
    document.body.textContent = '';
  });
});
