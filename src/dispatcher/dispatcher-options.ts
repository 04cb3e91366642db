import { SagaDefinitionError } from '../errors.js';
import type { SagaRuntime } from '../saga/saga-runtime.js';
import { consoleLogger, type SagaLogger } from '../telemetry/logger.js';
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

/** Default `pollIntervalMs`: pause after a pass that found nothing to do. */
export const DEFAULT_POLL_INTERVAL_MS = 5_000;
/** Default `batchSize` on PostgreSQL: rows claimed per table per pass. */
export const DEFAULT_BATCH_SIZE = 100;
/**
 * Default `batchSize` on SQLite, per delivery slot (`concurrency`): rows claimed per table per pass. Small on
 * purpose: SQLite has one write lock for all processes, and a process that wins it keeps winning (other
 * processes' busy handlers poll), so rows one process claimed ahead wait behind its turn while the others,
 * drained, sit idle. Measured in docs/performance.md ("SQLite: claim size").
 */
export const SQLITE_BATCH_PER_SLOT = 2;
/** Default `maxAttempts`: failed deliveries before a row is dead-lettered. */
export const DEFAULT_DISPATCH_MAX_ATTEMPTS = 10;
/** Default `leaseMs`: how long a claim is exclusive; after it another dispatcher may take the row. */
export const DEFAULT_LEASE_MS = 30_000;
/** Default `backoff.baseMs`: delay before the first retry of a failed delivery. */
export const DEFAULT_BACKOFF_BASE_MS = 1_000;
/** Default `backoff.maxMs`: cap of the retry delay. */
export const DEFAULT_BACKOFF_MAX_MS = 5 * 60_000;
/** Default `catchUp.maxAgeMs`: the threshold of `skip-beyond-max-age`. */
export const DEFAULT_MAX_CATCH_UP_AGE_MS = 24 * 60 * 60_000;
/** Default `catchUp.backlogAfterMs`: how overdue a never-attempted timer must be to count as backlog. */
export const DEFAULT_BACKLOG_AFTER_MS = 60_000;
/** Default `concurrency`: deliveries (and publishes) in flight at once per dispatcher. */
export const DEFAULT_DELIVERY_CONCURRENCY = 10;
/** Default `deliveryTimeoutMs`: a delivery or publish still running after this long counts as failed. */
export const DEFAULT_DELIVERY_TIMEOUT_MS = 60_000;
/** Default `dbRetry.maxMs`: cap of the loop's wait after a pass failed (database outage). */
export const DEFAULT_DB_RETRY_MAX_MS = 30_000;
/** Default `stopTimeoutMs` beyond `deliveryTimeoutMs`: how much longer `stop()` waits for the database. */
export const DEFAULT_STOP_GRACE_MS = 10_000;

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
  /** Deliveries and publishes in flight at once. Default 10. */
  readonly concurrency?: number;
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
  /** Where outages, failures and dead letters are reported. Default: console, warnings and errors. */
  readonly logger?: SagaLogger;
  /**
   * Check the database schema (`verifySagaSchema`, over the runtime's sagas) before the first pass: a mismatch
   * fails the pass with a `SagaSchemaError` cause naming every difference, and the loop retries with backoff.
   * Default true.
   */
  readonly verifySchema?: boolean;
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
  readonly deliveryTimeoutMs: number;
  readonly dbRetryMaxMs: number;
  readonly stopTimeoutMs: number;
  readonly logger: SagaLogger;
  readonly verifySchema: boolean;
}

/** Applies the documented defaults and checks every option's range. */
export function resolveDispatcherOptions(options: SagaDispatcherOptions): ResolvedDispatcherOptions {
  const fail = (message: string): never => {
    throw new SagaDefinitionError('OPTION_INVALID', `SagaDispatcher: ${message}`);
  };
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
  const policy = options.catchUp?.policy ?? CATCH_UP_POLICIES.FIRE_ALL;
  if (!Object.values(CATCH_UP_POLICIES).includes(policy)) {
    fail(`catchUp.policy must be one of ${Object.values(CATCH_UP_POLICIES).join(', ')}; got ${String(policy)}.`);
  }
  const deliveryTimeoutMs = duration('deliveryTimeoutMs', options.deliveryTimeoutMs ?? DEFAULT_DELIVERY_TIMEOUT_MS, MAX_WAIT_MS);
  const concurrency = positive('concurrency', options.concurrency ?? DEFAULT_DELIVERY_CONCURRENCY, true);
  // Bound as a statement's LIMIT: above 2^53 a number is no longer an exact integer, and SQLite refuses it there.
  if (concurrency > Number.MAX_SAFE_INTEGER) fail(`concurrency must be at most ${Number.MAX_SAFE_INTEGER}; got ${concurrency}.`);
  const defaultBatchSize =
    options.runtime.context.dialect.name === 'sqlite'
      ? Math.min(SQLITE_BATCH_PER_SLOT * concurrency, Number.MAX_SAFE_INTEGER)
      : DEFAULT_BATCH_SIZE;
  const batchSize = positive('batchSize', options.batchSize ?? defaultBatchSize, true);
  if (batchSize > Number.MAX_SAFE_INTEGER) fail(`batchSize must be at most ${Number.MAX_SAFE_INTEGER}; got ${batchSize}.`);
  return {
    runtime: options.runtime,
    publish: options.publish,
    clock: options.clock ?? options.runtime.options.clock,
    pollIntervalMs: duration('pollIntervalMs', options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS, MAX_WAIT_MS),
    batchSize,
    maxAttempts: attemptsInRange(positive('maxAttempts', options.maxAttempts ?? DEFAULT_DISPATCH_MAX_ATTEMPTS, true), fail),
    leaseMs: duration('leaseMs', options.leaseMs ?? DEFAULT_LEASE_MS, MAX_WAIT_MS),
    backoff: {
      baseMs: duration('backoff.baseMs', options.backoff?.baseMs ?? DEFAULT_BACKOFF_BASE_MS, MAX_SPAN_MS),
      maxMs: duration('backoff.maxMs', options.backoff?.maxMs ?? DEFAULT_BACKOFF_MAX_MS, MAX_SPAN_MS),
      jitter: options.backoff?.jitter ?? true,
    },
    catchUp: {
      policy,
      maxAgeMs: duration('catchUp.maxAgeMs', options.catchUp?.maxAgeMs ?? DEFAULT_MAX_CATCH_UP_AGE_MS, MAX_SPAN_MS),
      backlogAfterMs: duration('catchUp.backlogAfterMs', options.catchUp?.backlogAfterMs ?? DEFAULT_BACKLOG_AFTER_MS, MAX_SPAN_MS),
    },
    concurrency,
    deliveryTimeoutMs,
    dbRetryMaxMs: duration('dbRetryMaxMs', options.dbRetryMaxMs ?? DEFAULT_DB_RETRY_MAX_MS, MAX_WAIT_MS),
    // The default stays a wait a timer keeps, however long the delivery timeout.
    stopTimeoutMs: duration(
      'stopTimeoutMs',
      options.stopTimeoutMs ?? Math.min(deliveryTimeoutMs + DEFAULT_STOP_GRACE_MS, MAX_WAIT_MS),
      MAX_WAIT_MS,
    ),
    logger: options.logger ?? consoleLogger('warn'),
    verifySchema: options.verifySchema ?? true,
  };
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
