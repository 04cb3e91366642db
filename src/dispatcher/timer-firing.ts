import type { DispatchPassResult } from '../contracts.js';
import type { SagaPreload } from '../saga/unit-of-work/saga-preload.js';
import { missTimersOverdueBefore, missTimersSupersededInBacklog } from '../sql/catch-up-statements.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { DELIVERY_OUTCOMES, DeliverySpan } from '../telemetry/delivery-span.js';
import { SPAN_ATTRIBUTES } from '../telemetry/span-attributes.js';
import { type ClaimedTimer, claimDueTimers } from './claim-due-rows.js';
import type { DispatchParts } from './dispatch-parts.js';
import { CATCH_UP_POLICIES } from './dispatcher-options.js';
import type { HeldRow, Mutable } from './held-row.js';
import { isVersionContention } from './version-contention.js';

/** The timer counters of the pass being run. */
type TimerCounts = Mutable<DispatchPassResult['timers']>;

/**
 * Fires due timers: stamps the backlog the catch-up policy discards, claims due timers under a lease and delivers
 * each to its saga through the runtime, which stamps it `fired` in the transaction of the state change it causes.
 */
export class TimerFiring {
  constructor(private readonly parts: DispatchParts) {}

  /** Stamps the backlog the catch-up policy discards; returns how many. */
  async catchUp(now: Date): Promise<number> {
    const { context, options, metrics } = this.parts;
    const { policy, maxAgeMs, backlogAfterMs } = options.catchUp;
    let rows: { sagaType: string }[] = [];
    if (policy === CATCH_UP_POLICIES.SKIP_BEYOND_MAX_AGE) {
      rows = await missTimersOverdueBefore(context, new Date(now.getTime() - maxAgeMs), now);
    } else if (policy === CATCH_UP_POLICIES.FIRE_LATEST_PER_SAGA) {
      rows = await missTimersSupersededInBacklog(context, new Date(now.getTime() - backlogAfterMs), now);
    }
    for (const row of rows) metrics.add('timersMissed', row.sagaType);
    if (rows.length > 0) options.logger.warn('catch-up stamped overdue timers missed', { policy, missed: rows.length });
    return rows.length;
  }

  /** Claims the timers due at `now` and delivers them; resolves when every delivery ended (or was given back). */
  async claimAndFire(now: Date, signal: AbortSignal | undefined, counts: TimerCounts): Promise<void> {
    const { context, options, events, pool, leases, rest, outcomes, deliveries } = this.parts;
    const table = DISPATCH_TABLES.timer;
    const leaseUntil = new Date(now.getTime() + options.leaseMs);
    const { rows, undecodable } = await claimDueTimers(context, now, leaseUntil, options.batchSize, deliveries.claimGuard(table, now));
    counts.claimed = rows.length + undecodable.length;
    rest.noteClaim(table, now, counts.claimed === 0);
    if (counts.claimed > 0) events.emit('claimed', { table, ids: [...rows, ...undecodable].map((r) => r.id), at: now, leaseUntil });
    // The claimed timers' sagas are read with one query while the undecodable rows are retired and the start
    // marks written; each saga's first delivery takes its row (saga-preload.ts).
    const preload = options.runtime.preloadTimerSagas(rows);
    await outcomes.retireUndecodable(undecodable, counts);
    leases.hold(table, rows);
    await pool.submit(
      rows.map((timer) =>
        deliveries.task(table, timer, signal, counts, async () => {
          await this.fire(timer, counts, preload);
          return undefined;
        }),
      ),
    );
  }

  /**
   * Delivers one claimed timer in its `saga.timeout` span, a child of the trace context stored when the timer was
   * scheduled; the woken step's `saga.step` span is its child.
   */
  private async fire(claimed: ClaimedTimer, counts: TimerCounts, preload: SagaPreload): Promise<void> {
    const { options, metrics, tracer, rest, outcomes, deliveries } = this.parts;
    const { trace: stored, ...timer } = claimed;
    const row: HeldRow = timer;
    if (!(await deliveries.start(DISPATCH_TABLES.timer, row, counts))) return;
    const lateness = (options.clock.now().getTime() - timer.dueAt.getTime()) / 1000;
    const span = DeliverySpan.timeout(tracer, timer, stored, lateness);
    try {
      const result = await deliveries.withTimeout(() => options.runtime.deliverTimer(timer, preload, span.context), timer.correlationId);
      // The runtime counts stale and discarded deliveries (saga.timeout.stale / .discarded); counted here too, a
      // stale firing added 2.
      if (result.outcome === 'stale' || result.outcome === 'ignored') {
        counts.stale++;
        span.ended(result.outcome === 'stale' ? DELIVERY_OUTCOMES.STALE : DELIVERY_OUTCOMES.DISCARDED);
      } else {
        counts.fired++;
        rest.stepRan();
        metrics.add('timersFired', timer.sagaType);
        metrics.record('timerLateness', lateness, { [SPAN_ATTRIBUTES.sagaType]: timer.sagaType });
        span.ended(DELIVERY_OUTCOMES.FIRED);
      }
    } catch (error) {
      if (isVersionContention(error)) {
        // Version conflicts on a busy saga, not a failed delivery: uncharged, backed off.
        counts.contended++;
        metrics.add('timersContended', timer.sagaType);
        span.failed(DELIVERY_OUTCOMES.CONTENDED, error);
        await outcomes.contended(DISPATCH_TABLES.timer, row, error);
      } else {
        span.failed(await outcomes.deliveryFailed(DISPATCH_TABLES.timer, row, error, counts), error);
      }
    }
  }
}
