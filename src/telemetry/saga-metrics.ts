import { type Counter, metrics } from '@opentelemetry/api';

/** Name of the OpenTelemetry meter (and tracer) the library reports on. */
export const TELEMETRY_SCOPE = 'mikro-orm-saga';

/**
 * Every counter the library keeps, with its OpenTelemetry instrument name. Each event is counted in one place:
 * what a unit of work decides (started, handled, ignored, completed, stale and discarded timer deliveries, ...) and
 * what the application stages (`saga.inbox.staged`, `saga.outbox.staged`: staging calls, whether or not the
 * application's transaction then committed) by the runtime; what a dispatcher decides (fired, missed, failed,
 * dead-lettered, published, staged deliveries delivered) by the dispatcher.
 */
export const SAGA_COUNTERS = {
  started: 'saga.started',
  handled: 'saga.handled',
  duplicates: 'saga.duplicate',
  ignoredNoInstance: 'saga.ignored.no_instance',
  ignoredCompleted: 'saga.ignored.completed',
  completed: 'saga.completed',
  concurrencyConflicts: 'saga.concurrency_conflict',
  timersScheduled: 'saga.timeout.scheduled',
  timersCancelled: 'saga.timeout.canceled',
  timersFired: 'saga.timeout.fired',
  timersStale: 'saga.timeout.stale',
  timersDiscarded: 'saga.timeout.discarded',
  timersMissed: 'saga.timeout.missed',
  timersFailed: 'saga.timeout.failed',
  timersContended: 'saga.timeout.contended',
  timersDeadLettered: 'saga.timeout.dead_lettered',
  messagesSent: 'saga.outbox.sent',
  messagesPublished: 'saga.outbox.published',
  messagesFailed: 'saga.outbox.failed',
  messagesDeadLettered: 'saga.outbox.dead_lettered',
  messagesStaged: 'saga.outbox.staged',
  deliveriesStaged: 'saga.inbox.staged',
  stagedDelivered: 'saga.inbox.delivered',
  stagedStale: 'saga.inbox.stale',
  stagedFailed: 'saga.inbox.failed',
  stagedContended: 'saga.inbox.contended',
  stagedDeadLettered: 'saga.inbox.dead_lettered',
} as const;

/** A counter of {@link SAGA_COUNTERS}. */
export type SagaCounterName = keyof typeof SAGA_COUNTERS;

/** Totals since the runtime (or dispatcher) was created, per counter. */
export type SagaStats = { readonly [K in SagaCounterName]: number };

/**
 * Counts what happened, both in memory (`stats()`, handy in tests and health endpoints) and on the
 * OpenTelemetry meter `mikro-orm-saga`, tagged `saga.type` (a no-op unless the app registers an SDK).
 */
export class SagaMetrics {
  private readonly totals = new Map<SagaCounterName, number>();
  private readonly counters = new Map<SagaCounterName, Counter>();

  add(name: SagaCounterName, sagaType: string, value = 1): void {
    if (value === 0) return;
    this.totals.set(name, (this.totals.get(name) ?? 0) + value);
    let counter = this.counters.get(name);
    if (!counter) {
      counter = metrics.getMeter(TELEMETRY_SCOPE).createCounter(SAGA_COUNTERS[name]);
      this.counters.set(name, counter);
    }
    counter.add(value, { 'saga.type': sagaType });
  }

  stats(): SagaStats {
    const result = {} as Record<SagaCounterName, number>;
    for (const name of Object.keys(SAGA_COUNTERS) as SagaCounterName[]) result[name] = this.totals.get(name) ?? 0;
    return result;
  }
}
