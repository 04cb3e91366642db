/**
 * The figures `npm run bench` measures on both MikroORM majors (issue 10 point 5): timer firing and the saga
 * step. On 6 (the default leg) `run.ts` measures them here and again on 7 in a child process through the v7
 * leg (`legs/mikro-orm-7/run node --import tsx bench/mikro-orm-7-entry.ts`), which prints its figures as JSON.
 */
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { Utils } from '@mikro-orm/core';
import { BENCH_SETTINGS, SHORT } from './bench-settings.js';
import type { FigureResult } from './figure-stats.js';
import { sagaStepFigures } from './saga-step.js';
import { timerFiringFigures } from './timer-firing.js';

/** A figure of `bench/results/latest.json`, with the MikroORM version it was measured on. */
export type ReportedFigure = FigureResult & { readonly orm: string };

/** What a step yields besides its figures: data for `latest.json` (`details`) and a table to print (`report`). */
export interface StepOutput {
  readonly figures: FigureResult[];
  readonly details?: Readonly<Record<string, unknown>>;
  readonly report?: string;
}

/** One measurement of the run: its name for the progress lines, and the figures it yields. */
export type BenchStep = readonly [what: string, measure: () => Promise<FigureResult[] | StepOutput>];

/** One step as `latest.json` records it: how long it took and the load average (1, 5, 15 min) before and after. */
export interface StepRecord {
  readonly what: string;
  readonly seconds: number;
  readonly loadBefore: readonly number[];
  readonly loadAfter: readonly number[];
  readonly details?: Readonly<Record<string, unknown>>;
  readonly report?: string;
}

/** `os.loadavg()`, rounded to two decimals. */
export const loadNow = () => loadavg().map((n) => Math.round(n * 100) / 100);

/** The MikroORM version this process loaded ("6.6.16" by default, "7.2.1" under the v7 leg). */
export const ORM_VERSION: string = Utils.getORMVersion();

/** The suffix of the names of figures measured on 7 by a run on 6. */
export const MIKRO_ORM_7_SUFFIX = ' (MikroORM 7)';

const { reps, firingTimers, stepMessages } = BENCH_SETTINGS;

/** Timer firing and the saga step on PostgreSQL (1/4/16 callers) and SQLite, on this process's MikroORM. */
export const BOTH_MAJORS_STEPS: readonly BenchStep[] = [
  ['timer firing', () => timerFiringFigures(reps, firingTimers)],
  ['saga step, PostgreSQL', () => sagaStepFigures('postgresql', reps, stepMessages)],
  ['saga step, SQLite', () => sagaStepFigures('sqlite', reps, stepMessages)],
];

/**
 * Runs the steps one after the other, logs each one's duration and the load average before and after it, and
 * tags every figure not yet tagged with `ORM_VERSION`.
 */
export async function measureSteps(
  steps: readonly BenchStep[],
  log: (line: string) => void,
): Promise<{ figures: ReportedFigure[]; steps: StepRecord[] }> {
  const figures: ReportedFigure[] = [];
  const records: StepRecord[] = [];
  for (const [what, measure] of steps) {
    const at = Date.now();
    const loadBefore = loadNow();
    const measured = await measure();
    const output: StepOutput = Array.isArray(measured) ? { figures: measured } : measured;
    figures.push(...output.figures.map((figure) => ({ orm: ORM_VERSION, ...figure })));
    const seconds = Math.round((Date.now() - at) / 1000);
    const loadAfter = loadNow();
    log(`${what}: ${seconds} s, load average ${loadBefore.join(' ')} before, ${loadAfter.join(' ')} after`);
    records.push({
      what,
      seconds,
      loadBefore,
      loadAfter,
      ...(output.details ? { details: output.details } : {}),
      ...(output.report ? { report: output.report } : {}),
    });
  }
  return { figures, steps: records };
}

/**
 * Measures `BOTH_MAJORS_STEPS` on MikroORM 7 in a child process through the v7 leg (which installs itself when
 * missing), with this run's settings, and names its figures with `MIKRO_ORM_7_SUFFIX`. The child's progress
 * goes to this process's stderr.
 * @param env the child's environment (default `process.env`: `DATABASE_URL` and the `BENCH_*` sizes reach it)
 * @throws when the leg cannot be installed or run, or the child fails: a run on 6 never omits them silently.
 */
export async function mikroOrm7Figures(env: NodeJS.ProcessEnv = process.env): Promise<ReportedFigure[]> {
  const root = new URL('..', import.meta.url).pathname;
  const args = ['node', '--import', 'tsx', 'bench/mikro-orm-7-entry.ts', ...(SHORT ? ['--short'] : [])];
  const child = spawn(`${root}legs/mikro-orm-7/run`, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  const code = await new Promise<number | null>((resolve, reject) => child.on('error', reject).on('exit', resolve));
  const last = stdout.trim().split('\n').at(-1) ?? '';
  if (code !== 0 || !last.startsWith('[')) {
    throw new Error(`the MikroORM 7 figures failed (legs/mikro-orm-7/run exited ${code}; its output is above): fix or install the leg`);
  }
  return (JSON.parse(last) as ReportedFigure[]).map((figure) => ({ ...figure, name: `${figure.name}${MIKRO_ORM_7_SUFFIX}` }));
}
