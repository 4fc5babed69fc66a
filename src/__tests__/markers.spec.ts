import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import {
  IdleScheduler,
  deferStaleCheck,
  markerAtLine,
  reportFreshness,
  setMarkerOptions,
  setSyncReport,
  syncMarkerField,
  syncMarkers
} from '../gutter/extension';
import { markerLines } from '../gutter/lines';
import { weightOf } from '../model';
import { CELL, report, site } from './fixtures';

function editor(text = CELL): EditorView {
  return new EditorView({ state: EditorState.create({ doc: text, extensions: [syncMarkers()] }) });
}

function markedLines(view: EditorView): number[] {
  const lines: number[] = [];
  for (let n = 1; n <= view.state.doc.lines; n++) {
    if (markerAtLine(view, n)) {
      lines.push(n);
    }
  }
  return lines;
}

describe('markerLines', () => {
  it('puts one marker per reported line, merging sites and findings', () => {
    const r = report({
      sites: [site(), site({ kind: 'print', count: 8, blocked_ms: 20 }), site({ line: 4, chain: [4] })]
    });
    const markers = markerLines(r, 4);
    expect(markers.map(m => m.line)).toEqual([3, 4]);
    expect(markers[0].count).toBe(9);
    expect(markers[0].blockedMs).toBeCloseTo(20.5);
    expect(markers[0].weight).toBe(2);
    expect(markers[0].findings).toHaveLength(1);
  });

  it('drops lines outside the cell with a warning', () => {
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    const markers = markerLines(report({ sites: [site({ line: 99 })], findings: [] }), 4);
    expect(markers).toEqual([]);
    expect(warn).toHaveBeenCalled();
    warn.mockRestore();
  });

  it('hides sites under the threshold and static findings when asked', () => {
    const r = report({ sites: [site({ blocked_ms: 0.2 })] });
    expect(markerLines(r, 4, { thresholdMs: 1, showStatic: true }).map(m => m.source)).toEqual(['static']);
    expect(markerLines(r, 4, { thresholdMs: 1, showStatic: false })).toEqual([]);
  });

  it('weights by blocked time, else by count', () => {
    expect(weightOf(1, 0.1)).toBe(0);
    expect(weightOf(1, 2)).toBe(1);
    expect(weightOf(1, 50)).toBe(2);
    expect(weightOf(500, null)).toBe(2);
    expect(weightOf(3, null)).toBe(0);
  });
});

describe('SyncGutterMarker', () => {
  it('classes the gutter element of its line by source, weight, line and staleness', () => {
    const view = editor(CELL + '\n# edited');
    view.dispatch({ effects: setSyncReport.of(report()) });
    expect(markerAtLine(view, 3)!.elementClass).toBe(
      'jp-syncfree-marker jp-syncfree-marker-measured jp-syncfree-weight-0 jp-syncfree-at-3 jp-syncfree-stale'
    );
    const drawn = view.dom.querySelectorAll('.jp-syncfree-gutter .cm-gutterElement.jp-syncfree-marker');
    expect(drawn).toHaveLength(1);
    expect(drawn[0].classList.contains('jp-syncfree-at-3')).toBe(true);
    // The class is all it adds: the stylesheet draws the dot.
    expect(drawn[0].children).toHaveLength(0);
  });
});

describe('syncMarkerField', () => {
  it('marks exactly the reported line', () => {
    const view = editor();
    view.dispatch({ effects: setSyncReport.of(report()) });
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
    expect(view.dom.querySelectorAll('.jp-syncfree-line')).toHaveLength(1);
  });

  it('moves markers with edits above and turns stale, then fresh again when undone', () => {
    const view = editor();
    view.dispatch({ effects: setSyncReport.of(report()) });
    view.dispatch({ changes: { from: view.state.doc.line(2).from, insert: 'import math\n' } });
    expect(markedLines(view)).toEqual([4]);
    expect(view.state.field(syncMarkerField).stale).toBe(true);
    view.dispatch({ changes: { from: view.state.doc.line(2).from, to: view.state.doc.line(3).from, insert: '' } });
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
  });

  it('is stale at once when the text differs from what ran', () => {
    const view = editor(CELL + '\n# edited');
    view.dispatch({ effects: setSyncReport.of(report()) });
    expect(view.state.field(syncMarkerField).stale).toBe(true);
  });

  it('clears markers when the report goes away', () => {
    const view = editor();
    view.dispatch({ effects: setSyncReport.of(report()) });
    view.dispatch({ effects: setSyncReport.of(null) });
    expect(markedLines(view)).toEqual([]);
  });

  it('sets report text as text, never as HTML', () => {
    const view = editor();
    const hostile = report({
      sites: [site({ message: '<img src=x onerror="window.pwned=1">' })],
      findings: [{ ...report().findings[0], message: '<b>bold</b>' }]
    });
    view.dispatch({ effects: [setMarkerOptions.of({ showStatic: true }), setSyncReport.of(hostile)] });
    expect(markerAtLine(view, 3)).not.toBeNull();
    expect(view.dom.querySelector('img, b')).toBeNull();
    expect(view.dom.querySelector('.jp-syncfree-gutter')!.textContent).toBe('');
  });
});

describe('syncMarkers with an initial report', () => {
  it('draws the markers from the start, with no transaction', () => {
    const view = new EditorView({
      state: EditorState.create({
        doc: CELL,
        extensions: [
          syncMarkers({
            report: report(),
            options: { thresholdMs: 0, showStatic: true, lineHighlight: true, showLibraryFrames: true }
          })
        ]
      })
    });
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
  });

  it('starts stale when the cell text differs from the report', () => {
    const view = new EditorView({
      state: EditorState.create({
        doc: CELL + '\n',
        extensions: [
          syncMarkers({
            report: report(),
            options: { thresholdMs: 0, showStatic: true, lineHighlight: true, showLibraryFrames: true }
          })
        ]
      })
    });
    expect(view.state.field(syncMarkerField).stale).toBe(true);
  });
});

describe('the stale check deferred to idle time', () => {
  /** A scheduler that runs its tasks only when the test says so. */
  function manualScheduler(): { scheduler: IdleScheduler; run: () => number } {
    let tasks: (() => void)[] = [];
    return {
      scheduler: task => tasks.push(task),
      run: () => {
        const due = tasks;
        tasks = [];
        due.forEach(task => task());
        return due.length;
      }
    };
  }

  function deferredEditor(text: string, scheduler: IdleScheduler, initial = true): EditorView {
    const options = { thresholdMs: 0, showStatic: true, lineHighlight: true, showLibraryFrames: true };
    return new EditorView({
      state: EditorState.create({
        doc: text,
        extensions: [syncMarkers(initial ? { report: report(), options } : undefined), deferStaleCheck.of(scheduler)]
      })
    });
  }

  it('draws the markers at once and marks a changed cell stale when the check runs', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL + '\n# edited', idle.scheduler);
    expect(markedLines(view)).toEqual([3]);
    expect(view.state.field(syncMarkerField).unchecked).toBe(true);
    expect(view.state.field(syncMarkerField).stale).toBe(false);
    expect(idle.run()).toBe(1);
    expect(view.state.field(syncMarkerField).unchecked).toBe(false);
    expect(view.state.field(syncMarkerField).stale).toBe(true);
    expect(markedLines(view)).toEqual([3]);
    expect(markerAtLine(view, 3)!.elementClass.split(' ')).toContain('jp-syncfree-stale');
  });

  it('keeps an unchanged cell fresh without a transaction, and compares edits with its text', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL, idle.scheduler);
    const before = view.state;
    expect(reportFreshness(view.state)).toBe('unchecked');
    expect(idle.run()).toBe(1);
    expect(view.state).toBe(before);
    expect(reportFreshness(view.state)).toBe('fresh');
    // Nothing is scheduled again for a verified text.
    view.dispatch({ selection: { anchor: 1 } });
    expect(idle.run()).toBe(0);
    view.dispatch({ changes: { from: 0, insert: '#' } });
    expect(reportFreshness(view.state)).toBe('stale');
    view.dispatch({ changes: { from: 0, to: 1 } });
    expect(reportFreshness(view.state)).toBe('fresh');
    expect(view.state.field(syncMarkerField).freshDoc).toBe(before.doc);
  });

  it('does not mark a cell stale once an edit before the check made it match its report', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL + '\n# edited', idle.scheduler);
    view.dispatch({ changes: { from: view.state.doc.length - 9, to: view.state.doc.length } });
    expect(reportFreshness(view.state)).toBe('fresh');
    idle.run();
    expect(reportFreshness(view.state)).toBe('fresh');
    expect(markedLines(view)).toEqual([3]);
  });

  it('defers the check of a report set later, too', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL + '\n', idle.scheduler, false);
    view.dispatch({ effects: setSyncReport.of(report()) });
    expect(view.state.field(syncMarkerField).unchecked).toBe(true);
    expect(idle.run()).toBe(1);
    expect(view.state.field(syncMarkerField).stale).toBe(true);
  });

  it('checks at once when the cell is edited before the check runs', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL, idle.scheduler);
    view.dispatch({ changes: { from: 0, insert: '# note\n' } });
    expect(view.state.field(syncMarkerField).unchecked).toBe(false);
    expect(view.state.field(syncMarkerField).stale).toBe(true);
    idle.run();
    expect(view.state.field(syncMarkerField).stale).toBe(true);
  });

  it('does nothing once the editor is gone', () => {
    const idle = manualScheduler();
    const view = deferredEditor(CELL + '\n', idle.scheduler);
    view.destroy();
    expect(() => idle.run()).not.toThrow();
    expect(view.state.field(syncMarkerField).unchecked).toBe(true);
  });
});
