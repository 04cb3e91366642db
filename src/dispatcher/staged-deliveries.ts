import type { DispatchPassResult, StagedDelivery } from '../contracts.js';
import { HANDLE_OUTCOMES } from '../saga/handle-result.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { DELIVERY_OUTCOMES, DeliverySpan } from '../telemetry/delivery-span.js';
import { type ClaimedStagedDelivery, claimDueStagedDeliveries } from './claim-due-rows.js';
import type { DispatchParts } from './dispatch-parts.js';
import type { HeldRow, Mutable } from './held-row.js';
import { isVersionContention } from './version-contention.js';

/** The staged-delivery counters of the pass being run. */
type StagedCounts = Mutable<DispatchPassResult['inbox']>;

/**
 * Delivers the messages the application staged for its sagas (`saga_inbox`): claims the first pending row of each
 * saga under a lease and hands each to the runtime, whose unit of work stamps it in the transaction of the saga's
 * change. A saga's next row is claimed once this one left the pending set, by a later pass.
 */
export class StagedDeliveries {
  constructor(private readonly parts: DispatchParts) {}

  /** Claims the staged deliveries due at `now` and delivers them; resolves when every delivery ended (or was given back). */
  async claimAndDeliver(now: Date, signal: AbortSignal | undefined, counts: StagedCounts): Promise<void> {
    const { context, options, events, pool, leases, rest, outcomes, deliveries } = this.parts;
    const table = DISPATCH_TABLES.inbox;
    const leaseUntil = new Date(now.getTime() + options.leaseMs);
    const guard = deliveries.claimGuard(table, now);
    const { rows, undecodable } = await claimDueStagedDeliveries(context, now, leaseUntil, options.batchSize, guard);
    counts.claimed = rows.length + undecodable.length;
    rest.noteClaim(table, now, counts.claimed === 0);
    if (counts.claimed > 0) events.emit('claimed', { table, ids: [...rows, ...undecodable].map((r) => r.id), at: now, leaseUntil });
    await outcomes.retireUndecodable(undecodable, counts);
    const held = rows.map((delivery) => ({ delivery, row: heldStagedRow(delivery) }));
    leases.hold(
      table,
      held.map((h) => h.row),
    );
    await pool.submit(
      held.map(({ delivery, row }) =>
        deliveries.task(table, row, signal, counts, async () => {
          await this.deliver(delivery, row, counts);
          return undefined;
        }),
      ),
    );
  }

  /**
   * Delivers one claimed staged delivery in its `saga.deliver` span, a child of the trace context stored when it was
   * staged (and linked to it); the step's `saga.step` span is the delivery span's child.
   */
  private async deliver(claimed: ClaimedStagedDelivery, row: HeldRow, counts: StagedCounts): Promise<void> {
    const { options, metrics, tracer, rest, outcomes, deliveries } = this.parts;
    const { trace: stored, ...delivery } = claimed;
    const table = DISPATCH_TABLES.inbox;
    if (!(await deliveries.start(table, row, counts))) return;
    const span = DeliverySpan.staged(tracer, delivery, stored);
    try {
      const deliver = () => options.runtime.deliverStaged(delivery, span.context);
      const result = await deliveries.withTimeout(deliver, delivery.correlationId);
      // The runtime counts duplicates and ignored messages (saga.message.duplicate, saga.message.ignored).
      if (result.outcome === HANDLE_OUTCOMES.STALE) {
        counts.stale++;
        metrics.add('stagedStale', delivery.sagaType);
        span.ended(DELIVERY_OUTCOMES.STALE);
      } else if (result.outcome === HANDLE_OUTCOMES.DUPLICATE) {
        counts.duplicates++;
        span.ended(DELIVERY_OUTCOMES.DUPLICATE);
      } else if (result.outcome === HANDLE_OUTCOMES.IGNORED) {
        counts.ignored++;
        span.ended(DELIVERY_OUTCOMES.IGNORED);
      } else {
        counts.delivered++;
        rest.stepRan();
        metrics.add('stagedDelivered', delivery.sagaType);
        span.ended(DELIVERY_OUTCOMES.DELIVERED);
      }
    } catch (error) {
      if (isVersionContention(error)) {
        // Version conflicts on a busy saga, not a failed delivery: uncharged, backed off.
        counts.contended++;
        metrics.add('stagedContended', delivery.sagaType);
        span.failed(DELIVERY_OUTCOMES.CONTENDED, error);
        await outcomes.contended(table, row, error);
      } else {
        span.failed(await outcomes.deliveryFailed(table, row, error, counts), error);
      }
    }
  }
}

/** The held row of a claimed staged delivery: its lane is its saga (type and correlation value). */
function heldStagedRow({ id, token, sagaType, sagaKey, attempts, lastError }: StagedDelivery): HeldRow {
  return { id, token, sagaType, sagaId: sagaKey, attempts, lastError };
}
