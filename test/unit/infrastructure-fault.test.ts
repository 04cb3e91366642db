// Which errors the dispatcher treats as database faults (not charged) and which as the delivery's own failure; how it shows them.
import { ConnectionException, DriverException, LockWaitTimeoutException, UniqueConstraintViolationException } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { isInfrastructureFault } from '../../src/dispatcher/infrastructure-fault.js';
import { SagaPersistenceError } from '../../src/index.js';
import { describeError } from '../../src/telemetry/describe-error.js';

/** A driver error as node-postgres or node-sqlite3 raises it. */
const driverError = (message: string, code?: string) => Object.assign(new Error(message), code ? { code } : {});
/** What the runtime throws when its write fails: the driver error as the cause. */
const persistenceFailure = (cause: unknown) => new SagaPersistenceError('PERSISTENCE_FAILED', 'writing the effects failed', {}, { cause });

describe('isInfrastructureFault', () => {
  it.each([
    [
      'a terminated PostgreSQL backend (57P01)',
      new DriverException(driverError('terminating connection due to administrator command', '57P01')),
    ],
    ['a refused connection (08006)', new DriverException(driverError('connection failure', '08006'))],
    ['a connection that closed under a query (no code)', new DriverException(driverError('Connection terminated unexpectedly'))],
    ['a reset socket', new DriverException(driverError('read ECONNRESET', 'ECONNRESET'))],
    ['a locked SQLite file', new LockWaitTimeoutException(driverError('SQLITE_BUSY: database is locked', 'SQLITE_BUSY'))],
    // better-sqlite3 (`@mikro-orm/better-sqlite`, MikroORM 7's `@mikro-orm/sqlite`) reports extended result codes.
    ['a failed write to the SQLite file (better-sqlite3)', new DriverException(driverError('disk I/O error', 'SQLITE_IOERR_WRITE'))],
    ['a stale WAL snapshot (better-sqlite3)', new DriverException(driverError('database is locked', 'SQLITE_BUSY_SNAPSHOT'))],
    ['a connection MikroORM classified', new ConnectionException(driverError('unable to open database file'))],
    ['knex finding no pooled connection in time', Object.assign(new Error('Timeout acquiring a connection'), { name: 'KnexTimeoutError' })],
    // MikroORM 7 wraps pg-pool's acquire timeout in a DriverException with no code (not the row's fault, so not charged).
    ['pg-pool finding no pooled connection in time', new DriverException(driverError('timeout exceeded when trying to connect'))],
    // The connection was lost at the delivery's BEGIN: knex reports the next statement this way, without a code.
    [
      'a transaction whose BEGIN lost the connection',
      new DriverException(driverError('Transaction query already complete, run with DEBUG=knex:tx for more info')),
    ],
  ])('%s under a unit of work is a database fault', (_, cause) => {
    expect(isInfrastructureFault(persistenceFailure(cause))).toBe(true);
    expect(isInfrastructureFault(cause)).toBe(true);
  });

  it.each([
    ['DATABASE_UNREACHABLE', 'cannot reach PostgreSQL'],
    ['COMMIT_OUTCOME_UNKNOWN', 'the connection was lost at COMMIT'],
  ] as const)('the runtime’s %s verdict is a database fault, with or without a driver error behind it', (code, message) => {
    expect(isInfrastructureFault(new SagaPersistenceError(code, message))).toBe(true);
    expect(isInfrastructureFault(new SagaPersistenceError(code, message, {}, { cause: new DriverException(driverError('x')) }))).toBe(true);
  });

  it.each([
    ['a step that throws', new Error('carrier API down')],
    // A step's own HTTP call failing is the step's failure, even with a socket error code.
    ['a step whose fetch was reset', new TypeError('fetch failed', { cause: driverError('read ECONNRESET', 'ECONNRESET') })],
    ['a constraint the write broke', persistenceFailure(new UniqueConstraintViolationException(driverError('duplicate key', '23505')))],
    [
      'a unique constraint under better-sqlite3',
      persistenceFailure(new UniqueConstraintViolationException(driverError('UNIQUE constraint failed: t.k', 'SQLITE_CONSTRAINT_UNIQUE'))),
    ],
    ['a statement error', persistenceFailure(new DriverException(driverError('column "x" does not exist', '42703')))],
    ['a step error carrying a SagaError code of its own', new SagaPersistenceError('PERSISTENCE_FAILED', 'writing the effects failed')],
    ['not an error at all', 'a string'],
  ])('%s is the delivery’s own failure', (_, error) => {
    expect(isInfrastructureFault(error)).toBe(false);
  });
});

describe('describeError', () => {
  it('shows a driver error by its class and code only: its message quotes the SQL and its parameters', () => {
    const error = new DriverException(driverError(`update "saga_timer" set "last_error" = 'secret' where "token" = 'abc' - boom`, '22021'));
    expect(describeError(error)).toBe('DriverException (22021)');
  });

  it('shows any other error by its class and message', () => {
    expect(describeError(new SagaPersistenceError('DATABASE_UNREACHABLE', 'cannot reach PostgreSQL'))).toBe(
      'SagaPersistenceError: cannot reach PostgreSQL',
    );
    expect(describeError('plain')).toBe('plain');
  });
});
