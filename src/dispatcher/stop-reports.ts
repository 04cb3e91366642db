import type { SagaLogger } from '../telemetry/logger.js';
import { describeError as describe } from './describe-error.js';
import type { PendingOutcomes } from './pending-outcomes.js';

/** Logs the published stamps stop() leaves behind because another transaction still holds their rows locked. */
export function reportLockedStamps(logger: SagaLogger, pending: PendingOutcomes): void {
  const left = pending.ids();
  if (left.length === 0) return;
  const named = `${left.slice(0, 10).join(', ')}${left.length > 10 ? ` and ${left.length - 10} more` : ''}`;
  logger.error(
    `dispatcher stop(): ${left.length} published outbox message(s) could not be stamped, another transaction holds their rows locked (${named}); once it ends and their lease has run out, they are claimed and published again, charged as a lost delivery`,
  );
}

/** Logs the row outcomes stop() could not write because the database is away. */
export function reportUnwrittenOutcomes(logger: SagaLogger, pending: PendingOutcomes, error: unknown): void {
  logger.error(
    `dispatcher stop(): ${pending.size} row outcome(s) could not be written (the database is away); those rows are claimed again after their lease, a started one charged as a lost delivery: ${describe(error)}`,
  );
}
