import { errorText } from '../telemetry/error-text.js';
import { SagaDispatchError } from './dispatch-pass-error.js';

/**
 * An error as the dispatcher logs and records it ({@link errorText}: a driver error shows only its class and code),
 * and for a pass that failed the same for its cause.
 */
export function describeError(error: unknown): string {
  const text = errorText(error);
  return error instanceof SagaDispatchError ? `${text} Cause: ${describeError(error.cause)}` : text;
}
