/**
 * The UI benchmark (not a test): `npx playwright test --config bench/playwright.config.js`
 * from ui-tests/. It prints its figures; see bench/ui/README.md.
 */
const base = require('../playwright.config');

module.exports = {
  ...base,
  testDir: '.',
  testMatch: '*.bench.ts',
  timeout: 300000,
  webServer: { ...base.webServer, cwd: require('path').resolve(__dirname, '..') }
};
