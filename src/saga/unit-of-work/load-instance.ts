import type { EntityData, EntityManager } from '@mikro-orm/core';
import type { SagaState } from '../../entities/saga-state.js';
import { hydrateRow, readRowBy, readsRowsDirectly, rowReadSql } from '../../orm/index.js';
import { IGNORE_REASONS, type IgnoreReason } from '../handle-result.js';
import { type RegisteredSaga, readStep } from '../registered-saga.js';
import type { SagaMessage } from '../saga-message.js';
import { checkStoredSagaRow, isStackOverflow, jsonTooDeep } from '../stored-values.js';
import type { HandleTarget } from './handle-target.js';

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
  const found = await readOrHydrate(em, saga, property, value, target, preloaded);
  if (found) {
    checkStoredSagaRow(definition.name, saga.meta, found);
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
 * The instance, hydrated from `preloaded` or read.
 * @throws SagaPersistenceError `STORED_VALUE_INVALID` when MikroORM cannot hydrate the row's JSON (nested too deep).
 */
async function readOrHydrate(
  em: EntityManager,
  saga: RegisteredSaga,
  property: string,
  value: unknown,
  target: HandleTarget,
  preloaded: EntityData<object> | undefined,
): Promise<SagaState | null> {
  if (preloaded) return hydrate(em, saga, preloaded);
  const sql = rowReadSql(em, saga.meta, property);
  if (sql && (await readsRowsDirectly(em, saga.meta))) {
    const row = await readRowBy(em, saga.meta, sql, property, value);
    return row ? hydrate(em, saga, row) : null;
  }
  try {
    return await findInstance(em, saga, property, value);
  } catch (error) {
    if (!isStackOverflow(error)) throw error;
    // Found by its correlation value, the row's id is not known here; the value is never quoted.
    const sagaId = target.kind === 'timer' ? target.timer.sagaId : undefined;
    throw jsonTooDeep(saga.meta, { sagaType: saga.definition.name, sagaId }, error);
  }
}

/** The row, hydrated into `em` as `em.findOne` would. */
async function hydrate(em: EntityManager, saga: RegisteredSaga, row: EntityData<object>): Promise<SagaState> {
  try {
    return await hydrateRow<SagaState>(em, saga.meta, row);
  } catch (error) {
    if (!isStackOverflow(error)) throw error;
    const id = (row as Record<string, unknown>)[saga.meta.primaryKeys[0]!];
    throw jsonTooDeep(saga.meta, { sagaType: saga.definition.name, sagaId: id == null ? undefined : String(id) }, error);
  }
}

/**
 * The instance whose `property` is `value` by `em.findOne` (for mappings the saga's own SELECT does not read as
 * it does: see `rowReadSql`), managed by `em`, or null. Into `em` and from the primary database, whatever the ORM
 * config: `disableIdentityMap` would return an entity `em` does not manage (the step's changes never written), a
 * global `resultCache` a cached answer, and a read replica (`preferReadReplicas`) a row that may lag behind what
 * the version guard checks.
 */
async function findInstance(em: EntityManager, saga: RegisteredSaga, property: string, value: unknown): Promise<SagaState | null> {
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
