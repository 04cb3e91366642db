/**
 * How big and how often `npm run bench` measures. The short mode (`BENCH_SHORT=1` or `--short`) runs every
 * figure once on a few rows: a smoke test that the benchmark works, never a measurement.
 */
export const SHORT = process.env.BENCH_SHORT === '1' || process.argv.includes('--short');

/** Sizes of one run of each figure, and how many times each variant runs (interleaved). */
export const BENCH_SETTINGS = SHORT
  ? {
      reps: 1,
      relayRows: 50,
      // Two settings per relay.
      sweepRows: 50,
      latencyRate: 1_000,
      latencySeconds: 2,
      firingTimers: 20,
      // One message per caller at 16 callers.
      stepMessages: 16,
      // Two of the processes' batches (20 on SQLite).
      sqliteTimers: 40,
      historyRows: 200,
      emptyPasses: 5,
      memoryTimers: 100,
      stagedTransactions: 20,
      stagedRate: 50,
      stagedSeconds: 1,
    }
  : {
      reps: Number(process.env.BENCH_REPS ?? 3),
      relayRows: Number(process.env.BENCH_RELAY_ROWS ?? 10_000),
      sweepRows: Number(process.env.BENCH_SWEEP_ROWS ?? 5_000),
      latencyRate: Number(process.env.BENCH_LATENCY_RATE ?? 1_000),
      latencySeconds: Number(process.env.BENCH_LATENCY_SECONDS ?? 20),
      firingTimers: Number(process.env.BENCH_TIMERS ?? 1_000),
      stepMessages: Number(process.env.BENCH_STEPS ?? 2_400),
      sqliteTimers: Number(process.env.BENCH_SQLITE_TIMERS ?? 1_000),
      historyRows: Number(process.env.BENCH_HISTORY_ROWS ?? 1_000_000),
      emptyPasses: Number(process.env.BENCH_EMPTY_PASSES ?? 500),
      memoryTimers: Number(process.env.BENCH_MEMORY_TIMERS ?? 100_000),
      stagedTransactions: Number(process.env.BENCH_STAGED_TRANSACTIONS ?? 2_000),
      stagedRate: Number(process.env.BENCH_STAGED_RATE ?? 200),
      stagedSeconds: Number(process.env.BENCH_STAGED_SECONDS ?? 10),
    };

/** The PostgreSQL server the figures create their databases on. */
export const POSTGRES_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Where the results go (the smoke test writes elsewhere, so a short run never replaces the real figures). */
export const RESULTS_FILE = process.env.BENCH_OUT ?? new URL('./results/latest.json', import.meta.url).pathname;
