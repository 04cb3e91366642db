import { SAGA_ERROR_CODES, SagaError } from '../errors.js';
import { errorText } from './error-text.js';

/**
 * An error as the library logs and records it ({@link errorText}: a driver error shows only its class and code), and
 * for a failed dispatcher pass the same for its cause.
 */
export function describeError(error: unknown): string {
  const text = errorText(error);
  return error instanceof SagaError && error.code === SAGA_ERROR_CODES.DISPATCH_PASS_FAILED
    ? `${text} Cause: ${describeError(error.cause)}`
    : text;
}
