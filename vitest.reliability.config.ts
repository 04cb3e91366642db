// `npm run test:reliability`: only the process-level fault scenarios (tests tagged `reliability`), with the
// global setup and settings of vitest.config.ts. Its reporter prints their figures as one table and fails the run
// when a scenario lost or doubled work or reported nothing, or any scenario is missing on any database, however
// the run was narrowed (test/support/reliability-reporter.ts). `npm test` prints the same table.
// Under the MikroORM 7 leg (`legs/mikro-orm-7/run reliability`, which sets MIKRO_ORM_LEG=7) it extends the leg's
// config instead, so the same scenarios run on 7.
import { defineConfig, type TestUserConfig, type ViteUserConfig } from 'vitest/config';
import { RELIABILITY_FILES } from './test/support/reliability-figures.js';
import type { ReliabilityReporterOptions } from './test/support/reliability-reporter.js';

const base: ViteUserConfig =
  process.env.MIKRO_ORM_LEG === '7'
    ? (await import('./legs/mikro-orm-7/vitest.config.js')).default
    : (await import('./vitest.config.js')).default;

const reporterOptions = { everyScenario: true } satisfies ReliabilityReporterOptions;
// The include and reporters of the base config are replaced, not extended. `tagsFilter` is a run option, which
// vitest also reads from here.
const test: TestUserConfig = {
  ...base.test,
  include: [...RELIABILITY_FILES],
  tagsFilter: ['reliability'],
  reporters: ['default', ['./test/support/reliability-reporter.ts', reporterOptions]],
};
export default defineConfig({ ...base, test });
