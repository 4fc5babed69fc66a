/**
 * How fast the syncfree UI is on a large notebook (figures, not pass/fail):
 *
 * - open: a notebook of 500 cells whose saved reports hold 20 sites each. Wall time from
 *   the notebook model being ready to all 500 cell editors showing their markers and the
 *   Syncs sidebar listing every site, next to the same notebook whose outputs hold only
 *   the reports' HTML rendering (what JupyterLab itself takes without syncfree), and the
 *   CPU time spent with syncfree code on the stack (Chrome's sampling profiler) — the
 *   extension's own cost (target 150 ms);
 * - typing: keydown to the edited text being in the DOM, in a cell with 20 markers and
 *   in one without (target 16 ms, one frame), and syncfree's CPU time per keystroke.
 *
 * Once with windowing off (every cell attached at once, so "all markers" is well
 * defined), once with JupyterLab's default windowing, which attaches cells
 * progressively: there the figure is the first screen.
 *
 * Run from ui-tests/:  npx playwright test --config bench/playwright.config.js
 */
import { IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { CDPSession } from '@playwright/test';
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { WINDOWING_OFF } from '../tests/utils';

const CELLS = Number(process.env.SYNCFREE_BENCH_CELLS ?? 500);
/** Profiled opens of the large notebook (windowing off); the figure is their median. */
const RUNS = Math.max(1, Number(process.env.SYNCFREE_BENCH_RUNS ?? 3));
const SITES = Number(process.env.SYNCFREE_BENCH_SITES ?? 20);
const ROOT = path.resolve(__dirname, '..', '..');
/** Where JupyterLab serves this extension's code from: profile samples are attributed by it. */
const BUNDLE_URL = '/extensions/jupyterlab-syncfree/';

/**
 * The benchmark notebook; `htmlOnly` keeps just the text/html rendering of each report
 * (what JupyterLab shows without syncfree), the baseline for the same outputs.
 */
function makeNotebook(htmlOnly: boolean): string {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'syncfree-bench-')), 'big.ipynb');
  execFileSync(
    path.join(ROOT, '.venv', 'bin', 'python'),
    [path.join(ROOT, 'bench', 'ui', 'make_notebook.py'), out, String(CELLS), String(SITES)],
    { env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python_helper') } }
  );
  if (htmlOnly) {
    const nb = JSON.parse(fs.readFileSync(out, 'utf8'));
    for (const cell of nb.cells as { outputs: { data: Record<string, unknown> }[] }[]) {
      for (const output of cell.outputs) {
        output.data = { 'text/html': output.data['text/html'] };
      }
    }
    fs.writeFileSync(out, JSON.stringify(nb));
  }
  return out;
}

interface IProfileNode {
  id: number;
  callFrame: { url: string; functionName: string; lineNumber: number };
  children?: number[];
}

interface ICpuProfile {
  nodes: IProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/**
 * Milliseconds of samples with syncfree code anywhere on the stack, and the same time
 * by the innermost syncfree function of each sample (SYNCFREE_BENCH_DETAIL=1 prints it).
 */
function syncfreeTime(profile: ICpuProfile): { total: number; byFunction: Map<string, number> } {
  const parent = new Map<number, number>();
  const byId = new Map<number, IProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) {
      parent.set(child, node.id);
    }
  }
  // The innermost syncfree frame at or above each node, if any.
  const innermost = new Map<number, IProfileNode | null>();
  const oursAt = (id: number): IProfileNode | null => {
    if (!innermost.has(id)) {
      const node = byId.get(id)!;
      const up = parent.get(id);
      innermost.set(id, node.callFrame.url.includes(BUNDLE_URL) ? node : up !== undefined ? oursAt(up) : null);
    }
    return innermost.get(id)!;
  };
  let micros = 0;
  const byFunction = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const frame = oursAt(id);
    if (frame) {
      const delta = profile.timeDeltas[i] ?? 0;
      micros += delta;
      const name = `${frame.callFrame.functionName || '(anonymous)'}:${frame.callFrame.lineNumber}`;
      byFunction.set(name, (byFunction.get(name) ?? 0) + delta / 1000);
    }
  });
  return { total: micros / 1000, byFunction };
}

function topFunctions(byFunction: Map<string, number>, n = Math.max(12, Number(process.env.SYNCFREE_BENCH_DETAIL) || 0)): string {
  return [...byFunction.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([name, time]) => `    ${time.toFixed(1).padStart(8)} ms  ${name}`)
    .join('\n');
}

async function profiled<T>(
  cdp: CDPSession,
  action: () => Promise<T>
): Promise<{ result: T; syncfreeMs: number; byFunction: Map<string, number> }> {
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
  await cdp.send('Profiler.start');
  const result = await action();
  const { profile } = await cdp.send('Profiler.stop');
  const { total, byFunction } = syncfreeTime(profile as unknown as ICpuProfile);
  return { result, syncfreeMs: total, byFunction };
}

interface IOpenTimes {
  editors: number;
  readyToEditors: number;
  readyToMarkers: number | null;
  readyToSidebar: number | null;
}

/**
 * Open a notebook and time, frame by frame, when its editors, markers and the sidebar
 * are drawn. With `everyCell`, until all cells have editors (windowing off); otherwise
 * the first frame where the editors attached so far have their markers.
 */
async function timeOpen(page: IJupyterLabPageFixture, file: string, withReports: boolean, everyCell: boolean): Promise<IOpenTimes> {
  return page.evaluate(
    async ({ file, withReports, everyCell, cells, sites }) => {
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
          // The reports' cells and the scratch cell above them.
          const all = everyCell ? editors.length === cells + 1 : editors.length > 1;
          if (all && !times.readyToEditors) {
            times.readyToEditors = now;
          }
          if (withReports && times.readyToMarkers === null && all) {
            const marked = editors.filter(e => e.querySelectorAll('.jp-syncfree-gutter .jp-syncfree-marker').length === sites);
            times.readyToMarkers = marked.length === editors.length - 1 ? now : null;
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
    { file, withReports, everyCell, cells: CELLS, sites: SITES }
  );
}

/**
 * Close every open notebook without saving (opening marks a notebook changed when
 * JupyterLab normalises it; nothing here is worth keeping), and let the page settle.
 */
async function closeAll(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    for (const widget of Array.from((window as any).jupyterapp.shell.widgets('main')) as any[]) {
      if (widget.context?.model) {
        widget.context.model.dirty = false;
      }
      widget.dispose();
    }
    await new Promise(resolve => setTimeout(resolve, 1000));
  });
}

const VISIBLE_CELLS = '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell';

/** Keydown to the edited text being in the DOM, for each of `count` characters typed at the end of a 0-based line. */
async function timeTyping(page: IJupyterLabPageFixture, cellIndex: number, count: number, line = 2): Promise<number[]> {
  const cell = page.locator(`${VISIBLE_CELLS} >> nth=${cellIndex}`);
  await cell.locator('.cm-line').nth(line).click();
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

async function upload(page: IJupyterLabPageFixture, tmpPath: string): Promise<{ html: string; reports: string }> {
  await page.contents.uploadFile(makeNotebook(true), `${tmpPath}/html.ipynb`);
  await page.contents.uploadFile(makeNotebook(false), `${tmpPath}/reports.ipynb`);
  await page.evaluate(() => (window as any).jupyterapp.commands.execute('syncfree:open-sidebar'));
  return { html: `${tmpPath}/html.ipynb`, reports: `${tmpPath}/reports.ipynb` };
}

test.describe('syncfree UI benchmark, JupyterLab default windowing', () => {
  test('open a large notebook: the first screen', async ({ page, tmpPath }) => {
    const files = await upload(page, tmpPath);
    const cdp = await page.context().newCDPSession(page.page);
    const plain = await timeOpen(page, files.html, false, false);
    await closeAll(page);
    const open = await profiled(cdp, () => timeOpen(page, files.reports, true, false));
    const marked = open.result;
    // JupyterLab's default configuration, which is what users type in.
    const KEYS = 60;
    const typingMarked = await timeTyping(page, 1, KEYS);
    const typingPlain = await timeTyping(page, 0, KEYS);
    console.log(
      [
        `syncfree UI benchmark: ${CELLS} cells x ${SITES} sites, headless Chromium, default windowing (first screen)`,
        `  outputs as HTML only (no syncfree): first ${plain.editors} cell editors drawn ${ms(plain.readyToEditors)} after the model is ready`,
        `  with syncfree reports: first ${marked.editors} editors ${ms(marked.readyToEditors)}, their markers ${ms(marked.readyToMarkers)}, sidebar ${ms(marked.readyToSidebar)}`,
        `  syncfree CPU time until then and while JupyterLab attaches the rest: ${open.syncfreeMs.toFixed(0)} ms`,
        `  typing, keydown to DOM, cell with ${SITES} markers: ${stats(typingMarked)} (target 16 ms)`,
        `  typing, keydown to DOM, cell without markers (same notebook): ${stats(typingPlain)}`
      ].join('\n')
    );
  });
});

test.describe('syncfree UI benchmark, windowing off', () => {
  test.use({ mockSettings: WINDOWING_OFF });

  test('open a large notebook and type in it', async ({ page, tmpPath }) => {
    const KEYS = 60;
    const files = await upload(page, tmpPath);
    // galata wraps the Playwright page; the CDP session needs the page itself.
    const cdp = await page.context().newCDPSession(page.page);

    const plain = await timeOpen(page, files.html, false, true);
    await closeAll(page);
    // Each profiled open starts from no open notebook; the last one stays open for typing.
    const opens: Awaited<ReturnType<typeof profiled<IOpenTimes>>>[] = [];
    for (let run = 0; run < RUNS; run++) {
      if (run > 0) {
        await closeAll(page);
      }
      opens.push(await profiled(cdp, () => timeOpen(page, files.reports, true, true)));
    }
    const cpu = opens.map(o => o.syncfreeMs);
    const open = [...opens].sort((a, b) => a.syncfreeMs - b.syncfreeMs)[Math.floor(opens.length / 2)];
    // Cell 1 has a report with markers on every line; cell 0 (scratch) has none. The
    // latencies are taken without the profiler (it slows the page down); a third run,
    // profiled, gives syncfree's CPU time per keystroke.
    const typingMarked = await timeTyping(page, 1, KEYS);
    const typingPlain = await timeTyping(page, 0, KEYS);
    const typingProfile = await profiled(cdp, () => timeTyping(page, 1, KEYS));

    const marked = open.result;
    console.log(
      [
        `syncfree UI benchmark: ${CELLS} cells x ${SITES} sites, headless Chromium, windowing off`,
        `  open, outputs as HTML only (no syncfree): all ${plain.editors} cell editors drawn ${ms(plain.readyToEditors)} after the model is ready`,
        `  open, with syncfree reports: all editors ${ms(marked.readyToEditors)}, all markers ${ms(marked.readyToMarkers)}, sidebar ${ms(marked.readyToSidebar)}`,
        `  open, syncfree CPU time (code on the stack): median ${open.syncfreeMs.toFixed(0)} ms of ${RUNS} opens (${cpu.map(t => t.toFixed(0)).join(', ')} ms) (target 150 ms)`,
        `  typing, keydown to DOM, cell with ${SITES} markers: ${stats(typingMarked)} (target 16 ms)`,
        `  typing, keydown to DOM, cell without markers (same notebook): ${stats(typingPlain)}`,
        `  typing, syncfree CPU time per keystroke: ${(typingProfile.syncfreeMs / KEYS).toFixed(2)} ms`
      ].join('\n')
    );
    if (process.env.SYNCFREE_BENCH_DETAIL) {
      const mean = new Map<string, number>();
      for (const run of opens) {
        run.byFunction.forEach((time, name) => mean.set(name, (mean.get(name) ?? 0) + time / opens.length));
      }
      console.log(`  syncfree time while opening, mean of the ${RUNS} opens, by innermost syncfree function (names need a development build):\n${topFunctions(mean)}`);
      console.log(`  the first (cold) open:\n${topFunctions(opens[0].byFunction)}`);
      console.log(`  syncfree time while typing:\n${topFunctions(typingProfile.byFunction)}`);
    }
  });
});

test.describe('syncfree UI benchmark, a small notebook', () => {
  test('type in a cell with markers', async ({ page, tmpPath }) => {
    const KEYS = 60;
    await page.contents.uploadFile(path.resolve(__dirname, '..', 'tests', 'notebooks', 'syncs.ipynb'), `${tmpPath}/syncs.ipynb`);
    await page.notebook.openByPath(`${tmpPath}/syncs.ipynb`);
    await page.notebook.activate('syncs.ipynb');
    // Cell 2 (the training loop) has markers; cell 1 (imports) has none.
    const marked = await timeTyping(page, 2, KEYS, 5);
    const plain = await timeTyping(page, 1, KEYS, 0);
    console.log(
      [
        'syncfree UI benchmark: tests/notebooks/syncs.ipynb (5 cells), headless Chromium',
        `  typing, keydown to DOM, cell with markers: ${stats(marked)} (target 16 ms)`,
        `  typing, keydown to DOM, cell without markers: ${stats(plain)}`
      ].join('\n')
    );
  });
});
