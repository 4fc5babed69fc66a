/**
 * Issue 39 (7): a merged rank report shown in a notebook is in the Syncs panel, as a group
 * of its own whose rows name the scripts' file:line, and its syncs count in the totals.
 */
import type * as nbformat from '@jupyterlab/nbformat';
import type { INotebookModel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';
import { Signal } from '@lumino/signaling';
import { MERGED_MIME_TYPE, MergedReport, MergedSite } from '../merged/model';
import { SyncReportStore } from '../reports';
import { mergedRankInput } from '../sidebar/merged';
import { SyncsPanel } from '../sidebar/panel';
import type { IRankInput } from '../sidebar/ranking';
import { report, site } from './fixtures';

function mergedSite(file: string, line: number, counts: number[], extra: Partial<MergedSite> = {}): MergedSite {
  return {
    file,
    line,
    chain: [[file, line]],
    kind: 'item',
    rule: 'SF101',
    title: '`.item()` waits for the GPU',
    label: '`.item()`',
    predicted: true,
    allowed: false,
    in_children: false,
    count: counts.reduce((a, b) => a + b, 0),
    blocked_ms: null,
    divergent: false,
    per_rank: counts.map((count, rank) => ({ rank, count, blocked_ms: null })),
    path: file,
    ...extra
  };
}

/** Two ranks of examples/ddp_train.py: 22 predicted syncs at two lines. */
function merged(): MergedReport {
  const sites = [
    mergedSite('examples/ddp_train.py', 53, [10, 10]),
    mergedSite('examples/ddp_train.py', 55, [1, 1], { kind: 'format', rule: 'SF202', label: 'formatting a tensor' })
  ];
  return {
    version: 1,
    mode: 'predict',
    device: 'CPU stand-ins (no CUDA device)',
    world_size: 2,
    summary: '22 syncs on 2 of 2 ranks at 2 sites (predicted), ranked by count.',
    ranks: [0, 1].map(rank => ({
      rank,
      syncs: 11,
      counted: 11,
      blocked_ms: null,
      unattributed: 0,
      exit_code: 0,
      hostname: 'node-a'
    })),
    missing_ranks: [],
    extremes: null,
    totals: { syncs: 22, counted: 22, sites: 2, blocked_ms: null, divergent_sites: 0 },
    sites,
    notes: [],
    problems: [],
    spread_after: 4,
    truncated: 0,
    directory: null
  };
}

describe('a merged rank report in the Syncs panel', () => {
  function panel(inputs: IRankInput[], jump = jest.fn()) {
    const widget = new SyncsPanel({ jump });
    widget.source = { title: 'ddp.ipynb', inputs: () => inputs };
    Widget.attach(widget, document.body);
    widget.render();
    return { widget, jump };
  }

  afterEach(() => {
    document.body.textContent = '';
  });

  it('is listed as a group of its own, rows naming file:line, and a click goes nowhere', () => {
    const { widget, jump } = panel([mergedRankInput(merged(), 'cell-0', 1)]);
    const text = widget.node.textContent!;
    expect(text).not.toContain('No syncs reported');
    expect(Array.from(widget.node.querySelectorAll('.jp-syncfree-sidebar-cell-name')).map(n => n.textContent)).toEqual([
      'Cell 1: merged report, 2 ranks'
    ]);
    const rows = widget.rows;
    expect(rows.map(r => r.querySelector('.jp-syncfree-sidebar-where')!.textContent)).toEqual([
      'ddp_train.py:53',
      'ddp_train.py:55'
    ]);
    expect(rows[0].querySelector('.jp-syncfree-sidebar-where')!.getAttribute('title')).toBe('examples/ddp_train.py:53');
    rows[0].click();
    rows[0].dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    expect(jump).not.toHaveBeenCalled();
    expect(widget.node.querySelector('[data-total="syncs"]')!.textContent).toBe('22 predicted syncs');
  });

  it("counts in the notebook's totals beside the cells' own reports", () => {
    const cell: IRankInput = {
      cellId: 'cell-1',
      cellNumber: 2,
      report: report({ mode: 'predict', sites: [site({ line: 3, count: 3, predicted: true })], findings: [] }),
      previous: null,
      lineCount: 4
    };
    const { widget, jump } = panel([cell, mergedRankInput(merged(), 'cell-0', 1)]);
    expect(widget.node.querySelector('[data-total="syncs"]')!.textContent).toBe('25 predicted syncs');
    const own = widget.rows.find(r => r.dataset.cellId === 'cell-1')!;
    own.click();
    expect(jump).toHaveBeenCalledWith('cell-1', 3, null);
  });
});

class FakeOutputs {
  readonly changed = new Signal<this, void>(this);
  private _items: nbformat.IOutput[] = [];

  get length(): number {
    return this._items.length;
  }

  get(i: number): { toJSON(): nbformat.IOutput } {
    const item = this._items[i];
    return { toJSON: () => ({ ...item }) };
  }

  add(output: nbformat.IOutput): void {
    this._items.push(output);
    this.changed.emit();
  }
}

describe('the reports store', () => {
  it("finds a notebook's merged rank reports and signals when one appears", () => {
    const outputs = [new FakeOutputs(), new FakeOutputs()];
    const items = outputs.map((o, i) => ({ id: `cell-${i}`, type: 'code', outputs: o }));
    const cells = { changed: new Signal<object, void>({}), length: 2, get: (i: number) => items[i] };
    const model = { cells } as unknown as INotebookModel;
    const store = new SyncReportStore();
    const changed = jest.fn();
    store.changed.connect((_, path) => changed(path));
    store.watch('ddp.ipynb', model);
    expect(store.mergedOf('ddp.ipynb')).toEqual([]);
    const data = merged();
    outputs[1].add({
      output_type: 'display_data',
      data: { [MERGED_MIME_TYPE]: data, 'text/plain': 'merged' } as unknown as nbformat.IMimeBundle,
      metadata: {}
    });
    expect(changed).toHaveBeenCalledWith('ddp.ipynb');
    expect(store.mergedOf('ddp.ipynb').map(m => m.cellId)).toEqual(['cell-1']);
    expect(store.mergedOf('ddp.ipynb')[0].merged).toBe(data);
    expect(store.reportsOf('ddp.ipynb')).toEqual([]);
  });
});
