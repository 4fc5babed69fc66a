import { EditorState, Extension, Prec, StateEffect, StateField } from '@codemirror/state';
import { EditorView, Tooltip, ViewPlugin, ViewUpdate, getTooltip, keymap, showTooltip } from '@codemirror/view';
import { applyRewrite, planRewriteIn } from '../rewrite';
import { CSS_PREFIX } from '../tokens';
import { renderSyncCard } from './card';
import { anchorsIn, markerAtLine, setSyncReport, syncMarkerClick, syncMarkerField } from './extension';

/** The open sync card of an editor. */
interface ICardState {
  /** Start of the marked line the card belongs to. */
  pos: number;
  /** Opened by a click or the keyboard: stays until closed, not only while hovered. */
  pinned: boolean;
  /** Move the keyboard focus into the card when it appears. */
  focus: boolean;
  tooltip: Tooltip;
}

/** Open the card of a 1-based line (or close the card, with null). */
export const openSyncCard = StateEffect.define<{ line: number; pinned: boolean; focus?: boolean } | null>();

/** How long the pointer rests on a marked line before its card opens, and leaves before it closes. */
const HOVER_OPEN_MS = 300;
const HOVER_CLOSE_MS = 300;

function cardTooltip(pos: number, focus: boolean): Tooltip {
  return {
    pos,
    above: false,
    arrow: false,
    create: view => {
      const dom = createCard(view, pos);
      return {
        dom,
        mount: () => {
          if (focus) {
            dom.focus();
          }
        }
      };
    }
  };
}

function createCard(view: EditorView, pos: number): HTMLElement {
  const line = view.state.doc.lineAt(pos).number;
  const marker = markerAtLine(view, line);
  const state = view.state.field(syncMarkerField);
  if (!marker || !state.report) {
    return document.createElement('div');
  }
  const report = state.report;
  const close = () => {
    const refocus = card.contains(document.activeElement);
    view.dispatch({ effects: openSyncCard.of(null) });
    if (refocus) {
      view.focus();
    }
  };
  const card: HTMLElement = renderSyncCard(
    {
      marker: marker.info,
      line,
      report,
      stale: state.stale,
      showLibraryFrames: state.options.showLibraryFrames,
      anchors: anchorsIn(report, view.state.doc)
    },
    {
      plan: fix => planRewriteIn(view.state, report, fix),
      apply: fix => {
        const outcome = applyRewrite(view, report, fix);
        if (outcome.ok) {
          view.focus();
        }
        return outcome;
      },
      close
    }
  );
  card.addEventListener('mouseenter', () => view.plugin(cardHover)?.keep());
  card.addEventListener('mouseleave', () => view.plugin(cardHover)?.leave());
  card.addEventListener('focusout', event => {
    // A pinned card closes once the focus leaves both the card and its editor.
    const to = event.relatedTarget as Node | null;
    if (to && !card.contains(to) && !view.dom.contains(to)) {
      view.dispatch({ effects: openSyncCard.of(null) });
    }
  });
  return card;
}

/** The DOM of the open card of an editor, if any (it may live outside the editor). */
export function cardOf(view: EditorView): HTMLElement | null {
  const value = view.state.field(syncCardField, false);
  return value ? (getTooltip(view, value.tooltip)?.dom ?? null) : null;
}

function lineOfPos(state: EditorState, pos: number): number {
  return state.doc.lineAt(Math.min(pos, state.doc.length)).number;
}

export const syncCardField = StateField.define<ICardState | null>({
  create: () => null,
  update(value, tr) {
    for (const effect of tr.effects) {
      if (effect.is(openSyncCard)) {
        if (!effect.value) {
          return null;
        }
        const line = Math.max(1, Math.min(effect.value.line, tr.state.doc.lines));
        const pos = tr.state.doc.line(line).from;
        const focus = effect.value.focus ?? false;
        if (value && value.pos === pos && !focus) {
          return { ...value, pinned: value.pinned || effect.value.pinned };
        }
        return { pos, pinned: effect.value.pinned, focus, tooltip: cardTooltip(pos, focus) };
      }
      if (effect.is(setSyncReport)) {
        // A new report: the card would show the old one.
        return null;
      }
    }
    if (!value) {
      return value;
    }
    if (tr.docChanged) {
      // Typing closes the card, as an editor's hover does; the markers turn stale anyway.
      return null;
    }
    if (
      tr.selection &&
      tr.isUserEvent('select') &&
      lineOfPos(tr.state, tr.state.selection.main.head) !== lineOfPos(tr.state, value.pos)
    ) {
      return null;
    }
    return value;
  },
  provide: field => showTooltip.from(field, value => value?.tooltip ?? null)
});

/**
 * Opens the card of a marked line while the pointer rests on its marker or its text,
 * and closes a card that was opened this way once the pointer has left both the line
 * and the card.
 */
class CardHover {
  constructor(readonly view: EditorView) {
    view.dom.addEventListener('mousemove', this._onMove);
    view.dom.addEventListener('mouseleave', this._onLeave);
  }

  /** The pointer is on the card: keep it. */
  keep(): void {
    this._cancel();
  }

  /** The pointer left the card. */
  leave(): void {
    this._scheduleClose();
  }

  update(update: ViewUpdate): void {
    const open = update.state.field(syncCardField, false) ?? null;
    const listening = this._escapeListening;
    if (open && !listening) {
      document.addEventListener('keydown', this._onDocumentKey, true);
      this._escapeListening = true;
    } else if (!open && listening) {
      document.removeEventListener('keydown', this._onDocumentKey, true);
      this._escapeListening = false;
    }
  }

  destroy(): void {
    this._cancel();
    if (this._escapeListening) {
      document.removeEventListener('keydown', this._onDocumentKey, true);
      this._escapeListening = false;
    }
    this.view.dom.removeEventListener('mousemove', this._onMove);
    this.view.dom.removeEventListener('mouseleave', this._onLeave);
  }

  /**
   * Escape anywhere (command mode, the card itself) closes an open card. In the
   * editor the keymap (`closeOnEscape`) does it, so that Escape does not also leave
   * edit mode.
   */
  private _onDocumentKey = (event: KeyboardEvent) => {
    const target = event.target as Element | null;
    // The editor's keymap and the card's own handler (it returns the focus) go first.
    if (
      event.key !== 'Escape' ||
      this.view.dom.contains(target) ||
      target?.closest?.(`.${CSS_PREFIX}-card`) ||
      !this.view.state.field(syncCardField, false)
    ) {
      return;
    }
    this._cancel();
    this.view.dispatch({ effects: openSyncCard.of(null) });
  };

  private _escapeListening = false;

  private _onMove = (event: MouseEvent) => {
    const line = this._markedLineAt(event);
    const open = this.view.state.field(syncCardField, false);
    const openLine = open ? lineOfPos(this.view.state, open.pos) : null;
    if (line !== null && line === openLine) {
      this._cancel();
      return;
    }
    if (line === null) {
      this._cancelOpen();
      this._scheduleClose();
      return;
    }
    if (this._pending === line) {
      return;
    }
    this._cancel();
    this._pending = line;
    this._openTimer = window.setTimeout(() => {
      this._pending = null;
      if (markerAtLine(this.view, line)) {
        this.view.dispatch({ effects: openSyncCard.of({ line, pinned: false }) });
      }
    }, HOVER_OPEN_MS);
  };

  private _onLeave = () => {
    this._cancelOpen();
    this._scheduleClose();
  };

  /** The marked 1-based line under the pointer: its gutter marker or its text. */
  private _markedLineAt(event: MouseEvent): number | null {
    const target = event.target as HTMLElement | null;
    if (!target) {
      return null;
    }
    const { view } = this;
    let line: number | null = null;
    if (target.closest(`.${CSS_PREFIX}-gutter`)) {
      const block = view.lineBlockAtHeight(event.clientY - view.documentTop);
      line = view.state.doc.lineAt(block.from).number;
    } else if (view.contentDOM.contains(target)) {
      const pos = view.posAtCoords({ x: event.clientX, y: event.clientY }, false);
      const at = view.state.doc.lineAt(pos);
      const end = view.coordsAtPos(at.to);
      // Only over the text itself, not the empty space right of it.
      if (end && event.clientX <= end.right + 2) {
        line = at.number;
      }
    }
    return line !== null && markerAtLine(view, line) ? line : null;
  }

  private _scheduleClose(): void {
    const open = this.view.state.field(syncCardField, false);
    if (!open || open.pinned || this._closeTimer !== null) {
      return;
    }
    this._closeTimer = window.setTimeout(() => {
      this._closeTimer = null;
      const still = this.view.state.field(syncCardField, false);
      if (still && !still.pinned) {
        this.view.dispatch({ effects: openSyncCard.of(null) });
      }
    }, HOVER_CLOSE_MS);
  }

  private _cancelOpen(): void {
    if (this._openTimer !== null) {
      window.clearTimeout(this._openTimer);
      this._openTimer = null;
    }
    this._pending = null;
  }

  private _cancel(): void {
    this._cancelOpen();
    if (this._closeTimer !== null) {
      window.clearTimeout(this._closeTimer);
      this._closeTimer = null;
    }
  }

  private _pending: number | null = null;
  private _openTimer: number | null = null;
  private _closeTimer: number | null = null;
}

const cardHover = ViewPlugin.fromClass(CardHover);

/** Open or close the pinned card of a marked line (a click on its marker). */
export function toggleSyncCard(view: EditorView, line: number): void {
  const open = view.state.field(syncCardField, false);
  if (open && open.pinned && lineOfPos(view.state, open.pos) === line) {
    view.dispatch({ effects: openSyncCard.of(null) });
  } else {
    view.dispatch({ effects: openSyncCard.of({ line, pinned: true }) });
  }
}

/**
 * Open the card of the line with the cursor and move the focus into it (the keyboard
 * way to the card and its Apply rewrite button). False when that line has no marker.
 */
export function showSyncCardAtCursor(view: EditorView): boolean {
  const line = view.state.doc.lineAt(view.state.selection.main.head).number;
  if (!markerAtLine(view, line)) {
    return false;
  }
  view.dispatch({ effects: openSyncCard.of({ line, pinned: true, focus: true }) });
  return true;
}

/**
 * Escape in the editor closes an open card first. CodeMirror sees the key before
 * JupyterLab (which listens on the document and skips handled events), so the first
 * Escape does not also leave edit mode.
 */
const closeOnEscape = Prec.highest(
  keymap.of([
    {
      key: 'Escape',
      run: view => {
        if (!view.state.field(syncCardField, false)) {
          return false;
        }
        view.dispatch({ effects: openSyncCard.of(null) });
        return true;
      }
    }
  ])
);

/** The sync card: hover, click on a marker, or `showSyncCardAtCursor`. */
export function syncCard(): Extension {
  return [syncCardField, cardHover, closeOnEscape, syncMarkerClick.of(toggleSyncCard)];
}
