// The typed errors a failed unit of work becomes (see classify-failure.ts), with what they say to do.
import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { type SagaError, SagaPersistenceError, SagaSchemaError } from '../../errors.js';
import { allEntityMetadata, classifyDriverError, configuredDbName, serverAddress } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { probeColumn, probeTable } from '../../sql/schema-probe-statements.js';
import { queryRows } from '../../sql/sql-executor.js';
import type { RegisteredSaga } from '../registered-saga.js';
import type { StatementFailure } from './write-failures.js';

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

/** How the unit's writes were undone. */
export function rolledBack(context: FailureContext): string {
  return context.joined ? 'It was rolled back to its savepoint in your transaction' : 'The transaction was rolled back';
}

export function subject(context: FailureContext): string {
  return `Saga ${context.saga.definition.name}${context.sagaId ? `/${context.sagaId}` : ''}`;
}

export function details(context: FailureContext, extra: Record<string, unknown> = {}) {
  return { sagaType: context.saga.definition.name, sagaId: context.sagaId, messageType: context.messageType, ...extra };
}

/** "insert on saga_timer", "COMMIT": what failed, by operation and table (and the second table a statement wrote). */
export function what(operation: string, table: string | undefined, alsoTable?: string): string {
  if (operation === 'begin' || operation === 'commit') return operation.toUpperCase();
  if (operation === 'savepoint') return 'a SAVEPOINT statement';
  if (operation === 'notify') return 'waking the dispatchers (NOTIFY)';
  if (operation === 'lock') return `locking the pending rows of ${table}`;
  return operation === 'read' ? `reading ${table}` : `${operation} on ${table}${alsoTable ? ` and ${alsoTable}` : ''}`;
}

/** The exception's class and, when the driver reports it, the constraint: names only, never values. */
export function describe(error: unknown): string {
  const name = error instanceof Error ? error.constructor.name : typeof error;
  const constraint = constraintOf(error);
  return constraint ? `${name} on constraint ${constraint}` : name;
}

/** PostgreSQL reports the violated constraint's name; MikroORM copies it onto its exception. */
export function constraintOf(error: unknown): string | undefined {
  const constraint = (error as { constraint?: unknown } | null)?.constraint;
  return typeof constraint === 'string' && constraint !== '' ? constraint : undefined;
}

export const CAUSE_NOTE = "The driver's error is the `cause` (it may quote SQL and values: log it only where payload data may be logged).";

export function persistenceFailed(
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
export function commitOutcomeUnknown(
  context: FailureContext,
  cause: unknown,
  seen: 'connection' | 'subscriber' | 'outside' = 'connection',
) {
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
export function ormClosed(context: FailureContext, failure: StatementFailure | undefined, cause: unknown) {
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

export function uniqueViolation(context: FailureContext, failure: StatementFailure, cause: unknown) {
  const constraint = constraintOf(cause);
  return new SagaPersistenceError(
    'UNIQUE_VIOLATION',
    `${subject(context)}: ${what(failure.operation, failure.table, failure.alsoTable)} violates ${constraint ? `unique constraint ${constraint}` : `a unique constraint of ${failure.table}`} while handling '${context.messageType}': another row already holds a value this unit of work writes. This is not a race that a retry would resolve. ${rolledBack(context)}, so nothing of it was written; change the step or the data. ${CAUSE_NOTE}`,
    details(context, { operation: failure.operation, table: failure.table, constraint }),
    { cause },
  );
}

export function unreachable(context: FailureContext, failure: StatementFailure, cause: unknown, why: 'no free connection' | 'unreachable') {
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
export function databaseOf(context: FailureContext): string {
  const em = context.em;
  if (context.db.dialect.name === 'sqlite') return `the SQLite database '${configuredDbName(em)}'`;
  const { host, port, database } = serverAddress(em);
  return `PostgreSQL at ${host}:${port} (database '${database}')`;
}

export function schemaInvalid(context: FailureContext, failure: StatementFailure, cause: unknown, missing: Missing): SagaError {
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
export type Missing = 'table' | string[] | undefined;

export function entityOf(em: EntityManager, table: string): EntityMetadata | undefined {
  return allEntityMetadata(em).find((m) => m.tableName === table && !m.abstract);
}

/**
 * Which of its entity's columns `table` lacks ('table' when the table itself is missing), by selecting each. Each
 * probe is a read of its own: on PostgreSQL a failed statement aborts the transaction it runs in, which a unit
 * joined to the application's transaction shares with the probes.
 */
export async function missingColumns({ em: root, db, probes }: FailureContext, tableName: string | undefined): Promise<Missing> {
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
