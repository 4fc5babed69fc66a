/**
 * How fast the syncfree UI is on a large notebook (figures, not pass/fail):
 *
 * - open: a notebook of 500 cells whose saved reports hold 20 sites each; the time from
 *   the notebook model being ready to every rendered cell editor showing its markers and
 *   the Syncs sidebar listing all sites (target 150 ms), next to the same notebook
 *   without reports (what JupyterLab itself takes to render the cells);
 * - typing: the time from a keydown to the edited line being in the DOM, in a cell with
 *   20 markers and in one without (target 16 ms, one frame).
 *
 * Run from ui-tests/:  npx playwright test --config bench/playwright.config.js
 */
import { IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const CELLS = Number(process.env.SYNCFREE_BENCH_CELLS ?? 500);
const SITES = Number(process.env.SYNCFREE_BENCH_SITES ?? 20);
const ROOT = path.resolve(__dirname, '..', '..');

function makeNotebook(withReports: boolean): string {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'syncfree-bench-')), 'big.ipynb');
  execFileSync(path.join(ROOT, '.venv', 'bin', 'python'), [path.join(ROOT, 'bench', 'ui', 'make_notebook.py'), out, String(CELLS), String(SITES)], {
    env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python_helper') }
  });
  if (!withReports) {
    const nb = JSON.parse(fs.readFileSync(out, 'utf8'));
    nb.cells.forEach((cell: { outputs: unknown[] }) => (cell.outputs = []));
    fs.writeFileSync(out, JSON.stringify(nb));
  }
  return out;
}

interface IOpenTimes {
  editors: number;
  readyToEditors: number;
  readyToMarkers: number | null;
  readyToSidebar: number | null;
}

/** Open a notebook by path and time, frame by frame, when editors, markers and sidebar are drawn. */
async function timeOpen(page: IJupyterLabPageFixture, file: string, withReports: boolean): Promise<IOpenTimes> {
  return page.evaluate(
    async ({ file, withReports, cells, sites }) => {
      const app = (window as any).jupyterapp;
      const panel = await app.commands.execute('docmanager:open', { path: file, factory: 'Notebook' });
      await panel.context.ready;
      const ready = performance.now();
      const expectedCells = `${cells} cells`;
      return new Promise<IOpenTimes>(resolve => {
        let editorsAt: number | null = null;
        let markersAt: number | null = null;
        let sidebarAt: number | null = null;
        let lastEditors = -1;
        let stableFrames = 0;
        const frame = () => {
          const now = performance.now();
          const node: HTMLElement = panel.content.node;
          const editors = node.querySelectorAll('.jp-CodeCell .cm-editor').length;
          // JupyterLab attaches editors progressively: done when the count is stable.
          stableFrames = editors === lastEditors && editors > 0 ? stableFrames + 1 : 0;
          if (editors !== lastEditors) {
            editorsAt = now;
          }
          lastEditors = editors;
          if (withReports) {
            const marked = Array.from(node.querySelectorAll('.jp-CodeCell .cm-editor')).filter(
              editor => editor.querySelectorAll('.jp-syncfree-gutter .jp-syncfree-marker').length === sites
            ).length;
            if (marked === editors && editors > 0 && markersAt === null) {
              markersAt = now;
            }
            if (marked !== editors) {
              markersAt = null;
            }
            const cellsTotal = document.querySelector('#jp-syncfree-sidebar [data-total="cells"]')?.textContent;
            const rows = document.querySelectorAll('#jp-syncfree-sidebar .jp-syncfree-sidebar-row').length;
            if (sidebarAt === null && cellsTotal === expectedCells && rows > 0) {
              sidebarAt = now;
            }
          }
          const done = stableFrames >= 30 && (!withReports || (markersAt !== null && sidebarAt !== null));
          if (done || now - ready > 60000) {
            resolve({
              editors,
              readyToEditors: (editorsAt ?? now) - ready,
              readyToMarkers: markersAt === null ? null : markersAt - ready,
              readyToSidebar: sidebarAt === null ? null : sidebarAt - ready
            });
          } else {
            requestAnimationFrame(frame);
          }
        };
        requestAnimationFrame(frame);
      });
    },
    { file, withReports, cells: CELLS, sites: SITES }
  );
}

/** Keydown to the edited text being in the DOM, for each of `count` typed characters. */
const VISIBLE_CELLS = '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell';

async function timeTyping(page: IJupyterLabPageFixture, cellIndex: number, count: number): Promise<number[]> {
  const cell = page.locator(`${VISIBLE_CELLS} >> nth=${cellIndex}`);
  await cell.locator('.cm-line').nth(2).click();
  await page.keyboard.press('End');
  await page.evaluate(([selector, index]) => {
    const node = document.querySelectorAll(selector)[index].querySelector('.cm-content')!;
    const w = window as any;
    w.syncfreeLatencies = [];
    let down: number | null = null;
    node.addEventListener('keydown', (event: Event) => (down = event.timeStamp), { capture: true });
    new MutationObserver(() => {
      if (down !== null) {
        w.syncfreeLatencies.push(performance.now() - down);
        down = null;
      }
    }).observe(node, { childList: true, subtree: true, characterData: true });
  }, [VISIBLE_CELLS, cellIndex] as const);
  await page.keyboard.type('y'.repeat(count), { delay: 40 });
  return page.evaluate(() => (window as any).syncfreeLatencies as number[]);
}

function stats(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return `median ${at(0.5).toFixed(1)} ms, p95 ${at(0.95).toFixed(1)} ms (n=${values.length})`;
}

const ms = (value: number | null) => (value === null ? 'not reached' : `${value.toFixed(0)} ms`);

test.describe('syncfree UI benchmark', () => {
  test('open a large notebook and type in it', async ({ page, tmpPath }) => {
    const withReports = makeNotebook(true);
    const without = makeNotebook(false);
    await page.contents.uploadFile(without, `${tmpPath}/plain.ipynb`);
    await page.contents.uploadFile(withReports, `${tmpPath}/reports.ipynb`);
    await page.evaluate(() => (window as any).jupyterapp.commands.execute('syncfree:open-sidebar'));

    const plain = await timeOpen(page, `${tmpPath}/plain.ipynb`, false);
    const marked = await timeOpen(page, `${tmpPath}/reports.ipynb`, true);
    const typingMarked = await timeTyping(page, 0, 60);
    await page.notebook.activate('plain.ipynb');
    const typingPlain = await timeTyping(page, 0, 60);

    const lines = [
      `syncfree UI benchmark: ${CELLS} cells x ${SITES} sites, Chromium headless`,
      `  without reports: editors drawn ${ms(plain.readyToEditors)} after the model is ready (${plain.editors} editors)`,
      `  with reports:    editors drawn ${ms(marked.readyToEditors)}, all markers ${ms(marked.readyToMarkers)}, sidebar ${ms(marked.readyToSidebar)} (${marked.editors} editors)`,
      `  markers + sidebar beyond JupyterLab's own rendering: ${ms(Math.max(marked.readyToMarkers ?? NaN, marked.readyToSidebar ?? NaN) - plain.readyToEditors)} (target 150 ms)`,
      `  typing, cell with ${SITES} markers: ${stats(typingMarked)} (target 16 ms)`,
      `  typing, cell without markers:   ${stats(typingPlain)}`
    ];
    console.log(lines.join('\n'));
  });
});
