import { history, undo } from '@codemirror/commands';
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import { sourceHash } from '../hash';
import { STALE_REASON, applyRewrite, planRewrite, rewritableFindings, rewriteUndoBoundary } from '../rewrite';
import type { Fix } from '../tokens';
import { LOOP_CELL, loopReport } from './fixtures';

const REWRITTEN = LOOP_CELL.replace('model(x).sum().item()', 'model(x).sum().detach()');

function fixOf(r = loopReport()): Fix {
  return r.findings[0].fix!;
}

function editor(text: string, extra = [] as any[]): EditorView {
  return new EditorView({ state: EditorState.create({ doc: text, extensions: [history(), ...extra] }) });
}

describe('planRewrite', () => {
  it('turns cell-relative ranges into editor changes and a preview of the affected lines', () => {
    const plan = planRewrite(LOOP_CELL, loopReport(), fixOf());
    expect(plan.ok).toBe(true);
    if (!plan.ok) {
      return;
    }
    const from = LOOP_CELL.indexOf('model(x)');
    expect(plan.changes).toEqual([
      { from, to: from + 'model(x).sum().item()'.length, insert: 'model(x).sum().detach()' }
    ]);
    expect(plan.preview).toEqual({
      firstLine: 4,
      before: ['    total += model(x).sum().item()'],
      after: ['    total += model(x).sum().detach()']
    });
  });

  it('refuses when the text no longer matches the report', () => {
    const plan = planRewrite(LOOP_CELL + ' ', loopReport(), fixOf());
    expect(plan).toEqual({ ok: false, reason: STALE_REASON });
  });

  it('counts columns in characters, as Python does, not UTF-16 units', () => {
    const text = ['s = "🚀"; t = x.item()'].join('\n');
    // Python: 's = "🚀"; t = '.index('x') == 13 (the rocket is one character).
    const fix: Fix = {
      title: 'keep on device',
      safety: 'safe',
      edits: [{ range: { line: 1, col: 13, end_line: 1, end_col: 21 }, text: 'x' }]
    };
    const r = loopReport({ source_hash: sourceHash(text) }, text);
    const plan = planRewrite(text, r, fix);
    expect(plan.ok).toBe(true);
    if (plan.ok) {
      expect(plan.preview.after).toEqual(['s = "🚀"; t = x']);
    }
  });

  it.each([
    ['a line past the cell', { line: 9, col: 0, end_line: 9, end_col: 1 }],
    ['a column past the line', { line: 2, col: 0, end_line: 2, end_col: 500 }],
    ['an end before the start', { line: 4, col: 10, end_line: 4, end_col: 2 }]
  ])('refuses %s', (_name, range) => {
    const fix: Fix = { title: 't', safety: 'safe', edits: [{ range, text: '' }] };
    const plan = planRewrite(LOOP_CELL, loopReport(), fix);
    expect(plan.ok).toBe(false);
  });

  it('refuses overlapping edits', () => {
    const fix: Fix = {
      title: 't',
      safety: 'safe',
      edits: [
        { range: { line: 4, col: 4, end_line: 4, end_col: 20 }, text: 'a' },
        { range: { line: 4, col: 10, end_line: 4, end_col: 30 }, text: 'b' }
      ]
    };
    expect(planRewrite(LOOP_CELL, loopReport(), fix)).toEqual({
      ok: false,
      reason: 'The rewrite has overlapping edits; it was not applied.'
    });
  });

  it('applies several edits of one fix against the original positions', () => {
    const fix: Fix = {
      title: 't',
      safety: 'safe',
      edits: [
        { range: { line: 5, col: 6, end_line: 5, end_col: 11 }, text: 'total.item()' },
        { range: { line: 2, col: 0, end_line: 2, end_col: 5 }, text: 'acc' }
      ]
    };
    const plan = planRewrite(LOOP_CELL, loopReport(), fix);
    expect(plan.ok && plan.preview.firstLine).toBe(2);
    expect(plan.ok && plan.preview.after[0]).toBe('acc = torch.zeros((), device="cuda")');
    expect(plan.ok && plan.preview.after[3]).toBe('print(total.item())');
  });

  it('lists only findings with a mechanical rewrite', () => {
    const r = loopReport();
    expect(rewritableFindings(r, 4)).toHaveLength(1);
    expect(rewritableFindings(r, 5)).toHaveLength(0);
    const none = loopReport({ findings: [{ ...r.findings[0], fix: { ...fixOf(r), safety: 'none' } }] });
    expect(rewritableFindings(none, 4)).toHaveLength(0);
  });
});

describe('applyRewrite', () => {
  it('is one transaction: the text changes, and one undo restores it', () => {
    const view = editor(LOOP_CELL);
    const transactions: number[] = [];
    const listening = editor(LOOP_CELL, [EditorView.updateListener.of(u => transactions.push(u.transactions.length))]);
    expect(applyRewrite(view, loopReport(), fixOf())).toEqual({ ok: true });
    expect(view.state.doc.toString()).toBe(REWRITTEN);
    expect(undo(view)).toBe(true);
    expect(view.state.doc.toString()).toBe(LOOP_CELL);

    applyRewrite(listening, loopReport(), fixOf());
    expect(transactions).toEqual([1]);
  });

  it('is refused, leaving the text alone, when the cell changed since the report', () => {
    const edited = LOOP_CELL.replace('100', '200');
    const view = editor(edited);
    const outcome = applyRewrite(view, loopReport(), fixOf());
    expect(outcome).toEqual({ ok: false, reason: STALE_REASON });
    expect(view.state.doc.toString()).toBe(edited);
  });

  it('closes the undo step of the host before and after', () => {
    const stop = jest.fn();
    const view = editor(LOOP_CELL, [rewriteUndoBoundary.of(stop)]);
    applyRewrite(view, loopReport(), fixOf());
    expect(stop).toHaveBeenCalledTimes(2);
  });
});
