// `npm run bench -- --only <text>` runs the steps whose name contains the text alone (docs/performance.md "How to
// reproduce") and writes their figures to a file of their own; an --only that names no step is refused. It runs the
// RSS step, the cheapest (the smoke test runs every step). Never checks speed.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, inject, it } from 'vitest';
import { REPO_ROOT } from '../support/repository.js';

const run = promisify(execFile);

it('--only RSS measures the RSS figure and nothing else', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'saga-bench-only-'));
  const out = join(dir, 'rss.json');
  try {
    await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--short', '--only', 'RSS'], {
      cwd: REPO_ROOT,
      env: { ...process.env, BENCH_OUT: out, DATABASE_URL: inject('postgresUrl') },
    });
    const report = JSON.parse(await readFile(out, 'utf8')) as { figures: { name: string }[] };
    expect(report.figures).toHaveLength(1);
    expect(report.figures.every((figure) => figure.name.startsWith('RSS while draining'))).toBe(true);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 180_000);

it('--only with a text no step name contains exits with 2 and lists the steps', async () => {
  const failed = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--short', '--only', 'no-such-figure'], {
    cwd: REPO_ROOT,
    env: { ...process.env, DATABASE_URL: inject('postgresUrl') },
  }).catch((error: { code: number; stderr: string }) => error);
  expect(failed).toMatchObject({ code: 2 });
  expect((failed as { stderr: string }).stderr).toContain('outbox relay');
}, 60_000);
