import type { EntityManager } from '@mikro-orm/core';
import { SagaDefinitionError } from '../errors.js';
import type { AnySagaDefinition } from '../saga/registered-saga.js';
import { SagaRuntime } from '../saga/saga-runtime.js';
import { DISPATCH_TABLES } from '../sql/dispatch-tables.js';
import { resolveLogger, type SagaLogger, silentLogger } from '../telemetry/logger.js';
import type { Clock } from '../time/clock.js';
import { cancelTimers, requeueRows, rescheduleTimers } from './dispatch-row-commands.js';
import { listDispatchRows } from './dispatch-row-queries.js';
import { asOperation } from './operation-failure.js';
import { OPERATIONS_DEFAULTS } from './operation-input.js';
import {
  type ActiveSagaCount,
  type BulkResult,
  type CancelStatus,
  type DispatchRowQuery,
  type InboxRow,
  ITEM_STATUSES,
  type ItemStatus,
  type OutboxRow,
  type Page,
  type PurgeOptions,
  type PurgeReport,
  type RequeueStatus,
  type RescheduleStatus,
  type SagaChange,
  type SagaChangeRequest,
  type SagaDetail,
  type SagaListQuery,
  type SagaLookup,
  type SagaSummary,
  type TimerRow,
} from './operation-types.js';
import type { OperationsContext } from './operations-context.js';
import { purge } from './retention.js';
import { changeSaga } from './saga-commands.js';
import { countActiveSagas, getSaga, listSagas } from './saga-queries.js';
import { sagaTablesOf } from './saga-table.js';

/** Options of {@link SagaOperations}: a runtime, or what one is built from. */
export type SagaOperationsOptions =
  | {
      /** The application's runtime: its EntityManager, sagas, clock, message-id retention and logger are used. */
      readonly runtime: SagaRuntime;
      /** Where changes are reported (info; warn when a row failed). Default: the runtime's `logger`. */
      readonly logger?: SagaLogger;
    }
  | {
      /** The application's EntityManager (`orm.em`). */
      readonly em: EntityManager;
      /** The saga definitions an operator may look at; other saga types are unknown to these operations. */
      readonly sagas: readonly AnySagaDefinition[];
      /** "Now" for lease status, force-complete and reopen stamps, requeue. Default: the system clock. */
      readonly clock?: Clock;
      /** How long handled message ids are kept (`purge({ expiredMessageIds })`), ms. Default 7 days, as the runtime's. */
      readonly messageIds?: { readonly retentionMs?: number };
      /** Where changes are reported (info; warn when a row failed). Default `consoleLogger('warn')`. */
      readonly logger?: SagaLogger;
    };

/**
 * What an operator does to sagas, timers, outbox rows and staged deliveries: find, look at, force-complete or reopen a
 * saga; list, requeue, cancel and reschedule timers; list and requeue outbox rows and staged deliveries; purge what
 * retention allows. Every filter,
 * order and limit runs in SQL on the tables MikroORM's metadata names; nothing loads a whole table.
 * A database failure is a `SagaSchemaError` (`SCHEMA_INVALID`: a table or column is missing) or a
 * `SagaPersistenceError` (`DATABASE_UNREACHABLE`, `PERSISTENCE_FAILED`) naming the call, never SQL or values. A row
 * holding a value the library cannot read (PostgreSQL's infinity in a timestamp) is `STORED_VALUE_INVALID`, naming
 * the row and column, as the runtime reports it. An input whose getter throws is `OPTION_INVALID`.
 *
 * ```ts
 * const ops = new SagaOperations({ runtime });
 * const dead = await ops.listTimers({ status: 'dead_lettered', limit: 50 });
 * await ops.requeueTimers(dead.items.map((t) => t.id));
 * ```
 */
export class SagaOperations {
  /** The defaults of the operator API's inputs. */
  static readonly defaults = OPERATIONS_DEFAULTS;
  private readonly ops: OperationsContext;
  private readonly logger: SagaLogger;

  /** @throws SagaDefinitionError when a saga's entity is not registered, or an option is out of range. */
  constructor(options: SagaOperationsOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new SagaDefinitionError('OPTION_INVALID', 'SagaOperations needs { runtime } or { em, sagas }.');
    }
    // Checked first, so that a wrong one is named as this option, not the runtime's.
    const logger = options.logger === undefined ? undefined : resolveLogger(options.logger, 'SagaOperations', silentLogger);
    const runtime =
      'runtime' in options
        ? options.runtime
        : new SagaRuntime({
            em: options.em,
            sagas: options.sagas,
            clock: options.clock,
            messageIds: options.messageIds,
            logger,
            verifySchema: false,
          });
    if (!(runtime instanceof SagaRuntime))
      throw new SagaDefinitionError('OPTION_INVALID', "SagaOperations: 'runtime' must be a SagaRuntime.");
    this.logger = logger ?? runtime.options.logger;
    this.ops = {
      db: runtime.context,
      runtime,
      clock: runtime.options.clock,
      sagas: sagaTablesOf(runtime.context, runtime.options.sagas),
    };
  }

  /** The saga types these operations know, in registration order. */
  get sagaTypes(): string[] {
    return [...this.ops.sagas.keys()];
  }

  /**
   * Sagas of one type (or all registered types, merged), newest first (`created_at`, then type, then id),
   * filtered, ordered and limited in SQL; walk further pages with `nextCursor`.
   * @throws SagaValidationError `OPTION_INVALID` (limit, dates, filters), `SAGA_TYPE_UNKNOWN`, `CURSOR_INVALID`,
   *   `CORRELATION_INVALID`.
   */
  listSagas(query: SagaListQuery): Promise<Page<SagaSummary>> {
    return asOperation('listSagas', () => listSagas(this.ops, query));
  }

  /**
   * One saga by id or correlation value: its state, pending and recent timers, outbox rows and handled message ids.
   * @returns undefined when there is no such saga.
   */
  getSaga(lookup: SagaLookup): Promise<SagaDetail | undefined> {
    return asOperation('getSaga', () => getSaga(this.ops, lookup));
  }

  /** The number of active sagas of each registered type (one count over each table's active-row index). */
  countActiveSagas(): Promise<ActiveSagaCount[]> {
    return asOperation('countActiveSagas', () => countActiveSagas(this.ops));
  }

  /**
   * Completes an active saga now, deletes its pending timers and writes a `SagaForceCompleted` audit message to
   * the outbox, in one transaction guarded by its version.
   * @throws SagaValidationError `SAGA_NOT_FOUND`, `SAGA_STATE_CONFLICT` (already completed), `OPTION_INVALID`.
   * @throws SagaConcurrencyError `VERSION_CONFLICT`: the saga moved on (or is not at `expectedVersion`); nothing was written.
   */
  forceComplete(request: SagaChangeRequest): Promise<SagaChange> {
    return this.change('forceComplete', () => changeSaga(this.ops, 'forceComplete', request), sagaChangeFields);
  }

  /**
   * Reopens a completed saga (`completed_at` cleared) and writes a `SagaReopened` audit message to the outbox,
   * in one transaction guarded by its version. Timers are not restored: the next message schedules what it needs.
   * @throws as {@link SagaOperations.forceComplete}; `SAGA_STATE_CONFLICT` when the saga is active.
   */
  reopen(request: SagaChangeRequest): Promise<SagaChange> {
    return this.change('reopen', () => changeSaga(this.ops, 'reopen', request), sagaChangeFields);
  }

  /** Timers by status, saga, name and message type, newest first (`created_at`, id), paged with `nextCursor`. */
  listTimers(query: DispatchRowQuery): Promise<Page<TimerRow>> {
    return asOperation('listTimers', () => listDispatchRows(this.ops, DISPATCH_TABLES.timer, query));
  }

  /** Outbox rows by status, saga and message type, newest first (`created_at`, id), paged with `nextCursor`. */
  listOutbox(query: DispatchRowQuery): Promise<Page<OutboxRow>> {
    return asOperation('listOutbox', () => listDispatchRows(this.ops, DISPATCH_TABLES.outbox, query));
  }

  /**
   * Staged deliveries (`stageDelivery()`) by status, saga type, correlation value (`sagaKey`) and message type, newest
   * first (`created_at`, id), paged with `nextCursor`.
   */
  listInbox(query: DispatchRowQuery): Promise<Page<InboxRow>> {
    return asOperation('listInbox', () => listDispatchRows(this.ops, DISPATCH_TABLES.inbox, query));
  }

  /**
   * Puts dead-lettered timers back in the pending set (due now, attempts 0, new token). One result per id:
   * `requeued`, `not_found`, `not_dead_lettered`, `conflict` when a timer of that name is pending on the saga, or
   * `failed` (with the exception's class name) when the database refused that row's statement: the other ids are
   * still tried, so the call does not throw once a row changed.
   */
  requeueTimers(ids: readonly string[]): Promise<BulkResult<RequeueStatus>> {
    return this.change('requeueTimers', () => requeueRows(this.ops, DISPATCH_TABLES.timer, ids), bulkFields);
  }

  /** Puts dead-lettered outbox rows back in the pending set. One result per id, as {@link SagaOperations.requeueTimers}. */
  requeueOutbox(ids: readonly string[]): Promise<BulkResult<RequeueStatus>> {
    return this.change('requeueOutbox', () => requeueRows(this.ops, DISPATCH_TABLES.outbox, ids), bulkFields);
  }

  /**
   * Puts dead-lettered staged deliveries back in the pending set (due now, attempts 0, new token), at their place
   * among their saga's deliveries (their order key). One result per id, as {@link SagaOperations.requeueTimers}.
   */
  requeueInbox(ids: readonly string[]): Promise<BulkResult<RequeueStatus>> {
    return asOperation('requeueInbox', () => requeueRows(this.ops, DISPATCH_TABLES.inbox, ids));
  }

  /** Deletes pending timers: `cancelled`, `not_found`, `not_pending` or `failed` per id. */
  cancelTimers(ids: readonly string[]): Promise<BulkResult<CancelStatus>> {
    return this.change('cancelTimers', () => cancelTimers(this.ops, ids), bulkFields);
  }

  /** Moves pending timers to `dueAt` with a new token: `rescheduled`, `not_found`, `not_pending` or `failed` per id. */
  rescheduleTimers(ids: readonly string[], dueAt: Date): Promise<BulkResult<RescheduleStatus>> {
    return this.change('rescheduleTimers', () => rescheduleTimers(this.ops, ids, dueAt), bulkFields);
  }

  /**
   * Deletes what retention allows, in bounded batches (each one short statement or transaction); safe from
   * several processes at once.
   * @throws SagaValidationError `OPTION_INVALID` for a bad cutoff, batch size, or nothing to do.
   */
  purge(options: PurgeOptions): Promise<PurgeReport> {
    return this.change(
      'purge',
      () => purge(this.ops, options),
      (report) => ({ ...report }),
    );
  }

  /** Runs a change and reports what it changed: info, or warn when a row of it failed. */
  private async change<T>(operation: string, work: () => Promise<T>, fieldsOf: (result: T) => Record<string, unknown>): Promise<T> {
    const result = await asOperation(operation, work);
    const fields: Record<string, unknown> = { operation, ...fieldsOf(result) };
    if (typeof fields.failed === 'number' && fields.failed > 0) this.logger.warn('operator change: some rows failed', fields);
    else this.logger.info('operator change', fields);
    return result;
  }
}

/** What a force-complete or reopen changed, for the log. */
function sagaChangeFields(change: SagaChange): Record<string, unknown> {
  const { sagaType, sagaId, version, timersCancelled, auditMessageId } = change;
  return { sagaType, sagaId, version, timersCancelled, auditMessageId };
}

/** The statuses of the rows a bulk change changed. */
const CHANGED = new Set<ItemStatus>([ITEM_STATUSES.REQUEUED, ITEM_STATUSES.CANCELLED, ITEM_STATUSES.RESCHEDULED]);

/** What a bulk change did, for the log: counts and the ids changed (the first 100). */
function bulkFields(result: BulkResult): Record<string, unknown> {
  const changed = result.items.filter((item) => CHANGED.has(item.status)).map((item) => item.id);
  const failed = result.items.filter((item) => item.status === ITEM_STATUSES.FAILED).length;
  return { requested: result.requested, affected: result.affected, failed, ids: changed.slice(0, 100) };
}
