import type { ICodeCellModel } from '@jupyterlab/cells';
import type * as nbformat from '@jupyterlab/nbformat';
import type { INotebookModel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';
import { SyncReportStore, reportOfCell } from '../reports';
import { MIME_TYPE, SyncReport } from '../tokens';
import { CELL, report, site } from './fixtures';

/*
 * Stand-ins for JupyterLab's notebook, cell and output models with just the surface the
 * store reads (cells list, `outputs.get(i).toJSON()`, the `changed` signals). The real ones
 * ship as ES modules that this jest setup does not transform.
 */
class FakeOutputs {
  readonly changed = new Signal<this, void>(this);
  private _items: nbformat.IOutput[] = [];

  get length(): number {
    return this._items.length;
  }

  get(i: number): { toJSON(): nbformat.IOutput } {
    const item = this._items[i];
    // Like @jupyterlab/rendermime's OutputModel: a fresh output object around the stored data.
    return { toJSON: () => ({ ...item }) };
  }

  add(output: nbformat.IOutput): void {
    this._items.push(output);
    this.changed.emit();
  }

  clear(): void {
    this._items = [];
    this.changed.emit();
  }
}

class FakeCells {
  readonly changed = new Signal<this, void>(this);
  constructor(public items: { id: string; type: string; outputs: FakeOutputs }[]) {}

  get length(): number {
    return this.items.length;
  }

  get(i: number) {
    return this.items[i];
  }

  move(from: number, to: number): void {
    const [cell] = this.items.splice(from, 1);
    this.items.splice(to, 0, cell);
    this.changed.emit();
  }

  remove(i: number): void {
    this.items.splice(i, 1);
    this.changed.emit();
  }
}

function output(data: unknown): nbformat.IDisplayData {
  return {
    output_type: 'display_data',
    data: { [MIME_TYPE]: data, 'text/plain': 'syncfree report' } as any,
    metadata: {}
  };
}

function notebook(cells: { source: string; outputs?: nbformat.IOutput[] }[]): INotebookModel & { cells: FakeCells } {
  const items = cells.map((cell, i) => {
    const outputs = new FakeOutputs();
    (cell.outputs ?? []).forEach(o => outputs.add(o));
    return { id: `cell-${i}`, type: 'code', outputs };
  });
  return { cells: new FakeCells(items) } as unknown as INotebookModel & { cells: FakeCells };
}

const code = (model: INotebookModel, i: number) =>
  model.cells.get(i) as unknown as ICodeCellModel & { outputs: FakeOutputs };

describe('SyncReportStore', () => {
  let warn: jest.SpyInstance;
  beforeEach(() => {
    warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => warn.mockRestore());

  it('finds the reports of a notebook in cell order', () => {
    const model = notebook([
      { source: CELL, outputs: [output(report())] },
      { source: 'x = 1' },
      {
        source: CELL,
        outputs: [{ output_type: 'stream', name: 'stdout', text: 'hi' }, output(report({ cell_id: 'two' }))]
      }
    ]);
    const store = new SyncReportStore();
    store.watch('a.ipynb', model);
    expect(store.reportsOf('a.ipynb').map(r => r.cellId)).toEqual(['cell-0', 'cell-2']);
    expect(store.reportsOf('a.ipynb')[1].report.cell_id).toBe('two');
    expect(store.reportsOf('other.ipynb')).toEqual([]);
  });

  it('follows outputs: a new report appears, the replaced one becomes the previous run', () => {
    const model = notebook([{ source: CELL }]);
    const store = new SyncReportStore();
    const changed = jest.fn();
    store.changed.connect((_, path) => changed(path));
    store.watch('a.ipynb', model);
    changed.mockClear();

    const first = report({ sites: [site({ count: 5 })] });
    code(model, 0).outputs.add(output(first));
    expect(changed).toHaveBeenCalledWith('a.ipynb');
    expect(store.reportsOf('a.ipynb')[0].report).toEqual(first);

    // A re-run clears the outputs first, then the new report arrives.
    code(model, 0).outputs.clear();
    const second = report({ sites: [site({ count: 2 })] });
    code(model, 0).outputs.add(output(second));
    expect(store.reportsOf('a.ipynb')[0].report).toEqual(second);
    expect(store.previousOf('a.ipynb', 'cell-0')).toEqual(first);
  });

  it('does not signal for outputs that change no report', () => {
    const model = notebook([{ source: CELL, outputs: [output(report())] }, { source: 'print(1)' }]);
    const store = new SyncReportStore();
    store.watch('a.ipynb', model);
    const changed = jest.fn();
    store.changed.connect(changed);
    code(model, 1).outputs.add({ output_type: 'stream', name: 'stdout', text: '1\n' });
    expect(changed).not.toHaveBeenCalled();
  });

  it('ignores malformed and hostile reports with one warning each, and keeps the notebook working', () => {
    const hostile: unknown[] = [
      '{not json',
      { ...report(), version: 99 },
      report({ sites: [site({ line: 'three' as unknown as number })] }),
      { ...report(), extra: '<script>alert(1)</script>' },
      report({ sites: [site({ message: 'x'.repeat(1_000_000) })] })
    ];
    const model = notebook(hostile.map(data => ({ source: CELL, outputs: [output(data)] })));
    const store = new SyncReportStore();
    store.watch('a.ipynb', model);
    expect(store.reportsOf('a.ipynb')).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(hostile.length);
    // Reading again (every output change re-reads) does not warn again.
    code(model, 0).outputs.add({ output_type: 'stream', name: 'stdout', text: 'more' });
    expect(reportOfCell(code(model, 1))).toBeNull();
    expect(warn).toHaveBeenCalledTimes(hostile.length);
  });

  it('follows cells added, moved and deleted', () => {
    const model = notebook([{ source: CELL, outputs: [output(report())] }, { source: 'y = 2' }]);
    const store = new SyncReportStore();
    store.watch('a.ipynb', model);
    model.cells.move(0, 1);
    expect(store.reportsOf('a.ipynb').map(r => r.cellId)).toEqual(['cell-0']);
    model.cells.remove(1);
    expect(store.reportsOf('a.ipynb')).toEqual([]);
  });

  it('keeps watching while another view of the notebook is open, and follows renames', () => {
    const model = notebook([{ source: CELL, outputs: [output(report())] }]);
    const store = new SyncReportStore();
    const stopFirst = store.watch('a.ipynb', model);
    const stopSecond = store.watch('a.ipynb', model);
    stopFirst();
    expect(store.reportsOf('a.ipynb')).toHaveLength(1);
    store.rename(model, 'b.ipynb');
    expect(store.reportsOf('a.ipynb')).toEqual([]);
    expect(store.reportsOf('b.ipynb')).toHaveLength(1);
    stopSecond();
    expect(store.reportsOf('b.ipynb')).toEqual([]);
    const stale: SyncReport = report();
    code(model, 0).outputs.add(output(stale));
    expect(store.reportsOf('b.ipynb')).toEqual([]);
  });
});
