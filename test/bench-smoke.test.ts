// `npm run bench -- --short` keeps working: every figure runs against its baseline and lands in the JSON file.
// (Speed itself is judged from the ratios of a full `npm run bench`, never by a timed test.)
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, inject, it } from 'vitest';

const run = promisify(execFile);

const spread = { median: expect.any(Number), min: expect.any(Number), max: expect.any(Number) };

it('the short benchmark runs every figure with its baseline and writes one result object per figure', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'saga-bench-smoke-'));
  const out = join(dir, 'latest.json');
  try {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--short'], {
      cwd: new URL('..', import.meta.url).pathname,
      env: { ...process.env, BENCH_OUT: out, DATABASE_URL: inject('postgresUrl') },
    });
    const report = JSON.parse(await readFile(out, 'utf8')) as { short: boolean; figures: Record<string, unknown>[] };
    expect(report.short).toBe(true);
    const names = report.figures.map((f) => `${f.name} / ${(f.baseline as { name: string }).name}`);
    expect(names).toHaveLength(14);
    for (const wanted of [
      /^outbox relay, \d+ rows, no-op publisher, 1 process .* \/ raw batch claim/,
      /^outbox relay, \d+ rows, no-op publisher, 1 process .* \/ graphile-worker/,
      /^outbox relay, \d+ rows, no-op publisher, 2 processes .* \/ raw batch claim/,
      /^outbox relay, \d+ rows, no-op publisher, 2 processes .* \/ graphile-worker/,
      /^outbox relay: ours, 2 processes vs 1 \/ ours, 1 process$/,
      /^timer firing end to end.* \/ raw claim/,
      ...[1, 4, 16].flatMap((n) => [
        new RegExp(`^saga step, ${n} callers? \\(PostgreSQL\\) / raw pg`),
        new RegExp(`^saga step, ${n} callers? \\(SQLite, WAL\\) / raw sqlite3`),
      ]),
      /^SQLite dispatcher, .*3 processes vs 1 \(rollback journal\) \/ ours, 1 process$/,
      /^SQLite dispatcher, .*3 processes vs 1 \(WAL\) \/ ours, 1 process$/,
    ]) {
      expect(
        names.filter((name) => wanted.test(name)),
        String(wanted),
      ).toHaveLength(1);
    }
    for (const figure of report.figures) {
      expect(figure).toEqual({
        name: expect.any(String),
        unit: expect.stringMatching(/\/s$/),
        ours: spread,
        baseline: { name: expect.any(String), ...spread },
        ratio: expect.any(Number),
        target: expect.any(Number),
        met: (figure.ratio as number) >= (figure.target as number),
        runs: 1,
      });
      expect((figure.ours as { median: number }).median).toBeGreaterThan(0);
      expect((figure.baseline as { median: number }).median).toBeGreaterThan(0);
    }
    expect(stdout).toMatch(/\d+ of 14 targets met/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 600_000);
