/**
 * How fast the syncfree UI is on a large notebook (figures, not pass/fail):
 *
 * - open: a notebook of 500 cells whose saved reports hold 20 sites each. Wall time from
 *   the notebook model being ready to all 500 cell editors showing their markers and the
 *   Syncs sidebar listing every site, next to the same notebook without reports (what
 *   JupyterLab itself takes), and the CPU time spent with syncfree code on the stack
 *   (Chrome's sampling profiler) — the extension's own cost (target 150 ms);
 * - typing: keydown to the edited text being in the DOM, in a cell with 20 markers and
 *   in one without (target 16 ms, one frame), and syncfree's CPU time per keystroke.
 *
 * The notebook is opened with windowing off (every cell attached at once) so that "all
 * markers" is well defined; JupyterLab's default attaches cells progressively.
 *
 * Run from ui-tests/:  npx playwright test --config bench/playwright.config.js
 */
import { IJupyterLabPageFixture, galata, test } from '@jupyterlab/galata';
import type { CDPSession } from '@playwright/test';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const CELLS = Number(process.env.SYNCFREE_BENCH_CELLS ?? 500);
const SITES = Number(process.env.SYNCFREE_BENCH_SITES ?? 20);
const ROOT = path.resolve(__dirname, '..', '..');
/** Where JupyterLab serves this extension's code from: profile samples are attributed by it. */
const BUNDLE_URL = '/extensions/jupyterlab-syncfree/';

function makeNotebook(withReports: boolean): string {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'syncfree-bench-')), 'big.ipynb');
  execFileSync(
    path.join(ROOT, '.venv', 'bin', 'python'),
    [path.join(ROOT, 'bench', 'ui', 'make_notebook.py'), out, String(CELLS), String(SITES)],
    { env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python_helper') } }
  );
  if (!withReports) {
    const nb = JSON.parse(fs.readFileSync(out, 'utf8'));
    nb.cells.forEach((cell: { outputs: unknown[] }) => (cell.outputs = []));
    fs.writeFileSync(out, JSON.stringify(nb));
  }
  return out;
}

interface IProfileNode {
  id: number;
  callFrame: { url: string };
  children?: number[];
}

/** Milliseconds of samples with syncfree code anywhere on the stack. */
function syncfreeTime(profile: { nodes: IProfileNode[]; samples: number[]; timeDeltas: number[] }): number {
  const parent = new Map<number, number>();
  const byId = new Map<number, IProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) {
      parent.set(child, node.id);
    }
  }
  const ours = new Map<number, boolean>();
  const isOurs = (id: number): boolean => {
    if (!ours.has(id)) {
      const own = byId.get(id)!.callFrame.url.includes(BUNDLE_URL);
      const up = parent.get(id);
      ours.set(id, own || (up !== undefined && isOurs(up)));
    }
    return ours.get(id)!;
  };
  let micros = 0;
  profile.samples.forEach((id, i) => {
    if (isOurs(id)) {
      micros += profile.timeDeltas[i] ?? 0;
    }
  });
  return micros / 1000;
}

async function profiled<T>(cdp: CDPSession, action: () => Promise<T>): Promise<{ result: T; syncfreeMs: number }> {
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  const result = await action();
  const { profile } = await cdp.send('Profiler.stop');
  return { result, syncfreeMs: syncfreeTime(profile as any) };
}

interface IOpenTimes {
  editors: number;
  readyToEditors: number;
  readyToMarkers: number | null;
  readyToSidebar: number | null;
}

/** Open a notebook and time, frame by frame, when its editors, markers and the sidebar are drawn. */
async function timeOpen(page: IJupyterLabPageFixture, file: string, withReports: boolean): Promise<IOpenTimes> {
  return page.evaluate(
    async ({ file, withReports, cells, sites }) => {
      const app = (window as any).jupyterapp;
      const panel = await app.commands.execute('docmanager:open', { path: file, factory: 'Notebook' });
      await panel.context.ready;
      const ready = performance.now();
      return new Promise<IOpenTimes>(resolve => {
        const times: IOpenTimes = { editors: 0, readyToEditors: 0, readyToMarkers: null, readyToSidebar: null };
        const frame = () => {
          const now = performance.now() - ready;
          const editors = Array.from(panel.content.node.querySelectorAll('.jp-CodeCell .cm-editor')) as Element[];
          times.editors = editors.length;
          if (editors.length === cells && !times.readyToEditors) {
            times.readyToEditors = now;
          }
          if (withReports && times.readyToMarkers === null && editors.length === cells) {
            const marked = editors.every(e => e.querySelectorAll('.jp-syncfree-gutter .jp-syncfree-marker').length === sites);
            times.readyToMarkers = marked ? now : null;
          }
          const cellsTotal = document.querySelector('#jp-syncfree-sidebar [data-total="cells"]')?.textContent;
          if (withReports && times.readyToSidebar === null && cellsTotal === `${cells} cells`) {
            times.readyToSidebar = now;
          }
          const done = times.readyToEditors && (!withReports || (times.readyToMarkers !== null && times.readyToSidebar !== null));
          if (done || now > 120000) {
            resolve(times);
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

const VISIBLE_CELLS = '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell';

/** Keydown to the edited text being in the DOM, for each of `count` typed characters. */
async function timeTyping(page: IJupyterLabPageFixture, cellIndex: number, count: number): Promise<number[]> {
  const cell = page.locator(`${VISIBLE_CELLS} >> nth=${cellIndex}`);
  await cell.locator('.cm-line').nth(2).click();
  await page.keyboard.press('End');
  await page.evaluate(
    ([selector, index]) => {
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
    },
    [VISIBLE_CELLS, cellIndex] as const
  );
  await page.keyboard.type('y'.repeat(count), { delay: 40 });
  return page.evaluate(() => (window as any).syncfreeLatencies as number[]);
}

function stats(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return `median ${at(0.5).toFixed(1)} ms, p95 ${at(0.95).toFixed(1)} ms (n=${values.length})`;
}

const ms = (value: number | null) => (value === null ? 'not reached' : `${value.toFixed(0)} ms`);

test.use({
  mockSettings: {
    ...galata.DEFAULT_SETTINGS,
    '@jupyterlab/notebook-extension:tracker': {
      ...galata.DEFAULT_SETTINGS['@jupyterlab/notebook-extension:tracker'],
      windowingMode: 'none'
    }
  }
});

test.describe('syncfree UI benchmark', () => {
  test('open a large notebook and type in it', async ({ page, tmpPath }) => {
    const KEYS = 60;
    await page.contents.uploadFile(makeNotebook(false), `${tmpPath}/plain.ipynb`);
    await page.contents.uploadFile(makeNotebook(true), `${tmpPath}/reports.ipynb`);
    await page.evaluate(() => (window as any).jupyterapp.commands.execute('syncfree:open-sidebar'));
    // galata wraps the Playwright page; the CDP session needs the page itself.
    const cdp = await page.context().newCDPSession(page.page);

    const plain = await timeOpen(page, `${tmpPath}/plain.ipynb`, false);
    const open = await profiled(cdp, () => timeOpen(page, `${tmpPath}/reports.ipynb`, true));
    const typingMarked = await profiled(cdp, () => timeTyping(page, 0, KEYS));
    await page.notebook.activate('plain.ipynb');
    const typingPlain = await timeTyping(page, 0, KEYS);

    const marked = open.result;
    console.log(
      [
        `syncfree UI benchmark: ${CELLS} cells x ${SITES} sites, headless Chromium, windowing off`,
        `  open, without reports: all ${plain.editors} editors drawn ${ms(plain.readyToEditors)} after the model is ready`,
        `  open, with reports:    all editors ${ms(marked.readyToEditors)}, all markers ${ms(marked.readyToMarkers)}, sidebar ${ms(marked.readyToSidebar)}`,
        `  open, syncfree CPU time (code on the stack): ${open.syncfreeMs.toFixed(0)} ms (target 150 ms)`,
        `  typing, keydown to DOM, cell with ${SITES} markers: ${stats(typingMarked.result)} (target 16 ms)`,
        `  typing, keydown to DOM, cell without markers:  ${stats(typingPlain)}`,
        `  typing, syncfree CPU time per keystroke: ${(typingMarked.syncfreeMs / KEYS).toFixed(2)} ms`
      ].join('\n')
    );
  });
});
