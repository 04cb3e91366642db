/**
 * The settings the relay figures measure each system at: its own defaults, read from the package at run time,
 * and the grid the sweep tries on every system alike (docs/performance.md "The outbox relay").
 */
import { createRequire } from 'node:module';
import { SagaDispatcher } from '../src/index.js';

/** The relays the figures compare. */
export const RELAY_SYSTEMS = ['ours', 'raw', 'graphile-worker'] as const;
export type RelaySystem = (typeof RELAY_SYSTEMS)[number];

/**
 * One setting of one relay, every value explicit.
 * - `concurrency`: ours `publishConcurrency` (publishes at once; `concurrency` is its timer steps'); graphile-worker `concurrency` (jobs at once); raw: rows published at once.
 * - `batch`: ours `batchSize`; graphile-worker `localQueue.size` with batched completions on (null: no local
 *   queue, completions one by one, its default); raw: rows per claim.
 * - `pollMs`: ours `pollIntervalMs`; graphile-worker `pollInterval`; null for raw, which does not poll.
 */
export interface RelaySetting {
  readonly concurrency: number;
  readonly batch: number | null;
  readonly pollMs: number | null;
}

/** graphile-worker's own defaults, as its `config.js` computes them (environment and cosmiconfig included). */
function graphileDefaults(): RelaySetting {
  const require = createRequire(import.meta.url);
  const config = require('graphile-worker/dist/config.js') as {
    makeWorkerPresetWorkerOptions(): { concurrentJobs: number; pollInterval: number };
  };
  const { concurrentJobs, pollInterval } = config.makeWorkerPresetWorkerOptions();
  // main.js: `localQueue: { size = -1 }`, `completeJobBatchDelay = -1`: no local queue, no batched completions.
  return { concurrency: concurrentJobs, batch: null, pollMs: pollInterval };
}

/** Each system's defaults: ours from `SagaDispatcher.defaults`, graphile-worker from its config, raw by definition. */
export function relayDefaults(system: RelaySystem): RelaySetting {
  if (system === 'ours') {
    const { publishConcurrency, batchSize, pollIntervalMs } = SagaDispatcher.defaults;
    return { concurrency: publishConcurrency, batch: batchSize, pollMs: pollIntervalMs };
  }
  // The hand-written relay's "defaults": claims of 100, one row published at a time.
  if (system === 'raw') return { concurrency: 1, batch: 100, pollMs: null };
  return graphileDefaults();
}

/** The values the sweep tries: concurrency 1 / 10 / 100, batch 100 / 500 / 1000, poll 20 ms and the default. */
const SWEEP = { concurrency: [1, 10, 100], batch: [100, 500, 1000], pollMs: [20] } as const;

/**
 * The sweep's settings of `system`: every combination it accepts without a warning. graphile-worker also runs
 * without a local queue, and warns when `localQueue.size` is below `concurrency` (skipped; none is in this grid).
 * `short`: the defaults and one other setting only.
 */
export function sweepSettings(system: RelaySystem, short: boolean): RelaySetting[] {
  const defaults = relayDefaults(system);
  if (short) return [defaults, { concurrency: 10, batch: 100, pollMs: system === 'raw' ? null : 20 }];
  const polls = system === 'raw' ? [null] : [...SWEEP.pollMs, defaults.pollMs];
  const batches: (number | null)[] = system === 'graphile-worker' ? [null, ...SWEEP.batch] : [...SWEEP.batch];
  return SWEEP.concurrency.flatMap((concurrency) =>
    batches
      .filter((batch) => batch === null || batch >= concurrency || system !== 'graphile-worker')
      .flatMap((batch) => polls.map((pollMs) => ({ concurrency, batch, pollMs }))),
  );
}

/** A key that is equal for equal settings. */
export const settingKey = (system: RelaySystem, s: RelaySetting) => `${system} ${s.concurrency} ${s.batch} ${s.pollMs}`;

/** The setting in words, in each system's own option names. */
export function describeSetting(system: RelaySystem, s: RelaySetting): string {
  const poll = s.pollMs === null ? '' : `, poll ${s.pollMs} ms`;
  if (system === 'ours') return `publishConcurrency ${s.concurrency}, batchSize ${s.batch}${poll}`;
  if (system === 'raw') return `${s.concurrency} publish(es) at once, claims of ${s.batch}`;
  const queue = s.batch === null ? 'no local queue' : `localQueue.size ${s.batch}, batched completions`;
  return `concurrency ${s.concurrency}, ${queue}${poll}`;
}
