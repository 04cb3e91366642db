import { SAGA_ERROR_CODES, SagaError, type SagaErrorCode } from '../errors.js';
import { classifyDriverError, type DriverErrorKind, isDriverException } from '../orm/index.js';

/**
 * Kinds of driver error that are the database's fault, never the delivery's: the connection failed or the server
 * ended the session, the server ran out of resources or canceled the statement, the database file failed or stayed
 * locked past the busy timeout, a lock wait or a deadlock with another transaction, no pooled connection in time.
 */
const DATABASE_FAULT_KINDS: ReadonlySet<DriverErrorKind> = new Set([
  'connection failure',
  'never sent',
  'no free connection',
  'canceled or out of resources',
  'database failure',
  'lock wait',
  'deadlock',
]);
// The runtime's own verdicts on a database failure: the database could not be reached, or the connection
// was lost at COMMIT (if the commit did apply, the timer is stamped fired and giving it back finds nothing).
const DATABASE_FAULT_CODES: ReadonlySet<SagaErrorCode> = new Set([
  SAGA_ERROR_CODES.DATABASE_UNREACHABLE,
  SAGA_ERROR_CODES.COMMIT_OUTCOME_UNKNOWN,
]);

/**
 * Whether `error` is a database fault rather than the delivery's own failure. Only errors the ORM or the runtime
 * raised count, anywhere in the `cause` chain: the first MikroORM `DriverException` decides by its kind, and a
 * pool's acquire timeout or a `SagaError` coded `DATABASE_UNREACHABLE` / `COMMIT_OUTCOME_UNKNOWN` is one. A step's
 * own network error (a socket code on an error that is not MikroORM's) is the step's failure.
 */
export function isInfrastructureFault(error: unknown): boolean {
  const seen = new Set<unknown>();
  for (let current = error; current instanceof Error && !seen.has(current); current = current.cause) {
    seen.add(current);
    if (current instanceof SagaError && DATABASE_FAULT_CODES.has(current.code)) return true;
    const kind = classifyDriverError(current);
    // knex's pool timeout (MikroORM 6) reaches a delivery unconverted: not a DriverException.
    if (kind === 'no free connection') return true;
    if (isDriverException(current)) return DATABASE_FAULT_KINDS.has(kind);
  }
  return false;
}
