/**
 * The figures a process-level fault test reports for the reliability summary (printed by `npm test` and
 * `npm run test:reliability`). A test stores them in its vitest task metadata (`task.meta.reliability`), which
 * vitest serializes to the main process, where `reliability-reporter.ts` reads them with `testCase.meta()` and
 * prints one row per scenario and database. The test itself still asserts `lost === 0` and `twice === 0`: the
 * table summarizes, it does not check.
 */
import type { ScriptedSaga } from '../fixtures/scripted-saga.js';
import type { DialectName } from './databases.js';

/** The four process-level fault scenarios, each run on every database (docs/testing.md). */
export const RELIABILITY_SCENARIOS = {
  'kill-restart': 'three dispatcher processes, one SIGKILLed mid-delivery and restarted',
  'connection-faults': 'dispatcher processes whose connections are cut (PostgreSQL) or whose file is locked (SQLite)',
  'crash-poison': 'a timer whose step SIGKILLs its process, under a restarting supervisor',
  'same-message-ids': 'two processes delivering the same message ids concurrently',
} as const;
export type ReliabilityScenario = keyof typeof RELIABILITY_SCENARIOS;

/**
 * The files that hold the scenarios (`npm run test:reliability` runs them; a run of all of them, not narrowed
 * by test name or tag, must report every scenario on every database).
 */
export const RELIABILITY_FILES = [
  'test/reliability/dispatcher-processes.test.ts',
  'test/reliability/dispatcher-process-faults.test.ts',
  'test/reliability/idempotency-processes.test.ts',
] as const;

/** The databases every scenario must report from. */
export const RELIABILITY_DATABASES = ['postgresql', 'sqlite'] as const satisfies readonly DialectName[];

/** What one scenario on one database held, suffered and lost. */
export interface ReliabilityFigures {
  readonly scenario: ReliabilityScenario;
  readonly database: string;
  /** Processes started, restarts included. */
  readonly processes: number;
  /** Units of work the processes had to apply: timers to fire, or messages to handle. */
  readonly load: number;
  /** Processes killed with SIGKILL. */
  readonly kills: number;
  /** Processes started again after a kill. */
  readonly restarts: number;
  /** Database faults injected: backends terminated, connections dropped at COMMIT, file lock-outs. */
  readonly dbFaults: number;
  /** Hostile inputs tried: deliveries of a poison timer, redeliveries of an already handled message id. */
  readonly hostile: number;
  /** Units of work never applied. */
  readonly lost: number;
  /** Units of work applied more than once (each extra application counts). */
  readonly twice: number;
}

declare module 'vitest' {
  interface TaskMeta {
    reliability?: ReliabilityFigures;
  }
}

/** Stores a test's figures where the reliability reporter reads them. */
export function reportFigures(task: { meta: { reliability?: ReliabilityFigures } }, figures: ReliabilityFigures): void {
  task.meta.reliability = figures;
}

/** How many of the expected timer firings each saga's log shows not at all, and how many more than once. */
export interface AppliedCount {
  readonly applied: number;
  readonly lost: number;
  readonly twice: number;
}

/**
 * Counts, from the sagas' logs, the firings of timers `t0`..`t<perSaga - 1>` of the sagas `keys`: a saga
 * missing from `sagas` loses all of them; a tick logged twice is applied twice.
 */
export function countTimerFirings(sagas: readonly ScriptedSaga[], keys: readonly string[], perSaga: number): AppliedCount {
  const byKey = new Map(sagas.map((saga) => [saga.key, saga]));
  let applied = 0;
  let lost = 0;
  let twice = 0;
  for (const key of keys) {
    const ticks = (byKey.get(key)?.log ?? '').split(';').filter((entry) => entry.startsWith('tick:'));
    for (let t = 0; t < perSaga; t++) {
      const times = ticks.filter((tick) => tick === `tick:t${t}`).length;
      applied += times;
      if (times === 0) lost++;
      twice += Math.max(0, times - 1);
    }
  }
  return { applied, lost, twice };
}
