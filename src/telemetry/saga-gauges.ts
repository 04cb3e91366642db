import { type BatchObservableCallback, type Meter, metrics, type Observable } from '@opentelemetry/api';
import { OrmClosed, untilOrmClosed } from '../orm/index.js';
import { type ActiveRowsTable, readGauges } from '../sql/count-statements.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { queryRows } from '../sql/sql-executor.js';
import { type Clock, ENDED } from '../time/clock.js';
import { describeError } from './describe-error.js';
import type { SagaLogger } from './logger.js';
import { TELEMETRY_SCOPE } from './saga-metrics.js';
import { SPAN_ATTRIBUTES } from './span-attributes.js';

/** The observable gauges a running dispatcher reports, read from the database (docs/observability.md). */
export const SAGA_GAUGES = {
  /** Saga instances not completed, per `saga.type`. */
  active: 'saga.active',
  /** Timers due and not yet delivered (pending with `available_at <= now`, in flight or not). */
  timerBacklog: 'saga.timeout.backlog',
  /** Outbox messages due and not yet published, likewise. */
  outboxBacklog: 'saga.outbox.backlog',
  /** Staged deliveries (`saga_inbox`) due and not yet delivered, likewise: those held behind their saga's first one too. */
  inboxBacklog: 'saga.inbox.backlog',
} as const;

/** A registered saga type and its table's names. */
export interface GaugedSaga {
  readonly sagaType: string;
  readonly table: ActiveRowsTable;
}

/** One reading of the database for the gauges. */
export interface GaugeReading {
  readonly active: readonly { readonly sagaType: string; readonly count: number }[];
  readonly timerBacklog: number;
  readonly outboxBacklog: number;
  readonly inboxBacklog: number;
}

/**
 * Most time a collection waits for a reading, ms of the dispatcher's clock. The SDK collects every instrument of the
 * application at once, and a pull exporter (Prometheus, whose scrapes time out after 10 s by default) loses the
 * whole scrape when one callback is slow.
 */
const GAUGE_READING_WAIT_MS = 5_000;

/** What a collection's wait ends with when the reading did not come within it. */
const LATE = Symbol('late');

/** One reading of the database, as the collections share it. */
interface Reading {
  /** When it started, by the clock. */
  readonly at: number;
  readonly value: Promise<GaugeReading | undefined>;
  settled: boolean;
  /** Whether a collection reported it (or its failure): a reading that came late goes to the next, whatever its age. */
  reported: boolean;
  /** Whether a collection that gave up on it said so (once per reading). */
  lateLogged: boolean;
}

/** What {@link SagaGauges} reads and reports with. */
export interface SagaGaugeOptions {
  readonly db: DatabaseContext;
  readonly sagas: readonly GaugedSaga[];
  /** The dispatcher's clock: "due" is due by it, and a reading is reused for `cacheMs` of it. */
  readonly clock: Clock;
  readonly logger: SagaLogger;
  /** How long a reading (or a failed one) is reused, ms. */
  readonly cacheMs: number;
}

/**
 * The observable gauges `saga.active`, `saga.timeout.backlog`, `saga.outbox.backlog` and `saga.inbox.backlog`, registered on the meter
 * provider while `start()`ed. Values are read from the database only when the SDK collects (never kept as +1/-1, never
 * polled), by one statement of indexed counts, at most once per `cacheMs`: a collection within it reports the last
 * reading, and collections at once share one reading. A failed reading is logged and reports nothing (it is not
 * thrown into the SDK), and is not tried again within `cacheMs`. A collection waits for a reading at most
 * {@link GAUGE_READING_WAIT_MS}: past it, it reports nothing, and the reading goes on for the next collection. Nothing is read while the ORM is
 * closed, and a reading waiting when it closes ends.
 */
export class SagaGauges {
  private last: Reading | undefined;
  private registered: { readonly meter: Meter; readonly callback: BatchObservableCallback; readonly observables: Observable[] } | undefined;

  constructor(private readonly options: SagaGaugeOptions) {}

  /** Registers the gauges on the meter provider registered now (a no-op meter without an SDK). */
  start(): void {
    if (this.registered) return;
    const meter = metrics.getMeter(TELEMETRY_SCOPE);
    const active = meter.createObservableGauge(SAGA_GAUGES.active, { unit: '{saga}', description: 'Saga instances not completed.' });
    const timers = meter.createObservableGauge(SAGA_GAUGES.timerBacklog, {
      unit: '{timer}',
      description: 'Timers due and not yet delivered.',
    });
    const outbox = meter.createObservableGauge(SAGA_GAUGES.outboxBacklog, {
      unit: '{message}',
      description: 'Outbox messages due and not yet published.',
    });
    const inbox = meter.createObservableGauge(SAGA_GAUGES.inboxBacklog, {
      unit: '{delivery}',
      description: 'Staged deliveries due and not yet delivered.',
    });
    const callback: BatchObservableCallback = async (result) => {
      const reading = await this.collected();
      if (!reading) return;
      for (const { sagaType, count } of reading.active) result.observe(active, count, { [SPAN_ATTRIBUTES.sagaType]: sagaType });
      result.observe(timers, reading.timerBacklog);
      result.observe(outbox, reading.outboxBacklog);
      result.observe(inbox, reading.inboxBacklog);
    };
    const observables = [active, timers, outbox, inbox];
    meter.addBatchObservableCallback(callback, observables);
    this.registered = { meter, callback, observables };
  }

  /** Unregisters the gauges: collections no longer read the database. */
  stop(): void {
    if (!this.registered) return;
    const { meter, callback, observables } = this.registered;
    meter.removeBatchObservableCallback(callback, observables);
    this.registered = undefined;
  }

  /**
   * The reading a collection reports: the one in flight, the last one if no collection reported it yet or it is
   * within `cacheMs`, or a new one.
   */
  read(): Promise<GaugeReading | undefined> {
    return this.current().value;
  }

  private current(): Reading {
    const now = this.options.clock.now().getTime();
    const last = this.last;
    // A clock set back (now before the last reading) expires it.
    if (last && (!last.settled || !last.reported || (now >= last.at && now - last.at < this.options.cacheMs))) return last;
    const current: Reading = { at: now, value: this.readDatabase(new Date(now)), settled: false, reported: false, lateLogged: false };
    void current.value.then(() => {
      current.settled = true;
    });
    this.last = current;
    return current;
  }

  /** What one collection reports: the current reading if it comes within the wait, else nothing (it goes on). */
  private async collected(): Promise<GaugeReading | undefined> {
    const { clock, logger } = this.options;
    const waitMs = GAUGE_READING_WAIT_MS;
    const reading = this.current();
    const giveUp = new AbortController();
    const value = await Promise.race([reading.value, clock.sleep(waitMs, giveUp.signal).then((): typeof LATE => LATE)]);
    giveUp.abort(ENDED);
    if (value !== LATE) {
      reading.reported = true;
      return value;
    }
    if (!reading.lateLogged) {
      reading.lateLogged = true;
      logger.warn(
        `gauges: reading active sagas and backlogs has not ended after ${waitMs} ms (no free pooled connection, or the database does not answer); collections report none until it ends`,
      );
    }
    return undefined;
  }

  private async readDatabase(now: Date): Promise<GaugeReading | undefined> {
    const { db, sagas, logger, cacheMs } = this.options;
    if (db.orm.closed) return undefined;
    // Two sagas may share a state entity (and so a table): it is counted once, and reported for each.
    const tables = [...new Set(sagas.map((saga) => saga.table))];
    try {
      // A reading waiting for a connection when the ORM closes ends: MikroORM 7's pool never serves it then, 6's only
      // once a connection in use comes back.
      const query = queryRows<Record<string, number | string>>(db.autocommit, readGauges(db, tables, now));
      const [row] = await untilOrmClosed(db.autocommit, query, () => undefined);
      const count = (column: string) => Number(row?.[column] ?? 0);
      return {
        active: sagas.map(({ sagaType, table }) => ({ sagaType, count: count(`s${tables.indexOf(table)}`) })),
        timerBacklog: count('timers'),
        outboxBacklog: count('outbox'),
        inboxBacklog: count('inbox'),
      };
    } catch (error) {
      if (!(error instanceof OrmClosed)) {
        logger.warn('gauges: reading active sagas and backlogs failed; none reported until the cache ends', {
          cacheMs,
          error: describeError(error),
        });
      }
      return undefined;
    }
  }
}
