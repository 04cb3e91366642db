import { SagaError, SagaPersistenceError, SagaSchemaError } from '../errors.js';
import { classifyDriverError } from '../orm/index.js';
import { SCHEMA_FIX } from '../schema/verify-saga-schema.js';

/**
 * Runs one operator call; a database failure becomes a typed error that names the call and the exception
 * class, never the SQL or its parameters (correlation values, ids); the driver's error stays the `cause`.
 * Typed errors of the call itself pass unchanged.
 */
export async function asOperation<T>(operation: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof SagaError) throw error;
    const name = error instanceof Error ? error.constructor.name : typeof error;
    const kind = classifyDriverError(error);
    if (kind === 'missing table' || kind === 'missing column') {
      throw new SagaSchemaError(
        'SCHEMA_INVALID',
        `${operation} failed: a table or column it reads is missing (${name}). Run verifySagaSchema() to list every difference; to fix it, ${SCHEMA_FIX}.`,
        { operation },
        { cause: error },
      );
    }
    const code = kind === 'connection failure' ? 'DATABASE_UNREACHABLE' : 'PERSISTENCE_FAILED';
    throw new SagaPersistenceError(
      code,
      `${operation} failed (${name}). What it changed before the failure stays changed (each purge batch commits on its own; a requeue, cancel or reschedule fails before its first change; a force-complete or reopen is one transaction, rolled back unless the connection failed during COMMIT): read the rows again, then run it again once the database answers. The driver's error is the \`cause\`.`,
      { operation },
      { cause: error },
    );
  }
}
