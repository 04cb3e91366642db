/**
 * `npm run bench`: every figure of issue 8 next to its baseline, measured in the same run, each variant
 * repeated and interleaved with the others; prints medians, min-max and ratios (ours / baseline, higher is
 * better), then the tables steps report besides (each relay's settings; the relay latency in ms, its ratio
 * baseline / ours so that higher is still better), and writes `bench/results/latest.json` with the machine and
 * the load average around each step. These machines are shared and noisy: compare ratios.
 *
 *   npm run bench                       # full run (see docs/performance.md for its duration); on MikroORM 6 it
 *                                       # also measures timer firing and the saga step on 7 (bench/both-majors.ts)
 *   npm run bench -- --short            # every figure once on a few rows (BENCH_SHORT=1 does the same)
 *   BENCH_REPS=5 npm run bench          # more repetitions; BENCH_RELAY_ROWS, BENCH_SWEEP_ROWS, BENCH_LATENCY_RATE,
 *                                       # BENCH_LATENCY_SECONDS, BENCH_TIMERS, BENCH_STEPS, BENCH_SQLITE_TIMERS,
 *                                       # BENCH_HISTORY_ROWS, BENCH_EMPTY_PASSES, BENCH_MEMORY_TIMERS
 *   DATABASE_URL=postgres://... npm run bench
 *   npm run bench -- --only relay       # only the steps whose name contains "relay" (the outbox relay and its latency); the
 *                                       # results go to .tmp/bench-only-relay.json (untracked), never over latest.json
 *   npm run bench -- --only telemetry   # the saga step with an OpenTelemetry SDK registered against the same without one
 *   npm run bench -- --only staging     # an app transaction staging a saga delivery against graphile-worker's add_job and pg-boss's send in it
 *   npm run bench -- --skip relay       # every step but those whose name contains "relay" (repeatable); the results
 *                                       # go to .tmp/bench-skip-relay.json, never over latest.json
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname } from 'node:path';
import { appTransactionStagingFigures } from './app-transaction-staging.js';
import { postgresReachable } from './bench-database.js';
import { BENCH_SETTINGS, POSTGRES_URL, RESULTS_FILE, SHORT } from './bench-settings.js';
import { type BenchStep, BOTH_MAJORS_STEPS, loadNow, measureSteps, mikroOrm7Figures, ORM_VERSION } from './both-majors.js';
import { dispatchHistoryFigures } from './dispatch-history.js';
import { dispatchMemoryFigures } from './dispatch-memory.js';
import { formatTable } from './figure-stats.js';
import { outboxRelayFigures } from './outbox-relay.js';
import { relayLatencyFigures } from './relay-latency.js';
import { sagaStepFigures } from './saga-step.js';
import { sqliteProcessFigures } from './sqlite-processes.js';
import { telemetryOverheadFigures } from './telemetry-overhead.js';

const started = Date.now();
const {
  reps,
  relayRows,
  sweepRows,
  latencyRate,
  latencySeconds,
  sqliteTimers,
  stepMessages,
  historyRows,
  emptyPasses,
  memoryTimers,
  stagedTransactions,
  stagedRate,
  stagedSeconds,
} = BENCH_SETTINGS;
const log = (line: string) => console.info(line);
if (!(await postgresReachable())) {
  console.error(`PostgreSQL is not reachable at ${POSTGRES_URL} (set DATABASE_URL): every PostgreSQL figure needs it.`);
  process.exit(1);
}
const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version, platform: process.platform };
const loadAtStart = loadNow();
log(`${SHORT ? 'SHORT run (smoke test, not a measurement)' : 'full run'}: ${reps} rep(s) per variant, interleaved`);
log(
  `machine: ${machine.cpus} x ${machine.cpu}, Node.js ${machine.node}, ${machine.platform}; load average ${loadAtStart.join(' ')} (1, 5, 15 min)`,
);

// On 6 (the default leg) timer firing and the saga step are measured on 7 too, in a child process through the
// v7 leg; under `npm run bench:v7` this process is already on 7 and does not recurse.
const allSteps: BenchStep[] = [
  ['outbox relay', () => outboxRelayFigures(reps, relayRows, sweepRows, SHORT, log)],
  ['relay latency', () => relayLatencyFigures(latencyRate, latencySeconds, log)],
  ...BOTH_MAJORS_STEPS,
  // `@mikro-orm/better-sqlite` exists for MikroORM 6 only (7's `@mikro-orm/sqlite` is itself better-sqlite3).
  ...(ORM_VERSION.startsWith('7.')
    ? []
    : [['saga step, SQLite (better-sqlite)', () => sagaStepFigures('better-sqlite', reps, stepMessages)] as const]),
  ...(ORM_VERSION.startsWith('7.') ? [] : [['MikroORM 7: timer firing and saga step', mikroOrm7Figures] as const]),
  ['SQLite processes', () => sqliteProcessFigures(reps, sqliteTimers, log)],
  ['empty pass with history', () => dispatchHistoryFigures(reps, historyRows, emptyPasses)],
  ['RSS while draining timers', () => dispatchMemoryFigures(memoryTimers)],
  ['telemetry overhead', () => telemetryOverheadFigures(reps, stepMessages)],
  // MikroORM 6 only: pg-boss's `send` runs on the transaction's own pg client, which knex (6) hands out.
  ...(ORM_VERSION.startsWith('7.')
    ? []
    : [
        [
          'staging in the app transaction',
          () => appTransactionStagingFigures(reps, stagedTransactions, stagedRate, stagedSeconds, log),
        ] as const,
      ]),
];
const only = onlyFilter(process.argv);
const skip = skipFilters(process.argv);
const steps = allSteps.filter(([what]) => (!only || what.includes(only)) && !skip.some((text) => what.includes(text)));
const filters = [...(only ? [`only ${only}`] : []), ...skip.map((text) => `skip ${text}`)];
if (steps.length === 0) {
  console.error(`--${filters.join(' --')}: no step is left to run; the steps are: ${allSteps.map(([what]) => what).join(', ')}`);
  process.exit(2);
}
const { figures, steps: measured } = await measureSteps(steps, log);

const seconds = Math.round((Date.now() - started) / 1000);
const reports = measured.flatMap((step) => (step.report ? [`\n${step.report}`] : []));
console.info(
  `\n${formatTable(figures)}\n${reports.join('\n')}\n\n${figures.filter((f) => f.met).length} of ${figures.length} targets met; ${seconds} s in all`,
);
const load = { start: loadAtStart, end: loadNow() };
console.info(`load average ${load.start.join(' ')} at the start, ${load.end.join(' ')} at the end; each step's is above`);
// A partial run never replaces the full table: it goes to a file of its own unless BENCH_OUT names one.
const partial = filters.length > 0 && !process.env.BENCH_OUT;
const out = partial ? new URL(`../.tmp/bench-${filters.join('-').replace(/\W+/g, '-')}.json`, import.meta.url).pathname : RESULTS_FILE;
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  `${JSON.stringify({ short: SHORT, settings: BENCH_SETTINGS, machine, load, seconds, at: new Date().toISOString(), steps: measured, figures }, null, 2)}\n`,
);
console.info(`written to ${out}`);

/** The value of `--only <text>` (or `--only=<text>`): run only the steps whose name contains it. */
function onlyFilter(argv: readonly string[]): string | undefined {
  const at = argv.indexOf('--only');
  if (at >= 0) return argv[at + 1];
  return argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length);
}

/** The values of every `--skip <text>` (or `--skip=<text>`): leave out the steps whose name contains one. */
function skipFilters(argv: readonly string[]): string[] {
  return argv.flatMap((arg, i) =>
    arg === '--skip' ? [argv[i + 1] ?? ''] : arg.startsWith('--skip=') ? [arg.slice('--skip='.length)] : [],
  );
}
