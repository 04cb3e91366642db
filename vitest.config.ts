import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { SlowFilesFirst } from './test/support/slow-files-first.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Files share each worker's module cache: the suite imports MikroORM once per worker, not once per file
    // (6.4 min instead of 7.6 on MikroORM 6 on 2 cores). Every test opens a database of its own (suite.ts).
    isolate: false,
    sequence: { sequencer: SlowFilesFirst },
    // Test files mostly wait on PostgreSQL, SQLite files and child processes, and each has a database of its own
    // (test/support/suite.ts): two at once even on two cores (vitest's default there is one), which took the suite
    // on MikroORM 6 from 443 s to 273 s on this 2-core machine. More cores: vitest's default (one per core less one).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // The process-level fault scenarios (tests tagged `reliability`) report figures; at the end of a run that ran
    // any, the reporter prints them as one table and fails the run when a scenario lost or doubled work or ran and
    // reported nothing; a whole run, when one is missing (test/support/reliability-reporter.ts).
    reporters: ['default', './test/support/reliability-reporter.ts'],
    tags: [
      { name: 'reliability', description: 'a process-level fault scenario that reports its figures (test/support/reliability-figures.ts)' },
    ],
  },
});
