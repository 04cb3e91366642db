import type { EntityManager } from '@mikro-orm/core';
import { SagaConcurrencyError, SagaError, SagaPersistenceError, SagaSchemaError, SagaValidationError } from '../../errors.js';
import { classifyDriverError, freshFork, type JoinedTransaction } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { dispatcherChannel, notifyStatement } from '../../sql/notification-statements.js';
import { queryRows, type SqlStatement, sendStatement } from '../../sql/sql-executor.js';
import type { HandleResult } from '../handle-result.js';
import { rowsDueAtOnce } from '../rows-due.js';
import { attempt, type UnitOfWork, type UnitOfWorkRuntime } from './attempt.js';
import { classifyFailure, type FailureProbes, joinFailed, RetryableConflict } from './classify-failure.js';
import { reportHandled, type UnitOfWorkInput, unitOfWork } from './retry-loop.js';
import type { UnitPlace } from './unit-place.js';
import type { UnitWrite } from './unit-write.js';
import { runNamed } from './write-failures.js';
import { runPlanStatements, type WriteReport } from './write-plan.js';

/*
 * A unit of work inside the application's open transaction (`handle(..., { em })`). It runs as any unit does (load,
 * step without an EntityManager, plan, write), with these differences:
 * - every statement goes on the application's transaction's connection (SQLite's only one included): the instance's
 *   read, the schema check, the writes, and the reads that explain a failure. None waits for a pooled connection;
 * - a SAVEPOINT of its own comes before its first read, and the unit's end releases it: its writes commit only with
 *   the application's COMMIT. A failure rolls back to it, before the probes read: on PostgreSQL the application's
 *   transaction then takes statements again;
 * - no group commit, no lock bound (a `lock_timeout` of the unit's own would stay in force for the rest of the
 *   application's transaction), no retry: a concurrency conflict is `CONFLICT_IN_APP_TRANSACTION`, since only the
 *   application can run its transaction again;
 * - the dispatchers' wake-up: on PostgreSQL a NOTIFY inside the transaction, which PostgreSQL delivers at COMMIT (and
 *   drops at ROLLBACK). The in-process wake-up (`RowsDue`) cannot know when the application commits: the dispatchers
 *   of the process find the rows by the NOTIFY (they listen by default) or their next poll.
 */

/** The first attempt: a joined unit has only this one. */
const ONLY_ATTEMPT = { attempts: 1, conflicts: 0, alone: false } as const;

/** Answers any database that answers: how a joined unit's probe asks whether the connection still works. */
const ANSWER: SqlStatement = { sql: 'select 1 as one', params: [] };

/**
 * The connections of application transactions a unit is joined to now (`UnitTransactions.connectionOf`): a nested
 * transaction's counts as the one it is nested in. Two units on one connection at once would interleave their
 * statements, and a rollback to one's savepoint would undo the other's writes too.
 */
const joinedNow = new WeakSet<object>();

/** What a joined unit needs from its runtime besides the unit of work's own. */
export interface JoinedUnitOptions {
  /** The application's EntityManager, inside its open transaction. */
  readonly appEm: EntityManager;
  /** The start-up schema check, reading the catalog through `em` (inside the transaction); none once it passed. */
  readonly checkSchema: (em: EntityManager) => Promise<void>;
}

/**
 * Runs the unit of work of one message inside the application's open transaction (see above), once.
 * @throws SagaValidationError `TRANSACTION_REQUIRED` when `appEm` is in no open transaction; `OPTION_INVALID` while
 *   another unit is joined to the same transaction. Nothing was read or written.
 * @throws SagaConcurrencyError `CONFLICT_IN_APP_TRANSACTION` when another transaction changed or started the saga
 *   first; the unit was rolled back to its savepoint.
 * @throws what `handle()` throws otherwise (`SagaPersistenceError`, `SagaSchemaError`, the step's own error), the unit
 *   rolled back to its savepoint.
 */
export async function runJoinedUnitOfWork(
  runtime: UnitOfWorkRuntime,
  input: UnitOfWorkInput,
  options: JoinedUnitOptions,
): Promise<HandleResult> {
  const sagaType = input.saga.definition.name;
  const messageType = input.message.copy.type;
  const connection = await runtime.db.transactions.connectionOf(options.appEm);
  if (connection && joinedNow.has(connection)) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `Saga ${sagaType}: '${messageType}' was handled in a transaction that another handle() call is still joined to; nothing of it was read or written. Await each handle() or route() call before the next in one transaction.`,
      { sagaType, messageType },
    );
  }
  if (connection) joinedNow.add(connection);
  try {
    const joined = await join(runtime.db, options.appEm, sagaType, messageType);
    return await runInSavepoint(runtime, input, joined, options.checkSchema);
  } finally {
    if (connection) joinedNow.delete(connection);
  }
}

/** Joins the application's transaction with a fresh fork of the runtime's EntityManager, after a SAVEPOINT. */
async function join(db: DatabaseContext, appEm: EntityManager, sagaType: string, messageType: string): Promise<JoinedTransaction> {
  let joined: JoinedTransaction | undefined;
  try {
    joined = await db.transactions.join(appEm, freshFork(db.em));
  } catch (error) {
    throw joinFailed(sagaType, messageType, error);
  }
  if (joined) return joined;
  throw new SagaValidationError(
    'TRANSACTION_REQUIRED',
    `Saga ${sagaType}: handle() was given an EntityManager in no open transaction for '${messageType}' (none begun, or its transaction has ended); nothing was read or written. Pass the EntityManager em.transactional() hands its callback (or one after em.begin()), or leave 'em' out to handle the message in a transaction of the runtime's own.`,
    { sagaType, messageType },
  );
}

/**
 * The unit of work after its SAVEPOINT: the schema check, the attempt, then RELEASE SAVEPOINT; on any failure,
 * ROLLBACK TO SAVEPOINT and RELEASE SAVEPOINT.
 */
async function runInSavepoint(
  runtime: UnitOfWorkRuntime,
  input: UnitOfWorkInput,
  joined: JoinedTransaction,
  checkSchema: (em: EntityManager) => Promise<void>,
): Promise<HandleResult> {
  const unit = unitOfWork(input);
  const inTransaction: UnitOfWorkRuntime = { ...runtime, place: joinedPlace(runtime, joined) };
  let result: HandleResult;
  try {
    await checkSchema(joined.em).catch(async (error: unknown) => {
      if (error instanceof SagaSchemaError) throw error;
      // Not held against the schema: the unit's own statements report what failed (as outside a transaction).
      await joined.undo().catch(() => undefined);
    });
    result = await attempt(inTransaction, unit, ONLY_ATTEMPT);
    await release(inTransaction, joined, unit, result.sagaId ?? undefined);
  } catch (error) {
    await joined.rollback().catch(() => undefined);
    if (!joined.open) throw transactionEndedUnderUnit(unit, error);
    if (!(error instanceof RetryableConflict)) throw error;
    runtime.metrics.add('concurrencyConflicts', unit.saga.definition.name);
    throw conflictInAppTransaction(runtime.db, unit, error);
  }
  reportHandled(inTransaction, result, input.message, input.target);
  return result;
}

/** RELEASE SAVEPOINT: the unit's writes become the application's. What fails there is the unit's failure, classified. */
async function release(runtime: UnitOfWorkRuntime, joined: JoinedTransaction, unit: UnitOfWork, sagaId: string | undefined): Promise<void> {
  try {
    await runNamed('savepoint', undefined, () => joined.commit());
  } catch (error) {
    const { probes } = runtime.place;
    const { em } = runtime.options;
    throw await classifyFailure(error, {
      em,
      probes,
      joined: true,
      db: runtime.db,
      saga: unit.saga,
      messageType: unit.message.type,
      sagaId,
      startedWith: undefined,
      timerNames: [],
    });
  }
}

/** Where a joined unit runs: see the top of this file. */
function joinedPlace(runtime: UnitOfWorkRuntime, joined: JoinedTransaction): UnitPlace {
  const { db, dialect, options } = runtime;
  const notify = options.notifyDispatchers && dialect.notifiesListeners ? notifyStatement(dispatcherChannel(db)) : undefined;
  const probes = joinedProbes(db, joined);
  return {
    fork: () => joined.em,
    write: (unit) => {
      const due = rowsDueAtOnce(unit.plan, options.clock.now());
      return writeJoined(db, joined, unit, due.outbox || due.timers ? notify : undefined);
    },
    // The in-process wake-up cannot know when the application commits: see the top of this file.
    written: () => undefined,
    probes,
    joined: true,
  };
}

/**
 * Writes a joined unit's plan in the application's transaction (no COMMIT: its savepoint is released once the unit
 * ends). `notify`: the NOTIFY that wakes the listening dispatchers at the application's COMMIT, sent when the plan
 * wrote rows due at once.
 */
async function writeJoined(
  db: DatabaseContext,
  joined: JoinedTransaction,
  { em, plan, target }: UnitWrite,
  notify: SqlStatement | undefined,
): Promise<WriteReport> {
  const report = await runPlanStatements(db, joined, em, plan, target);
  // As before a unit's own COMMIT: what MikroORM's flush has left to write (normally nothing), named after the saga row.
  await runNamed('update', db.tables.saga(target.meta).name, () => em.flush());
  if (notify) await runNamed('notify', undefined, () => sendStatement(em, notify));
  return report;
}

/**
 * The probes of a joined unit: in the application's transaction, on a fresh fork joined to it (the unit's own fork
 * holds the entity whose write failed), each after ROLLBACK TO the unit's savepoint and rolled back to it again, so
 * a probe that fails leaves the transaction as the unit found it.
 */
function joinedProbes(db: DatabaseContext, joined: JoinedTransaction): FailureProbes {
  const read = async <T>(work: (em: EntityManager) => Promise<T>): Promise<T> => {
    await joined.undo();
    const em = freshFork(db.em);
    joined.join(em);
    try {
      return await work(em);
    } finally {
      joined.leave(em);
      await joined.undo().catch(() => undefined);
    }
  };
  return {
    read,
    reachable: () =>
      read((em) => queryRows(em, ANSWER)).then(
        () => true,
        () => false,
      ),
  };
}

/**
 * The error of a joined unit whose application transaction ended (the application committed or rolled it back
 * without awaiting the unit): the unit's statements sent before are durable if it committed, the rest never ran.
 */
function transactionEndedUnderUnit(unit: UnitOfWork, error: unknown): SagaPersistenceError {
  const sagaType = unit.saga.definition.name;
  const messageType = unit.message.type;
  const sagaId = error instanceof SagaError ? (error.details.sagaId as string | undefined) : undefined;
  return new SagaPersistenceError(
    'COMMIT_OUTCOME_UNKNOWN',
    `Saga ${sagaType}${sagaId ? `/${sagaId}` : ''}: your transaction ended (committed or rolled back) while the unit of work of '${messageType}' was writing in it. What the unit wrote before is durable if your transaction committed, and the rest was not written: its effects may be partial. Await handle() and route() before you commit or roll back your transaction; read the saga before handling the message again.`,
    { sagaType, sagaId, messageType, operation: 'commit' },
    { cause: error },
  );
}

/** What a joined unit's conflict was, for the message of its error. */
function conflictWording(db: DatabaseContext, cause: unknown): string {
  switch (classifyDriverError(cause)) {
    case 'unique violation':
      return 'another transaction started this saga, or recorded this message id for it, and committed first';
    case 'deadlock':
      return 'a deadlock with another transaction, or a serialization failure';
    case 'lock wait':
      return db.dialect.name === 'sqlite'
        ? 'the database stayed locked by another connection past the busy timeout, or another connection wrote to it after your transaction began reading'
        : "the saga's row stayed locked by another transaction past your connection's lock_timeout";
    default:
      return 'another transaction committed a change to this saga after your transaction read it';
  }
}

/** The error of a joined unit's conflict: rolled back to its savepoint, never retried. */
function conflictInAppTransaction(db: DatabaseContext, unit: UnitOfWork, error: RetryableConflict): SagaConcurrencyError {
  const sagaType = unit.saga.definition.name;
  const messageType = unit.message.type;
  const usable =
    db.dialect.name === 'postgresql'
      ? 'Your transaction still takes statements; the message was not applied in it. At REPEATABLE READ or SERIALIZABLE, handling it again in the same transaction fails the same way: your transaction keeps reading the snapshot it took first.'
      : 'On SQLite your transaction may take no more writes (another connection wrote since it began reading).';
  return new SagaConcurrencyError(
    'CONFLICT_IN_APP_TRANSACTION',
    `Saga ${sagaType}${error.sagaId ? `/${error.sagaId}` : ''}: message '${messageType}' met a concurrency conflict in your transaction (${conflictWording(db, error.cause)}). It was rolled back to its savepoint; nothing of it was written. The library cannot retry a transaction it does not own: roll back your transaction and run it again, which reads the saga afresh. ${usable}`,
    { sagaType, sagaId: error.sagaId, messageType, attempts: 1 },
    { cause: error.cause },
  );
}
