import { describeError as describe } from '../telemetry/describe-error.js';
import type { SagaLogger } from '../telemetry/logger.js';
import type { PendingOutcomes } from './pending-outcomes.js';

/** Logs the published stamps stop() leaves behind because another transaction still holds their rows locked. */
export function reportLockedStamps(logger: SagaLogger, pending: PendingOutcomes): void {
  const left = pending.ids();
  if (left.length === 0) return;
  logger.error(
    'dispatcher stop(): published outbox messages could not be stamped, another transaction holds their rows locked; once it ends and their lease has run out, they are claimed and published again, charged as a lost delivery',
    { unstamped: left.length, ids: left.slice(0, 10) },
  );
}

/** Logs the row outcomes stop() could not write because the database is away. */
export function reportUnwrittenOutcomes(logger: SagaLogger, pending: PendingOutcomes, error: unknown): void {
  logger.error(
    'dispatcher stop(): row outcomes could not be written (the database is away); those rows are claimed again after their lease, a started one charged as a lost delivery',
    { unwritten: pending.size, error: describe(error) },
  );
}
