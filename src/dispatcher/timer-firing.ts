import type { DispatchPassResult, TimerDelivery } from '../contracts.js';
import type { SagaPreload } from '../saga/unit-of-work/saga-preload.js';
import { missTimersOverdueBefore, missTimersSupersededInBacklog } from '../sql/catch-up-statements.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { claimDueTimers } from './claim-due-rows.js';
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
    if (rows.length > 0) options.logger.warn(`catch-up (${policy}) stamped ${rows.length} overdue timer(s) missed`);
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

  private async fire(timer: TimerDelivery, counts: TimerCounts, preload: SagaPreload): Promise<void> {
    const { options, metrics, rest, outcomes, deliveries } = this.parts;
    const row: HeldRow = timer;
    const what = `timer '${timer.name}' of saga ${timer.sagaType}/${timer.sagaId}`;
    if (!(await deliveries.start(DISPATCH_TABLES.timer, row, what, counts))) return;
    try {
      const result = await deliveries.withTimeout(() => options.runtime.deliverTimer(timer, preload), timer.correlationId);
      // The runtime counts stale and discarded deliveries (saga.timeout.stale / .discarded); counted here too, a
      // stale firing added 2.
      if (result.outcome === 'stale' || result.outcome === 'ignored') {
        counts.stale++;
      } else {
        counts.fired++;
        rest.stepRan();
        metrics.add('timersFired', timer.sagaType);
      }
    } catch (error) {
      if (isVersionContention(error)) {
        // Version conflicts on a busy saga, not a failed delivery: uncharged, backed off.
        counts.contended++;
        metrics.add('timersContended', timer.sagaType);
        await outcomes.contended(DISPATCH_TABLES.timer, row, error, what);
      } else {
        await outcomes.deliveryFailed(DISPATCH_TABLES.timer, row, error, what, counts);
      }
    }
  }
}
