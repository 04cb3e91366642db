import { runWithCorrelationId } from '../correlation/correlation-context.js';
import { SagaError } from '../errors.js';
import type { TimerDelivery } from '../saga/saga-runtime.js';
import type { SagaPreload } from '../saga/unit-of-work/saga-preload.js';
import { missTimersOverdueBefore, missTimersSupersededInBacklog } from '../sql/catch-up-statements.js';
import type { ClaimGuard } from '../sql/claim-statements.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { deadLetter, markDeliveriesStarted, markPublished, recordFailure, releaseClaim } from '../sql/delivery-statements.js';
import { type Claim, DISPATCH_TABLES, type DispatchTable, diedWithItsDispatcher, ERROR_TEXT_LIMIT } from '../sql/dispatch-tables.js';
import { type SagaCounterName, SagaMetrics, type SagaStats } from '../telemetry/saga-metrics.js';
import { storableText } from '../text/storable-text.js';
import { ENDED } from '../time/clock.js';
import { type ClaimedOutboxRow, claimDueOutboxRows, claimDueTimers, type UndecodableRow } from './claim-due-rows.js';
import { CoalescedWrite } from './coalesced-write.js';
import { DeliveryDeadlines } from './delivery-deadlines.js';
import { DeliveryPool, type DeliveryTask } from './delivery-pool.js';
import { describeError as describe } from './describe-error.js';
import { SagaDispatchError } from './dispatch-pass-error.js';
import {
  CATCH_UP_POLICIES,
  type ResolvedDispatcherOptions,
  resolveDispatcherOptions,
  retryDelayMs,
  type SagaDispatcherOptions,
} from './dispatcher-options.js';
import { isInfrastructureFault } from './infrastructure-fault.js';
import { LeaseKeeper, type LeaseRenewal } from './lease-keeper.js';

/** What happened to the rows one pass claimed, per table. */
interface DeliveryCounts {
  /** Due rows this pass claimed. */
  readonly claimed: number;
  /** Failed deliveries (the step or publisher threw, timed out or died with its process); the row backs off. */
  readonly failed: number;
  /** Failed for the last allowed time, or could not be decoded, and retired. */
  readonly deadLettered: number;
  /** Claimed but given back unattempted because the dispatcher was stopping. */
  readonly released: number;
  /** The database failed under the delivery (connection lost, file locked): not charged, given back. */
  readonly interrupted: number;
  /** Taken over by another dispatcher before the delivery started (the lease ran out): not delivered here. */
  readonly lost: number;
}

/** What one dispatcher pass did. */
export interface DispatchPassResult {
  readonly timers: DeliveryCounts & {
    /** Delivered; the state change and the `fired` stamp committed together. */
    readonly fired: number;
    /** Dropped: cancelled, replaced or already fired meanwhile, or their saga is gone or completed. */
    readonly stale: number;
    /** Discarded by the catch-up policy, stamped `missed`. */
    readonly missed: number;
  };
  readonly outbox: DeliveryCounts & {
    /** Handed to the publisher, which resolved. */
    readonly published: number;
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
  /** The leases of held rows (waiting or being delivered) were extended; `lost` ones were taken over. */
  renewed: (renewal: LeaseRenewal) => void;
  /** A pass of the loop finished: its deliveries all ended. */
  pass: (result: DispatchPassResult) => void;
  /** The loop found nothing to do and now waits `pollIntervalMs` (moving a fake clock past it wakes the loop). */
  idle: () => void;
  /**
   * A pass failed as a whole (usually the database is unreachable); the loop now waits and then tries again.
   * The error is a `SagaDispatchError` whose `result` says what the pass did first.
   */
  passFailed: (error: unknown, consecutiveFailures: number) => void;
}

type Mutable<T> = { -readonly [K in keyof T]: Mutable<T[K]> };
type Counts = Mutable<DeliveryCounts>;

/** The counters a failed delivery moves, per table. */
const FAILURE_COUNTERS = {
  saga_timer: { failed: 'timersFailed', deadLettered: 'timersDeadLettered' },
  saga_outbox: { failed: 'messagesFailed', deadLettered: 'messagesDeadLettered' },
} as const satisfies Record<DispatchTable, { failed: SagaCounterName; deadLettered: SagaCounterName }>;

/** A claimed row as the delivery machinery sees it, whichever its table. */
interface HeldRow extends Claim {
  readonly sagaType: string;
  readonly sagaId: string;
  readonly attempts: number;
  readonly lastError?: string | null;
}

/** A published row's stamp, written after its delivery ended (the row stays held until it is written or kept). */
interface Stamping {
  readonly stamped: Promise<void>;
}

/** The held row of a claimed outbox row. */
function heldOutboxRow({ envelope, token, lastError }: ClaimedOutboxRow): HeldRow {
  return { id: envelope.id, token, sagaType: envelope.sagaType, sagaId: envelope.sagaId, attempts: envelope.attempts, lastError };
}

/** A kept write whose row another transaction still holds locked: not a database fault; kept for a later pass. */
class RowLockedElsewhere extends Error {
  constructor() {
    super('another transaction holds the row locked');
    this.name = 'RowLockedElsewhere';
  }
}

/** What the loop learns when a pass it waits for has delivered every row and only writes their published stamps. */
const STAMPS_LEFT = Symbol('stamps left');

/** Most undelivered outcomes kept for writing once the database answers again. */
const MAX_PENDING_OUTCOMES = 10_000;

/**
 * A row's outcome (published, failed, dead-lettered, given back) the database could not take when it was
 * decided. Written at the next pass, token-checked (so a row taken over meanwhile is left alone); until then
 * this dispatcher does not claim the row.
 */
interface PendingOutcome {
  readonly table: DispatchTable;
  readonly claim: Claim;
  readonly write: () => Promise<unknown>;
  /** A published stamp: written together with the other kept stamps, in one statement. */
  readonly stamp?: boolean;
}

/**
 * Fires due timers and relays the outbox. Polls `saga_timer` and `saga_outbox`, claims due rows under a
 * lease by their concurrency token, delivers timers to their saga through the runtime (which stamps them
 * `fired` in the same transaction as the state change) and hands outbox rows to the publisher.
 * Safe with any number of dispatchers on one database. See docs/timers.md for the failure model.
 *
 * `start()` runs the loop; `stop()` (or `await using`) ends it gracefully; `runOnce()` runs one pass, for
 * tests and for hosts that schedule passes themselves.
 */
export class SagaDispatcher implements AsyncDisposable {
  readonly options: ResolvedDispatcherOptions;
  /** @internal The runtime's database context: the statements' EntityManager, dialect and table names. */
  readonly context: DatabaseContext;
  private readonly metrics = new SagaMetrics();
  private readonly listeners: { [K in keyof DispatcherEvents]: Set<DispatcherEvents[K]> } = {
    claimed: new Set(),
    renewed: new Set(),
    pass: new Set(),
    idle: new Set(),
    passFailed: new Set(),
  };
  private readonly pool: DeliveryPool;
  private readonly leases: LeaseKeeper;
  private readonly deadlines: DeliveryDeadlines;
  /** Start marks of the deliveries starting together, per table: one statement. */
  private readonly starts: Record<DispatchTable, CoalescedWrite>;
  /** Published stamps of the messages published together: one statement. */
  private readonly published: CoalescedWrite;
  /** Outcomes the database could not take (it was down): written at the next pass, or by stop(). */
  private pendingOutcomes: PendingOutcome[] = [];
  private controller: AbortController | undefined;
  private loop: Promise<void> | undefined;
  /**
   * When a claim of each table last came back empty (the clock's milliseconds); absent once one found rows. The
   * loop claims such a table again only after `pollIntervalMs`, while the other table keeps it busy.
   */
  private readonly foundEmptyAt: Partial<Record<DispatchTable, number>> = {};
  /** Timers this dispatcher fired: a timer's step may send messages, which the next pass publishes. */
  private timersFired = 0;

  /** @throws SagaDefinitionError `OPTION_INVALID` for an option out of range. */
  constructor(options: SagaDispatcherOptions) {
    this.options = resolveDispatcherOptions(options);
    this.context = this.options.runtime.context;
    const { concurrency, clock, leaseMs, logger } = this.options;
    this.pool = new DeliveryPool(concurrency, (error) => logger.error(`a delivery task threw: ${describe(error)}`));
    this.leases = new LeaseKeeper(this.context, { clock, leaseMs, logger, onRenewed: (renewal) => this.emit('renewed', renewal) });
    this.deadlines = new DeliveryDeadlines(clock, this.options.deliveryTimeoutMs);
    const starts = (table: DispatchTable) =>
      new CoalescedWrite(async (claims) => ({ written: await markDeliveriesStarted(this.context, table, claims, clock.now()) }));
    this.starts = { saga_timer: starts(DISPATCH_TABLES.timer), saga_outbox: starts(DISPATCH_TABLES.outbox) };
    this.published = new CoalescedWrite((claims) => markPublished(this.context, claims, clock.now()));
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
   * Stops the loop: deliveries in flight finish, rows claimed but not yet started are released for other
   * dispatchers, outcomes the database could not take earlier are written once more, then the promise resolves. It resolves after `stopTimeoutMs` at the latest, even when the
   * database stops answering; what is left behind is logged and re-claimed after its lease.
   * Safe to call when not running.
   */
  async stop(): Promise<void> {
    const loop = this.loop;
    this.controller?.abort(ENDED);
    if (loop || this.pendingOutcomes.length > 0) {
      const { clock, stopTimeoutMs, logger } = this.options;
      const giveUp = new AbortController();
      // Outcomes the database could not take are written now if it is back (once, within stopTimeoutMs):
      // left behind, a started row would be charged as a lost delivery when it is next claimed.
      const finished = await Promise.race([
        (loop ?? Promise.resolve())
          .then(() => this.writePendingOutcomes())
          .then(
            () => this.reportLockedStamps(),
            (error: unknown) => this.reportUnwrittenOutcomes(error),
          )
          .then(() => true),
        clock.sleep(stopTimeoutMs, giveUp.signal).then(() => false),
      ]);
      giveUp.abort(ENDED);
      if (!finished) {
        this.leases.stop();
        logger.error(
          `dispatcher stop() gave up after ${stopTimeoutMs} ms (stopTimeoutMs): ${this.pool.active} delivery(ies) or a database statement did not finish; their rows are claimed again after their lease`,
        );
      }
    }
    this.loop = undefined;
    this.controller = undefined;
  }

  /** Logs the published stamps stop() leaves behind because another transaction still holds their rows locked. */
  private reportLockedStamps(): void {
    const left = this.pendingOutcomes.map((outcome) => outcome.claim.id);
    if (left.length === 0) return;
    const named = `${left.slice(0, 10).join(', ')}${left.length > 10 ? ` and ${left.length - 10} more` : ''}`;
    this.options.logger.error(
      `dispatcher stop(): ${left.length} published outbox message(s) could not be stamped, another transaction holds their rows locked (${named}); once it ends and their lease has run out, they are claimed and published again, charged as a lost delivery`,
    );
  }

  private reportUnwrittenOutcomes(error: unknown): void {
    this.options.logger.error(
      `dispatcher stop(): ${this.pendingOutcomes.length} row outcome(s) could not be written (the database is away); those rows are claimed again after their lease, a started one charged as a lost delivery: ${describe(error)}`,
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /**
   * Runs one pass: catch-up, then claim and deliver due timers and, at the same time, claim and publish due
   * outbox rows (a message a timer of this pass sends goes out with the next pass); resolves when every row
   * it claimed was delivered (or given back).
   * @throws SagaDispatchError when the pass fails as a whole; its `result` says what it did first.
   */
  runOnce(): Promise<DispatchPassResult> {
    return this.pass(this.controller?.signal);
  }

  private async runLoop(signal: AbortSignal): Promise<void> {
    const { clock, pollIntervalMs } = this.options;
    const inFlight = new Set<Promise<unknown>>();
    /** The pass whose published stamps are being written while the current one runs. */
    let stampsBehind: Promise<unknown> | undefined;
    let failures = 0;
    /** Whether the next pass claims every table: the last one found nothing in those it claimed. */
    let claimAll = false;
    while (!signal.aborted) {
      let stamping!: () => void;
      const onlyStamps = new Promise<void>((resolve) => {
        stamping = resolve;
      });
      const skipped = claimAll ? new Set<DispatchTable>() : this.tablesAtRest(clock.now());
      claimAll = false;
      const settled = this.pass(signal, stamping, skipped).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      inFlight.add(settled);
      void settled.then(() => inFlight.delete(settled));
      const outcome = await this.untilSettledOrOvertaken(settled, signal, onlyStamps, this.restLeft(skipped, clock.now()));
      if (outcome === undefined || outcome === STAMPS_LEFT) {
        // The pass waits on slow deliveries, or only on its published stamps: it reports when they end, and the
        // next pass claims meanwhile.
        void settled.then((late) => ('error' in late ? this.reportFailedPass(late.error, failures + 1) : this.emit('pass', late.result)));
        if (outcome === STAMPS_LEFT) {
          // At most one pass's stamps are written behind the next pass: when that statement is slow, the loop
          // waits for it rather than publish more rows it has not stamped.
          await stampsBehind;
          stampsBehind = settled;
        }
        continue;
      }
      if ('error' in outcome) {
        failures++;
        await this.reportFailedPass(outcome.error, failures, signal);
        continue;
      }
      failures = 0;
      this.emit('pass', outcome.result);
      if (outcome.result.timers.claimed + outcome.result.timers.missed + outcome.result.outbox.claimed === 0) {
        if (skipped.size > 0) {
          // A table was left unclaimed while the other kept the loop busy: the next pass claims every table, rather
          // than wait a poll interval after this one.
          claimAll = true;
          continue;
        }
        // Idle only once the stamps written behind are written too (their pass reported): a listener of 'idle'
        // finds every row published so far stamped, as before the loop claimed behind them.
        if (stampsBehind) {
          await stampsBehind;
          stampsBehind = undefined;
          if (signal.aborted) break;
        }
        const waiting = clock.sleep(pollIntervalMs, signal);
        this.emit('idle');
        await waiting;
      }
    }
    await Promise.all(inFlight);
  }

  /**
   * Waits for `settled`, or for the moment it may be overtaken: a poll interval has passed (or, sooner, the rest of
   * a table the pass left unclaimed ended: `restLeftMs`) and the pool has a free slot (the pass waits on slow
   * deliveries), or `onlyStamps` resolved (every delivery of the pass ended; it waits only for the statement stamping
   * its published rows, which the next claim need not wait for). Returns {@link STAMPS_LEFT} in that last case,
   * undefined when otherwise overtaken or stopping.
   */
  private async untilSettledOrOvertaken<T>(
    settled: Promise<T>,
    signal: AbortSignal,
    onlyStamps: Promise<void>,
    restLeftMs = Number.POSITIVE_INFINITY,
  ): Promise<T | typeof STAMPS_LEFT | undefined> {
    const overtake = new AbortController();
    const abort = () => overtake.abort(ENDED);
    signal.addEventListener('abort', abort, { once: true });
    const overtaken = this.options.clock
      .sleep(Math.min(this.options.pollIntervalMs, restLeftMs), overtake.signal)
      .then(() => this.pool.whenRoom(overtake.signal))
      .then(() => undefined);
    try {
      return await Promise.race([settled, overtaken, onlyStamps.then((): typeof STAMPS_LEFT => STAMPS_LEFT)]);
    } finally {
      overtake.abort(ENDED);
      signal.removeEventListener('abort', abort);
    }
  }

  /**
   * The tables the loop leaves unclaimed in its next pass: those whose last claim, less than `pollIntervalMs` ago,
   * came back empty. While one table keeps the loop busy, the other costs no claim statement per pass, and a row
   * that becomes due there waits at most about a poll interval, as it would with the loop idle.
   */
  private tablesAtRest(now: Date): Set<DispatchTable> {
    const atRest = new Set<DispatchTable>();
    for (const table of Object.values(DISPATCH_TABLES)) {
      if (this.restOf(table, now) > 0) atRest.add(table);
    }
    return atRest;
  }

  /**
   * How long `table` still rests at `now`, ms (0 when it does not). A clock that stepped back since the empty claim
   * ends the rest: measured on it, the rest would last as long as the step.
   */
  private restOf(table: DispatchTable, now: Date): number {
    const at = this.foundEmptyAt[table];
    if (at === undefined) return 0;
    const since = now.getTime() - at;
    return since < 0 ? 0 : Math.max(0, this.options.pollIntervalMs - since);
  }

  /** When the first of `tables` stops resting, ms from `now` (infinite for none): a pass that left them out is overtaken then. */
  private restLeft(tables: ReadonlySet<DispatchTable>, now: Date): number {
    let left = Number.POSITIVE_INFINITY;
    for (const table of tables) left = Math.min(left, this.restOf(table, now));
    return left;
  }

  /** Notes whether a claim of `table` at `at` came back empty, for {@link tablesAtRest}. */
  private noteClaim(table: DispatchTable, at: Date, empty: boolean): void {
    if (empty) this.foundEmptyAt[table] = at.getTime();
    else delete this.foundEmptyAt[table];
  }

  /** Logs a failed pass and reports it; with `signal`, waits the backoff (the loop's own pass). */
  private async reportFailedPass(error: unknown, failures: number, signal?: AbortSignal): Promise<void> {
    const { clock, pollIntervalMs, dbRetryMaxMs, logger } = this.options;
    const wait = Math.min(dbRetryMaxMs, pollIntervalMs * 2 ** (failures - 1));
    logger.error(`dispatcher pass failed (${failures} in a row); retrying in ${wait} ms: ${describe(error)}`);
    // The wait starts before listeners hear of it, so a listener that moves a fake clock wakes the loop.
    const waiting = signal ? clock.sleep(wait, signal) : Promise.resolve();
    this.emit('passFailed', error, failures);
    await waiting;
  }

  /**
   * One pass. It resolves once the published stamps of its rows are written too; `onlyStamps` is called when
   * every delivery ended and only those stamps are left (the loop then claims again while they are written).
   * The tables in `skipped` are not claimed.
   */
  private async pass(
    signal: AbortSignal | undefined,
    onlyStamps?: () => void,
    skipped: ReadonlySet<DispatchTable> = new Set(),
  ): Promise<DispatchPassResult> {
    const now = this.options.clock.now();
    const result: Mutable<DispatchPassResult> = {
      timers: { claimed: 0, fired: 0, stale: 0, failed: 0, deadLettered: 0, missed: 0, released: 0, interrupted: 0, lost: 0 },
      outbox: { claimed: 0, published: 0, failed: 0, deadLettered: 0, released: 0, interrupted: 0, lost: 0 },
    };
    try {
      if (this.options.verifySchema) await this.options.runtime.verifySchemaOnce();
      await this.writePendingOutcomes();
      result.timers.missed = await this.applyCatchUp(now);
      // The outbox is claimed while the timers are, not after their deliveries: one round trip less per pass.
      // A message a timer of this pass sends is published by the next pass, which starts at once (this one
      // claimed something). A stopping dispatcher claims no more outbox rows only to release them again.
      const stamps: Promise<void>[] = [];
      const timers = skipped.has(DISPATCH_TABLES.timer) ? undefined : this.claimAndFireTimers(now, signal, result.timers);
      const outbox =
        this.options.publish && !signal?.aborted && !skipped.has(DISPATCH_TABLES.outbox)
          ? this.claimAndPublish(signal, result.outbox, stamps)
          : undefined;
      const [timersDone, outboxDone] = await Promise.allSettled([timers, outbox]);
      if (stamps.length > 0) {
        // A pass that failed (its timer or outbox claim) is not overtaken: the loop hears of its failure when its
        // stamps are written, and backs off as after any failed pass.
        if (timersDone.status === 'fulfilled' && outboxDone.status === 'fulfilled') onlyStamps?.();
        await Promise.all(stamps);
      }
      if (timersDone.status === 'rejected') throw timersDone.reason;
      if (outboxDone.status === 'rejected') throw outboxDone.reason;
    } catch (error) {
      throw new SagaDispatchError(result, error);
    }
    return result;
  }

  private async claimAndFireTimers(now: Date, signal: AbortSignal | undefined, counts: Mutable<DispatchPassResult['timers']>) {
    const table = DISPATCH_TABLES.timer;
    const leaseUntil = new Date(now.getTime() + this.options.leaseMs);
    const { rows, undecodable } = await claimDueTimers(this.context, now, leaseUntil, this.options.batchSize, this.claimGuard(table, now));
    counts.claimed = rows.length + undecodable.length;
    this.noteClaim(table, now, counts.claimed === 0);
    if (counts.claimed > 0) this.emit('claimed', { table, ids: [...rows, ...undecodable].map((r) => r.id), at: now, leaseUntil });
    // The claimed timers' sagas are read with one query while the undecodable rows are retired and the start
    // marks written; each saga's first delivery takes its row (saga-preload.ts).
    const preload = this.options.runtime.preloadTimerSagas(rows);
    await this.retireUndecodable(undecodable, counts);
    this.leases.hold(table, rows);
    await this.pool.submit(
      rows.map((timer) =>
        this.task(table, timer, signal, counts, async () => {
          await this.fire(timer, counts, preload);
          return undefined;
        }),
      ),
    );
  }

  /**
   * Claims due outbox rows and publishes them. When the pool is idle, the claim holds all its slots and
   * marks started, in the claim statement itself, the rows that then start at once (the head of each
   * saga's lane, up to `concurrency`), instead of a start-mark statement of their own.
   */
  private async claimAndPublish(signal: AbortSignal | undefined, counts: Mutable<DispatchPassResult['outbox']>, stamps: Promise<void>[]) {
    const table = DISPATCH_TABLES.outbox;
    const at = this.options.clock.now();
    const leaseUntil = new Date(at.getTime() + this.options.leaseMs);
    const firedBefore = this.timersFired;
    const reservation = this.pool.reserve();
    const startAtClaim = reservation && { upTo: this.options.concurrency, maxAttempts: this.options.maxAttempts };
    let claimed: Awaited<ReturnType<typeof claimDueOutboxRows>>;
    try {
      claimed = await claimDueOutboxRows(this.context, at, leaseUntil, this.options.batchSize, this.claimGuard(table, at), startAtClaim);
    } catch (error) {
      if (reservation) this.pool.release(reservation);
      throw error;
    }
    const { rows, undecodable } = claimed;
    counts.claimed = rows.length + undecodable.length;
    // Empty while a timer fired meanwhile is not at rest: the step may have sent a message this claim missed.
    this.noteClaim(table, at, counts.claimed === 0 && this.timersFired === firedBefore);
    if (counts.claimed > 0) {
      this.emit('claimed', { table, ids: [...rows.map((r) => r.envelope.id), ...undecodable.map((r) => r.id)], at, leaseUntil });
    }
    // The rows started by the claim go first: they are the heads of their lanes, and start before submit returns.
    const ordered = [...rows.filter((row) => row.startedAtClaim), ...rows.filter((row) => !row.startedAtClaim)];
    const held = ordered.map((row) => ({ row, claim: heldOutboxRow(row) }));
    this.leases.hold(
      table,
      held.map((h) => h.claim),
    );
    const delivered = this.pool.submit(
      held.map(({ row, claim }) =>
        this.task(table, claim, signal, counts, () => this.publishOne(row, claim, counts, stamps), row.startedAtClaim),
      ),
      reservation,
    );
    // After the submit: rows the claim marked started must not wait on these statements.
    await this.retireUndecodable(undecodable, counts);
    await delivered;
  }

  /**
   * What a claim at `now` leaves alone: rows this dispatcher holds (after an outage longer than the lease
   * they look free, but their delivery is still running here) or whose outcome it has yet to write, and rows whose delivery elsewhere started
   * less than `deliveryTimeoutMs` ago (it may still be running: its dispatcher may have lost the database,
   * not its process).
   */
  private claimGuard(table: DispatchTable, now: Date): ClaimGuard {
    const pending = this.pendingOutcomes.filter((outcome) => outcome.table === table).map((outcome) => outcome.claim.id);
    return {
      exclude: [...this.leases.heldIds(table), ...pending],
      startedBefore: new Date(now.getTime() - this.options.deliveryTimeoutMs),
    };
  }

  /**
   * Wraps one held row's delivery for the pool. Rows of one saga share a lane. A row whose last delivery
   * died with its process is delivered alone: if it kills this process too, it takes no other delivery
   * with it, and only it is charged for the lost lease. A row the claim marked started is delivered even
   * when the dispatcher is stopping meanwhile: it started.
   */
  private task(
    table: DispatchTable,
    row: HeldRow,
    signal: AbortSignal | undefined,
    counts: Counts,
    deliver: () => Promise<Stamping | undefined>,
    startedAtClaim = false,
  ): DeliveryTask {
    /** The published stamp still being written when the delivery ended: the row stays held until it is. */
    let stamping: Promise<void> | undefined;
    return {
      lane: `${table}\u0000${row.sagaType}\u0000${row.sagaId}`,
      isolated: diedWithItsDispatcher(row.lastError),
      run: async () => {
        if (!signal?.aborted || startedAtClaim) {
          stamping = (await deliver())?.stamped;
          return;
        }
        counts.released++;
        await this.giveBack(table, row);
      },
      // A row whose stamp is being written is still this dispatcher's: its lease is renewed and the claims of
      // the passes started meanwhile leave it alone (once the stamp failed it is kept in pendingOutcomes, which
      // they leave alone too); let go earlier, it would be claimed and published again once its lease ran out.
      settle: () => {
        if (stamping) void stamping.finally(() => this.leases.let(table, row));
        else this.leases.let(table, row);
      },
    };
  }

  /** Stamps the backlog the catch-up policy discards; returns how many. */
  private async applyCatchUp(now: Date): Promise<number> {
    const { policy, maxAgeMs, backlogAfterMs } = this.options.catchUp;
    let rows: { sagaType: string }[] = [];
    if (policy === CATCH_UP_POLICIES.SKIP_BEYOND_MAX_AGE) {
      rows = await missTimersOverdueBefore(this.context, new Date(now.getTime() - maxAgeMs), now);
    } else if (policy === CATCH_UP_POLICIES.FIRE_LATEST_PER_SAGA) {
      rows = await missTimersSupersededInBacklog(this.context, new Date(now.getTime() - backlogAfterMs), now);
    }
    for (const row of rows) this.metrics.add('timersMissed', row.sagaType);
    if (rows.length > 0) this.options.logger.warn(`catch-up (${policy}) stamped ${rows.length} overdue timer(s) missed`);
    return rows.length;
  }

  private async fire(timer: TimerDelivery, counts: Mutable<DispatchPassResult['timers']>, preload: SagaPreload): Promise<void> {
    const row: HeldRow = timer;
    const what = `timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId}`;
    if (!(await this.startDelivery(DISPATCH_TABLES.timer, row, what, counts))) return;
    try {
      const result = await this.withTimeout(() => this.options.runtime.deliverTimer(timer, preload), timer.correlationId);
      // The runtime counts stale and discarded deliveries (saga.timeout.stale / .discarded); counted here too, a
      // stale firing added 2.
      if (result.outcome === 'stale' || result.outcome === 'ignored') {
        counts.stale++;
      } else {
        counts.fired++;
        this.timersFired++;
        delete this.foundEmptyAt[DISPATCH_TABLES.outbox];
        this.metrics.add('timersFired', timer.sagaType);
      }
    } catch (error) {
      await this.deliveryFailed(DISPATCH_TABLES.timer, row, error, what, counts);
    }
  }

  /**
   * Publishes one claimed row; its published stamp, written with the others of its pass in one statement, is
   * pushed to `stamps`: the delivery (and its pool slot) ends when the publisher returned.
   */
  private async publishOne(
    claimed: ClaimedOutboxRow,
    row: HeldRow,
    counts: Mutable<DispatchPassResult['outbox']>,
    stamps: Promise<void>[],
  ): Promise<Stamping | undefined> {
    const { envelope } = claimed;
    const what = `outbox message '${envelope.type}' ${envelope.id} of saga ${envelope.sagaType}/${envelope.sagaId}`;
    if (!claimed.startedAtClaim && !(await this.startDelivery(DISPATCH_TABLES.outbox, row, what, counts))) return;
    try {
      await this.withTimeout(() => this.options.publish!(envelope), envelope.correlationId);
    } catch (error) {
      await this.deliveryFailed(DISPATCH_TABLES.outbox, row, error, what, counts);
      return;
    }
    counts.published++;
    this.metrics.add('messagesPublished', envelope.sagaType);
    const stamped = this.stampPublished(row, envelope.id);
    stamps.push(stamped);
    return { stamped };
  }

  /**
   * Stamps a published row published (token-checked); when the database cannot take it, or another transaction
   * holds the row locked (PostgreSQL: the stamp does not wait for it), keeps it for the next pass.
   */
  private stampPublished(row: HeldRow, id: string): Promise<void> {
    // Without async wrappers: one stamp per published row, and every promise counts at the relay's rate.
    const write = () =>
      this.published.submit(row).then((outcome) => {
        if (outcome === 'busy') throw new RowLockedElsewhere();
        return outcome;
      });
    return write().then(
      (outcome) => {
        // The lease ran out and another dispatcher took the row: it will publish again (at-least-once).
        if (outcome === 'lost')
          this.options.logger.warn(`outbox message ${id} was published after its lease ended; it may be published again`);
      },
      (error: unknown) => {
        this.keep(DISPATCH_TABLES.outbox, row, write, true);
        if (error instanceof RowLockedElsewhere) {
          this.options.logger.warn(
            `outbox message ${id} was published, but another transaction holds its row locked; it is stamped at a later pass`,
          );
        } else {
          this.options.logger.error(`outbox message ${id} was published but could not be stamped yet; it is stamped at the next pass`);
        }
      },
    );
  }

  /**
   * Decides whether a held row's delivery starts, and records its start (its own statement, before the step
   * or publisher runs, so a process that dies from here on is charged for it). Not started: a row taken over
   * meanwhile (lost), one whose attempts ran out on lost leases (dead-lettered without a delivery), or one
   * the database could not mark (interrupted, not charged).
   */
  private async startDelivery(table: DispatchTable, row: HeldRow, what: string, counts: Counts): Promise<boolean> {
    if (this.leases.isLost(table, row)) {
      counts.lost++;
      return false;
    }
    if (row.attempts >= this.options.maxAttempts) {
      // Its deliveries kept dying with their dispatcher: the claim counted the last one.
      await this.retireWithoutDelivery(table, row, what, counts);
      return false;
    }
    try {
      if ((await this.starts[table].submit(row)) === 'written') return true;
      counts.lost++;
    } catch (error) {
      await this.interrupted(table, row, error, what, counts);
    }
    return false;
  }

  /** A delivery threw: a database fault is given back uncharged; anything else is a failed attempt. */
  private async deliveryFailed(table: DispatchTable, row: HeldRow, error: unknown, what: string, counts: Counts): Promise<void> {
    if (isInfrastructureFault(error)) await this.interrupted(table, row, error, what, counts);
    else await this.recordFailure(table, row, error, what, counts);
  }

  /** The database failed under a delivery: not the row's fault. Gives the row back, or keeps it to give back later. */
  private async interrupted(table: DispatchTable, row: HeldRow, error: unknown, what: string, counts: Counts): Promise<void> {
    counts.interrupted++;
    this.options.logger.warn(`${what}: the database failed under its delivery; not counted as an attempt: ${describe(error)}`);
    await this.giveBack(table, row);
  }

  /** Releases a claim; when the database cannot be reached, remembers it for the next pass. */
  private async giveBack(table: DispatchTable, claim: Claim): Promise<void> {
    // Without it the lease runs out and the row is re-claimed; a started row would then be charged.
    await this.writeOrKeep(table, claim, () => releaseClaim(this.context, table, { id: claim.id, token: claim.token }));
  }

  /**
   * Writes a row's outcome; when the database cannot take it, keeps it for the next pass (and stop()).
   * @returns the statement's result, or undefined when it was kept.
   */
  private async writeOrKeep<T>(table: DispatchTable, claim: Claim, write: () => Promise<T>): Promise<T | undefined> {
    try {
      return await write();
    } catch {
      this.keep(table, claim, write);
      return undefined;
    }
  }

  /** Keeps a row's outcome the database could not take, for the next pass (and stop()). */
  private keep(table: DispatchTable, claim: Claim, write: () => Promise<unknown>, stamp = false): void {
    this.pendingOutcomes.push({ table, claim: { id: claim.id, token: claim.token }, write, stamp });
    if (this.pendingOutcomes.length > MAX_PENDING_OUTCOMES) this.pendingOutcomes.shift();
  }

  /**
   * Writes the kept outcomes: the published stamps together (one statement), then the others oldest first; stops at
   * the first the database still refuses (and rethrows). One whose row another transaction still holds locked is
   * kept again, and the others are written.
   */
  private async writePendingOutcomes(): Promise<void> {
    const pending = this.pendingOutcomes;
    this.pendingOutcomes = [];
    const stamps = pending.filter((outcome) => outcome.stamp);
    const others = pending.filter((outcome) => !outcome.stamp);
    let refused: { error: unknown } | undefined;
    const stamped = await Promise.allSettled(stamps.map((outcome) => outcome.write()));
    for (const [index, result] of stamped.entries()) {
      if (result.status === 'fulfilled') continue;
      this.pendingOutcomes.push(stamps[index]!);
      if (!(result.reason instanceof RowLockedElsewhere)) refused ??= { error: result.reason };
    }
    if (refused) {
      this.pendingOutcomes.push(...others);
      throw refused.error;
    }
    for (const [index, outcome] of others.entries()) {
      try {
        await outcome.write();
      } catch (error) {
        this.pendingOutcomes.push(...others.slice(index));
        throw error;
      }
    }
  }

  /**
   * Counts a failed delivery: backs the row off, or dead-letters it on its last allowed attempt. When the
   * database cannot take it, the record is kept and written at the next pass.
   */
  private async recordFailure(table: DispatchTable, row: HeldRow, error: unknown, what: string, counts: Counts): Promise<void> {
    const { clock, maxAttempts, backoff, logger } = this.options;
    const attempts = row.attempts + 1;
    const message = storableText(describe(error), ERROR_TEXT_LIMIT);
    const now = clock.now();
    const counters = FAILURE_COUNTERS[table];
    const kept = `${what} failed (attempt ${attempts} of ${maxAttempts}) and the database could not record it yet; it is recorded at the next pass: ${message}`;
    if (attempts >= maxAttempts) {
      const reason = storableText(`failed ${attempts} time(s), the last with: ${message}`, ERROR_TEXT_LIMIT);
      const record = { claim: row, error: message, reason, now, countsAnAttempt: true };
      if ((await this.writeOrKeep(table, row, () => deadLetter(this.context, table, record))) === undefined) logger.error(kept);
      else logger.error(`${what} dead-lettered after ${attempts} failed attempt(s): ${message}`);
      counts.deadLettered++;
      this.metrics.add(counters.deadLettered, row.sagaType);
      return;
    }
    const retryAt = new Date(now.getTime() + retryDelayMs(attempts, backoff));
    const failure = { claim: row, error: message, retryAt };
    if ((await this.writeOrKeep(table, row, () => recordFailure(this.context, table, failure))) === undefined) logger.error(kept);
    else logger.warn(`${what} failed (attempt ${attempts} of ${maxAttempts}); retrying at ${retryAt.toISOString()}: ${message}`);
    counts.failed++;
    this.metrics.add(counters.failed, row.sagaType);
  }

  /**
   * Dead-letters a row whose attempts ran out before this delivery (lost leases are counted by the claim)
   * without delivering it once more.
   */
  private async retireWithoutDelivery(table: DispatchTable, row: HeldRow, what: string, counts: Counts): Promise<void> {
    const message = row.lastError ?? 'no error recorded';
    const reason = storableText(`failed ${row.attempts} time(s), the last with: ${message}`, ERROR_TEXT_LIMIT);
    await this.retire(
      table,
      row,
      { error: message, reason, what: `${what} dead-lettered after ${row.attempts} failed attempt(s)` },
      counts,
    );
  }

  /** Dead-letters, alone and without a delivery, the claimed rows that cannot be decoded. */
  private async retireUndecodable(rows: readonly UndecodableRow[], counts: Counts): Promise<void> {
    for (const row of rows) {
      const what = `${row.table} row ${row.id} of saga ${row.sagaType}/${row.sagaId}`;
      const reason = `cannot be decoded: ${row.problem}; it was never delivered: repair or delete the row`;
      await this.retire(
        row.table,
        row,
        { error: `Undecodable: ${row.problem}`, reason, what: `${what} dead-lettered: it ${reason}` },
        counts,
      );
    }
  }

  private async retire(
    table: DispatchTable,
    row: Claim & { sagaType: string },
    retirement: { error: string; reason: string; what: string },
    counts: Counts,
  ): Promise<void> {
    try {
      const { error, reason } = retirement;
      await deadLetter(this.context, table, { claim: row, error, reason, now: this.options.clock.now(), countsAnAttempt: false });
      this.options.logger.error(retirement.what);
      counts.deadLettered++;
      this.metrics.add(FAILURE_COUNTERS[table].deadLettered, row.sagaType);
    } catch (error) {
      this.options.logger.error(`could not retire a row (${retirement.what}); it is retried after its lease: ${describe(error)}`);
    }
  }

  /**
   * Runs `work` under `correlationId` (the ambient id the step or publisher sees), failing with
   * DeliveryTimeout after `deliveryTimeoutMs` of the dispatcher's clock.
   */
  private withTimeout<T>(work: () => Promise<T>, correlationId: string | null): Promise<T> {
    return this.deadlines.race(correlationId ? runWithCorrelationId(correlationId, work) : work());
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
