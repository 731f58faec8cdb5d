// eslint flat config: TypeScript sources (type-aware), webview scripts (browser), build and e2e
// scripts (node). `npm run lint` runs it with --max-warnings=0.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'out/**', 'build/**', '.venv/**'] },
  js.configs.recommended,
  {
    files: ['extension/src/**/*.ts', 'extension/test/**/*.ts'],
    extends: [...tseslint.configs.strictTypeChecked],
    languageOptions: {
      parserOptions: { project: './tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      '@typescript-eslint/no-unnecessary-condition': 'off',
      eqeqeq: ['error', 'always'],
      'no-console': 'error',
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
    },
  },
  {
    // node:test's describe/it return promises the runner awaits itself
    files: ['extension/test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unnecessary-type-parameters': 'off',
    },
  },
  {
    files: ['extension/media/**/*.js'],
    languageOptions: { globals: { ...globals.browser, acquireVsCodeApi: 'readonly' } },
    rules: { eqeqeq: ['error', 'always'] },
  },
  {
    files: ['extension/scripts/**/*.mjs', 'e2e/**/*.js', 'e2e/**/*.mjs', 'eslint.config.mjs'],
    languageOptions: { globals: { ...globals.node } },
  },
);
