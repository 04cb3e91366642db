import type { DatabaseContext } from '../sql/database-context.js';
import { deadLetter, giveBackUntil, recordFailure, releaseClaim } from '../sql/delivery-statements.js';
import { type Claim, type DispatchTable, ERROR_TEXT_LIMIT } from '../sql/dispatch-tables.js';
import { DELIVERY_OUTCOMES } from '../telemetry/delivery-span.js';
import { describeError as describe } from '../telemetry/describe-error.js';
import type { SagaCounterName, SagaMetrics } from '../telemetry/saga-metrics.js';
import { storableText } from '../text/storable-text.js';
import type { UndecodableRow } from './claim-due-rows.js';
import { type ResolvedDispatcherOptions, retryDelayMs } from './dispatcher-options.js';
import { type Counts, type HeldRow, rowFields } from './held-row.js';
import { isInfrastructureFault } from './infrastructure-fault.js';
import type { PendingOutcomes } from './pending-outcomes.js';

/** What became of a row whose delivery threw. */
export type FailedDeliveryOutcome =
  | typeof DELIVERY_OUTCOMES.INTERRUPTED
  | typeof DELIVERY_OUTCOMES.FAILED
  | typeof DELIVERY_OUTCOMES.DEAD_LETTERED;

/** The counters a failed delivery moves, per table. */
const FAILURE_COUNTERS = {
  saga_timer: { failed: 'timersFailed', deadLettered: 'timersDeadLettered' },
  saga_outbox: { failed: 'messagesFailed', deadLettered: 'messagesDeadLettered' },
  saga_inbox: { failed: 'stagedFailed', deadLettered: 'stagedDeadLettered' },
} as const satisfies Record<DispatchTable, { failed: SagaCounterName; deadLettered: SagaCounterName }>;

/**
 * Writes what became of a held row that was not delivered: a failed attempt (backed off, or dead-lettered on the
 * last), a row retired without a delivery, or a claim given back. An outcome the database cannot take is kept in
 * `pending` and written at the next pass.
 */
export class RowOutcomes {
  constructor(
    private readonly context: DatabaseContext,
    private readonly options: ResolvedDispatcherOptions,
    private readonly metrics: SagaMetrics,
    private readonly pending: PendingOutcomes,
  ) {}

  /** A delivery threw: a database fault is given back uncharged; anything else is a failed attempt. Says which. */
  async deliveryFailed(table: DispatchTable, row: HeldRow, error: unknown, counts: Counts): Promise<FailedDeliveryOutcome> {
    if (!isInfrastructureFault(error)) return this.recordFailure(table, row, error, counts);
    await this.interrupted(table, row, error, counts);
    return DELIVERY_OUTCOMES.INTERRUPTED;
  }

  /** The database failed under a delivery: not the row's fault. Gives the row back, or keeps it to give back later. */
  async interrupted(table: DispatchTable, row: HeldRow, error: unknown, counts: Counts): Promise<void> {
    counts.interrupted++;
    this.options.logger.warn('delivery interrupted: the database failed under it; given back, not counted as an attempt', {
      ...rowFields(table, row),
      error: describe(error),
    });
    await this.giveBack(table, row);
  }

  /**
   * The delivery's unit of work met concurrency conflicts past the runtime's retries: not a failed delivery (its saga
   * is busy). Gives the row back uncharged, due again after the first retry delay (`backoff.baseMs`, jittered), so a
   * hot saga's timers do not spin.
   */
  async contended(table: DispatchTable, row: HeldRow, error: unknown): Promise<void> {
    const { clock, backoff, logger } = this.options;
    const retryAt = new Date(clock.now().getTime() + retryDelayMs(1, backoff));
    logger.warn('delivery given back: its saga stayed busy (concurrency conflicts); not counted as an attempt', {
      ...rowFields(table, row),
      retryAt: retryAt.toISOString(),
      error: describe(error),
    });
    await this.pending.writeOrKeep(table, row, () => giveBackUntil(this.context, table, row, retryAt));
  }

  /** Releases a claim; when the database cannot be reached, remembers it for the next pass. */
  async giveBack(table: DispatchTable, claim: Claim): Promise<void> {
    // Without it the lease runs out and the row is re-claimed; a started row would then be charged.
    await this.pending.writeOrKeep(table, claim, () => releaseClaim(this.context, table, { id: claim.id, token: claim.token }));
  }

  /**
   * Counts a failed delivery: backs the row off, or dead-letters it on its last allowed attempt. When the
   * database cannot take it, the record is kept and written at the next pass.
   */
  private async recordFailure(table: DispatchTable, row: HeldRow, error: unknown, counts: Counts): Promise<FailedDeliveryOutcome> {
    const { clock, maxAttempts, backoff, logger } = this.options;
    const attempts = row.attempts + 1;
    const message = storableText(describe(error), ERROR_TEXT_LIMIT);
    const now = clock.now();
    const counters = FAILURE_COUNTERS[table];
    const fields = { ...rowFields(table, row), attempt: attempts, maxAttempts, error: message };
    const kept = 'delivery failed and the database could not record it yet; it is recorded at the next pass';
    if (attempts >= maxAttempts) {
      const reason = storableText(`failed ${attempts} time(s), the last with: ${message}`, ERROR_TEXT_LIMIT);
      const record = { claim: row, error: message, reason, now, countsAnAttempt: true };
      if ((await this.pending.writeOrKeep(table, row, () => deadLetter(this.context, table, record))) === undefined)
        logger.error(kept, fields);
      else logger.error('delivery failed on its last allowed attempt: dead-lettered', fields);
      counts.deadLettered++;
      this.metrics.add(counters.deadLettered, row.sagaType);
      return DELIVERY_OUTCOMES.DEAD_LETTERED;
    }
    const retryAt = new Date(now.getTime() + retryDelayMs(attempts, backoff));
    const failure = { claim: row, error: message, retryAt };
    if ((await this.pending.writeOrKeep(table, row, () => recordFailure(this.context, table, failure))) === undefined)
      logger.error(kept, fields);
    else logger.warn('delivery failed; retried after a backoff', { ...fields, retryAt: retryAt.toISOString() });
    counts.failed++;
    this.metrics.add(counters.failed, row.sagaType);
    return DELIVERY_OUTCOMES.FAILED;
  }

  /**
   * Dead-letters a row whose attempts ran out before this delivery (lost leases are counted by the claim)
   * without delivering it once more.
   */
  async retireWithoutDelivery(table: DispatchTable, row: HeldRow, counts: Counts): Promise<void> {
    const message = row.lastError ?? 'no error recorded';
    const reason = storableText(`failed ${row.attempts} time(s), the last with: ${message}`, ERROR_TEXT_LIMIT);
    await this.retire(
      table,
      row,
      {
        error: message,
        reason,
        log: 'dead-lettered: its attempts ran out before this delivery',
        fields: { ...rowFields(table, row), attempts: row.attempts, error: message },
      },
      counts,
    );
  }

  /** Dead-letters, alone and without a delivery, the claimed rows that cannot be decoded. */
  async retireUndecodable(rows: readonly UndecodableRow[], counts: Counts): Promise<void> {
    for (const row of rows) {
      const reason = `cannot be decoded: ${row.problem}; it was never delivered: repair or delete the row`;
      const { table, id, sagaType, sagaId, problem } = row;
      await this.retire(
        table,
        row,
        {
          error: `Undecodable: ${row.problem}`,
          reason,
          log: 'dead-lettered: the row cannot be decoded and was never delivered; repair or delete it',
          fields: { table, id, sagaType, sagaId, problem },
        },
        counts,
      );
    }
  }

  private async retire(
    table: DispatchTable,
    row: Claim & { sagaType: string },
    retirement: { error: string; reason: string; log: string; fields: Record<string, unknown> },
    counts: Counts,
  ): Promise<void> {
    try {
      const { error, reason } = retirement;
      await deadLetter(this.context, table, { claim: row, error, reason, now: this.options.clock.now(), countsAnAttempt: false });
      this.options.logger.error(retirement.log, retirement.fields);
      counts.deadLettered++;
      this.metrics.add(FAILURE_COUNTERS[table].deadLettered, row.sagaType);
    } catch (error) {
      this.options.logger.error('could not dead-letter a row; it is claimed again after its lease', {
        ...retirement.fields,
        error: describe(error),
      });
    }
  }
}
