/**
 * galata + Playwright against a real JupyterLab and ipykernel, in Debian's Chromium
 * (Playwright's own browser download is not available on our machines).
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

// SYNCFREE_UI_PORT lets a second test server run beside a developer's (default 8888).
const port = process.env.SYNCFREE_UI_PORT || '8888';
const baseURL = `http://localhost:${port}`;

module.exports = {
  ...baseConfig,
  timeout: 120000,
  retries: process.env.CI ? 1 : 0,
  // Two browsers against the one server: each test works in its own folder (galata's tmpPath), and most of a
  // test's time is spent waiting on a kernel. SYNCFREE_UI_WORKERS=1 runs them one at a time.
  workers: Number(process.env.SYNCFREE_UI_WORKERS || 2),
  reporter: [['list']],
  use: {
    ...baseConfig.use,
    baseURL,
    video: 'off',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage']
    }
  },
  webServer: {
    command: 'jupyter lab --config jupyter_server_test_config.py',
    url: `${baseURL}/lab`,
    timeout: 120 * 1000,
    reuseExistingServer: !process.env.CI,
    // SIGTERM first: JupyterLab shuts its kernels down and removes the folders galata made
    // (jupyter_server_test_config.py); killed as before after 15 s.
    gracefulShutdown: { signal: 'SIGTERM', timeout: 15000 },
    // The server's log is noise in a passing run; SYNCFREE_UI_DEBUG=1 shows it.
    stdout: process.env.SYNCFREE_UI_DEBUG ? 'pipe' : 'ignore',
    stderr: process.env.SYNCFREE_UI_DEBUG ? 'pipe' : 'ignore'
  }
};
