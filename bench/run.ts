/**
 * `npm run bench`: every figure of issue 8 next to its baseline, measured in the same run, each variant
 * repeated and interleaved with the others; prints medians, min-max and ratios (ours / baseline, higher is
 * better) and writes `bench/results/latest.json`. These machines are shared and noisy: compare ratios.
 *
 *   npm run bench                       # full run (see docs/performance.md for its duration)
 *   npm run bench -- --short            # every figure once on a few rows (BENCH_SHORT=1 does the same)
 *   BENCH_REPS=5 npm run bench          # more repetitions; BENCH_RELAY_ROWS, BENCH_TIMERS, BENCH_STEPS, BENCH_SQLITE_TIMERS
 *   DATABASE_URL=postgres://... npm run bench
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname } from 'node:path';
import { postgresReachable } from './bench-database.js';
import { BENCH_SETTINGS, POSTGRES_URL, RESULTS_FILE, SHORT } from './bench-settings.js';
import { type FigureResult, formatTable } from './figure-stats.js';
import { outboxRelayFigures } from './outbox-relay.js';
import { sagaStepFigures } from './saga-step.js';
import { sqliteProcessFigures } from './sqlite-processes.js';
import { timerFiringFigures } from './timer-firing.js';

const started = Date.now();
const { reps, relayRows, firingTimers, stepMessages, sqliteTimers } = BENCH_SETTINGS;
const log = (line: string) => console.info(line);
if (!(await postgresReachable())) {
  console.error(`PostgreSQL is not reachable at ${POSTGRES_URL} (set DATABASE_URL): every PostgreSQL figure needs it.`);
  process.exit(1);
}
log(`${SHORT ? 'SHORT run (smoke test, not a measurement)' : 'full run'}: ${reps} rep(s) per variant, interleaved`);

const figures: FigureResult[] = [];
const steps: [string, () => Promise<FigureResult[]>][] = [
  ['outbox relay', () => outboxRelayFigures(reps, relayRows)],
  ['timer firing', () => timerFiringFigures(reps, firingTimers)],
  ['saga step, PostgreSQL', () => sagaStepFigures('postgresql', reps, stepMessages)],
  ['saga step, SQLite', () => sagaStepFigures('sqlite', reps, stepMessages)],
  ['SQLite processes', () => sqliteProcessFigures(reps, sqliteTimers, log)],
];
for (const [what, measure] of steps) {
  const at = Date.now();
  figures.push(...(await measure()));
  log(`${what}: ${((Date.now() - at) / 1000).toFixed(0)} s`);
}

const seconds = Math.round((Date.now() - started) / 1000);
console.info(`\n${formatTable(figures)}\n\n${figures.filter((f) => f.met).length} of ${figures.length} targets met; ${seconds} s in all`);
const machine = { cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown', node: process.version, platform: process.platform };
mkdirSync(dirname(RESULTS_FILE), { recursive: true });
writeFileSync(
  RESULTS_FILE,
  `${JSON.stringify({ short: SHORT, settings: BENCH_SETTINGS, machine, seconds, at: new Date().toISOString(), figures }, null, 2)}\n`,
);
console.info(`written to ${RESULTS_FILE}`);
