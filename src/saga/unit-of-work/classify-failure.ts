import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { SagaError, SagaPersistenceError, SagaSchemaError } from '../../errors.js';
import {
  allEntityMetadata,
  CommitNotSent,
  CommitRolledBack,
  CommitSubscriberThrew,
  classifyDriverError,
  configuredDbName,
  convertDriverError,
  type DriverErrorKind,
  freshFork,
  isDriverException,
  isOrmClosed,
  isReachable,
  OrmClosed,
  serverAddress,
  uniqueKeyNamesOf,
} from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { probeColumn, probeTable } from '../../sql/schema-probe-statements.js';
import { queryRows } from '../../sql/sql-executor.js';
import { countPendingTimersNamed } from '../../sql/timer-statements.js';
import type { RegisteredSaga } from '../registered-saga.js';
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

/**
 * Where the reads that explain a failure run, after the unit's writes were undone: on a fresh fork of the runtime's
 * EntityManager ({@link ownTransactionProbes}), or, for a unit joined to the application's transaction, in that
 * transaction on its connection (SQLite's only one), after ROLLBACK TO the unit's savepoint.
 */
export interface FailureProbes {
  /** Runs `work`'s reads on an EntityManager that holds no entity of the unit; what it throws passes on. */
  read<T>(work: (em: EntityManager) => Promise<T>): Promise<T>;
  /** Whether the database answers. */
  reachable(): Promise<boolean>;
}

/** The probes of a unit in a transaction of the runtime's own: on fresh forks of `em`, on a pooled connection. */
export function ownTransactionProbes(em: EntityManager): FailureProbes {
  return {
    read: (work) => work(freshFork(em)),
    reachable: () => isReachable(em),
  };
}

/** What the runtime knows about the unit of work that failed. */
export interface FailureContext {
  /** The runtime's EntityManager (its config and driver); the probes read through {@link probes}. */
  readonly em: EntityManager;
  /** Where the reads that explain the failure run. */
  readonly probes: FailureProbes;
  /**
   * Set for a unit joined to the application's transaction: its writes were rolled back to its savepoint, not a
   * transaction of its own (the messages say so).
   */
  readonly joined?: boolean;
  /** The runtime's database context: the dialect, and the library tables' names. */
  readonly db: DatabaseContext;
  readonly saga: RegisteredSaga;
  readonly messageType: string;
  readonly sagaId: string | undefined;
  /** Set when the unit of work inserted a new instance with this correlation value. */
  readonly startedWith: { readonly value: unknown } | undefined;
  /** Names of the timers the unit of work inserted or replaced. */
  readonly timerNames: readonly string[];
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

/** How the unit's writes were undone. */
function rolledBack(context: FailureContext): string {
  return context.joined ? 'It was rolled back to its savepoint in your transaction' : 'The transaction was rolled back';
}

function subject(context: FailureContext): string {
  return `Saga ${context.saga.definition.name}${context.sagaId ? `/${context.sagaId}` : ''}`;
}

function details(context: FailureContext, extra: Record<string, unknown> = {}) {
  return { sagaType: context.saga.definition.name, sagaId: context.sagaId, messageType: context.messageType, ...extra };
}

/** "insert on saga_timer", "COMMIT": what failed, by operation and table (and the second table a statement wrote). */
function what(operation: string, table: string | undefined, alsoTable?: string): string {
  if (operation === 'begin' || operation === 'commit') return operation.toUpperCase();
  if (operation === 'savepoint') return 'a SAVEPOINT statement';
  if (operation === 'notify') return 'waking the dispatchers (NOTIFY)';
  if (operation === 'lock') return `locking the pending rows of ${table}`;
  return operation === 'read' ? `reading ${table}` : `${operation} on ${table}${alsoTable ? ` and ${alsoTable}` : ''}`;
}

/** The exception's class and, when the driver reports it, the constraint: names only, never values. */
function describe(error: unknown): string {
  const name = error instanceof Error ? error.constructor.name : typeof error;
  const constraint = constraintOf(error);
  return constraint ? `${name} on constraint ${constraint}` : name;
}

/** PostgreSQL reports the violated constraint's name; MikroORM copies it onto its exception. */
function constraintOf(error: unknown): string | undefined {
  const constraint = (error as { constraint?: unknown } | null)?.constraint;
  return typeof constraint === 'string' && constraint !== '' ? constraint : undefined;
}

const CAUSE_NOTE = "The driver's error is the `cause` (it may quote SQL and values: log it only where payload data may be logged).";

function persistenceFailed(
  context: FailureContext,
  operation: string,
  table: string | undefined,
  cause: unknown,
  reason: string,
  alsoTable?: string,
) {
  const nothing =
    operation === 'read' || operation === 'begin' ? 'Nothing was written.' : `${rolledBack(context)}, so nothing of it was written.`;
  return new SagaPersistenceError(
    'PERSISTENCE_FAILED',
    `${subject(context)}: ${what(operation, table, alsoTable)} failed (${reason}) while handling '${context.messageType}'. ${nothing} ${CAUSE_NOTE}`,
    details(context, { operation, table }),
    { cause },
  );
}

/**
 * What was seen at a COMMIT whose outcome is unknown: the connection failed while it was in flight, an
 * afterTransactionCommit subscriber threw once it was answered, or it failed with an error no database code names.
 */
function commitOutcomeUnknown(context: FailureContext, cause: unknown, seen: 'connection' | 'subscriber' | 'outside' = 'connection') {
  const effects = `the effects of '${context.messageType}'`;
  const how = {
    connection: `the connection failed while COMMIT of ${effects} was in flight (${describe(cause)})`,
    subscriber: `an afterTransactionCommit subscriber threw ${describe(cause)} once COMMIT of ${effects} was answered`,
    outside: `COMMIT of ${effects} failed with ${describe(cause)}, an error that carries no database code`,
  }[seen];
  return new SagaPersistenceError(
    'COMMIT_OUTCOME_UNKNOWN',
    `${subject(context)}: ${how}, so they may or may not have been written. Do not assume either: redeliver the message with the same message id, or read the saga's version before handling it again. ${CAUSE_NOTE}`,
    details(context, { operation: 'commit' }),
    { cause },
  );
}

/** The unit did not commit: the ORM was closed before it did (`orm.close()`), or while it waited for a connection. */
function ormClosed(context: FailureContext, failure: StatementFailure | undefined, cause: unknown) {
  const during = failure ? ` (${what(failure.operation, failure.table, failure.alsoTable)} failed)` : '';
  return ormClosedError(context.saga.definition.name, context.sagaId, context.messageType, { cause, during });
}

/**
 * The error of a message a closed ORM stopped: `ORM_CLOSED`, nothing written. `during`: what failed, if a statement
 * did (the unit had begun); `cause`: the driver's error.
 */
export function ormClosedError(
  sagaType: string,
  sagaId: string | undefined,
  messageType: string,
  { cause, during = '' }: { readonly cause?: unknown; readonly during?: string } = {},
): SagaPersistenceError {
  return new SagaPersistenceError(
    'ORM_CLOSED',
    `Saga ${sagaType}${sagaId ? `/${sagaId}` : ''}: the MikroORM instance was closed (orm.close()) before '${messageType}' was handled${during}; nothing of it was written. Close the ORM only after dispatcher.stop() and once handle() calls have settled (docs/integration.md, step 4); handle the message again on an open ORM.`,
    { sagaType, sagaId, messageType, operation: 'orm closed' },
    { cause },
  );
}

/**
 * The error of a unit of work that could not join the application's transaction: its SAVEPOINT failed there, so
 * nothing of it was read or written.
 */
export function joinFailed(sagaType: string, messageType: string, cause: unknown): SagaPersistenceError {
  return new SagaPersistenceError(
    'PERSISTENCE_FAILED',
    `Saga ${sagaType}: the unit of work of '${messageType}' could not join your transaction (its SAVEPOINT failed: ${describe(cause)}); nothing of it was read or written. Your transaction takes no more statements: one of them failed before (PostgreSQL then refuses every statement until ROLLBACK), or its connection was lost. Roll it back and run it again. ${CAUSE_NOTE}`,
    { sagaType, messageType, operation: 'savepoint' },
    { cause },
  );
}

function uniqueViolation(context: FailureContext, failure: StatementFailure, cause: unknown) {
  const constraint = constraintOf(cause);
  return new SagaPersistenceError(
    'UNIQUE_VIOLATION',
    `${subject(context)}: ${what(failure.operation, failure.table, failure.alsoTable)} violates ${constraint ? `unique constraint ${constraint}` : `a unique constraint of ${failure.table}`} while handling '${context.messageType}': another row already holds a value this unit of work writes. This is not a race that a retry would resolve. ${rolledBack(context)}, so nothing of it was written; change the step or the data. ${CAUSE_NOTE}`,
    details(context, { operation: failure.operation, table: failure.table, constraint }),
    { cause },
  );
}

function unreachable(context: FailureContext, failure: StatementFailure, cause: unknown, why: 'no free connection' | 'unreachable') {
  const nothing = failure.operation === 'read' || failure.operation === 'begin' ? 'Nothing was written' : 'Nothing of it was committed';
  return new SagaPersistenceError(
    'DATABASE_UNREACHABLE',
    why === 'no free connection'
      ? `${subject(context)}: no connection of the pool to ${databaseOf(context)} came free within the pool's acquire timeout (${describe(cause)} after waiting ${failure.elapsedMs} ms, during ${what(failure.operation, failure.table, failure.alsoTable)}) while handling '${context.messageType}'. ${nothing}. Every connection was in use: raise the pool's max or its timeout, or lower the concurrency of your callers and dispatchers; then handle the message again. ${CAUSE_NOTE}`
      : `${subject(context)}: cannot reach ${databaseOf(context)} (${describe(cause)} after waiting ${failure.elapsedMs} ms, during ${what(failure.operation, failure.table, failure.alsoTable)}) while handling '${context.messageType}'. ${nothing}. Check that the database runs and accepts connections there, and the host, port and timeouts of your ORM config; then handle the message again. ${CAUSE_NOTE}`,
    details(context, { operation: failure.operation, table: failure.table, waitedMs: failure.elapsedMs }),
    { cause },
  );
}

/** Where the ORM connects, from its config: host, port and database, never the user or password. */
function databaseOf(context: FailureContext): string {
  const em = context.em;
  if (context.db.dialect.name === 'sqlite') return `the SQLite database '${configuredDbName(em)}'`;
  const { host, port, database } = serverAddress(em);
  return `PostgreSQL at ${host}:${port} (database '${database}')`;
}

function schemaInvalid(context: FailureContext, failure: StatementFailure, cause: unknown, missing: Missing): SagaError {
  const table = failure.table;
  const problem =
    missing === 'table'
      ? `table ${table} does not exist`
      : missing && missing.length > 0
        ? `table ${table} lacks column(s) ${missing.join(', ')}`
        : `table ${table ?? '?'} or one of its columns does not exist`;
  const { timer, outbox, handledMessage } = context.db.tables;
  const library = table === timer.name || table === outbox.name || table === handledMessage.name;
  const entity = table === undefined ? undefined : entityOf(context.em, table);
  const fix = library
    ? "run the library's migrations (SAGA_MIGRATIONS from 'mikro-orm-saga/migrations'), or with SAGA_ENTITIES in your entities generate and run your own: `npx mikro-orm migration:create` then `npx mikro-orm migration:up` (docs/migrations.md)"
    : `generate and run a migration for ${entity?.className ?? 'the saga state entity'}: \`npx mikro-orm migration:create\` then \`npx mikro-orm migration:up\` (docs/migrations.md)`;
  return new SagaSchemaError(
    'SCHEMA_INVALID',
    `${subject(context)}: ${problem} (${what(failure.operation, table)} for '${context.messageType}' failed); nothing was written. Create it: ${fix}.`,
    details(context, { operation: failure.operation, table, missingColumns: Array.isArray(missing) ? missing : undefined }),
    { cause },
  );
}

/** What a table lacks: 'table' when it is missing, else its missing columns; undefined when unknown. */
type Missing = 'table' | string[] | undefined;

function entityOf(em: EntityManager, table: string): EntityMetadata | undefined {
  return allEntityMetadata(em).find((m) => m.tableName === table && !m.abstract);
}

/**
 * Which of its entity's columns `table` lacks ('table' when the table itself is missing), by selecting each. Each
 * probe is a read of its own: on PostgreSQL a failed statement aborts the transaction it runs in, which a unit
 * joined to the application's transaction shares with the probes.
 */
async function missingColumns({ em: root, db, probes }: FailureContext, tableName: string | undefined): Promise<Missing> {
  const meta = tableName === undefined ? undefined : entityOf(root, tableName);
  if (!meta) return undefined;
  const { timer, outbox, handledMessage } = db.tables;
  const names = [timer, outbox, handledMessage].find((library) => library.name === tableName) ?? db.tables.saga(meta);
  try {
    await probes.read((em) => queryRows(em, probeTable(names)));
  } catch (error) {
    return classifyDriverError(error) === 'missing table' ? 'table' : undefined;
  }
  const missing: string[] = [];
  for (const column of names.stored) {
    try {
      await probes.read((em) => queryRows(em, probeColumn(names, column)));
    } catch (error) {
      if (classifyDriverError(error) !== 'missing column') return undefined;
      missing.push(column.field);
    }
  }
  return missing;
}
