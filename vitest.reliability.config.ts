// `npm run test:reliability`: only the process-level fault scenarios (tests tagged `reliability`), with the
// global setup and settings of vitest.config.ts, and a reporter that prints their figures as one table and fails
// the run when a scenario lost or doubled work or reported nothing (test/support/reliability-reporter.ts).
// Under the MikroORM 7 leg (`legs/mikro-orm-7/run reliability`, which sets MIKRO_ORM_LEG=7) it extends the leg's
// config instead, so the same scenarios run on 7.
import { mergeConfig } from 'vite';
import { defineConfig } from 'vitest/config';

const base =
  process.env.MIKRO_ORM_LEG === '7'
    ? (await import('./legs/mikro-orm-7/vitest.config.js')).default
    : (await import('./vitest.config.js')).default;

/** The files that hold the scenarios; the tag picks the tests inside them. */
export const RELIABILITY_FILES = [
  'test/reliability/dispatcher-processes.test.ts',
  'test/reliability/dispatcher-process-faults.test.ts',
  'test/reliability/idempotency-processes.test.ts',
];

// mergeConfig concatenates arrays: the include and reporters of the base config are replaced, not extended.
const config = mergeConfig(base, defineConfig({ test: { tagsFilter: ['reliability'] } }));
config.test = { ...config.test, include: RELIABILITY_FILES, reporters: ['default', './test/support/reliability-reporter.ts'] };
export default config;
