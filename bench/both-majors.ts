/**
 * The figures `npm run bench` measures on both MikroORM majors (issue 10 point 5): timer firing and the saga
 * step. On 6 (the default leg) `run.ts` measures them here and again on 7 in a child process through the v7
 * leg (`legs/mikro-orm-7/run node --import tsx bench/mikro-orm-7-entry.ts`), which prints its figures as JSON.
 */
import { spawn } from 'node:child_process';
import { Utils } from '@mikro-orm/core';
import { BENCH_SETTINGS, SHORT } from './bench-settings.js';
import type { FigureResult } from './figure-stats.js';
import { sagaStepFigures } from './saga-step.js';
import { timerFiringFigures } from './timer-firing.js';

/** A figure of `bench/results/latest.json`, with the MikroORM version it was measured on. */
export type ReportedFigure = FigureResult & { readonly orm: string };

/** One measurement of the run: its name for the progress lines, and the figures it yields. */
export type BenchStep = readonly [what: string, measure: () => Promise<FigureResult[]>];

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

/** Runs the steps one after the other, logs each one's duration, and tags every figure not yet tagged with `ORM_VERSION`. */
export async function measureSteps(steps: readonly BenchStep[], log: (line: string) => void): Promise<ReportedFigure[]> {
  const figures: ReportedFigure[] = [];
  for (const [what, measure] of steps) {
    const at = Date.now();
    figures.push(...(await measure()).map((figure) => ({ orm: ORM_VERSION, ...figure })));
    log(`${what}: ${((Date.now() - at) / 1000).toFixed(0)} s`);
  }
  return figures;
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
