import { runWithCorrelationId, runWithoutCorrelationId } from '../correlation/correlation-context.js';
import type { ClaimGuard } from '../sql/claim-statements.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { markDeliveriesStarted, markDeliveryStartedWaiting } from '../sql/delivery-statements.js';
import { DISPATCH_TABLES, type DispatchTable, diedWithItsDispatcher } from '../sql/dispatch-tables.js';
import { CoalescedWrite } from './coalesced-write.js';
import { DeliveryDeadlines } from './delivery-deadlines.js';
import type { DeliveryTask } from './delivery-pool.js';
import type { ResolvedDispatcherOptions } from './dispatcher-options.js';
import type { Counts, HeldRow } from './held-row.js';
import type { LeaseKeeper } from './lease-keeper.js';
import type { PendingOutcomes } from './pending-outcomes.js';
import type { RowOutcomes } from './row-outcomes.js';

/** A published row's stamp, written after its delivery ended (the row stays held until it is written or kept). */
export interface Stamping {
  readonly stamped: Promise<void>;
}

/** What {@link RowDeliveries} works with: the dispatcher's statements, leases and kept outcomes. */
export interface RowDeliveryParts {
  readonly context: DatabaseContext;
  readonly options: ResolvedDispatcherOptions;
  readonly leases: LeaseKeeper;
  readonly pending: PendingOutcomes;
  readonly outcomes: RowOutcomes;
}

/**
 * The life of a held row's delivery, whichever its table: what a claim leaves alone, the pool task that runs the
 * delivery, the start mark written before it, and the deadline and correlation id it runs under.
 */
export class RowDeliveries {
  private readonly deadlines: DeliveryDeadlines;
  /** Start marks of the deliveries starting together, per table: one statement. */
  private readonly starts: Record<DispatchTable, CoalescedWrite>;

  constructor(private readonly parts: RowDeliveryParts) {
    const { context, options } = parts;
    const { clock } = options;
    this.deadlines = new DeliveryDeadlines(clock, options.deliveryTimeoutMs);
    const starts = (table: DispatchTable) => new CoalescedWrite((claims) => markDeliveriesStarted(context, table, claims, clock.now()));
    this.starts = {
      saga_timer: starts(DISPATCH_TABLES.timer),
      saga_outbox: starts(DISPATCH_TABLES.outbox),
      saga_inbox: starts(DISPATCH_TABLES.inbox),
    };
  }

  /**
   * What a claim at `now` leaves alone: rows this dispatcher holds (after an outage longer than the lease
   * they look free, but their delivery is still running here) or whose outcome it has yet to write, and rows whose
   * delivery elsewhere started less than `deliveryTimeoutMs` ago (it may still be running: its dispatcher may have
   * lost the database, not its process).
   */
  claimGuard(table: DispatchTable, now: Date): ClaimGuard {
    const pending = this.parts.pending.ids(table);
    return {
      exclude: [...this.parts.leases.heldIds(table), ...pending],
      startedBefore: new Date(now.getTime() - this.parts.options.deliveryTimeoutMs),
    };
  }

  /**
   * Wraps one held row's delivery for the pool. Rows of one saga share a lane. A row whose last delivery
   * died with its process is delivered alone: if it kills this process too, it takes no other delivery
   * with it, and only it is charged for the lost lease. A row the claim marked started is delivered even
   * when the dispatcher is stopping meanwhile: it started.
   */
  task(
    table: DispatchTable,
    row: HeldRow,
    signal: AbortSignal | undefined,
    counts: Counts,
    deliver: () => Promise<Stamping | undefined>,
    startedAtClaim = false,
  ): DeliveryTask {
    /** The published stamp still being written when the delivery ended: the row stays held until it is. */
    let stamping: Promise<void> | undefined;
    const { leases, outcomes } = this.parts;
    return {
      lane: `${table}\u0000${row.sagaType}\u0000${row.sagaId}`,
      group: table,
      isolated: diedWithItsDispatcher(row.lastError),
      run: async () => {
        if (!signal?.aborted || startedAtClaim) {
          stamping = (await deliver())?.stamped;
          return;
        }
        counts.released++;
        await outcomes.giveBack(table, row);
      },
      // A row whose stamp is being written is still this dispatcher's: its lease is renewed and the claims of
      // the passes started meanwhile leave it alone (once the stamp failed it is kept in the pending outcomes,
      // which they leave alone too); let go earlier, it would be claimed and published again once its lease ran out.
      settle: () => {
        if (stamping) void stamping.finally(() => leases.let(table, row));
        else leases.let(table, row);
      },
    };
  }

  /**
   * Decides whether a held row's delivery starts, and records its start (its own statement, before the step
   * or publisher runs, so a process that dies from here on is charged for it). A row another transaction holds locked
   * is marked by a statement of its own that waits for it: it holds this row's delivery slot and its saga's later
   * rows, never the start marks of other rows. Not started: a row taken over
   * meanwhile (lost), one whose attempts ran out on lost leases (dead-lettered without a delivery), or one
   * the database could not mark (interrupted, not charged).
   */
  async start(table: DispatchTable, row: HeldRow, counts: Counts): Promise<boolean> {
    const { leases, outcomes, options } = this.parts;
    if (leases.isLost(table, row)) {
      counts.lost++;
      return false;
    }
    if (row.attempts >= options.maxAttempts) {
      // Its deliveries kept dying with their dispatcher: the claim counted the last one.
      await outcomes.retireWithoutDelivery(table, row, counts);
      return false;
    }
    try {
      const outcome = await this.starts[table].submit(row);
      if (outcome === 'written') return true;
      if (outcome === 'busy' && (await markDeliveryStartedWaiting(this.parts.context, table, row, options.clock.now()))) return true;
      counts.lost++;
    } catch (error) {
      await outcomes.interrupted(table, row, error, counts);
    }
    return false;
  }

  /**
   * Runs `work` under `correlationId` (the ambient id the step or publisher sees; none when null), failing with
   * DeliveryTimeout after `deliveryTimeoutMs` of the dispatcher's clock.
   */
  withTimeout<T>(work: () => Promise<T>, correlationId: string | null): Promise<T> {
    // Without an id of its own, the delivery runs under none: not under the id of the caller of start() or runOnce().
    return this.deadlines.race(correlationId ? runWithCorrelationId(correlationId, work) : runWithoutCorrelationId(work));
  }
}
