import type { EntityData, EntityManager } from '@mikro-orm/core';
import type { SagaState } from '../../entities/saga-state.js';
import { hydrateRow } from '../../orm/compat.js';
import type { SagaMessage } from '../define-saga.js';
import { IGNORE_REASONS, type IgnoreReason } from '../handle-result.js';
import { type HandleTarget, type RegisteredSaga, readStep } from '../registered-saga.js';

/** What the instance looked like before its step ran. */
export interface InstanceSnapshot {
  readonly version: number;
  readonly completed: boolean;
  /** The value of the definition's `stepProperty`, or null. */
  readonly step: string | null;
}

/** An instance the step runs on: read, or created (not yet written) for a start message. */
export interface LoadedInstance {
  readonly kind: 'loaded';
  /** Managed by the unit of work's EntityManager; the step mutates it. */
  readonly state: SagaState;
  readonly isNew: boolean;
  readonly before: InstanceSnapshot;
}

/** A message the runtime does not run a step for. */
export interface IgnoredMessage {
  readonly kind: 'ignored';
  readonly reason: IgnoreReason;
  /** The completed instance, or null when there is none. */
  readonly state: SagaState | null;
}

/**
 * Phase 1 of a unit of work: finds the instance the message is for (by correlation value, or a timer's
 * saga id) and decides whether a step runs. A start message without an instance creates one in `em`
 * (inserted by the write phase); anything else without an instance, and a completed instance the
 * definition does not handle `message.type` for, is ignored. Reads one row (or takes `preloaded`, the instance's
 * row read ahead with its timer batch's, hydrated into `em` as `em.findOne` would); writes nothing.
 */
export async function loadInstance(
  em: EntityManager,
  saga: RegisteredSaga,
  message: SagaMessage,
  target: HandleTarget,
  now: Date,
  preloaded?: EntityData<object>,
): Promise<LoadedInstance | IgnoredMessage> {
  const { definition } = saga;
  const where = target.kind === 'timer' ? { id: target.timer.sagaId } : { [definition.correlationProperty]: target.value };
  const found = preloaded
    ? await hydrateRow<SagaState>(em, saga.meta, preloaded)
    : ((await em.findOne(definition.state, where as never)) as SagaState | null);
  if (found) {
    if (found.completedAt && !definition.handlesCompleted(message.type)) {
      return { kind: 'ignored', reason: IGNORE_REASONS.COMPLETED, state: found };
    }
    return loaded(found, false, definition.stepProperty);
  }
  if (target.kind === 'timer' || !definition.startedBy.has(message.type)) {
    return { kind: 'ignored', reason: IGNORE_REASONS.NO_INSTANCE, state: null };
  }
  const created = em.create(definition.state, {
    [definition.correlationProperty]: target.value,
    createdAt: now,
    updatedAt: now,
    version: 0,
  } as never) as SagaState;
  return loaded(created, true, definition.stepProperty);
}

function loaded(state: SagaState, isNew: boolean, stepProperty: string | undefined): LoadedInstance {
  return {
    kind: 'loaded',
    state,
    isNew,
    before: { version: state.version, completed: state.completedAt !== null, step: readStep(state, stepProperty) },
  };
}
