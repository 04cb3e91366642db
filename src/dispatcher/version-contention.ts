import { SAGA_ERROR_CODES, SagaConcurrencyError } from '../errors.js';
import { isInfrastructureFault } from './infrastructure-fault.js';

/**
 * Whether a delivery ended because its unit of work met version conflicts past the runtime's retries. Conflicts whose
 * last was a lock wait or a deadlock are database faults (interrupted, given back at once), as before the retries.
 */
export function isVersionContention(error: unknown): boolean {
  return error instanceof SagaConcurrencyError && error.code === SAGA_ERROR_CODES.CONCURRENCY_CONFLICT && !isInfrastructureFault(error);
}
