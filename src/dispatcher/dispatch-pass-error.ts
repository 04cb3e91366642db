import type { DispatchPassResult } from '../contracts.js';
import { SagaError } from '../errors.js';

/**
 * A dispatcher pass failed as a whole: the database could not be reached, or one of the dispatcher's own
 * statements failed (the driver error is the `cause`). `result` reports what the pass did before it failed,
 * such as the timers its catch-up already stamped `missed` (committed). Rows it claimed are delivered by
 * the tasks already running, or re-claimed after their lease.
 */
export class SagaDispatchError extends SagaError {
  override readonly name = 'SagaDispatchError';

  constructor(
    readonly result: DispatchPassResult,
    cause: unknown,
  ) {
    super(
      'DISPATCH_PASS_FAILED',
      `A dispatcher pass failed after stamping ${result.timers.missed} timer(s) missed and claiming ${result.timers.claimed} timer(s) and ${result.outbox.claimed} outbox row(s); the loop retries with backoff. Check that the database is reachable and migrated (the cause has the driver error).`,
      {},
      { cause },
    );
  }
}
