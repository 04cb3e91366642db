import { classifyDriverError, isNeverSent, isRefusedByServer } from '../../orm/index.js';
import type { ItemOutcome } from './unit-batcher.js';
import { StatementFailure } from './write-failures.js';
import type { WriteReport } from './write-plan.js';

/* What the units of a group commit learn: their outcomes, and when they leave their group. */

/**
 * A unit of work whose write waited past its group's lock timeout for a row another transaction holds (an
 * application's own transaction, an operator's session): rolled back to its savepoint, so nothing of it was
 * written, while the rest of the group went on. The runtime runs it again in a transaction of its own, which
 * holds no other unit and waits for the row as long as the connection's own settings let it.
 */
export class LeftGroup extends Error {
  constructor(
    override readonly cause: unknown,
    reason = 'a row this unit of work writes is locked by another transaction; it left its group',
  ) {
    super(reason);
  }
}

/**
 * What the units a refused group COMMIT carried get. The database refused it (a deferred constraint, a serialization
 * failure: an error it answered with), or pg never sent it (the connection had already failed), so nothing of the
 * group was written; the refusal may be one unit's alone, and
 * the others would have committed on their own. Each leaves the group ({@link LeftGroup}): the runtime runs it again,
 * from its read, in a transaction of its own, where a refusal is that unit's own failure. A COMMIT that failed
 * otherwise (the connection) may have been applied: its units get that failure, an unknown outcome.
 */
export function commitFailure(error: unknown, carried: number): ItemOutcome<never> {
  const cause = error instanceof StatementFailure ? error.cause : error;
  if (carried > 1 && (isRefusedByServer(cause) || isNeverSent(cause))) {
    return failure(new LeftGroup(error, "the group's COMMIT was refused; the unit of work is written again alone"));
  }
  return failure(error);
}

/** A unit that failed waiting for a row lock past the group's lock timeout leaves the group: {@link LeftGroup}. */
export function leftGroupIfLockWait(outcome: ItemOutcome<WriteReport>): ItemOutcome<WriteReport> {
  if (outcome.ok || !(outcome.error instanceof StatementFailure) || classifyDriverError(outcome.error.cause) !== 'lock wait')
    return outcome;
  return failure(new LeftGroup(outcome.error));
}

/** A failed outcome. */
export function failure(error: unknown): ItemOutcome<never> {
  return { ok: false, error };
}

/** The outcome of `work`: its value, or what it threw. */
export async function settle<R>(work: Promise<R>): Promise<ItemOutcome<R>> {
  try {
    return { ok: true, value: await work };
  } catch (error) {
    return failure(error);
  }
}
