import { SagaDefinitionError } from '../errors.js';
import type { SagaRuntime } from '../saga/saga-runtime.js';
import { resolveLogger, type SagaLogger } from '../telemetry/logger.js';
import type { Clock } from '../time/clock.js';
import { MAX_SPAN_MS, MAX_WAIT_MS, shownOption } from '../time/option-ranges.js';
import type { OutboxEnvelope } from './outbox-envelope.js';

/** What happens to timers that came due while no dispatcher ran (the catch-up backlog). */
export const CATCH_UP_POLICIES = {
  /** Fire the whole backlog, oldest first. */
  FIRE_ALL: 'fire-all',
  /** Fire only the newest overdue timer of each saga instance; stamp the older backlog `missed`. */
  FIRE_LATEST_PER_SAGA: 'fire-latest-per-saga',
  /** Stamp `missed` the backlog overdue by more than `maxAgeMs`; fire the rest. */
  SKIP_BEYOND_MAX_AGE: 'skip-beyond-max-age',
} as const;
/** What happens to timers that came due while no dispatcher ran. */
export type CatchUpPolicy = (typeof CATCH_UP_POLICIES)[keyof typeof CATCH_UP_POLICIES];

/**
 * The dispatcher's defaults, shaped like {@link SagaDispatcherOptions} (also `SagaDispatcher.defaults`).
 * `stopTimeoutMs` defaults to `deliveryTimeoutMs + stopGraceMs`, at most {@link MAX_WAIT_MS}.
 */
export const DISPATCHER_DEFAULTS = Object.freeze({
  /** Pause after a pass that found nothing to do. */
  pollIntervalMs: 5_000,
  /** Rows claimed per table per pass, on PostgreSQL. */
  batchSize: 100,
  /**
   * Rows claimed per table per pass on SQLite, per delivery slot (`concurrency`). Small on purpose: SQLite has
   * one write lock for all processes, and a process that wins it keeps winning (other processes' busy handlers
   * poll), so rows one process claimed ahead wait behind its turn while the others, drained, sit idle.
   * Measured in docs/performance.md ("SQLite: claim size").
   */
  sqliteBatchPerSlot: 2,
  /** Failed deliveries before a row is dead-lettered. */
  maxAttempts: 10,
  /** How long a claim is exclusive; after it another dispatcher may take the row. */
  leaseMs: 30_000,
  /** Delay before the first retry of a failed delivery (`baseMs`), and its cap (`maxMs`). */
  backoff: Object.freeze({ baseMs: 1_000, maxMs: 300_000, jitter: true }),
  /**
   * The threshold of `skip-beyond-max-age` (`maxAgeMs`), and how overdue a never-attempted timer must be to
   * count as backlog (`backlogAfterMs`).
   */
  catchUp: Object.freeze({ policy: CATCH_UP_POLICIES.FIRE_ALL, maxAgeMs: 86_400_000, backlogAfterMs: 60_000 }),
  /** Timer deliveries (saga steps) in flight at once per dispatcher. */
  concurrency: 10,
  /**
   * Outbox publishes in flight at once per dispatcher, when `concurrency` is not set (with it, `concurrency`).
   * A publish holds no database connection: the start marks and published stamps of the rows in flight are
   * written for many rows in one statement, so the rows in flight set how many a statement carries. Measured in
   * docs/performance.md ("Relay: rows in flight").
   */
  publishConcurrency: 100,
  /** A delivery or publish still running after this long counts as failed. */
  deliveryTimeoutMs: 60_000,
  /** Cap of the loop's wait after a pass failed (database outage). */
  dbRetryMaxMs: 30_000,
  /** How much longer than `deliveryTimeoutMs` `stop()` waits for the database. */
  stopGraceMs: 10_000,
  /** Whether the schema is checked before the first pass. */
  verifySchema: true,
  /** PostgreSQL: whether the loop listens for other processes' commits of rows due at once (LISTEN/NOTIFY). */
  listen: true,
  /** How long a reading of the gauges (active sagas, backlogs) is reused, ms. */
  gauges: Object.freeze({ cacheMs: 15_000 }),
});

/** Hands one outbox message to the application's broker; resolve when it is accepted. */
export type OutboxPublisher = (envelope: OutboxEnvelope) => Promise<void>;

/** Options of {@link SagaDispatcher}. */
export interface SagaDispatcherOptions {
  /** The runtime timers are delivered through (its EntityManager, clock and sagas are used). */
  readonly runtime: SagaRuntime;
  /** Publishes outbox messages. Default: none, the outbox is not relayed by this dispatcher. */
  readonly publish?: OutboxPublisher;
  /** Source of "now". Default: the runtime's clock. */
  readonly clock?: Clock;
  /**
   * Pause after a pass that found nothing to do, ms, at most {@link MAX_WAIT_MS}. Default 5,000. Also how long the loop leaves a table whose
   * claim came back empty unclaimed while the other table keeps it busy.
   */
  readonly pollIntervalMs?: number;
  /**
   * Rows claimed per table per pass. Default 100 on PostgreSQL; on SQLite `2 x concurrency` (20 by default),
   * so that several processes on one file share the due rows instead of one holding them claimed ahead.
   */
  readonly batchSize?: number;
  /**
   * Failed deliveries a row may collect; the last one dead-letters it. At least 2 and at most
   * {@link MAX_DISPATCH_ATTEMPTS}: a row delivered beside
   * a delivery that killed the process is charged once for that lost delivery before it runs alone, so
   * with 1 a healthy row would be dead-lettered undelivered. Default 10.
   */
  readonly maxAttempts?: number;
  /**
   * Lease of a claim, ms, at most {@link MAX_WAIT_MS}: exclusive ownership; a crashed dispatcher's rows are taken over after it. While a
   * claimed row waits for a slot or is being delivered, its lease is renewed every `leaseMs / 3`, so a
   * delivery within `deliveryTimeoutMs` keeps it however long that is. Default 30,000.
   */
  readonly leaseMs?: number;
  /** Retry delay after a failed delivery: `min(maxMs, baseMs * 2^(attempts-1))`, half of it jittered; each at most {@link MAX_SPAN_MS}. */
  readonly backoff?: {
    /** Default 1,000 ms. */
    readonly baseMs?: number;
    /** Default 300,000 ms (5 minutes). */
    readonly maxMs?: number;
    /** Randomise the upper half of each delay. Default true. */
    readonly jitter?: boolean;
  };
  /** Catch-up for timers that came due while no dispatcher ran. */
  readonly catchUp?: {
    /** Default `fire-all`. */
    readonly policy?: CatchUpPolicy;
    /** Threshold of `skip-beyond-max-age`, ms, at most {@link MAX_SPAN_MS}. Default 86,400,000 (1 day). */
    readonly maxAgeMs?: number;
    /**
     * A never-attempted timer overdue by more than this (ms) counts as backlog for `fire-latest-per-saga`:
     * a running dispatcher would have fired it within a poll interval. At most {@link MAX_SPAN_MS}. Default 60,000.
     */
    readonly backlogAfterMs?: number;
  };
  /**
   * Timer deliveries in flight at once: saga steps, each a unit of work on a pooled connection. Default 10. Also
   * the default of `publishConcurrency` when set.
   */
  readonly concurrency?: number;
  /**
   * Outbox publishes in flight at once (at most one per saga instance: a saga's messages go out in order). Default
   * 100, or `concurrency` when that is set. Lower it when the broker must not see more at once.
   */
  readonly publishConcurrency?: number;
  /**
   * A delivery or publish still running after this long (ms, at most {@link MAX_WAIT_MS}) counts as failed; its
   * late result is discarded. Default 60,000.
   */
  readonly deliveryTimeoutMs?: number;
  /**
   * Cap of the loop's wait between passes that failed (database outage), ms, at most {@link MAX_WAIT_MS}; it doubles
   * from the poll interval. Default 30,000.
   */
  readonly dbRetryMaxMs?: number;
  /**
   * Longest `stop()` waits, ms of the dispatcher's clock, for deliveries in flight and for the database
   * (a statement the database never answers); after it `stop()` resolves anyway, logs what it left
   * behind, and the abandoned rows are re-claimed after their lease. At most {@link MAX_WAIT_MS}. Default
   * `deliveryTimeoutMs + 10,000` (at most {@link MAX_WAIT_MS}).
   */
  readonly stopTimeoutMs?: number;
  /**
   * Where the dispatcher reports, with structured fields: start and stop (info), what a pass did (debug), failed
   * deliveries, outages and missed timers (warn), dead letters and what `stop()` left behind (error). A `SagaLogger`.
   * Default: the runtime's `logger`.
   */
  readonly logger?: SagaLogger;
  /**
   * Check the database schema (`verifySagaSchema`, over the runtime's sagas) before the first pass: a mismatch
   * fails the pass with a `SagaSchemaError` cause naming every difference, and the loop retries with backoff.
   * Default true.
   */
  readonly verifySchema?: boolean;
  /**
   * PostgreSQL: while the loop runs, hold a connection of its own (outside MikroORM's pool) that LISTENs for the
   * NOTIFY runtimes send when they commit an outbox message or a timer due at once (the runtime's
   * `notifyDispatchers`), in this process or another: a waiting loop then claims at once instead of at its next
   * poll. A lost connection is logged and opened again with the loop's backoff while the loop polls. `false`: poll
   * only (one connection less). No effect on SQLite. Default true.
   */
  readonly listen?: boolean;
  /**
   * The OpenTelemetry gauges `saga.active`, `saga.timeout.backlog`, `saga.outbox.backlog` and `saga.inbox.backlog`,
   * reported while the loop runs (`start()` to `stop()`) to the meter provider registered at `start()`. They are read
   * from the database only when the SDK collects, by one statement of indexed counts, and a reading is reused for
   * `cacheMs` (ms of the dispatcher's clock, at most {@link MAX_WAIT_MS}; default 15,000). `false`: no gauges, no
   * reading.
   */
  readonly gauges?: false | { readonly cacheMs?: number };
}

/** {@link SagaDispatcherOptions} with every default applied. */
export interface ResolvedDispatcherOptions {
  readonly runtime: SagaRuntime;
  readonly publish: OutboxPublisher | undefined;
  readonly clock: Clock;
  readonly pollIntervalMs: number;
  readonly batchSize: number;
  readonly maxAttempts: number;
  readonly leaseMs: number;
  readonly backoff: { readonly baseMs: number; readonly maxMs: number; readonly jitter: boolean };
  readonly catchUp: { readonly policy: CatchUpPolicy; readonly maxAgeMs: number; readonly backlogAfterMs: number };
  readonly concurrency: number;
  readonly publishConcurrency: number;
  readonly deliveryTimeoutMs: number;
  readonly dbRetryMaxMs: number;
  readonly stopTimeoutMs: number;
  readonly logger: SagaLogger;
  readonly verifySchema: boolean;
  readonly listen: boolean;
  readonly gauges: false | { readonly cacheMs: number };
}

function fail(message: string): never {
  throw new SagaDefinitionError('OPTION_INVALID', `SagaDispatcher: ${message}`);
}

/** Applies the documented defaults and checks every option's range. */
export function resolveDispatcherOptions(options: SagaDispatcherOptions): ResolvedDispatcherOptions {
  const defaults = DISPATCHER_DEFAULTS;
  if (!options?.runtime) fail("'runtime' is required: pass the SagaRuntime timers are delivered through.");
  if (options.publish !== undefined && typeof options.publish !== 'function')
    fail("'publish' must be an async function taking an envelope.");
  const positive = (name: string, value: number, integer = false) => {
    if (!(value > 0) || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
      fail(`${name} must be a positive ${integer ? 'integer' : 'number'}; got ${shownOption(value)}.`);
    }
    return value;
  };
  /** A positive duration of at most `max` ms: a wait (`MAX_WAIT_MS`) or a span from now (`MAX_SPAN_MS`). */
  const duration = (name: string, value: number, max: number) => {
    if (positive(name, value) > max) fail(`${name} must be at most ${max} ms; got ${value}.`);
    return value;
  };
  const policy = options.catchUp?.policy ?? defaults.catchUp.policy;
  if (!Object.values(CATCH_UP_POLICIES).includes(policy)) {
    fail(`catchUp.policy must be one of ${Object.values(CATCH_UP_POLICIES).join(', ')}; got ${String(policy)}.`);
  }
  const deliveryTimeoutMs = duration('deliveryTimeoutMs', options.deliveryTimeoutMs ?? defaults.deliveryTimeoutMs, MAX_WAIT_MS);
  /** A count bound as a statement's LIMIT: above 2^53 a number is no longer an exact integer, and SQLite refuses it there. */
  const count = (name: string, value: number) => {
    if (positive(name, value, true) > Number.MAX_SAFE_INTEGER) fail(`${name} must be at most ${Number.MAX_SAFE_INTEGER}; got ${value}.`);
    return value;
  };
  const concurrency = count('concurrency', options.concurrency ?? defaults.concurrency);
  const publishConcurrency = count(
    'publishConcurrency',
    options.publishConcurrency ?? (options.concurrency === undefined ? defaults.publishConcurrency : concurrency),
  );
  const defaultBatchSize =
    options.runtime.dialect.name === 'sqlite'
      ? Math.min(defaults.sqliteBatchPerSlot * concurrency, Number.MAX_SAFE_INTEGER)
      : defaults.batchSize;
  const batchSize = count('batchSize', options.batchSize ?? defaultBatchSize);
  return {
    runtime: options.runtime,
    publish: options.publish,
    clock: options.clock ?? options.runtime.options.clock,
    pollIntervalMs: duration('pollIntervalMs', options.pollIntervalMs ?? defaults.pollIntervalMs, MAX_WAIT_MS),
    batchSize,
    maxAttempts: attemptsInRange(positive('maxAttempts', options.maxAttempts ?? defaults.maxAttempts, true), fail),
    leaseMs: duration('leaseMs', options.leaseMs ?? defaults.leaseMs, MAX_WAIT_MS),
    backoff: {
      baseMs: duration('backoff.baseMs', options.backoff?.baseMs ?? defaults.backoff.baseMs, MAX_SPAN_MS),
      maxMs: duration('backoff.maxMs', options.backoff?.maxMs ?? defaults.backoff.maxMs, MAX_SPAN_MS),
      jitter: options.backoff?.jitter ?? defaults.backoff.jitter,
    },
    catchUp: {
      policy,
      maxAgeMs: duration('catchUp.maxAgeMs', options.catchUp?.maxAgeMs ?? defaults.catchUp.maxAgeMs, MAX_SPAN_MS),
      backlogAfterMs: duration('catchUp.backlogAfterMs', options.catchUp?.backlogAfterMs ?? defaults.catchUp.backlogAfterMs, MAX_SPAN_MS),
    },
    concurrency,
    publishConcurrency,
    deliveryTimeoutMs,
    dbRetryMaxMs: duration('dbRetryMaxMs', options.dbRetryMaxMs ?? defaults.dbRetryMaxMs, MAX_WAIT_MS),
    // The default stays a wait a timer keeps, however long the delivery timeout.
    stopTimeoutMs: duration(
      'stopTimeoutMs',
      options.stopTimeoutMs ?? Math.min(deliveryTimeoutMs + defaults.stopGraceMs, MAX_WAIT_MS),
      MAX_WAIT_MS,
    ),
    logger: resolveLogger(options.logger, 'SagaDispatcher', options.runtime.options.logger),
    verifySchema: options.verifySchema ?? defaults.verifySchema,
    listen: options.listen ?? defaults.listen,
    gauges: resolveGauges(options.gauges),
  };
}

/** `gauges` with its default applied: false, or the cache of a reading in ms. */
function resolveGauges(gauges: SagaDispatcherOptions['gauges']): ResolvedDispatcherOptions['gauges'] {
  if (gauges === false) return false;
  if (gauges !== undefined && (typeof gauges !== 'object' || gauges === null)) {
    fail(`gauges must be false or an object ({ cacheMs }); got ${shownOption(gauges)}.`);
  }
  const cacheMs = gauges?.cacheMs ?? DISPATCHER_DEFAULTS.gauges.cacheMs;
  if (!(cacheMs > 0) || cacheMs > MAX_WAIT_MS)
    fail(`gauges.cacheMs must be a positive number of at most ${MAX_WAIT_MS} ms; got ${shownOption(cacheMs)}.`);
  return { cacheMs };
}

/** The retry delay after the `attempts`-th failure (1-based), ms. */
export function retryDelayMs(attempts: number, backoff: ResolvedDispatcherOptions['backoff'], random: () => number = Math.random): number {
  const ceiling = Math.min(backoff.maxMs, backoff.baseMs * 2 ** Math.max(0, attempts - 1));
  // Equal jitter: never less than half the ceiling, so a failing row always leaves the head of the due
  // queue, while competing retries still spread out.
  return backoff.jitter ? ceiling / 2 + random() * (ceiling / 2) : ceiling;
}

/** Largest `maxAttempts`: a row's `attempts` column is a 32-bit integer. */
export const MAX_DISPATCH_ATTEMPTS = 2_147_483_647;

/**
 * `maxAttempts` below 2 is refused: a lost lease is charged to every row whose delivery had started when the
 * process died (the poison and the rows delivered beside it); the next delivery of each runs alone, so only
 * the poison is charged again. With one attempt the first, shared charge would dead-letter healthy rows.
 * Above {@link MAX_DISPATCH_ATTEMPTS} the count would overflow its column before the row is dead-lettered.
 */
function attemptsInRange(maxAttempts: number, fail: (message: string) => never): number {
  if (maxAttempts < 2) {
    fail(
      `maxAttempts must be at least 2; got ${maxAttempts}. A row delivered beside one that killed the process is charged once for the lost delivery before it runs alone; with 1 it would be dead-lettered undelivered.`,
    );
  }
  if (maxAttempts > MAX_DISPATCH_ATTEMPTS) {
    fail(`maxAttempts must be at most ${MAX_DISPATCH_ATTEMPTS} (the attempts column is a 32-bit integer); got ${maxAttempts}.`);
  }
  return maxAttempts;
}
