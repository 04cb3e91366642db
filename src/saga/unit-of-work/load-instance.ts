import type { EntityData, EntityManager } from '@mikro-orm/core';
import type { SagaState } from '../../entities/saga-state.js';
import { hydrateRow, readRowBy, readsRowsDirectly, rowReadSql } from '../../orm/index.js';
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
 * row read ahead with its timer batch's), hydrated into `em` as `em.findOne` would; writes nothing.
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
  const [property, value] = target.kind === 'timer' ? ['id', target.timer.sagaId] : [definition.correlationProperty, target.value];
  const found = preloaded ? await hydrateRow<SagaState>(em, saga.meta, preloaded) : await readInstance(em, saga, property, value);
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

/**
 * The instance whose `property` is `value`, managed by `em`, or null: read with the saga's own SELECT when its
 * mapping lets that read what `em.findOne` reads (no QueryBuilder per message), else by `em.findOne` (into `em`,
 * never from MikroORM's result cache). Both read the primary database, never a read replica.
 */
async function readInstance(em: EntityManager, saga: RegisteredSaga, property: string, value: unknown): Promise<SagaState | null> {
  const sql = rowReadSql(em, saga.meta, property);
  if (sql && (await readsRowsDirectly(em, saga.meta))) {
    const row = await readRowBy(em, saga.meta, sql, property, value);
    return row ? hydrateRow<SagaState>(em, saga.meta, row) : null;
  }
  // Into `em` and from the primary database, whatever the ORM config, as the SELECT above reads: `disableIdentityMap`
  // would return an entity `em` does not manage (the step's changes never written), a global `resultCache` a cached
  // answer, and a read replica (`preferReadReplicas`) a row that may lag behind what the version guard checks.
  return (await em.findOne(saga.definition.state, { [property]: value } as never, {
    disableIdentityMap: false,
    cache: false,
    connectionType: 'write',
  })) as SagaState | null;
}

function loaded(state: SagaState, isNew: boolean, stepProperty: string | undefined): LoadedInstance {
  return {
    kind: 'loaded',
    state,
    isNew,
    before: { version: state.version, completed: state.completedAt != null, step: readStep(state, stepProperty) },
  };
}
