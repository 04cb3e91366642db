import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import { runWithCorrelationId } from '../correlation/correlation-context.js';
import { SagaError } from '../errors.js';
import type { TimerDelivery } from '../saga/saga-runtime.js';
import {
  DISPATCH_TABLES,
  type DispatchTable,
  deadLetter,
  markPublished,
  missTimersOverdueBefore,
  missTimersSupersededInBacklog,
  recordFailure,
  releaseClaim,
} from '../sql/dispatch-statements.js';
import { type SagaCounterName, SagaMetrics, type SagaStats } from '../telemetry/saga-metrics.js';
import { truncate } from '../text/truncate.js';
import { type ClaimedOutboxRow, claimDueOutboxRows, claimDueTimers } from './claim-due-rows.js';
import {
  CATCH_UP_POLICIES,
  type ResolvedDispatcherOptions,
  resolveDispatcherOptions,
  retryDelayMs,
  type SagaDispatcherOptions,
} from './dispatcher-options.js';

/** What one dispatcher pass did. */
export interface DispatchPassResult {
  readonly timers: {
    /** Due timers this pass claimed. */
    readonly claimed: number;
    /** Delivered; the state change and the `fired` stamp committed together. */
    readonly fired: number;
    /** Dropped: cancelled, replaced or already fired meanwhile, or their saga is gone or completed. */
    readonly stale: number;
    /** Delivery failed; the timer stays pending and backs off. */
    readonly failed: number;
    /** Failed for the last allowed time and retired. */
    readonly deadLettered: number;
    /** Discarded by the catch-up policy, stamped `missed`. */
    readonly missed: number;
    /** Claimed but given back unattempted because the dispatcher was stopping. */
    readonly released: number;
  };
  readonly outbox: {
    readonly claimed: number;
    readonly published: number;
    readonly failed: number;
    readonly deadLettered: number;
    readonly released: number;
  };
}

/** Events a dispatcher reports (see {@link SagaDispatcher.on}). */
export interface DispatcherEvents {
  /** Rows were claimed: which, and until when the claim is exclusive. */
  claimed: (claim: {
    readonly table: DispatchTable;
    readonly ids: readonly string[];
    readonly at: Date;
    readonly leaseUntil: Date;
  }) => void;
  /** A pass of the loop finished. */
  pass: (result: DispatchPassResult) => void;
  /** The loop found nothing to do and now waits `pollIntervalMs` (moving a fake clock past it wakes the loop). */
  idle: () => void;
  /** A pass failed as a whole (usually the database is unreachable); the loop now waits and then tries again. */
  passFailed: (error: unknown, consecutiveFailures: number) => void;
}

type Mutable<T> = { -readonly [K in keyof T]: Mutable<T[K]> };

/** The counters a failed delivery moves, per table. */
const FAILURE_COUNTERS = {
  saga_timer: { failed: 'timersFailed', deadLettered: 'timersDeadLettered' },
  saga_outbox: { failed: 'messagesFailed', deadLettered: 'messagesDeadLettered' },
} as const satisfies Record<DispatchTable, { failed: SagaCounterName; deadLettered: SagaCounterName }>;

/** Marks a delivery that ran past `deliveryTimeoutMs`. */
class DeliveryTimeout extends Error {
  override readonly name = 'DeliveryTimeout';
}

/**
 * Fires due timers and relays the outbox. Polls `saga_timer` and `saga_outbox`, claims due rows under a
 * lease by their concurrency token, delivers timers to their saga through the runtime (which stamps them
 * `fired` in the same transaction as the state change) and hands outbox rows to the publisher.
 * Safe with any number of dispatchers on one database.
 *
 * `start()` runs the loop; `stop()` (or `await using`) ends it gracefully; `runOnce()` runs one pass, for
 * tests and for hosts that schedule passes themselves.
 */
export class SagaDispatcher implements AsyncDisposable {
  readonly options: ResolvedDispatcherOptions;
  private readonly metrics = new SagaMetrics();
  private readonly listeners: { [K in keyof DispatcherEvents]: Set<DispatcherEvents[K]> } = {
    claimed: new Set(),
    pass: new Set(),
    idle: new Set(),
    passFailed: new Set(),
  };
  private controller: AbortController | undefined;
  private loop: Promise<void> | undefined;

  /** @throws SagaDefinitionError `OPTION_INVALID` for an option out of range. */
  constructor(options: SagaDispatcherOptions) {
    this.options = resolveDispatcherOptions(options);
  }

  /** Whether the loop is running. */
  get running(): boolean {
    return this.loop !== undefined;
  }

  /** Totals of what this dispatcher did since it was created. */
  stats(): SagaStats {
    return this.metrics.stats();
  }

  /** Subscribes to an event; returns the unsubscribe function. */
  on<K extends keyof DispatcherEvents>(event: K, listener: DispatcherEvents[K]): () => void {
    this.listeners[event].add(listener);
    return () => this.listeners[event].delete(listener);
  }

  /**
   * Starts the polling loop. Only {@link stop} ends it: failed deliveries are counted and retried, and a
   * failed pass (database outage) is logged and retried with backoff.
   */
  start(): void {
    if (this.loop) throw new SagaError('OPTION_INVALID', 'SagaDispatcher.start(): the dispatcher is already running.');
    const controller = new AbortController();
    this.controller = controller;
    this.loop = this.runLoop(controller.signal);
  }

  /**
   * Stops the loop: deliveries in flight finish, rows claimed but not yet attempted are released for other
   * dispatchers, then the promise resolves. Safe to call when not running.
   */
  async stop(): Promise<void> {
    this.controller?.abort();
    await this.loop;
    this.loop = undefined;
    this.controller = undefined;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Runs one pass: catch-up, then claim and deliver due timers, then claim and publish due outbox rows. */
  runOnce(): Promise<DispatchPassResult> {
    return this.pass(this.controller?.signal);
  }

  private async runLoop(signal: AbortSignal): Promise<void> {
    const { clock, pollIntervalMs, dbRetryMaxMs, logger } = this.options;
    let failures = 0;
    while (!signal.aborted) {
      let result: DispatchPassResult;
      try {
        result = await this.pass(signal);
      } catch (error) {
        failures++;
        const wait = Math.min(dbRetryMaxMs, pollIntervalMs * 2 ** (failures - 1));
        logger.error(`dispatcher pass failed (${failures} in a row); retrying in ${wait} ms: ${describe(error)}`, { error });
        // The wait starts before listeners hear of it, so a listener that moves a fake clock wakes the loop.
        const waiting = clock.sleep(wait, signal);
        this.emit('passFailed', error, failures);
        await waiting;
        continue;
      }
      failures = 0;
      this.emit('pass', result);
      if (result.timers.claimed + result.timers.missed + result.outbox.claimed === 0) {
        const waiting = clock.sleep(pollIntervalMs, signal);
        this.emit('idle');
        await waiting;
      }
    }
  }

  private async pass(signal: AbortSignal | undefined): Promise<DispatchPassResult> {
    const { runtime, clock, leaseMs, batchSize, publish } = this.options;
    const em = runtime.options.em.fork();
    const result: Mutable<DispatchPassResult> = {
      timers: { claimed: 0, fired: 0, stale: 0, failed: 0, deadLettered: 0, missed: 0, released: 0 },
      outbox: { claimed: 0, published: 0, failed: 0, deadLettered: 0, released: 0 },
    };
    const now = clock.now();
    result.timers.missed = await this.applyCatchUp(em, now);
    const leaseUntil = new Date(now.getTime() + leaseMs);
    const timers = await claimDueTimers(em, runtime.dialect, now, leaseUntil, batchSize);
    result.timers.claimed = timers.length;
    if (timers.length > 0) this.emit('claimed', { table: DISPATCH_TABLES.timer, ids: timers.map((t) => t.id), at: now, leaseUntil });
    await this.forEachConcurrently(timers, signal, DISPATCH_TABLES.timer, result.timers, (timer) => this.fire(timer, result.timers));
    // A stopping dispatcher claims no more outbox rows only to release them again.
    if (publish && !signal?.aborted) {
      const at = clock.now();
      const outboxLease = new Date(at.getTime() + leaseMs);
      const rows = await claimDueOutboxRows(em, runtime.dialect, at, outboxLease, batchSize);
      result.outbox.claimed = rows.length;
      if (rows.length > 0)
        this.emit('claimed', { table: DISPATCH_TABLES.outbox, ids: rows.map((r) => r.envelope.id), at, leaseUntil: outboxLease });
      await this.forEachConcurrently(
        rows.map((row) => ({ ...row, id: row.envelope.id, sagaType: row.envelope.sagaType, sagaId: row.envelope.sagaId })),
        signal,
        DISPATCH_TABLES.outbox,
        result.outbox,
        (row) => this.publishOne(row, result.outbox),
      );
    }
    return result;
  }

  /** Stamps the backlog the catch-up policy discards; returns how many. */
  private async applyCatchUp(em: EntityManager, now: Date): Promise<number> {
    const { policy, maxAgeMs, backlogAfterMs } = this.options.catchUp;
    let rows: { saga_type: string }[] = [];
    if (policy === CATCH_UP_POLICIES.SKIP_BEYOND_MAX_AGE) {
      rows = await missTimersOverdueBefore(em, new Date(now.getTime() - maxAgeMs), now);
    } else if (policy === CATCH_UP_POLICIES.FIRE_LATEST_PER_SAGA) {
      rows = await missTimersSupersededInBacklog(em, new Date(now.getTime() - backlogAfterMs), now);
    }
    for (const row of rows) this.metrics.add('timersMissed', row.saga_type);
    if (rows.length > 0) this.options.logger.warn(`catch-up (${policy}) stamped ${rows.length} overdue timer(s) missed`);
    return rows.length;
  }

  private async fire(timer: TimerDelivery, counts: Mutable<DispatchPassResult['timers']>): Promise<void> {
    const what = `timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId}`;
    if (timer.attempts >= this.options.maxAttempts) {
      // Its deliveries kept dying with their dispatcher: the claim counted the last one.
      await this.retireWithoutDelivery(DISPATCH_TABLES.timer, timer, timer.attempts, timer.sagaType, timer.lastError ?? null, what, counts);
      return;
    }
    try {
      const result = await this.withTimeout(() => this.options.runtime.deliverTimer(timer), timer.correlationId);
      // The runtime counts stale and discarded deliveries (saga.timeout.stale / .discarded); counted here too, a
      // stale firing added 2.
      if (result.outcome === 'stale' || result.outcome === 'ignored') {
        counts.stale++;
      } else {
        counts.fired++;
        this.metrics.add('timersFired', timer.sagaType);
      }
    } catch (error) {
      await this.recordFailure(DISPATCH_TABLES.timer, timer, timer.attempts, timer.sagaType, error, what, counts);
    }
  }

  private async publishOne(row: ClaimedOutboxRow, counts: Mutable<DispatchPassResult['outbox']>): Promise<void> {
    const { envelope } = row;
    const publish = this.options.publish!;
    const what = `outbox message '${envelope.type}' ${envelope.id} of saga ${envelope.sagaType}/${envelope.sagaId}`;
    const claim = { id: envelope.id, token: row.token };
    if (envelope.attempts >= this.options.maxAttempts) {
      await this.retireWithoutDelivery(DISPATCH_TABLES.outbox, claim, envelope.attempts, envelope.sagaType, row.lastError, what, counts);
      return;
    }
    try {
      await this.withTimeout(() => publish(envelope), envelope.correlationId);
    } catch (error) {
      await this.recordFailure(DISPATCH_TABLES.outbox, claim, envelope.attempts, envelope.sagaType, error, what, counts);
      return;
    }
    counts.published++;
    this.metrics.add('messagesPublished', envelope.sagaType);
    try {
      const em = this.options.runtime.options.em.fork();
      if ((await markPublished(em, { id: envelope.id, token: row.token }, this.options.clock.now())) === 0) {
        // The lease ran out and another dispatcher took the row: it will publish again (at-least-once).
        this.options.logger.warn(`outbox message ${envelope.id} was published after its lease ended; it may be published again`);
      }
    } catch (error) {
      this.options.logger.error(
        `outbox message ${envelope.id} was published but could not be stamped; it will be published again: ${describe(error)}`,
      );
    }
  }

  /**
   * Counts a failed delivery: backs the row off, or dead-letters it on its last allowed attempt. A failure
   * to record (database down) is logged; the row's lease then runs out and it is claimed again.
   */
  private async recordFailure(
    table: DispatchTable,
    claim: { id: string; token: string },
    attemptsBefore: number,
    sagaType: string,
    error: unknown,
    what: string,
    counts: { failed: number; deadLettered: number },
  ): Promise<void> {
    const { clock, maxAttempts, backoff, logger, runtime } = this.options;
    const attempts = attemptsBefore + 1;
    const message = truncate(describe(error), 2_000);
    const now = clock.now();
    const em = runtime.options.em.fork();
    const counters = FAILURE_COUNTERS[table];
    try {
      if (attempts >= maxAttempts) {
        const reason = truncate(`failed ${attempts} time(s), the last with: ${message}`, 2_000);
        await deadLetter(em, table, claim, message, reason, now, randomUUID());
        logger.error(`${what} dead-lettered after ${attempts} failed attempt(s): ${message}`);
        counts.deadLettered++;
        this.metrics.add(counters.deadLettered, sagaType);
        return;
      }
      const retryAt = new Date(now.getTime() + retryDelayMs(attempts, backoff));
      await recordFailure(em, table, claim, message, retryAt, randomUUID());
      logger.warn(`${what} failed (attempt ${attempts} of ${maxAttempts}); retrying at ${retryAt.toISOString()}: ${message}`);
    } catch (recordError) {
      logger.error(`${what} failed and the failure could not be recorded; it is retried after its lease: ${describe(recordError)}`);
    }
    counts.failed++;
    this.metrics.add(counters.failed, sagaType);
  }

  /**
   * Dead-letters a row whose attempts ran out before this delivery (lost leases are counted by the claim)
   * without delivering it once more.
   */
  private async retireWithoutDelivery(
    table: DispatchTable,
    claim: { id: string; token: string },
    attempts: number,
    sagaType: string,
    lastError: string | null,
    what: string,
    counts: { failed: number; deadLettered: number },
  ): Promise<void> {
    const { clock, logger, runtime } = this.options;
    const message = lastError ?? 'no error recorded';
    const reason = truncate(`failed ${attempts} time(s), the last with: ${message}`, 2_000);
    try {
      await deadLetter(runtime.options.em.fork(), table, claim, message, reason, clock.now(), randomUUID(), false);
      logger.error(`${what} dead-lettered after ${attempts} failed attempt(s): ${message}`);
      counts.deadLettered++;
      this.metrics.add(FAILURE_COUNTERS[table].deadLettered, sagaType);
    } catch (error) {
      logger.error(`${what} could not be dead-lettered; it is retried after its lease: ${describe(error)}`);
      counts.failed++;
      this.metrics.add(FAILURE_COUNTERS[table].failed, sagaType);
    }
  }

  /**
   * Runs `work` for each claimed row, `concurrency` sagas at a time. Rows of one saga instance form a lane
   * run one after the other in claim order (oldest first), so a saga sees its timers in due order and its
   * deliveries do not conflict with each other. Once the dispatcher is stopping, rows not yet started are
   * released so another dispatcher can take them at once.
   */
  private async forEachConcurrently<T extends { id: string; token: string; sagaType: string; sagaId: string }>(
    items: readonly T[],
    signal: AbortSignal | undefined,
    table: DispatchTable,
    counts: { released: number },
    work: (item: T) => Promise<void>,
  ): Promise<void> {
    const lanes = new Map<string, T[]>();
    for (const item of items) {
      const key = `${item.sagaType}\u0000${item.sagaId}`;
      const lane = lanes.get(key);
      if (lane) lane.push(item);
      else lanes.set(key, [item]);
    }
    const queue = [...lanes.values()];
    const worker = async () => {
      for (let lane = queue.shift(); lane; lane = queue.shift()) {
        for (const item of lane) {
          if (signal?.aborted) {
            await releaseClaim(this.options.runtime.options.em.fork(), table, item.id, item.token).catch(() => undefined);
            counts.released++;
            continue;
          }
          await work(item);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.options.concurrency, queue.length) }, worker));
  }

  /**
   * Runs `work` under `correlationId` (the ambient id the step or publisher sees), failing with
   * DeliveryTimeout after `deliveryTimeoutMs` of the dispatcher's clock.
   */
  private async withTimeout<T>(work: () => Promise<T>, correlationId: string | null): Promise<T> {
    const { clock, deliveryTimeoutMs } = this.options;
    const timer = new AbortController();
    try {
      return await Promise.race([
        correlationId ? runWithCorrelationId(correlationId, work) : work(),
        clock.sleep(deliveryTimeoutMs, timer.signal).then(() => {
          if (!timer.signal.aborted) throw new DeliveryTimeout(`still running after ${deliveryTimeoutMs} ms (deliveryTimeoutMs)`);
          return undefined as never;
        }),
      ]);
    } finally {
      timer.abort();
    }
  }

  private emit<K extends keyof DispatcherEvents>(event: K, ...args: Parameters<DispatcherEvents[K]>): void {
    for (const listener of this.listeners[event]) {
      try {
        (listener as (...a: Parameters<DispatcherEvents[K]>) => void)(...args);
      } catch (error) {
        this.options.logger.error(`a '${event}' listener threw: ${describe(error)}`);
      }
    }
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
