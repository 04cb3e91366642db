import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // `npm run test:reliability` (vitest.reliability.config.ts) runs the tests tagged so and prints their figures.
    tags: [
      { name: 'reliability', description: 'a process-level fault scenario that reports its figures (test/support/reliability-figures.ts)' },
    ],
  },
});
