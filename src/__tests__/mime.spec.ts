import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';
import { SyncReportRenderer } from '../mime';
import { MIME_TYPE } from '../tokens';
import { loopReport, site } from './fixtures';

function render(data: unknown, actions = {}): SyncReportRenderer {
  const renderer = new SyncReportRenderer({ mimeType: MIME_TYPE } as IRenderMime.IRendererOptions, actions);
  void renderer.renderModel({ data: { [MIME_TYPE]: data } } as unknown as IRenderMime.IMimeModel);
  Widget.attach(renderer, document.body);
  return renderer;
}

describe('SyncReportRenderer', () => {
  afterEach(() => {
    document.body.textContent = '';
  });

  it('summarises the sites, most costly first: line, what, count, blocked', () => {
    const node = render(loopReport()).node;
    expect(node.querySelector('.jp-syncfree-title')!.textContent).toBe(
      'syncfree: 101 syncs at 2 sites, blocked 42.5 ms · warn · NVIDIA H100'
    );
    const rows = Array.from(node.querySelectorAll('tbody tr')).map(r =>
      Array.from(r.querySelectorAll('td')).slice(0, 4).map(td => td.textContent)
    );
    expect(rows).toEqual([
      ['4', 'item', '×100', '41.2 ms'],
      ['5', 'print', '×1', '1.30 ms']
    ]);
  });

  it('opens the sidebar and jumps to a line', () => {
    const openSidebar = jest.fn();
    const jumpToLine = jest.fn();
    const node = render(loopReport(), { openSidebar, jumpToLine }).node;
    node.querySelector<HTMLButtonElement>('.jp-syncfree-open-sidebar')!.click();
    expect(openSidebar).toHaveBeenCalled();
    node.querySelectorAll<HTMLElement>('tbody tr')[1].click();
    expect(jumpToLine).toHaveBeenCalledWith(node, 5);
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

describe('a long report', () => {
  it('shows the most costly sites first and the rest on request', () => {
    const kind = (i: number) => `kind_${'abcdefghijklmnopqrst'[i]}`;
    const sites = Array.from({ length: 20 }, (_, i) => site({ line: 1 + (i % 4), chain: [1 + (i % 4)], kind: kind(i), blocked_ms: i }));
    const node = render(loopReport({ sites })).node;
    const lines = () => Array.from(node.querySelectorAll('tbody tr td:nth-child(2)')).map(td => td.textContent);
    expect(lines()).toEqual([19, 18, 17, 16, 15, 14, 13, 12].map(kind));
    node.querySelector<HTMLButtonElement>('.jp-syncfree-more')!.click();
    expect(lines()).toHaveLength(20);
    document.body.textContent = '';
  });
});
