// `npm run bench` keeps working: a short run prints a ratio for every scenario on both databases.
// (Speed itself is judged from the ratios of a full `npm run bench`, never by a timed test.)
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, inject, it } from 'vitest';

const run = promisify(execFile);

it('the benchmark runs end to end and reports ours/raw for each scenario', async () => {
  const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts'], {
    cwd: new URL('..', import.meta.url).pathname,
    env: { ...process.env, BENCH_N: '20', DATABASE_URL: inject('postgresUrl') },
  });
  const rows = stdout.split('\n').filter((line) => /^(sqlite|postgresql)\s/.test(line));
  expect(rows).toHaveLength(8);
  for (const row of rows) expect(row).toMatch(/\s\d+\s+\d+\s+\d+\.\d\d$/);
}, 120_000);
