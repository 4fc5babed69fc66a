// Builds the prebuilt labextension with the `jupyter labextension build` on PATH, against
// the core packages of the JupyterLab that ships that command (its staging/package.json):
// @jupyterlab/builder 4.5 cannot read @jupyterlab/core-meta 4.6 on its own.
// The interpreter is taken from the `jupyter` script's shebang, so that this also works
// inside pip's isolated build environment, where `python` may be another interpreter.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

function jupyterPython() {
  const found = spawnSync(process.platform === 'win32' ? 'where' : 'which', ['jupyter'], { encoding: 'utf8' });
  const script = found.status === 0 ? found.stdout.split(/\r?\n/)[0].trim() : '';
  if (script) {
    const first = readFileSync(script, 'utf8').split('\n')[0];
    if (first.startsWith('#!')) {
      return first.slice(2).trim().split(/\s+/)[0];
    }
  }
  return 'python3';
}

const python = jupyterPython();
const staging = execFileSync(
  python,
  ['-c', 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))'],
  { encoding: 'utf8' }
).trim();
const args = ['-m', 'jupyterlab.labextensions', 'build', '.', '--core-path', staging, ...process.argv.slice(2)];
const result = spawnSync(python, args, { stdio: 'inherit' });
process.exit(result.status ?? 1);
