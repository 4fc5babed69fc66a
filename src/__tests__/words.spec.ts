/**
 * Words a newcomer reads in the panel, the card and the summary under a cell: plain words,
 * no internal ids or jargon ("stand-ins", "recurring", "static finding", "sync(s)", "[once]",
 * "frames"), in the text and in every tooltip (issue 39, issue 37).
 */
import { Widget } from '@lumino/widgets';
import { renderSyncCard } from '../gutter/card';
import { markerLines } from '../gutter/lines';
import { headline } from '../mime';
import { costText } from '../model';
import { SyncsPanel } from '../sidebar/panel';
import { loopReport, report, site } from './fixtures';

const JARGON = /stand-ins?|recurring|static (finding|analysis)|sync\(s\)|\[once\]|\bframes\b|\b[a-z]+_[a-z_]+\b/i;

/** The text a user can read in a node: its text, its tooltips and its accessible names. */
function readable(node: Element): string[] {
  const texts = [node.textContent ?? ''];
  for (const element of [node, ...Array.from(node.querySelectorAll('*'))]) {
    for (const name of ['title', 'aria-label', 'placeholder']) {
      const value = element.getAttribute(name);
      if (value) {
        texts.push(value);
      }
    }
  }
  return texts;
}

describe('plain words', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('the Syncs panel says what it means, also in its tooltips', () => {
    const measured = report({
      sites: [
        site({ line: 2, chain: [2], count: 100, blocked_ms: 100.99, first_ms: 100 }),
        site({ line: 3, chain: [3], kind: 'copy', label: 'a copy to the host', count: 1, blocked_ms: 5, phase: 'once' })
      ],
      findings: [
        {
          rule: 'SF101',
          range: { line: 4, col: 0, end_line: 4, end_col: 8 },
          message: 'an `.item()` that did not run',
          certainty: 'likely',
          fix: null
        }
      ]
    });
    const widget = new SyncsPanel({ jump: jest.fn() });
    widget.source = {
      title: 'demo.ipynb',
      inputs: () => [{ cellId: 'a', cellNumber: 1, report: measured, previous: null, lineCount: 4 }]
    };
    Widget.attach(widget, document.body);
    widget.render();
    for (const text of readable(widget.node)) {
      expect(text).not.toMatch(JARGON);
    }
  });

  it('the card and the summary headline too', () => {
    const r = loopReport();
    r.truncated = { ...r.truncated, frames: true };
    const card = renderSyncCard(
      { marker: markerLines(r, 5).find(m => m.line === 4)!, report: r, stale: false, showLibraryFrames: true },
      { plan: () => ({ ok: false, reason: 'The cell changed.' }), apply: jest.fn(), close: jest.fn() }
    );
    // The library's own file names (torch/_tensor.py) are what they are: the words around them are checked.
    card.querySelectorAll('.jp-syncfree-card-frames li').forEach(li => li.remove());
    for (const text of readable(card)) {
      expect(text).not.toMatch(JARGON);
    }
    expect(headline(report({ mode: 'static', sites: [] }))).not.toMatch(JARGON);
    // "blocked" says what it is, to whoever hovers it.
    expect(card.querySelector('.jp-syncfree-card-blocked')!.getAttribute('title')).toMatch(/^How long the CPU waited/);
  });
  it("a row's tooltip says each thing once, counts as ×N; a tiny share of the GPU's time is not '0.0 %'", () => {
    const r = report({
      sites: [site({ count: 100, message: '`.item()` synced 100x, blocked 0.5 ms' })],
      findings: []
    });
    const widget = new SyncsPanel({ jump: jest.fn() });
    widget.source = { title: 'demo.ipynb', inputs: () => [{ cellId: 'a', cellNumber: 1, report: r, previous: null }] };
    Widget.attach(widget, document.body);
    widget.render();
    const title = widget.rows[0].title;
    expect(title).toBe('line 3: .item() ×100 — SF101 .item() on a CUDA tensor');
    expect(title).not.toMatch(/\d+x\b/);
    expect(costText({ cost_ms: 2.5, cost_each_ms: 0.025, cost_share: 0.0004, count: 100 })).toBe(
      "costs ≈ 0.03 ms of GPU time each time it runs (2.50 ms in all), under 0.1 % of the cell's GPU time"
    );
  });
});
