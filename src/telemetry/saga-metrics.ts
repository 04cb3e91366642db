import { type Counter, type Histogram, type MetricAttributes, metrics } from '@opentelemetry/api';
import { SPAN_ATTRIBUTES } from './span-attributes.js';

/** Name of the OpenTelemetry meter (and tracer) the library reports on. */
export const TELEMETRY_SCOPE = 'mikro-orm-saga';

/**
 * Every counter the library keeps, with its OpenTelemetry instrument name. Each event is counted in one place:
 * what a unit of work decides (started, handled, ignored, completed, stale and discarded timer deliveries, ...) and
 * what the application stages (`saga.inbox.staged`, `saga.outbox.staged`: staging calls, whether or not the
 * application's transaction then committed) by the runtime; what a dispatcher decides (fired, missed, failed,
 * dead-lettered, published, staged deliveries delivered) by the dispatcher.
 * `ignoredNoInstance` and `ignoredCompleted` are one instrument, told apart by its `saga.ignore.reason` attribute.
 */
export const SAGA_COUNTERS = {
  started: 'saga.started',
  handled: 'saga.message.handled',
  duplicates: 'saga.message.duplicate',
  ignoredNoInstance: 'saga.message.ignored',
  ignoredCompleted: 'saga.message.ignored',
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

/** The histograms the library records, in seconds. */
export const SAGA_HISTOGRAMS = {
  /** How long handling one message took, conflicts retried included (`runtime.handle()`, `route()`, a timer's step). */
  stepDuration: 'saga.step.duration',
  /** How late a fired timer was delivered: the dispatcher's clock at the delivery minus the timer's `due_at`. */
  timerLateness: 'saga.timeout.lateness',
  /** How long an outbox message waited: the dispatcher's clock once the publisher resolved minus the row's `created_at`. */
  outboxLatency: 'saga.outbox.latency',
} as const;

/** A histogram of {@link SAGA_HISTOGRAMS}. */
export type SagaHistogramName = keyof typeof SAGA_HISTOGRAMS;

/** What each counter counts, in UCUM annotation units as the semantic conventions write them. */
const COUNTER_UNITS: Readonly<Record<SagaCounterName, { readonly unit: string; readonly description: string }>> = {
  started: { unit: '{saga}', description: 'Saga instances a start message created.' },
  handled: { unit: '{message}', description: 'Messages a step ran for on an existing instance.' },
  duplicates: { unit: '{message}', description: 'Messages whose id the instance had handled before; nothing was written.' },
  ignoredNoInstance: { unit: '{message}', description: 'Messages no step ran for, by saga.ignore.reason.' },
  ignoredCompleted: { unit: '{message}', description: 'Messages no step ran for, by saga.ignore.reason.' },
  completed: { unit: '{saga}', description: 'Saga instances a step completed.' },
  concurrencyConflicts: { unit: '{conflict}', description: 'Units of work re-run because another committed first.' },
  timersScheduled: { unit: '{timer}', description: 'Timers written, new or replaced.' },
  timersCancelled: { unit: '{timer}', description: 'Pending timers deleted: cancelled, left step, completion.' },
  timersFired: { unit: '{timer}', description: 'Timers delivered; their step committed with the fired stamp.' },
  timersStale: { unit: '{timer}', description: 'Timer deliveries dropped: cancelled, replaced or fired meanwhile.' },
  timersDiscarded: { unit: '{timer}', description: 'Timers delivered to a saga that is gone or completed.' },
  timersMissed: { unit: '{timer}', description: 'Overdue timers the catch-up policy stamped missed.' },
  timersFailed: { unit: '{timer}', description: 'Failed timer deliveries, backed off.' },
  timersContended: { unit: '{timer}', description: 'Timer deliveries given back because their saga stayed busy.' },
  timersDeadLettered: { unit: '{timer}', description: 'Timers retired after too many failed deliveries.' },
  messagesSent: { unit: '{message}', description: 'Outbox rows written.' },
  messagesPublished: { unit: '{message}', description: 'Outbox messages the publisher accepted.' },
  messagesFailed: { unit: '{message}', description: 'Failed publishes, backed off.' },
  messagesDeadLettered: { unit: '{message}', description: 'Outbox messages retired after too many failed publishes.' },
  messagesStaged: {
    unit: '{message}',
    description: 'Outgoing messages the application staged (stageMessage calls, whether or not its transaction committed).',
  },
  deliveriesStaged: {
    unit: '{message}',
    description: 'Saga deliveries the application staged (stageDelivery calls, whether or not its transaction committed).',
  },
  stagedDelivered: { unit: '{message}', description: 'Staged deliveries a step ran for; their stamp committed with the step.' },
  stagedStale: { unit: '{message}', description: 'Staged deliveries dropped: their claim was taken over meanwhile.' },
  stagedFailed: { unit: '{message}', description: 'Failed staged deliveries, backed off.' },
  stagedContended: { unit: '{message}', description: 'Staged deliveries given back because their saga stayed busy.' },
  stagedDeadLettered: { unit: '{message}', description: 'Staged deliveries retired after too many failed deliveries.' },
};

/** The attributes a counter adds to `saga.type`: the two ignored counters are one instrument. */
const COUNTER_ATTRIBUTES: Partial<Record<SagaCounterName, MetricAttributes>> = {
  ignoredNoInstance: { [SPAN_ATTRIBUTES.ignoreReason]: 'no-instance' },
  ignoredCompleted: { [SPAN_ATTRIBUTES.ignoreReason]: 'completed' },
};

/** Each histogram's description and bucket boundaries (seconds), given to the SDK as advice. */
const HISTOGRAMS: Readonly<Record<SagaHistogramName, { readonly description: string; readonly buckets: readonly number[] }>> = {
  stepDuration: {
    description: 'Time to handle one message, conflicts retried included.',
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  },
  timerLateness: {
    description: 'Delivery time of a fired timer minus its due time.',
    buckets: [0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 21600, 86400],
  },
  outboxLatency: {
    description: 'Time from an outbox row written to its message published.',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  },
};

/**
 * Counts what happened, both in memory (`stats()`, handy in tests and health endpoints) and on the
 * OpenTelemetry meter `mikro-orm-saga`, tagged `saga.type` (a no-op unless the app registers an SDK), and records
 * the histograms. Each instrument is created at its first use, from the meter provider registered then.
 */
export class SagaMetrics {
  private readonly totals = new Map<SagaCounterName, number>();
  private readonly counters = new Map<string, Counter>();
  private readonly histograms = new Map<SagaHistogramName, Histogram>();

  add(name: SagaCounterName, sagaType: string, value = 1): void {
    if (value === 0) return;
    this.totals.set(name, (this.totals.get(name) ?? 0) + value);
    const instrument = SAGA_COUNTERS[name];
    let counter = this.counters.get(instrument);
    if (!counter) {
      const { unit, description } = COUNTER_UNITS[name];
      counter = metrics.getMeter(TELEMETRY_SCOPE).createCounter(instrument, { unit, description });
      this.counters.set(instrument, counter);
    }
    counter.add(value, { [SPAN_ATTRIBUTES.sagaType]: sagaType, ...COUNTER_ATTRIBUTES[name] });
  }

  /** Records `seconds` (a negative reading, from a clock set back, as 0) on the histogram `name`. */
  record(name: SagaHistogramName, seconds: number, attributes: MetricAttributes): void {
    let histogram = this.histograms.get(name);
    if (!histogram) {
      const { description, buckets } = HISTOGRAMS[name];
      histogram = metrics.getMeter(TELEMETRY_SCOPE).createHistogram(SAGA_HISTOGRAMS[name], {
        unit: 's',
        description,
        advice: { explicitBucketBoundaries: [...buckets] },
      });
      this.histograms.set(name, histogram);
    }
    histogram.record(Math.max(0, seconds), attributes);
  }

  stats(): SagaStats {
    const result = {} as Record<SagaCounterName, number>;
    for (const name of Object.keys(SAGA_COUNTERS) as SagaCounterName[]) result[name] = this.totals.get(name) ?? 0;
    return result;
  }
}
