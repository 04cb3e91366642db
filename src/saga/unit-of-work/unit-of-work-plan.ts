import type { TimerOutcome } from '../../entities/dispatch-states.js';
import type { HandledMessageWrite } from '../../sql/handled-message-statements.js';
import type { StagedStamp } from '../../sql/inbox-statements.js';
import type { OutboxWrite } from '../../sql/outbox-statements.js';
import type { TimerWrite } from '../../sql/timer-statements.js';

/** How a unit of work writes the saga row. Written first: it is the lock every unit of work on the instance takes. */
export type SagaRowWrite =
  /** INSERT of a new instance at version 0. */
  | { readonly kind: 'insert' }
  /** UPDATE of the changed columns, `WHERE version = loadedVersion`, to `version` and `updatedAt`. */
  | { readonly kind: 'update'; readonly loadedVersion: number; readonly version: number; readonly updatedAt: Date }
  /** No column changed but other effects are written: a no-op UPDATE `WHERE version = loadedVersion` takes the lock. */
  | { readonly kind: 'guard'; readonly loadedVersion: number }
  /** The row is not touched (a timer retired because its saga is gone or completed). */
  | { readonly kind: 'none' };

/** Which pending timers of the instance a unit of work deletes, before it writes new ones. */
export interface TimerDeletes {
  /** Every pending timer (completion, `cancelAll()`). When set, the other fields are empty. */
  readonly all: boolean;
  /** Pending timers cancelled by name. */
  readonly names: readonly string[];
  /** Set when the step changed: step-scoped timers of every other step are deleted. */
  readonly otherStepsThan: { readonly step: string | null } | undefined;
}

/**
 * Everything one unit of work writes, as plain data, decided before the transaction opens. The write phase
 * turns it into statements in a fixed order (saga row, timer stamp, staged stamp, timer deletes, timer writes, outbox)
 * and runs them in one transaction. New effects are new fields here and new statements there.
 */
export interface UnitOfWorkPlan {
  readonly sagaType: string;
  readonly sagaId: string;
  /** The message type handled, for error messages. */
  readonly messageType: string;
  readonly sagaRow: SagaRowWrite;
  /** The delivering timer taken out of the pending set, only while `token` is still its token. */
  readonly timerStamp:
    | {
        readonly id: string;
        readonly token: string;
        /** The delivered timer's name: once stamped, a delete or replacement of that name no longer matches it. */
        readonly name?: string;
        readonly outcome: TimerOutcome;
        readonly at: Date;
      }
    | undefined;
  /** The delivering staged row (`saga_inbox`) taken out of the pending set, only while `token` is still its token. */
  readonly stagedStamp?: StagedStamp | undefined;
  readonly timerDeletes: TimerDeletes;
  /** Timers to write; each replaces the pending timer of its name in place when `replaceTimers`, else is inserted. */
  readonly timers: readonly TimerWrite[];
  /** False for a new instance: it has no pending timers to replace. */
  readonly replaceTimers: boolean;
  readonly outbox: readonly OutboxWrite[];
  /** The caller's message id, recorded last so a redelivery finds it (`saga_handled_message`). */
  readonly handledMessage: HandledMessageWrite | undefined;
}

/** No timer deleted. */
export const NO_TIMER_DELETES: TimerDeletes = { all: false, names: [], otherStepsThan: undefined };
