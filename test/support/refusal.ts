import { expect } from 'vitest';
import type { SagaError } from '../../src/index.js';

/** What a refused call threw; fails the test when it did not throw. */
export async function refusal(call: Promise<unknown>): Promise<SagaError> {
  const outcome = await call.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(outcome, 'the call should have been refused').toBeDefined();
  return outcome as SagaError;
}
