import { type Tracer, trace } from '@opentelemetry/api';
import type { DispatchPassResult } from '../contracts.js';
import { SagaError } from '../errors.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { DISPATCH_TABLES, type DispatchTable } from '../sql/dispatch-tables.js';
import { describeError as describe } from '../telemetry/describe-error.js';
import { SagaGauges } from '../telemetry/saga-gauges.js';
import { SagaMetrics, type SagaStats, TELEMETRY_SCOPE } from '../telemetry/saga-metrics.js';
import { ENDED } from '../time/clock.js';
import { DeliveryPool } from './delivery-pool.js';
import type { DispatchParts } from './dispatch-parts.js';
import { DispatchPass } from './dispatch-pass.js';
import { DispatcherEventListeners, type DispatcherEvents } from './dispatcher-events.js';
import {
  DISPATCHER_DEFAULTS,
  type ResolvedDispatcherOptions,
  resolveDispatcherOptions,
  type SagaDispatcherOptions,
} from './dispatcher-options.js';
import { LeaseKeeper } from './lease-keeper.js';
import { type LoopState, STAMPS_LEFT } from './loop-state.js';
import { LoopWakeup } from './loop-wakeup.js';
import { NotificationListener } from './notification-listener.js';
import { PendingOutcomes } from './pending-outcomes.js';
import { RowDeliveries } from './row-deliveries.js';
import { RowOutcomes } from './row-outcomes.js';
import { reportLockedStamps, reportUnwrittenOutcomes } from './stop-reports.js';
import { TableRest } from './table-rest.js';

/**
 * Fires due timers, delivers staged deliveries and relays the outbox. Polls `saga_timer`, `saga_inbox` and
 * `saga_outbox`, claims due rows under a lease by their concurrency token, delivers timers and staged deliveries to
 * their saga through the runtime (which stamps them in the same transaction as the state change) and hands outbox rows
 * to the publisher.
 * Safe with any number of dispatchers on one database. See docs/timers.md for the failure model.
 *
 * `start()` runs the loop; `stop()` (or `await using`) ends it gracefully; `runOnce()` runs one pass, for
 * tests and for hosts that schedule passes themselves.
 */
export class SagaDispatcher implements AsyncDisposable {
  /** The defaults of {@link SagaDispatcherOptions}. */
  static readonly defaults = DISPATCHER_DEFAULTS;
  readonly options: ResolvedDispatcherOptions;
  /** @internal The runtime's database context: the statements' EntityManager, dialect and table names. */
  readonly context: DatabaseContext;
  private readonly metrics = new SagaMetrics();
  /** The library's tracer: a proxy that follows the tracer provider registered when a span starts. */
  private readonly tracer: Tracer = trace.getTracer(TELEMETRY_SCOPE);
  private readonly events: DispatcherEventListeners;
  private readonly pool: DeliveryPool;
  private readonly leases: LeaseKeeper;
  /** Outcomes the database could not take (it was down): written at the next pass, or by stop(). */
  private readonly pending = new PendingOutcomes();
  /** Which tables the loop leaves unclaimed for a while, their last claim having found nothing. */
  private readonly rest: TableRest;
  /** Its passes: claims, deliveries and stamps of each table. */
  private readonly passes: DispatchPass;
  private readonly wakeup = new LoopWakeup();
  /** The gauges reported while the loop runs; undefined with `gauges: false`. */
  private readonly gauges: SagaGauges | undefined;
  private controller: AbortController | undefined;
  private loop: Promise<void> | undefined;

  /** @throws SagaDefinitionError `OPTION_INVALID` for an option out of range. */
  constructor(options: SagaDispatcherOptions) {
    this.options = resolveDispatcherOptions(options);
    const { context } = this.options.runtime;
    this.context = context;
    const { concurrency, publishConcurrency, clock, leaseMs, logger, pollIntervalMs } = this.options;
    this.events = new DispatcherEventListeners(logger);
    // Staged deliveries run steps, as timers do: they take `concurrency` slots of their own.
    const limits = {
      [DISPATCH_TABLES.timer]: concurrency,
      [DISPATCH_TABLES.outbox]: publishConcurrency,
      [DISPATCH_TABLES.inbox]: concurrency,
    };
    this.pool = new DeliveryPool(limits, (error) => logger.error('a delivery task threw', { error: describe(error) }));
    this.leases = new LeaseKeeper(context, { clock, leaseMs, logger, onRenewed: (renewal) => this.events.emit('renewed', renewal) });
    this.rest = new TableRest(pollIntervalMs);
    const { metrics, tracer, events, pool, leases, rest, pending } = this;
    const outcomes = new RowOutcomes(context, this.options, metrics, pending);
    const deliveries = new RowDeliveries({ context, options: this.options, leases, pending, outcomes });
    const parts: DispatchParts = {
      context,
      options: this.options,
      metrics,
      tracer,
      events,
      pool,
      leases,
      rest,
      pending,
      outcomes,
      deliveries,
    };
    this.passes = new DispatchPass(parts);
    const { gauges } = this.options;
    this.gauges = gauges
      ? new SagaGauges({ db: context, sagas: this.options.runtime.gaugedSagas(), clock, logger, cacheMs: gauges.cacheMs })
      : undefined;
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
    return this.events.on(event, listener);
  }

  /**
   * Starts the polling loop. Only {@link SagaDispatcher.stop} ends it: failed deliveries are counted and retried, and a
   * failed pass (database outage) is logged and retried with backoff. Registers the gauges (`gauges`) until stop().
   */
  start(): void {
    if (this.loop) throw new SagaError('OPTION_INVALID', 'SagaDispatcher.start(): the dispatcher is already running.');
    this.gauges?.start();
    const controller = new AbortController();
    this.controller = controller;
    const unsubscribe = this.options.runtime.rowsDue.on((table) => this.rowsDue([table]));
    // The loop's first claim waits for the first attempt to LISTEN: a row another process commits after that claim
    // then wakes the loop.
    let attempted!: () => void;
    const firstAttempt = new Promise<void>((resolve) => {
      attempted = resolve;
    });
    const listening = this.listenWhileRunning(controller.signal, attempted);
    this.loop = Promise.all([firstAttempt.then(() => this.runLoop(controller.signal)), listening])
      .then(() => undefined)
      .finally(unsubscribe);
    const { logger, pollIntervalMs, batchSize, concurrency, publishConcurrency, listen } = this.options;
    const publishes = this.options.publish !== undefined;
    logger.info('dispatcher started', { pollIntervalMs, batchSize, concurrency, publishConcurrency, publishes, listen });
  }

  /** Rows of `tables` became due: they rest no longer, and a waiting loop claims at once. */
  private rowsDue(tables: readonly DispatchTable[]): void {
    for (const table of tables) this.rest.rowsDue(table);
    this.wakeup.ring();
  }

  /** Listens for other processes' commits while the loop runs (PostgreSQL, `listen`); resolves once that stopped. */
  private async listenWhileRunning(signal: AbortSignal, onFirstAttempt: () => void): Promise<void> {
    if (!this.options.listen || !this.context.dialect.notifiesListeners) return onFirstAttempt();
    const { clock, logger, pollIntervalMs, dbRetryMaxMs } = this.options;
    const listener = new NotificationListener({
      context: this.context,
      ...{ clock, logger, pollIntervalMs, dbRetryMaxMs },
      // The notification names no table: both rest no longer.
      onRowsDue: () => this.rowsDue(Object.values(DISPATCH_TABLES)),
      onListening: () => this.events.emit('listening'),
      onFirstAttempt,
    });
    await listener.run(signal);
  }

  /**
   * Stops the loop: deliveries in flight finish, rows claimed but not yet started are released for other
   * dispatchers, outcomes the database could not take earlier are written once more, then the promise resolves. It resolves after `stopTimeoutMs` at the latest, even when the
   * database stops answering, and at once when the ORM is closed (`orm.close()`, which should come after stop());
   * what is left behind is logged and re-claimed after its lease.
   * Safe to call when not running.
   */
  async stop(): Promise<void> {
    const loop = this.loop;
    this.controller?.abort(ENDED);
    if (loop || this.pending.size > 0) {
      const { clock, stopTimeoutMs, logger } = this.options;
      const giveUp = new AbortController();
      const orm = this.context.orm;
      let unsubscribe = () => undefined as unknown;
      const closed = new Promise<'orm closed'>((resolve) => {
        unsubscribe = orm.onClose(() => resolve('orm closed'));
      });
      // Outcomes the database could not take are written now if it is back (once, within stopTimeoutMs):
      // left behind, a started row would be charged as a lost delivery when it is next claimed.
      const outcome = await Promise.race([
        (loop ?? Promise.resolve())
          .then(() => (orm.closed ? undefined : this.pending.write()))
          .then(
            () => reportLockedStamps(logger, this.pending),
            (error: unknown) => reportUnwrittenOutcomes(logger, this.pending, error),
          )
          .then(() => 'finished' as const),
        clock.sleep(stopTimeoutMs, giveUp.signal).then(() => 'timed out' as const),
        closed,
      ]);
      unsubscribe();
      giveUp.abort(ENDED);
      if (outcome === 'orm closed') {
        this.leases.stop();
        logger.error(
          'dispatcher stop(): the ORM was closed (orm.close()) before the dispatcher stopped; the rows left behind are claimed again after their lease. Call dispatcher.stop() before orm.close()',
          { deliveriesInFlight: this.pool.active, outcomesUnwritten: this.pending.size },
        );
      } else if (outcome === 'timed out') {
        this.leases.stop();
        logger.error(
          'dispatcher stop() gave up after stopTimeoutMs: deliveries or a database statement did not finish; their rows are claimed again after their lease',
          { stopTimeoutMs, deliveriesInFlight: this.pool.active },
        );
      }
    }
    this.gauges?.stop();
    if (loop) this.options.logger.info('dispatcher stopped');
    this.loop = undefined;
    this.controller = undefined;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /**
   * Runs one pass: catch-up, then claim and deliver due timers and staged deliveries and, at the same time, claim and
   * publish due outbox rows (a message a step of this pass sends goes out with the next pass; a saga's next staged
   * delivery is claimed by the next pass); resolves when every row it claimed was delivered (or given back).
   * @throws SagaDispatchError when the pass fails as a whole; its `result` says what it did first.
   */
  runOnce(): Promise<DispatchPassResult> {
    return this.passes.run(this.controller?.signal);
  }

  private async runLoop(signal: AbortSignal): Promise<void> {
    const { clock } = this.options;
    const loop: LoopState = { inFlight: new Set(), stampsBehind: undefined, failures: 0, claimAll: false, waiting: false, drained: false };
    while (!signal.aborted) {
      let stamping!: () => void;
      const onlyStamps = new Promise<void>((resolve) => {
        stamping = resolve;
      });
      const skipped = loop.claimAll ? new Set<DispatchTable>() : this.rest.tablesAtRest(clock.now());
      loop.claimAll = false;
      // Rows a unit of work committed before this claim starts are claimed by it.
      this.wakeup.take();
      const settled = this.passes.run(signal, stamping, skipped).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      loop.inFlight.add(settled);
      void settled.then(() => {
        loop.inFlight.delete(settled);
        this.reportDrained(loop);
      });
      const outcome = await this.untilSettledOrOvertaken(settled, signal, onlyStamps, this.rest.restLeft(skipped, clock.now()));
      if (outcome === undefined || outcome === STAMPS_LEFT) {
        await this.overtaken(settled, outcome, loop);
        continue;
      }
      if ('error' in outcome) {
        loop.failures++;
        await this.reportFailedPass(outcome.error, loop.failures, signal);
        continue;
      }
      loop.failures = 0;
      this.events.emit('pass', outcome.result);
      const { timers, outbox, inbox } = outcome.result;
      if (timers.claimed + timers.missed + outbox.claimed + inbox.claimed > 0) continue;
      if (skipped.size > 0) {
        // A table was left unclaimed while the other kept the loop busy: the next pass claims every table, rather
        // than wait a poll interval after this one.
        loop.claimAll = true;
        continue;
      }
      await this.waitIdle(signal, loop);
    }
    await Promise.all(loop.inFlight);
  }

  /**
   * The pass `settled` was overtaken: it waits on slow deliveries, or only on its published stamps (`STAMPS_LEFT`). It
   * reports when they end, and the next pass claims meanwhile.
   */
  private async overtaken(
    settled: Promise<{ result: DispatchPassResult } | { error: unknown }>,
    outcome: typeof STAMPS_LEFT | undefined,
    loop: LoopState,
  ): Promise<void> {
    const failures = loop.failures;
    void settled.then((late) =>
      'error' in late ? this.reportFailedPass(late.error, failures + 1) : this.events.emit('pass', late.result),
    );
    if (outcome !== STAMPS_LEFT) return;
    // At most one pass's stamps are written behind the next pass: when that statement is slow, the loop waits for it
    // rather than publish more rows it has not stamped.
    await loop.stampsBehind;
    loop.stampsBehind = settled;
  }

  /**
   * After a pass that found nothing: waits `pollIntervalMs`, or less when a unit of work of this process commits
   * rows due at once (`runtime.rowsDue`), or not at all when one did during the pass.
   */
  private async waitIdle(signal: AbortSignal, loop: LoopState): Promise<void> {
    // Idle only once the stamps written behind are written too (their pass reported): a listener of 'idle' finds
    // every row published so far stamped, as before the loop claimed behind them.
    if (loop.stampsBehind) {
      await loop.stampsBehind;
      loop.stampsBehind = undefined;
      if (signal.aborted) return;
    }
    // stop() may have come while the pass settled: an abort listener added now would never hear of it.
    if (signal.aborted || this.wakeup.take()) return;
    const waiting = this.wakeup.wait(this.options.clock, this.options.pollIntervalMs, signal);
    loop.waiting = true;
    loop.drained = false;
    this.events.emit('idle');
    this.reportDrained(loop);
    try {
      await waiting;
    } finally {
      loop.waiting = false;
    }
  }

  /** Emits 'drained' once per wait of the loop, when it waits with no pass left in flight (a pass ends after its deliveries and stamps). */
  private reportDrained(loop: LoopState): void {
    if (!loop.waiting || loop.drained || loop.inFlight.size > 0) return;
    loop.drained = true;
    this.events.emit('drained');
  }

  /**
   * Waits for `settled`, or for the moment it may be overtaken: a poll interval has passed (or, sooner, the rest of
   * a table the pass left unclaimed ended: `restLeftMs`) and the pool has a free slot (the pass waits on slow
   * deliveries), or `onlyStamps` resolved (every delivery of the pass ended; it waits only for the statement stamping
   * its published rows, which the next claim need not wait for). Returns `STAMPS_LEFT` in that last case,
   * undefined when otherwise overtaken or stopping.
   */
  private async untilSettledOrOvertaken<T>(
    settled: Promise<T>,
    signal: AbortSignal,
    onlyStamps: Promise<void>,
    restLeftMs = Number.POSITIVE_INFINITY,
  ): Promise<T | typeof STAMPS_LEFT | undefined> {
    const overtake = new AbortController();
    const until = AbortSignal.any([signal, overtake.signal]);
    // Rows committed meanwhile (a ring) end the wait as a poll interval would.
    const overtaken = this.wakeup
      .wait(this.options.clock, Math.min(this.options.pollIntervalMs, restLeftMs), until)
      .then(() => this.pool.whenRoom(until))
      .then(() => undefined);
    try {
      return await Promise.race([settled, overtaken, onlyStamps.then((): typeof STAMPS_LEFT => STAMPS_LEFT)]);
    } finally {
      overtake.abort(ENDED);
    }
  }

  /** Logs a failed pass and reports it; with `signal`, waits the backoff (the loop's own pass). */
  private async reportFailedPass(error: unknown, failures: number, signal?: AbortSignal): Promise<void> {
    const { clock, pollIntervalMs, dbRetryMaxMs, logger } = this.options;
    const wait = Math.min(dbRetryMaxMs, pollIntervalMs * 2 ** (failures - 1));
    logger.warn('dispatcher pass failed; the loop retries after a backoff', {
      failuresInARow: failures,
      retryInMs: wait,
      error: describe(error),
    });
    if (!signal) {
      this.events.emit('passFailed', error, failures);
      return;
    }
    // A ring ends the wait early: rows were committed, or the LISTEN connection is back: the database answers again.
    // The wait starts before listeners hear of it, so a listener that moves a fake clock wakes the loop.
    const waiting = this.wakeup.wait(clock, wait, signal);
    this.events.emit('passFailed', error, failures);
    await waiting;
  }
}
