import type { DatabaseContext } from '../sql/database-context.js';
import { deadLetter, giveBackUntil, recordFailure, releaseClaim } from '../sql/delivery-statements.js';
import { type Claim, type DispatchTable, ERROR_TEXT_LIMIT } from '../sql/dispatch-tables.js';
import type { SagaCounterName, SagaMetrics } from '../telemetry/saga-metrics.js';
import { storableText } from '../text/storable-text.js';
import type { UndecodableRow } from './claim-due-rows.js';
import { describeError as describe } from './describe-error.js';
import { type ResolvedDispatcherOptions, retryDelayMs } from './dispatcher-options.js';
import type { Counts, HeldRow } from './held-row.js';
import { isInfrastructureFault } from './infrastructure-fault.js';
import type { PendingOutcomes } from './pending-outcomes.js';

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

  /** A delivery threw: a database fault is given back uncharged; anything else is a failed attempt. */
  async deliveryFailed(table: DispatchTable, row: HeldRow, error: unknown, what: string, counts: Counts): Promise<void> {
    if (isInfrastructureFault(error)) await this.interrupted(table, row, error, what, counts);
    else await this.recordFailure(table, row, error, what, counts);
  }

  /** The database failed under a delivery: not the row's fault. Gives the row back, or keeps it to give back later. */
  async interrupted(table: DispatchTable, row: HeldRow, error: unknown, what: string, counts: Counts): Promise<void> {
    counts.interrupted++;
    this.options.logger.warn(`${what}: the database failed under its delivery; not counted as an attempt: ${describe(error)}`);
    await this.giveBack(table, row);
  }

  /**
   * The delivery's unit of work met concurrency conflicts past the runtime's retries: not a failed delivery (its saga
   * is busy). Gives the row back uncharged, due again after the first retry delay (`backoff.baseMs`, jittered), so a
   * hot saga's timers do not spin.
   */
  async contended(table: DispatchTable, row: HeldRow, error: unknown, what: string): Promise<void> {
    const { clock, backoff, logger } = this.options;
    const retryAt = new Date(clock.now().getTime() + retryDelayMs(1, backoff));
    logger.warn(
      `${what}: its saga stayed busy (concurrency conflicts); not counted as an attempt, retrying at ${retryAt.toISOString()}: ${describe(error)}`,
    );
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
      if ((await this.pending.writeOrKeep(table, row, () => deadLetter(this.context, table, record))) === undefined) logger.error(kept);
      else logger.error(`${what} dead-lettered after ${attempts} failed attempt(s): ${message}`);
      counts.deadLettered++;
      this.metrics.add(counters.deadLettered, row.sagaType);
      return;
    }
    const retryAt = new Date(now.getTime() + retryDelayMs(attempts, backoff));
    const failure = { claim: row, error: message, retryAt };
    if ((await this.pending.writeOrKeep(table, row, () => recordFailure(this.context, table, failure))) === undefined) logger.error(kept);
    else logger.warn(`${what} failed (attempt ${attempts} of ${maxAttempts}); retrying at ${retryAt.toISOString()}: ${message}`);
    counts.failed++;
    this.metrics.add(counters.failed, row.sagaType);
  }

  /**
   * Dead-letters a row whose attempts ran out before this delivery (lost leases are counted by the claim)
   * without delivering it once more.
   */
  async retireWithoutDelivery(table: DispatchTable, row: HeldRow, what: string, counts: Counts): Promise<void> {
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
  async retireUndecodable(rows: readonly UndecodableRow[], counts: Counts): Promise<void> {
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
}
