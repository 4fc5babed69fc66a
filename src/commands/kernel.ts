import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

/** The result of loading the syncfree IPython extension in a kernel. */
export type LoadOutcome =
  { ok: true } | { ok: false; problem: 'no-kernel' | 'not-python' | 'not-installed' | 'failed'; detail: string };

/** What the user must do when the kernel has no `syncfree` module. */
export const INSTALL_HINT =
  'The kernel cannot import syncfree. Install it in the kernel’s environment — pip install syncfree — then restart the kernel.';

interface IKernelState {
  /** The pending or finished `%load_ext syncfree`. */
  loading: Promise<LoadOutcome> | null;
  watching: boolean;
}

/**
 * The syncfree side of each notebook kernel: loads the IPython extension
 * (`%load_ext syncfree`) and switches watch mode (`%syncfree on|off`), both as silent
 * executions that leave no trace in the notebook or the kernel's history. The state
 * belongs to the kernel connection, so a restarted kernel starts afresh.
 */
export class SyncfreeKernelControl {
  /** Emitted when the watch state of a kernel changes (also on restart). */
  get stateChanged(): ISignal<this, void> {
    return this._stateChanged;
  }

  /** Load the extension in the session's kernel, once per kernel. */
  async ensureLoaded(session: ISessionContext): Promise<LoadOutcome> {
    await session.ready;
    const kernel = session.session?.kernel;
    if (!kernel) {
      return { ok: false, problem: 'no-kernel', detail: 'This notebook has no running kernel: start one first.' };
    }
    const state = this._stateOf(kernel);
    if (!state.loading) {
      state.loading = this._load(kernel);
      // A failed load is tried again next time (the user may have installed it).
      void state.loading.then(outcome => {
        if (!outcome.ok) {
          state.loading = null;
        }
      });
    }
    return state.loading;
  }

  /** Whether watch mode is on for the session's kernel. */
  isWatching(session: ISessionContext | null | undefined): boolean {
    const kernel = session?.session?.kernel;
    return kernel ? (this._states.get(kernel)?.watching ?? false) : false;
  }

  /**
   * Keep the watch state of a notebook's kernels in step with the kernel itself: after
   * any cell that mentions syncfree (`%syncfree on|off`, `%unload_ext syncfree`, …) has
   * run, the kernel is asked (silently) whether it watches. Call once per notebook.
   */
  follow(session: ISessionContext): void {
    const attach = (kernel: Kernel.IKernelConnection | null | undefined) => {
      if (kernel) {
        this._follow(kernel);
      }
    };
    session.kernelChanged.connect((_, change) => attach(change.newValue));
    attach(session.session?.kernel);
  }

  /** Turn watch mode on or off with its line magic (`%syncfree on [options]`, `%syncfree off`). */
  async setWatching(session: ISessionContext, on: boolean, line: string): Promise<LoadOutcome> {
    const loaded = await this.ensureLoaded(session);
    const kernel = session.session?.kernel;
    if (!loaded.ok || !kernel) {
      return loaded;
    }
    const reply = await executeSilently(kernel, line);
    if (reply.status !== 'ok') {
      return { ok: false, problem: 'failed', detail: errorText(reply) };
    }
    this._stateOf(kernel).watching = on;
    this._stateChanged.emit();
    return { ok: true };
  }

  private async _load(kernel: Kernel.IKernelConnection): Promise<LoadOutcome> {
    const info = await kernel.info;
    const language = info.language_info?.name ?? '';
    if (language && language.toLowerCase() !== 'python') {
      return {
        ok: false,
        problem: 'not-python',
        detail: `syncfree needs an IPython kernel; this one runs ${language}.`
      };
    }
    // The user expression confirms the load: `%load_ext` only prints (and succeeds)
    // when the module it finds is not an extension (IPython/core/magics/extension.py).
    const reply = await executeSilently(kernel, '%load_ext syncfree', {
      loaded: LOADED_EXPRESSION
    });
    if (reply.status === 'ok') {
      const loaded = reply.user_expressions?.loaded as
        { status?: string; data?: { 'text/plain'?: string } } | undefined;
      if (loaded?.status === 'ok' && loaded.data?.['text/plain'] === 'True') {
        return { ok: true };
      }
      return {
        ok: false,
        problem: 'failed',
        detail: 'The kernel found a module named syncfree that is not the syncfree IPython extension.'
      };
    }
    if (reply.status === 'error' && (reply.ename === 'ModuleNotFoundError' || reply.ename === 'ImportError')) {
      return { ok: false, problem: 'not-installed', detail: INSTALL_HINT };
    }
    return { ok: false, problem: 'failed', detail: `Loading syncfree in the kernel failed: ${errorText(reply)}` };
  }

  private _follow(kernel: Kernel.IKernelConnection): void {
    if (this._followed.has(kernel)) {
      return;
    }
    this._followed.add(kernel);
    const pending = new Set<string>();
    kernel.anyMessage.connect((_, { msg, direction }) => {
      if (direction === 'send' && msg.header.msg_type === 'execute_request') {
        const content = (msg as KernelMessage.IExecuteRequestMsg).content;
        if (!content.silent && mentionsSyncfree(content.code)) {
          pending.add(msg.header.msg_id);
        }
      } else if (direction === 'recv' && msg.header.msg_type === 'execute_reply') {
        const parent = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id;
        if (parent && pending.delete(parent)) {
          void this._refresh(kernel);
        }
      }
    });
  }

  /** Ask the kernel whether it watches, and update (and signal) the state if it changed. */
  private async _refresh(kernel: Kernel.IKernelConnection): Promise<void> {
    let reply: ExecuteReply;
    try {
      reply = await executeSilently(kernel, '', { watching: WATCHING_EXPRESSION, loaded: LOADED_EXPRESSION });
    } catch {
      return;
    }
    if (reply.status !== 'ok') {
      return;
    }
    const truth = (name: string): boolean | null => {
      const value = reply.user_expressions?.[name] as { status?: string; data?: { 'text/plain'?: string } } | undefined;
      return value?.status === 'ok' ? value.data?.['text/plain'] === 'True' : null;
    };
    const watching = truth('watching');
    const loaded = truth('loaded');
    const state = this._stateOf(kernel);
    if (loaded === false) {
      state.loading = null;
    } else if (loaded === true && !state.loading) {
      state.loading = Promise.resolve({ ok: true });
    }
    if (watching !== null && watching !== state.watching) {
      state.watching = watching;
      this._stateChanged.emit();
    }
  }

  private _stateOf(kernel: Kernel.IKernelConnection): IKernelState {
    let state = this._states.get(kernel);
    if (!state) {
      const created: IKernelState = { loading: null, watching: false };
      state = created;
      this._states.set(kernel, created);
      kernel.statusChanged.connect((_, status) => {
        // A restarted kernel has neither the extension loaded nor watch mode on.
        if (status === 'restarting' || status === 'autorestarting') {
          created.loading = null;
          if (created.watching) {
            created.watching = false;
            this._stateChanged.emit();
          }
        }
      });
    }
    return state;
  }

  private _followed = new WeakSet<Kernel.IKernelConnection>();
  private _states = new WeakMap<Kernel.IKernelConnection, IKernelState>();
  private _stateChanged = new Signal<this, void>(this);
}

/** Whether code run by the user may change syncfree's state in the kernel. */
export function mentionsSyncfree(code: string): boolean {
  return /syncfree/.test(code);
}

/**
 * A user expression: whether the kernel's syncfree magics watch every cell (their
 * read-only `watching` property, python_helper/syncfree/magic.py).
 */
export const WATCHING_EXPRESSION =
  "getattr(get_ipython().magics_manager.registry.get('SyncfreeMagics'), 'watching', False) is True";

/** A user expression: whether the syncfree IPython extension is loaded. */
export const LOADED_EXPRESSION = "'syncfree' in get_ipython().extension_manager.loaded";

type ExecuteReply = KernelMessage.IExecuteReplyMsg['content'];

/**
 * Run code without output, history or execution count (`silent` execute request);
 * `userExpressions` are evaluated afterwards and come back in the reply.
 */
export async function executeSilently(
  kernel: Kernel.IKernelConnection,
  code: string,
  userExpressions: Record<string, string> = {}
): Promise<ExecuteReply> {
  const future = kernel.requestExecute({
    code,
    silent: true,
    store_history: false,
    allow_stdin: false,
    stop_on_error: false,
    user_expressions: userExpressions
  });
  const reply = await future.done;
  return reply.content;
}

function errorText(reply: ExecuteReply): string {
  if (reply.status === 'error') {
    return `${reply.ename}: ${reply.evalue}`;
  }
  return reply.status;
}
