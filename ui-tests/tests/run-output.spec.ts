import { expect, test } from '@jupyterlab/galata';
import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { cellMarkers, lineOfMarker } from './utils';

/**
 * `syncfree run NOTEBOOK --output annotated.ipynb` headless, then the annotated notebook opened in JupyterLab with
 * no kernel run: the markers come from the report outputs the command saved.
 */

const cell = (source: string[], metadata: Record<string, unknown> = {}) => ({
  cell_type: 'code',
  execution_count: null,
  id: Math.random().toString(16).slice(2, 10),
  metadata,
  outputs: [],
  source: source.join('\n')
});

const NOTEBOOK = {
  cells: [
    cell(['import torch']),
    cell(['x = torch.arange(10.0, device="cuda")', 'y = x * 2', 's = y.sum().item()', 'print("total", s)']),
    cell(['m = x[x > 3]', 'n = x.max().item()  # syncfree: allow'], { syncfree: { budget: 5 } })
  ],
  metadata: {
    kernelspec: { display_name: 'Python 3', language: 'python', name: 'python3' }
  },
  nbformat: 4,
  nbformat_minor: 5
};

/** The syncfree command of the repository's venv (make test puts it on PATH too). */
function syncfreeCommand(): string {
  const local = path.resolve(__dirname, '..', '..', '.venv', 'bin', 'syncfree');
  return fs.existsSync(local) ? local : 'syncfree';
}

test('a notebook annotated by `syncfree run --output` shows its markers when opened', async ({ page, tmpPath }) => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'syncfree-run-output-'));
  try {
    const source = path.join(folder, 'train.ipynb');
    const annotated = path.join(folder, 'annotated.ipynb');
    fs.writeFileSync(source, JSON.stringify(NOTEBOOK));
    const run = spawnSync(syncfreeCommand(), ['run', source, '--output', annotated, '--timeout', '120'], {
      encoding: 'utf8',
      timeout: 180000
    });
    // Exit 1: cell 2 syncs with no budget of its own; cell 3 stays within its budget of 5.
    expect(run.status, run.stderr).toBe(1);
    expect(run.stderr).toContain('cell 2: 1 (line 3 .item() ×1)');
    expect(fs.existsSync(annotated)).toBe(true);

    await page.contents.uploadFile(annotated, `${tmpPath}/annotated.ipynb`);
    await page.notebook.openByPath(`${tmpPath}/annotated.ipynb`);
    await page.notebook.activate('annotated.ipynb');
    await page.locator('.jp-Notebook .jp-Cell').first().waitFor();

    // Cell 2: one marker, beside the `.item()` line.
    const markers = cellMarkers(page, 1);
    await expect(markers).toHaveCount(1);
    expect(await lineOfMarker(page, 1, markers.first())).toBe(3);
    await expect(page.locator('.jp-Notebook .jp-Cell >> nth=1').locator('.jp-syncfree-summary')).toBeVisible();
    // Cell 3: the boolean mask on line 1 is marked; the first cell has no report and no marker.
    const third = cellMarkers(page, 2);
    await expect(third.first()).toBeVisible();
    expect(await lineOfMarker(page, 2, third.first())).toBe(1);
    await expect(cellMarkers(page, 0)).toHaveCount(0);
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
});
