const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

const base = jestJupyterLab(__dirname);

module.exports = {
  ...base,
  roots: ['<rootDir>/src'],
  reporters: ['default'],
  testRegex: '/__tests__/.*\\.spec\\.ts$',
  testPathIgnorePatterns: ['/lib/', '/node_modules/']
};
