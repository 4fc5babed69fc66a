import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import { CSS_PREFIX } from '../tokens';
import { INotebookTotals, notebookTotalsText } from '../model';
import { el } from '../dom';

/**
 * The status-bar item: the current notebook's totals ("103 syncs · 1.73 ms GPU time lost");
 * a click opens the Syncs panel. Inactive (hidden by the status bar, which shows and
 * hides its items itself) while the notebook has no report.
 */
export class SyncsStatus extends Widget {
  constructor(private readonly _open: () => void) {
    super({ node: el('button', `${CSS_PREFIX}-status jp-StatusBar-TextItem`) });
    const node = this.node as HTMLButtonElement;
    node.type = 'button';
    node.addEventListener('click', () => this._open());
    this.totals = null;
  }

  /** Whether there is anything to show (the status bar's `isActive`). */
  get active(): boolean {
    return this._active;
  }

  /** Emitted when `active` changes (the status bar's `activeStateChanged`). */
  get activeChanged(): ISignal<this, void> {
    return this._activeChanged;
  }

  /** The totals shown, or null for none (the item goes inactive). */
  set totals(value: INotebookTotals | null) {
    const node = this.node as HTMLButtonElement;
    const active = value !== null && value.cells > 0;
    if (value && active) {
      const text = `Syncs: ${notebookTotalsText(value)}`;
      node.textContent = text;
      // Predicted on CPU there is no cost to show, and the title says why (issue 37).
      const noCost = value.predicted ? ' (no GPU: no cost)' : '';
      node.title = `${text} in ${value.cells} cell${value.cells === 1 ? '' : 's'}${noCost}. Click to open the Syncs panel.`;
    } else {
      node.textContent = '';
      node.title = '';
    }
    if (active !== this._active) {
      this._active = active;
      this._activeChanged.emit();
    }
  }

  private _active = false;
  private _activeChanged = new Signal<this, void>(this);
}

/** The number on the Syncs tab: syncs, or likely syncs when nothing ran; null for none. */
export function badgeCount(totals: INotebookTotals | null): number | null {
  if (!totals || totals.cells === 0) {
    return null;
  }
  return totals.syncs > 0 ? totals.syncs : totals.notRun > 0 ? totals.notRun : null;
}

/** "1.2k" past 999: the badge is small. */
export function badgeText(count: number): string {
  return count > 999 ? `${(count / 1000).toFixed(count > 9999 ? 0 : 1)}k` : String(count);
}
