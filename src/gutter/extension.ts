import {
  ChangeSet,
  EditorState,
  Extension,
  Facet,
  RangeSet,
  RangeSetBuilder,
  StateEffect,
  StateField,
  Text
} from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, GutterMarker, ViewPlugin, ViewUpdate, gutter } from '@codemirror/view';
import { sourceHash, sourceHashSoon } from '../hash';
import { LineAnchors, anchorReportLines, reportLinesInPlace } from '../model';
import type { SyncReport } from '../tokens';
import { CSS_PREFIX } from '../tokens';
import { DEFAULT_MARKER_OPTIONS, ILineMarker, IMarkerOptions, MarkerSource, markerLines } from './lines';

/** How markers are drawn and what the card shows (the markers plugin's settings). */
export interface ISyncMarkerOptions extends IMarkerOptions {
  lineHighlight: boolean;
  showLibraryFrames: boolean;
}

export const DEFAULT_SYNC_MARKER_OPTIONS: ISyncMarkerOptions = {
  ...DEFAULT_MARKER_OPTIONS,
  lineHighlight: true,
  showLibraryFrames: true
};

/**
 * Called when a marker is clicked, with its current 1-based line: the sync card
 * (tooltip.ts) opens from here without the marker field depending on it.
 */
export const syncMarkerClick = Facet.define<(view: EditorView, line: number) => void>();

/** What the marker field holds for one editor. */
export interface ISyncMarkerState {
  report: SyncReport | null;
  options: ISyncMarkerOptions;
  /** Marked lines at their current positions (mapped through edits). */
  markers: RangeSet<SyncGutterMarker>;
  lines: DecorationSet;
  /** The cell text no longer matches the report's source_hash. */
  stale: boolean;
  /**
   * The text the report was made from, once the editor has held it: comparing with it
   * is much cheaper than hashing the cell on every keystroke.
   */
  freshDoc: Text | null;
  /**
   * Report lines whose marked line was deleted by edits since the report (their markers
   * are gone): the Syncs panel says so rather than guess where they went. Empty while
   * the text is the report's.
   */
  deleted: ReadonlySet<number>;
  /**
   * The edits from the report's text (`freshDoc`) to the text now, while that text is
   * known: a rewrite whose lines these edits did not touch still applies (rewrite.ts).
   */
  sinceReport: ChangeSet | null;
  /**
   * The cell text had not been hashed against the report's source_hash when the report
   * was set: the check waits for idle time (see `deferStaleCheck`), and the markers are
   * drawn fresh until it runs. A text it finds fresh is recorded outside the state
   * (`verifiedTexts`; `reportFreshness` reads both), so this stays set then; a stale
   * one clears it. An edit before the check checks at once.
   */
  unchecked: boolean;
}

/**
 * Runs a task later, when the page is idle. Given to `deferStaleCheck`, it moves the
 * SHA-256 of each cell's text out of editor creation: opening a notebook of 500 reports
 * otherwise hashes 500 cells before the first paint.
 */
export type IdleScheduler = (task: () => void) => void;

/** Tasks waiting for idle time, run in order by `runIdleTasks`. */
const idleTasks: (() => void)[] = [];
let idleRequested = false;

/** Leave the rest of the queue for the next idle period when less than this is left (ms). */
const IDLE_RESERVE_MS = 2;
/** Where there is no requestIdleCallback, run tasks for this long per zero timeout (ms). */
const TIMEOUT_SLICE_MS = 8;

function requestIdle(): void {
  if (idleRequested) {
    return;
  }
  idleRequested = true;
  if (typeof requestIdleCallback === 'function') {
    // The timeout bounds how long a busy page can leave a stale cell drawn as fresh.
    requestIdleCallback(runIdleTasks, { timeout: 1000 });
  } else {
    setTimeout(() => runIdleTasks(), 0);
  }
}

function runIdleTasks(deadline?: IdleDeadline): void {
  idleRequested = false;
  const start = performance.now();
  const more = () =>
    deadline
      ? deadline.didTimeout || deadline.timeRemaining() > IDLE_RESERVE_MS
      : performance.now() - start < TIMEOUT_SLICE_MS;
  let done = 0;
  try {
    // Tasks queued while this runs (a check scheduling another) are run in turn.
    while (done < idleTasks.length && more()) {
      idleTasks[done++]();
    }
  } finally {
    idleTasks.splice(0, done);
    if (idleTasks.length > 0) {
      requestIdle();
    }
  }
}

/**
 * Runs a task when the page is idle. The tasks of all editors share one queue and one
 * idle callback, which runs as many as its idle period allows: a notebook of 500
 * reports queues 500 checks when it opens.
 */
export const whenIdle: IdleScheduler = task => {
  idleTasks.push(task);
  requestIdle();
};

/**
 * When set, a report's stale check (hashing the cell) runs through this scheduler
 * rather than while the report is set; without it the check is synchronous.
 */
export const deferStaleCheck = Facet.define<IdleScheduler, IdleScheduler | null>({
  combine: values => values[0] ?? null
});

/**
 * The result of the stale check that `deferStaleCheck` postponed: the hash of `doc`,
 * which the cell has turned out not to match (a fresh cell dispatches nothing).
 */
const checkedStale = StateEffect.define<{ doc: Text; hash: string }>();

/**
 * Cell texts that the deferred check found to match a report, with that report's
 * `source_hash`. A fresh cell is the common case on opening a notebook: recording the
 * verdict here rather than in a transaction spares every editor an update.
 */
const verifiedTexts = new WeakMap<Text, string>();

function verified(doc: Text, report: SyncReport | null): boolean {
  return report !== null && verifiedTexts.get(doc) === report.source_hash;
}

/**
 * Where an editor's report stands against its cell text: `fresh` or `stale`, or
 * `unchecked` while the deferred stale check has not run yet.
 */
export function reportFreshness(state: EditorState): 'fresh' | 'stale' | 'unchecked' | 'none' {
  const field = state.field(syncMarkerField, false);
  if (!field?.report) {
    return 'none';
  }
  if (field.stale) {
    return 'stale';
  }
  return field.unchecked && !verified(state.doc, field.report) ? 'unchecked' : 'fresh';
}

type Freshness = Pick<ISyncMarkerState, 'stale' | 'freshDoc' | 'unchecked'>;

const NO_LINES: ReadonlySet<number> = new Set();

/**
 * Whether `doc` is the text the report ran on (remembering that text once seen). With
 * `defer`, a check that needs the hash is left for later (`unchecked`).
 */
function freshness(report: SyncReport | null, doc: Text, known: Text | null, defer = false): Freshness {
  if (!report) {
    return { stale: false, freshDoc: null, unchecked: false };
  }
  if (known) {
    return { stale: !doc.eq(known), freshDoc: known, unchecked: false };
  }
  if (verified(doc, report)) {
    return { stale: false, freshDoc: doc, unchecked: false };
  }
  if (!reportLinesInPlace(report, n => doc.line(n).text, doc.lines)) {
    // A line that ran holds other text now (a cell moved, pasted or reopened after an
    // edit): out of date without hashing the cell, and its markers are placed by text.
    return { stale: true, freshDoc: null, unchecked: false };
  }
  if (defer) {
    return { stale: false, freshDoc: null, unchecked: true };
  }
  const fresh = sourceHash(doc.toString()) === report.source_hash;
  return { stale: !fresh, freshDoc: fresh ? doc : null, unchecked: false };
}

/** Set (or clear, with null) the report shown in this editor. */
export const setSyncReport = StateEffect.define<SyncReport | null>();

/** Change how markers are drawn. */
export const setMarkerOptions = StateEffect.define<Partial<ISyncMarkerState['options']>>();

/**
 * A marked line. It draws no element of its own: its classes go on the gutter element
 * CodeMirror makes for the line anyway (`elementClass`), and the stylesheet draws the
 * dot there. A notebook of 500 reports has 10,000 of these, and an element each was
 * the largest share of syncfree's time opening it.
 *
 * No accessible label: CodeMirror hides gutters from assistive technology
 * (`aria-hidden`); the sync card (opened from the keyboard at the cursor's line) and
 * the Syncs panel are the accessible views of a marker. No `title`: the card is the
 * marker's tooltip. `jp-syncfree-at-<line>` names the line the marker was made for.
 */
export class SyncGutterMarker extends GutterMarker {
  readonly elementClass: string;

  constructor(
    readonly info: ILineMarker,
    readonly stale: boolean
  ) {
    super();
    this.elementClass =
      `${CSS_PREFIX}-marker ${CSS_PREFIX}-marker-${info.source} ${CSS_PREFIX}-weight-${info.weight} ${CSS_PREFIX}-at-${info.line}` +
      (stale ? ` ${CSS_PREFIX}-stale` : '');
  }

  eq(other: GutterMarker): boolean {
    return other instanceof SyncGutterMarker && other.info === this.info && other.stale === this.stale;
  }
}

/**
 * Line decorations are the same for every editor with a mark of that kind on that
 * line: made once and shared (they are immutable), rather than 10,000 times for a
 * notebook of 500 reports.
 */
const lineDecorations = new Map<number, Decoration>();

const SOURCES: readonly MarkerSource[] = ['measured', 'predicted', 'static'];

function lineDecoration(line: number, source: MarkerSource, stale: boolean): Decoration {
  const key = (line * SOURCES.length + SOURCES.indexOf(source)) * 2 + (stale ? 1 : 0);
  let decoration = lineDecorations.get(key);
  if (!decoration) {
    decoration = Decoration.line({
      class: `${CSS_PREFIX}-line ${CSS_PREFIX}-line-${source}${stale ? ` ${CSS_PREFIX}-stale` : ''}`,
      attributes: { 'data-syncfree-line': String(line) }
    });
    lineDecorations.set(key, decoration);
  }
  return decoration;
}

/**
 * Where the report's lines are in a stale document, by the text they had when they ran
 * (model.ts anchorReportLines); null when they are where the report says (or the report
 * knows no line text, an older one).
 */
export function anchorsIn(report: SyncReport, doc: Text): LineAnchors | null {
  const lineAt = (n: number) => doc.line(n).text;
  return reportLinesInPlace(report, lineAt, doc.lines) ? null : anchorReportLines(report, lineAt, doc.lines);
}

/**
 * The markers and highlights of a report on a document. On a stale document (an editor
 * made for a cell that was moved, pasted, undone or reopened after an edit: no edit to map
 * the markers through) each line is placed by its text; a line whose text is gone is left
 * unmarked and counted as deleted, and the panel says the row is out of date.
 */
function build(
  state: Pick<ISyncMarkerState, 'report' | 'options' | 'stale'>,
  doc: EditorState['doc']
): Pick<ISyncMarkerState, 'markers' | 'lines' | 'deleted'> {
  const markers = new RangeSetBuilder<SyncGutterMarker>();
  const lines = new RangeSetBuilder<Decoration>();
  let deleted: Set<number> | null = null;
  if (state.report) {
    const anchors = state.stale ? anchorsIn(state.report, doc) : null;
    const placed: { info: ILineMarker; at: number }[] = [];
    // With anchors, a report line past the cell's end may be inside it now (and the
    // reverse): the range is checked where the line is placed.
    for (const info of markerLines(state.report, anchors ? Number.MAX_SAFE_INTEGER : doc.lines, state.options)) {
      const at = anchors ? anchors(info.line) : info.line;
      if (at === null || at < 1 || at > doc.lines) {
        (deleted ??= new Set()).add(info.line);
      } else {
        placed.push({ info, at });
      }
    }
    placed.sort((a, b) => a.at - b.at);
    for (const { info, at } of placed) {
      const from = doc.line(at).from;
      markers.add(from, from, new SyncGutterMarker(info, state.stale));
      if (state.options.lineHighlight && info.source !== 'static') {
        lines.add(from, from, lineDecoration(info.line, info.source, state.stale));
      }
    }
  }
  return { markers: markers.finish(), lines: lines.finish(), deleted: deleted ?? NO_LINES };
}

/** The edits since the report, from nothing: the text is the report's (or unknown). */
function sinceFresh(freshDoc: Text | null): ChangeSet | null {
  return freshDoc ? ChangeSet.empty(freshDoc.length) : null;
}

/** The field's value for a report and options, drawn on a document. */
function initialState(report: SyncReport | null, options: ISyncMarkerOptions, state: EditorState): ISyncMarkerState {
  const fresh = freshness(report, state.doc, null, state.facet(deferStaleCheck) !== null);
  const value = { report, options, ...fresh, deleted: NO_LINES, sinceReport: sinceFresh(fresh.freshDoc) };
  return { ...value, ...build(value, state.doc) };
}

/**
 * Markers mapped through an edit, less those whose line the edit deleted, and the report
 * lines deleted so far. A marker sits at the start of its line: it is dropped when the
 * edit removes text across that point (CodeMirror's MapMode.TrackDel), and it lands
 * inside another line when the edit joins its line to the one above (Backspace at its
 * start after clearing it): both mean the line is gone.
 */
function mapMarkers(
  markers: RangeSet<SyncGutterMarker>,
  changes: ChangeSet,
  doc: Text,
  deleted: ReadonlySet<number>
): { markers: RangeSet<SyncGutterMarker>; deleted: ReadonlySet<number> } {
  const mapped = markers.map(changes);
  let gone: Set<number> | null = null;
  for (const iter = mapped.iter(); iter.value; iter.next()) {
    if (doc.lineAt(iter.from).from !== iter.from) {
      (gone ??= new Set(deleted)).add(iter.value.info.line);
    }
  }
  if (mapped.size !== markers.size) {
    const kept = new Set<number>();
    for (const iter = mapped.iter(); iter.value; iter.next()) {
      kept.add(iter.value.info.line);
    }
    for (const iter = markers.iter(); iter.value; iter.next()) {
      if (!kept.has(iter.value.info.line)) {
        (gone ??= new Set(deleted)).add(iter.value.info.line);
      }
    }
  }
  if (!gone) {
    return { markers: mapped, deleted };
  }
  const lost = gone;
  return { markers: mapped.update({ filter: (_from, _to, marker) => !lost.has(marker.info.line) }), deleted: lost };
}

export const syncMarkerField = StateField.define<ISyncMarkerState>({
  create(state) {
    return initialState(null, DEFAULT_SYNC_MARKER_OPTIONS, state);
  },
  update(value, tr) {
    let next = value;
    let rebuild = false;
    let check: { doc: Text; hash: string } | null = null;
    for (const effect of tr.effects) {
      if (effect.is(checkedStale)) {
        check = effect.value;
      } else if (effect.is(setSyncReport)) {
        next = { ...next, report: effect.value, freshDoc: null };
        rebuild = true;
      } else if (effect.is(setMarkerOptions)) {
        next = { ...next, options: { ...next.options, ...effect.value } };
        rebuild = true;
      }
    }
    if (rebuild) {
      const defer = tr.state.facet(deferStaleCheck) !== null;
      const fresh = freshness(next.report, tr.state.doc, next.freshDoc, defer);
      next = { ...next, ...fresh, deleted: NO_LINES, sinceReport: sinceFresh(fresh.freshDoc) };
      return { ...next, ...build(next, tr.state.doc) };
    }
    if (check && next.unchecked && next.report && check.doc === tr.state.doc) {
      const stale = check.hash !== next.report.source_hash;
      next = { ...next, stale, freshDoc: stale ? null : check.doc, unchecked: false };
      next = { ...next, sinceReport: sinceFresh(next.freshDoc) };
      // Markers were drawn fresh: redraw them only when the cell turned out stale.
      return stale ? { ...next, ...build(next, tr.state.doc) } : next;
    }
    if (tr.docChanged && next.report) {
      // Markers follow edits (a line inserted above moves them); the report turns stale
      // once the text differs from what ran, and fresh again if the edit is undone.
      // Text the idle check already verified is compared with, not hashed again.
      const known = next.freshDoc ?? (verified(tr.startState.doc, next.report) ? tr.startState.doc : null);
      const { stale, freshDoc } = freshness(next.report, tr.state.doc, known);
      if (!stale) {
        // The text is the report's again (an undo, the same text cut and pasted back):
        // every marker comes back where the report puts it, whatever the edits in
        // between had removed, as the line highlights do.
        const fresh = {
          ...next,
          stale,
          freshDoc,
          unchecked: false,
          deleted: NO_LINES,
          sinceReport: sinceFresh(freshDoc)
        };
        return { ...fresh, ...build(fresh, tr.state.doc) };
      }
      const base =
        next.sinceReport && next.sinceReport.newLength === tr.startState.doc.length
          ? next.sinceReport
          : known === tr.startState.doc
            ? ChangeSet.empty(known.length)
            : null;
      const sinceReport = freshDoc && base ? base.compose(tr.changes) : null;
      const { markers: mappedMarkers, deleted } = mapMarkers(next.markers, tr.changes, tr.state.doc, next.deleted);
      if (stale !== next.stale) {
        const mapped = { ...next, stale, freshDoc, unchecked: false, deleted, sinceReport };
        const markers = new RangeSetBuilder<SyncGutterMarker>();
        for (const iter = mappedMarkers.iter(); iter.value; iter.next()) {
          markers.add(iter.from, iter.to, new SyncGutterMarker(iter.value.info, stale));
        }
        return {
          ...mapped,
          markers: markers.finish(),
          lines: next.lines.map(tr.changes).update({ filter: () => false })
        };
      }
      return {
        ...next,
        freshDoc,
        unchecked: false,
        deleted,
        sinceReport,
        markers: mappedMarkers,
        lines: next.lines.map(tr.changes)
      };
    }
    return next;
  },
  provide: field => EditorView.decorations.from(field, value => value.lines)
});

/** The marker at a 1-based line of the editor, if any. */
export function markerAtLine(view: EditorView, line: number): SyncGutterMarker | null {
  const state = view.state.field(syncMarkerField, false);
  if (!state || line < 1 || line > view.state.doc.lines) {
    return null;
  }
  const from = view.state.doc.line(line).from;
  let found: SyncGutterMarker | null = null;
  state.markers.between(from, from, (_from, _to, value) => {
    found = value;
    return false;
  });
  return found;
}

/** What an editor shows from the start (the report already in the cell's outputs). */
export interface IInitialMarkers {
  report: SyncReport | null;
  options: ISyncMarkerOptions;
}

/**
 * The syncfree gutter and line highlight: add once per editor. With `initial`, the
 * editor starts with its markers drawn rather than receiving them in a transaction
 * after it is created: opening a notebook of many reports then costs no extra editor
 * update per cell.
 */
export function syncMarkers(initial?: IInitialMarkers): Extension {
  return [
    initial ? syncMarkerField.init(state => initialState(initial.report, initial.options, state)) : syncMarkerField,
    syncGutter,
    staleCheckRunner,
    staleCellClass
  ];
}

/** Set on the cell whose report is out of date: the summary under it says so. */
export const STALE_CELL_CLASS = `${CSS_PREFIX}-mod-stale`;

/**
 * Marks the editor's cell (`.jp-Cell`) while its report is stale, so the inline summary
 * (a separate output widget) is shown as out of date.
 */
const staleCellClass = ViewPlugin.fromClass(
  class {
    private _stale = false;

    constructor(readonly view: EditorView) {
      this._set(view.state.field(syncMarkerField).stale);
    }

    update(update: ViewUpdate): void {
      const field = update.state.field(syncMarkerField);
      if (field !== update.startState.field(syncMarkerField)) {
        this._set(field.stale);
      }
    }

    destroy(): void {
      this._set(false);
    }

    private _set(stale: boolean): void {
      if (stale === this._stale) {
        return;
      }
      this._stale = stale;
      this.view.dom.closest('.jp-Cell')?.classList.toggle(STALE_CELL_CLASS, stale);
    }
  }
);

/**
 * Schedules the stale check that `deferStaleCheck` postponed, once per unchecked
 * report. The check hashes the cell (natively where the page allows, see
 * `sourceHashSoon`); a match is remembered with the text (`verifiedTexts`) and needs no
 * transaction, a mismatch is sent to the marker field (`checkedStale`).
 */
const staleCheckRunner = ViewPlugin.fromClass(
  class {
    private _scheduled = false;
    private _destroyed = false;

    constructor(readonly view: EditorView) {
      this._schedule();
    }

    update(update: ViewUpdate): void {
      // A new report or options (the field's value changes), or an edit; not the many
      // layout updates of an editor whose text was already verified.
      if (update.docChanged || update.state.field(syncMarkerField) !== update.startState.field(syncMarkerField)) {
        this._schedule();
      }
    }

    destroy(): void {
      this._destroyed = true;
    }

    /** The report and text still waiting for the check, if any. */
    private _pending(): { report: SyncReport; doc: Text } | null {
      const { state } = this.view;
      const field = state.field(syncMarkerField);
      return field.report && field.unchecked && !verified(state.doc, field.report)
        ? { report: field.report, doc: state.doc }
        : null;
    }

    private _schedule(): void {
      const scheduler = this.view.state.facet(deferStaleCheck);
      if (this._scheduled || !scheduler || !this._pending()) {
        return;
      }
      this._scheduled = true;
      scheduler(() => {
        this._scheduled = false;
        const pending = this._destroyed ? null : this._pending();
        if (!pending) {
          return;
        }
        const { report, doc } = pending;
        const settle = (hash: string) => {
          if (hash === report.source_hash) {
            verifiedTexts.set(doc, hash);
          } else if (!this._destroyed && this.view.state.doc === doc) {
            this.view.dispatch({ effects: checkedStale.of({ doc, hash }) });
          }
        };
        const hash = sourceHashSoon(doc.toString());
        if (typeof hash === 'string') {
          settle(hash);
        } else {
          void hash.then(settle);
        }
      });
    }
  }
);

/**
 * The gutter and its theme, made once and shared by every editor: they read everything
 * from the editor's own marker field, and building them per editor (a gutter config and
 * a theme's style module) was a measurable share of opening a notebook of 500 cells.
 */
const syncGutter: Extension = [
  gutter({
    class: `${CSS_PREFIX}-gutter`,
    markers: view => view.state.field(syncMarkerField).markers,
    initialSpacer: () => new SpacerMarker(),
    domEventHandlers: {
      mousedown(view, block) {
        const line = view.state.doc.lineAt(block.from).number;
        const handlers = view.state.facet(syncMarkerClick);
        if (handlers.length === 0 || !markerAtLine(view, line)) {
          return false;
        }
        handlers.forEach(handler => handler(view, line));
        return true;
      }
    }
  }),
  EditorView.baseTheme({
    [`.${CSS_PREFIX}-gutter`]: { minWidth: '10px' }
  })
];

class SpacerMarker extends GutterMarker {
  toDOM(): Node {
    const span = document.createElement('span');
    span.className = `${CSS_PREFIX}-marker-spacer`;
    return span;
  }
}
