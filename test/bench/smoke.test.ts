// `npm run bench -- --short` keeps working: every figure runs against its baseline and lands in the JSON file, with
// the machine, the load average around each step, the relay's sweep (two settings per relay in short mode) and the
// relay latencies.
// On MikroORM 6 the run also measures timer firing and the saga step on 7 through the v7 leg. On 7 (the leg's own
// run of this file) it leaves those two out (`--skip`): the run on 6 measured them on 7 already. It measures the
// rest on 7 and does not recurse.
// (Speed itself is judged from the ratios of a full `npm run bench`, never by a timed test.)
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Utils } from '@mikro-orm/core';
import { expect, inject, it } from 'vitest';
import { mikroOrm7Figures } from '../../bench/both-majors.js';
import { REPO_ROOT } from '../support/repository.js';

const run = promisify(execFile);

const spread = { median: expect.any(Number), min: expect.any(Number), max: expect.any(Number) };
const orm = Utils.getORMVersion();
const onSix = orm.startsWith('6.');
/** The saga step's baseline (the target is against it); its hand-written SQL follows as the figure's limit. */
const PLAIN = 'plain MikroORM: fork, em\\.transactional, findOne by key, flush with version check';

/**
 * The figures measured on both majors: on 6, the run adds each again, measured on 7 and named "... (MikroORM 7)";
 * on 7 this file's run skips them (measured on 7 by the run on 6).
 */
const BOTH_MAJORS = [
  /^timer firing end to end.* \/ raw claim/,
  ...[1, 4, 16].flatMap((n) => [
    new RegExp(`^saga step, ${n} callers? \\(PostgreSQL\\)[^/]* / ${PLAIN} / raw pg`),
    // The limit is the driver the ORM runs on: sqlite3 under MikroORM 6's @mikro-orm/sqlite, better-sqlite3 under 7's.
    new RegExp(`^saga step, ${n} callers? \\(SQLite, WAL\\)[^/]* / ${PLAIN} / raw (?:sqlite3|better-sqlite3),`),
  ]),
];

/** Measured on 6 only: `@mikro-orm/better-sqlite` does not exist for 7 (its `@mikro-orm/sqlite` is better-sqlite3 already). */
const SIX_ONLY = [1, 4, 16].map(
  (n) => new RegExp(`^saga step, ${n} callers? \\(SQLite, WAL, @mikro-orm/better-sqlite\\)[^/]* / ${PLAIN} / raw better-sqlite3`),
);

/** Measured on 6 only: pg-boss's `send` runs on the transaction's pg client, which knex (6) hands out. */
const STAGING = ["graphile-worker's add_job in the same transaction", "pg-boss's send on the transaction's connection"].map(
  (baseline) =>
    new RegExp(
      `^app transaction: an article and a staged saga delivery, 4 callers \\(PostgreSQL\\) / ${baseline} / the article alone, no work handed over$`,
    ),
);

/** The relay figures: ours against each baseline at the defaults and at the best, in 1 and 2 processes; then ours alone. */
const RELAY = [1, 2].flatMap((n) =>
  ['defaults', 'best setting'].flatMap((which) => [
    new RegExp(`^outbox relay, \\d+ rows, no-op publisher, ${n} process(es)?, each at its ${which} \\(PostgreSQL\\) / raw batch claim`),
    new RegExp(`^outbox relay, \\d+ rows, no-op publisher, ${n} process(es)?, each at its ${which} \\(PostgreSQL\\) / graphile-worker`),
  ]),
);
RELAY.push(
  /^outbox relay: ours, 2 processes vs 1, at its defaults \/ ours, 1 process$/,
  /^outbox relay: ours, 2 processes vs 1, at its best setting \/ ours, 1 process$/,
  /^outbox relay: ours, pollIntervalMs 20 vs \d+ \(its default\), publishConcurrency \d+, batchSize \d+, 1 process \/ ours, pollIntervalMs \d+$/,
);

/** A relay setting as a figure records it. */
const relaySetting = {
  concurrency: expect.any(Number),
  batch: expect.toSatisfy((batch: unknown) => batch === null || typeof batch === 'number'),
  pollMs: expect.toSatisfy((poll: unknown) => poll === null || typeof poll === 'number'),
  from: expect.stringMatching(/^defaults$|^best of the sweep/),
  description: expect.any(String),
};

const loadAverage = [expect.any(Number), expect.any(Number), expect.any(Number)];

/** The machine and the load average at the start and end of the run, and before and after each step. */
function expectMachineAndLoad(report: { machine: unknown; load: unknown; steps: unknown[] }): void {
  expect(report.machine).toEqual({
    cpus: expect.any(Number),
    cpu: expect.any(String),
    node: expect.any(String),
    platform: expect.any(String),
  });
  expect(report.load).toEqual({ start: loadAverage, end: loadAverage });
  for (const step of report.steps) {
    expect(step).toMatchObject({ what: expect.any(String), seconds: expect.any(Number), loadBefore: loadAverage, loadAfter: loadAverage });
  }
}

/** The relay step records its sweep (two settings per relay in short mode) and its choices; the latency step its ms. */
function expectRelayDetails(steps: { what: string; details?: Record<string, unknown> }[]): void {
  const relay = steps.find((step) => step.what === 'outbox relay')?.details as {
    sweep: { system: string }[];
    chosen: Record<string, unknown>;
  };
  expect(relay.sweep.map((result) => result.system)).toEqual(['ours', 'ours', 'raw', 'raw', 'graphile-worker', 'graphile-worker']);
  expect(Object.keys(relay.chosen)).toEqual(['ours', 'raw', 'graphile-worker']);
  const latency = steps.find((step) => step.what === 'relay latency')?.details;
  const ms = { medianMs: expect.any(Number), p99Ms: expect.any(Number) };
  expect(latency).toMatchObject({ rate: 1_000, ours: ms, graphileWorker: ms });
}

/** A figure as "name / baseline", and " / limit" when it has one. */
function named(figure: Record<string, unknown>): string {
  const limit = figure.limit as { name: string } | undefined;
  return `${figure.name} / ${(figure.baseline as { name: string }).name}${limit ? ` / ${limit.name}` : ''}`;
}

it('the short benchmark runs every figure with its baseline and writes one result object per figure', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'saga-bench-smoke-'));
  const out = join(dir, 'latest.json');
  try {
    const skipBothMajors = onSix ? [] : ['--skip', 'timer firing', '--skip', 'saga step'];
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--short', ...skipBothMajors], {
      cwd: REPO_ROOT,
      env: { ...process.env, BENCH_OUT: out, DATABASE_URL: inject('postgresUrl') },
    });
    const report = JSON.parse(await readFile(out, 'utf8')) as {
      short: boolean;
      machine: Record<string, unknown>;
      load: Record<string, unknown>;
      steps: { what: string; details?: Record<string, unknown> }[];
      figures: Record<string, unknown>[];
    };
    expect(report.short).toBe(true);
    expectMachineAndLoad(report);
    expectRelayDetails(report.steps);
    const names = report.figures.map(named);
    const total = onSix ? 25 + BOTH_MAJORS.length + SIX_ONLY.length + STAGING.length : 25 - BOTH_MAJORS.length;
    expect(names).toHaveLength(total);
    for (const wanted of [
      ...RELAY,
      ...BOTH_MAJORS,
      ...(onSix ? [...SIX_ONLY, ...STAGING] : []),
      /^SQLite dispatcher, .*3 processes vs 1 \(rollback journal\) \/ ours, 1 process$/,
      /^SQLite dispatcher, .*3 processes vs 1 \(WAL\) \/ ours, 1 process$/,
      /^SQLite, hand-written SQL .*3 processes vs 1 \(rollback journal\) \/ raw SQL, 1 process$/,
      /^SQLite, hand-written SQL .*3 processes vs 1 \(WAL\) \/ raw SQL, 1 process$/,
      /^empty dispatcher pass, \d+ delivered timers and \d+ published messages of history, after VACUUM \(PostgreSQL\) \/ the same pass, no history$/,
      /^RSS while draining \d+ timers on \d+ sagas: the 50 MB growth budget left after the first tenth \(PostgreSQL\) \/ the 50 MB budget$/,
      /^saga step with an OpenTelemetry SDK registered \(in-memory exporters, simple span processor\), 4 callers \(PostgreSQL\) \/ the same step, no SDK registered$/,
    ]) {
      expect(
        names.filter((name) => wanted.test(name)),
        String(wanted),
      ).toHaveLength(BOTH_MAJORS.includes(wanted) ? (onSix ? 2 : 0) : 1);
    }
    // Each figure says which major measured it; on 6 exactly the both-majors figures come back from 7, suffixed.
    const fromSeven = report.figures.filter((f) => f.orm !== orm);
    expect(fromSeven.map((f) => f.orm)).toEqual(onSix ? BOTH_MAJORS.map(() => '7.2.1') : []);
    for (const wanted of BOTH_MAJORS) {
      expect(fromSeven.filter((f) => wanted.test(named(f)))).toHaveLength(onSix ? 1 : 0);
    }
    expect(fromSeven.every((f) => (f.name as string).endsWith(' (MikroORM 7)'))).toBe(true);
    for (const figure of report.figures.filter((f) => /^saga step, \d+ callers? \(SQLite, WAL\)/.test(f.name as string))) {
      const driver = (figure.orm as string).startsWith('7.') ? 'better-sqlite3' : 'sqlite3';
      expect((figure.limit as { name: string }).name).toBe(`raw ${driver}, same statements`);
    }
    const isStep = (f: Record<string, unknown>) => /^saga step, /.test(f.name as string);
    const isProcesses = (f: Record<string, unknown>) => /3 processes vs 1/.test(f.name as string);
    const isRelay = (f: Record<string, unknown>) => /^outbox relay/.test(f.name as string);
    const isStaging = (f: Record<string, unknown>) => /^app transaction:/.test(f.name as string);
    // Every saga step against plain MikroORM at 1.0; three SQLite processes against one at 0.9.
    expect(report.figures.filter(isStep).map((f) => f.target)).toEqual(report.figures.filter(isStep).map(() => 1));
    expect(report.figures.filter(isProcesses).map((f) => f.target)).toEqual([0.9, 0.9, 0.9, 0.9]);
    expect(report.figures.filter((f) => (f.name as string).endsWith(' (MikroORM 7)'))).toHaveLength(fromSeven.length);
    for (const figure of report.figures) {
      const claimed = figure.claimedPerProcess as number[][] | undefined;
      expect(figure).toEqual({
        orm: expect.stringMatching(/^[67]\.\d+\.\d+$/),
        name: expect.any(String),
        // Higher is better in every unit: a throughput, or the MB left of the memory figure's budget.
        unit: expect.stringMatching(/\/s$|^MB$/),
        ours: spread,
        baseline: { name: expect.any(String), ...spread },
        ratio: expect.any(Number),
        target: expect.any(Number),
        met: (figure.ratio as number) >= (figure.target as number) && (claimed ?? []).every((run) => run.every((n) => n > 0)),
        runs: 1,
        // The saga step's hand-written SQL: printed with its ratio, no target.
        // The app transaction's: the article alone, without work handed over.
        ...(isStep(figure) || isStaging(figure) ? { limit: { name: expect.any(String), ...spread, ratio: expect.any(Number) } } : {}),
        // What each of the three processes claimed, in the one run of the short mode.
        ...(isProcesses(figure) ? { claimedPerProcess: [[expect.any(Number), expect.any(Number), expect.any(Number)]] } : {}),
        // The relay's settings: ours and the baseline, each with where it came from.
        ...(isRelay(figure) ? { settings: { ours: relaySetting, baseline: relaySetting } } : {}),
      });
      expect((figure.ours as { median: number }).median).toBeGreaterThan(0);
      expect((figure.baseline as { median: number }).median).toBeGreaterThan(0);
    }
    expect(stdout).toMatch(new RegExp(`\\d+ of ${total} targets met`));
    // The table prints each step's ratio against its limit, and what each process claimed.
    expect(stdout.match(/^\| {3}ours against the limit \(no target\)/gm) ?? []).toHaveLength(
      report.figures.filter((f) => isStep(f) || isStaging(f)).length,
    );
    expect(stdout).toMatch(/^SQLite dispatcher, .*3 processes vs 1 \(WAL\): claimed per process, each run: \d+ \+ \d+ \+ \d+$/m);
    // Each relay's two rows with their settings, and the latencies in ms with the ratio graphile-worker / ours.
    for (const relay of ['ours', 'raw batch claim \\+ batch stamp', 'graphile-worker']) {
      expect(stdout).toMatch(new RegExp(`^\\| ${relay} +\\| its defaults +\\| (publishConcurrency|concurrency|1 publish)`, 'm'));
      expect(stdout).toMatch(new RegExp(`^\\| ${relay} +\\| best of the sweep +\\| `, 'm'));
    }
    expect(stdout).toMatch(/^\| median +\| \d+ +\| \d+ +\| [\d.]+ +\|$/m);
    expect(stdout).toMatch(/^\| p99 +\| \d+ +\| \d+ +\| [\d.]+ +\|$/m);
    expect(stdout).toMatch(/^load average [\d. ]+ at the start, [\d. ]+ at the end/m);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 600_000);

it('the bench stops with an error instead of leaving out the MikroORM 7 rows when their child process fails', async () => {
  // Port 1 has no PostgreSQL: the child on 7 fails at its first figure.
  const env = { ...process.env, BENCH_SHORT: '1', DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test' };
  await expect(mikroOrm7Figures(env)).rejects.toThrow(/^the MikroORM 7 figures failed \(legs\/mikro-orm-7\/run exited 1;/);
}, 120_000);
