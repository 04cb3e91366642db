import type { EntityManager } from '@mikro-orm/core';
import { SagaError } from '../../errors.js';
import {
  CommitNotSent,
  CommitRolledBack,
  CommitSubscriberThrew,
  classifyDriverError,
  convertDriverError,
  type DriverErrorKind,
  freshFork,
  isDriverException,
  isOrmClosed,
  isReachable,
  OrmClosed,
  uniqueKeyNamesOf,
} from '../../orm/index.js';
import { countPendingTimersNamed } from '../../sql/timer-statements.js';
import type { FailureContext, FailureProbes } from './failure-errors.js';
import {
  commitOutcomeUnknown,
  constraintOf,
  describe,
  missingColumns,
  ormClosed,
  persistenceFailed,
  schemaInvalid,
  uniqueViolation,
  unreachable,
} from './failure-errors.js';
import { StatementFailure, VersionConflict } from './write-failures.js';

/** A conflict worth re-running the unit of work for: another unit of work committed first. */
export class RetryableConflict extends Error {
  constructor(
    readonly sagaId: string | undefined,
    override readonly cause: unknown,
  ) {
    super('concurrency conflict');
  }
}

/** The probes of a unit in a transaction of the runtime's own: on fresh forks of `em`, on a pooled connection. */
export function ownTransactionProbes(em: EntityManager): FailureProbes {
  return {
    read: (work) => work(freshFork(em)),
    reachable: () => isReachable(em),
  };
}

/**
 * Turns what a unit of work threw into a {@link RetryableConflict} (only for real races) or a typed
 * {@link SagaError} whose message names the operation, table and constraint, never SQL or values (the
 * driver's error stays as `cause`). Runs after the rollback; may read the database to tell a race from a
 * deterministic duplicate, or a missing table from a missing column.
 */
export async function classifyFailure(error: unknown, context: FailureContext): Promise<RetryableConflict | SagaError> {
  if (error instanceof SagaError) return error;
  if (error instanceof VersionConflict) return new RetryableConflict(context.sagaId, error);
  if (error instanceof OrmClosed) return ormClosed(context, undefined, error);
  if (!(error instanceof StatementFailure)) return persistenceFailed(context, 'handling', undefined, error, describe(error));
  if (error.cause instanceof OrmClosed) return ormClosed(context, error, error.cause);
  // COMMIT was never sent: the transaction is rolled back, nothing of it was written.
  if (error.cause instanceof CommitNotSent) {
    const hook = error.cause.cause;
    return persistenceFailed(
      context,
      'commit',
      undefined,
      hook,
      `a beforeTransactionCommit subscriber threw ${describe(hook)}, so COMMIT was not sent`,
    );
  }
  if (error.cause instanceof CommitSubscriberThrew) return commitOutcomeUnknown(context, error.cause.cause, 'subscriber');
  // The database answered COMMIT with ROLLBACK (a statement of the transaction had failed): nothing was written.
  if (error.cause instanceof CommitRolledBack) {
    return persistenceFailed(context, 'commit', undefined, error.cause, 'the database rolled the transaction back at COMMIT');
  }
  if (error.cause instanceof SagaError) return error.cause;
  const cause = driverErrorOf(error, context.em);
  const commit = error.operation === 'commit' ? { canFailAfterApplying: context.db.dialect.commitCanFailAfterApplying } : undefined;
  const kind = classifyDriverError(cause, { commit });
  // The ORM was closed under the unit (SQLite's connection closed, the pool ended): no probe, which would wait or reconnect.
  if (isOrmClosed(context.em) && CLOSED_KINDS.has(kind)) return ormClosed(context, error, cause);
  return classifyDriverFailure(error, cause, kind, context);
}

/** Kinds a closed ORM explains (a COMMIT whose outcome is unknown stays unknown). */
const CLOSED_KINDS: ReadonlySet<DriverErrorKind> = new Set([
  'connection failure',
  'never sent',
  'no free connection',
  'database failure',
  'canceled or out of resources',
  'other',
]);

/** Maps the kind of the driver's error behind a failed statement to the runtime's verdict. */
async function classifyDriverFailure(
  failure: StatementFailure,
  cause: unknown,
  kind: DriverErrorKind,
  context: FailureContext,
): Promise<RetryableConflict | SagaError> {
  switch (kind) {
    case 'commit failed outside the database':
      return commitOutcomeUnknown(context, failure.cause, 'outside');
    case 'outcome unknown':
      return commitOutcomeUnknown(context, cause);
    case 'version conflict':
    case 'deadlock':
    case 'lock wait':
      return new RetryableConflict(context.sagaId, cause);
    case 'unique violation':
      if (await isRace(failure, context)) return new RetryableConflict(context.sagaId, cause);
      return uniqueViolation(context, failure, cause);
    case 'missing table':
    case 'missing column':
      return schemaInvalid(context, failure, cause, await missingColumns(context, failure.table));
    case 'no free connection':
      return unreachable(context, failure, cause, 'no free connection');
  }
  if (PROBED_KINDS.has(kind) || (kind === 'other' && isDriverException(cause))) {
    if (!(await context.probes.reachable())) return unreachable(context, failure, cause, 'unreachable');
    // Drivers do not classify every schema error (SQLite: "table x has no column named y"): look at the table.
    const missing = await missingColumns(context, failure.table);
    if (missing === 'table' || (missing && missing.length > 0)) return schemaInvalid(context, failure, cause, missing);
  }
  return persistenceFailed(context, failure.operation, failure.table, cause, describe(cause), failure.alsoTable);
}

/**
 * Kinds after which the database may be away, or the table may lack a column the driver did not name: the
 * runtime asks the database (a driver error no rule places, too; an error that is not the driver's, not).
 */
const PROBED_KINDS: ReadonlySet<DriverErrorKind> = new Set([
  'connection failure',
  'never sent',
  'canceled or out of resources',
  'database failure',
]);

/** BEGIN and COMMIT errors come from knex unconverted: ask MikroORM's driver for its exception class. */
function driverErrorOf(failure: StatementFailure, em: EntityManager): unknown {
  const cause = failure.cause;
  if (isDriverException(cause) || classifyDriverError(cause) === 'version conflict') return cause;
  if (failure.operation !== 'begin' && failure.operation !== 'commit' && failure.operation !== 'savepoint') return cause;
  return cause instanceof Error ? convertDriverError(em, cause) : cause;
}

/**
 * A unique violation is a race when re-reading would see another unit of work's row: the instance a racing
 * start message inserted, a pending timer of one of our names, or the record of our message id. Anything else fails the same way on every
 * retry (a unique business column, two names of one plan that collide once stored).
 */
async function isRace(failure: StatementFailure, context: FailureContext): Promise<boolean> {
  if (failure.operation !== 'insert' || isOrmClosed(context.em)) return false;
  const { definition, meta } = context.saga;
  // Another delivery of the same message id committed first: the retry finds its record and answers duplicate.
  const { timer, handledMessage } = context.db.tables;
  if (failure.table === handledMessage.name) return true;
  if (failure.table === meta.tableName && context.startedWith) {
    return (await isStartSeen(context, context.startedWith.value)) || isStartUnseen(context, failure.cause);
  }
  try {
    const sagaId = context.sagaId;
    if (failure.table === timer.name && sagaId && context.timerNames.length > 0) {
      const names = context.timerNames;
      return await context.probes.read(async (em) => (await countPendingTimersNamed(context.db, em, definition.name, sagaId, names)) > 0);
    }
  } catch {
    // The probe failing says nothing about a race; report the violation itself.
  }
  return false;
}

/** Whether the probes see an instance with the correlation value a start inserted; false when the probe fails. */
async function isStartSeen({ saga, probes }: FailureContext, value: unknown): Promise<boolean> {
  const { definition } = saga;
  const where = { [definition.correlationProperty]: value };
  try {
    return await probes.read(async (em) => (await em.count(definition.state, where as never)) > 0);
  } catch {
    // The probe failing says nothing about a race; report the violation itself.
    return false;
  }
}

/**
 * Whether a joined unit's start duplicated the correlation key of an instance its probe cannot see. Its probe reads
 * in the application's transaction, whose snapshot at REPEATABLE READ or SERIALIZABLE (PostgreSQL) leaves out an
 * instance another transaction started and committed after the snapshot was taken. The database names the key the
 * insert duplicated: the correlation property's own says it is that race.
 */
function isStartUnseen(context: FailureContext, cause: unknown): boolean {
  if (!context.joined) return false;
  const constraint = constraintOf(cause);
  const { meta, definition } = context.saga;
  return constraint !== undefined && uniqueKeyNamesOf(context.em, meta, definition.correlationProperty).includes(constraint);
}

export { type FailureContext, type FailureProbes, joinFailed, ormClosedError } from './failure-errors.js';
