import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ICodeCellModel } from '@jupyterlab/cells';
import type { CodeEditor } from '@jupyterlab/codeeditor';
import { EditorExtensionRegistry, IEditorExtensionRegistry } from '@jupyterlab/codemirror';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { EditorView, ViewPlugin } from '@codemirror/view';
import type { SyncfreeMarkers } from '../_settings';
import { reportOfCell, sameReport } from '../reports';
import { rewriteUndoBoundary } from '../rewrite';
import { PLUGIN_IDS, SyncReport } from '../tokens';
import {
  DEFAULT_SYNC_MARKER_OPTIONS,
  ISyncMarkerOptions,
  deferStaleCheck,
  setMarkerOptions,
  setSyncReport,
  syncMarkerField,
  syncMarkers,
  whenIdle
} from './extension';
import { syncCard } from './tooltip';

type MarkerOptions = ISyncMarkerOptions;

/**
 * The marker settings shared by every editor. Editors subscribe to changes through a
 * Set rather than a Lumino signal: a signal finds duplicate connections by a linear
 * scan of the sender's connections, which made opening a notebook of 500 cells spend
 * O(n²) time connecting editors to this one sender.
 */
class MarkerSettings {
  options: MarkerOptions = DEFAULT_SYNC_MARKER_OPTIONS;

  /** Call `listener` on every change until the returned function is called. */
  subscribe(listener: (options: MarkerOptions) => void): () => void {
    this._listeners.add(listener);
    return () => this._listeners.delete(listener);
  }

  update(settings: SyncfreeMarkers): void {
    const defaults = DEFAULT_SYNC_MARKER_OPTIONS;
    this.options = {
      thresholdMs: settings.thresholdMs ?? defaults.thresholdMs,
      showStatic: settings.showStatic ?? defaults.showStatic,
      lineHighlight: settings.lineHighlight ?? defaults.lineHighlight,
      showLibraryFrames: settings.showLibraryFrames ?? defaults.showLibraryFrames
    };
    this._listeners.forEach(listener => listener(this.options));
  }

  private _listeners = new Set<(options: MarkerOptions) => void>();
}

function isCodeCellModel(model: CodeEditor.IModel): model is ICodeCellModel {
  return (model as Partial<ICodeCellModel>).outputs !== undefined && (model as ICodeCellModel).type === 'code';
}

/**
 * Connects one cell editor to its cell's outputs: whenever a report output appears,
 * changes or is cleared, the editor's markers follow. Reading the report from the cell
 * model (rather than from a notebook-wide store) keeps this working in any notebook view,
 * Notebook 7 included, and for cells created lazily by the windowed notebook.
 */
function cellReportBridge(model: ICodeCellModel, settings: MarkerSettings) {
  return ViewPlugin.define(view => {
    let disposed = false;
    // The editor started with the report and options of its creation (syncMarkers'
    // `initial`, computed synchronously just before this view was constructed): only
    // later output and settings changes need a transaction.
    let current: SyncReport | null = view.state.field(syncMarkerField).report;
    // The outputs list of the model, kept: a disposed cell model has none (its
    // `outputs` is null), and an editor can outlive its model by a moment.
    const outputs = model.outputs;
    const push = () => {
      if (disposed || model.isDisposed) {
        return;
      }
      const report = reportOfCell(model);
      if (sameReport(report, current)) {
        return;
      }
      current = report;
      view.dispatch({ effects: setSyncReport.of(report) });
    };
    const unsubscribe = settings.subscribe(options => {
      if (!disposed) {
        view.dispatch({ effects: setMarkerOptions.of(options) });
      }
    });
    outputs.changed.connect(push);
    return {
      destroy() {
        disposed = true;
        // Unsubscribe first: nothing below may keep a destroyed view subscribed.
        unsubscribe();
        if (!outputs.isDisposed) {
          outputs.changed.disconnect(push);
        }
      }
    };
  });
}

/**
 * Close the current undo step of a cell. Cell editors undo through the Y.UndoManager of
 * the cell's shared model (@jupyter/ydoc ycell.ts `undoManager`, not declared on
 * ISharedText), which merges edits made within its capture timeout into one step.
 */
function stopUndoCapturing(model: CodeEditor.IModel): void {
  const shared = model.sharedModel as { undoManager?: { stopCapturing(): void } | null };
  shared.undoManager?.stopCapturing();
}

/** The view of a cell editor's host element, for code that has only the DOM. */
export function editorViewOf(host: HTMLElement): EditorView | null {
  const content = host.querySelector('.cm-content');
  return content ? EditorView.findFromDOM(content as HTMLElement) : null;
}

export const markersPlugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_IDS.markers,
  description: 'Gutter markers and line highlights on the cell lines where syncs were reported.',
  autoStart: true,
  requires: [IEditorExtensionRegistry],
  optional: [ISettingRegistry],
  activate: (app: JupyterFrontEnd, registry: IEditorExtensionRegistry, settingRegistry: ISettingRegistry | null) => {
    const settings = new MarkerSettings();
    registry.addExtension({
      name: 'jupyterlab-syncfree:markers',
      factory: options => {
        if (!isCodeCellModel(options.model)) {
          return null;
        }
        const model = options.model;
        return EditorExtensionRegistry.createImmutableExtension([
          syncMarkers({ report: reportOfCell(model), options: settings.options }),
          // Hash the cell for the stale check in idle time, not while the notebook opens.
          deferStaleCheck.of(whenIdle),
          syncCard(),
          cellReportBridge(model, settings),
          rewriteUndoBoundary.of(() => stopUndoCapturing(model))
        ]);
      }
    });
    if (settingRegistry) {
      void settingRegistry
        .load(PLUGIN_IDS.markers)
        .then(loaded => {
          const apply = () => settings.update(loaded.composite as SyncfreeMarkers);
          loaded.changed.connect(apply);
          apply();
        })
        .catch(reason => console.error('syncfree: could not load marker settings', reason));
    }
  }
};
