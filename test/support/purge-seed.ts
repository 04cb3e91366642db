// Rows for the retention tests: what a purge with cutoffs after `at` deletes, in numbers the tests know.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { SagaOutbox, SagaTimer } from '../../src/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';

/** Completed sagas {@link seedPurgeable} writes. */
export const SAGAS = 300;
const TIMERS_PER_SAGA = 2;
/** Fired timers of sagas that stay, which {@link seedPurgeable} writes. */
export const OTHER_TIMERS = 400;

/** Completed sagas with fired timers and published outbox rows, and fired timers of sagas that stay. */
export async function seedPurgeable(orm: MikroORM, at: Date): Promise<void> {
  const em = orm.em.fork();
  const sagaIds = Array.from({ length: SAGAS }, () => randomUUID());
  await em.insertMany(
    ScriptedSaga,
    sagaIds.map((id, i) => ({
      id,
      key: `purge-${i}`,
      stage: 'open',
      counter: 0,
      log: '',
      createdAt: at,
      updatedAt: at,
      completedAt: at,
      version: 1,
    })),
  );
  const dispatched = (sagaId: string, name: string) => ({
    id: randomUUID(),
    sagaType: 'scripted',
    sagaId,
    name,
    dueAt: at,
    availableAt: at,
    messageType: 'Tick',
    payload: { type: 'Tick' },
    token: randomUUID(),
    attempts: 0,
    dispatchedAt: at,
    outcome: 'fired' as const,
    createdAt: at,
  });
  const timers = sagaIds.flatMap((sagaId) => Array.from({ length: TIMERS_PER_SAGA }, (_, t) => dispatched(sagaId, `t${t}`)));
  const others = Array.from({ length: OTHER_TIMERS }, (_, i) => dispatched(randomUUID(), `other-${i}`));
  await em.insertMany(SagaTimer, [...timers, ...others]);
  await em.insertMany(
    SagaOutbox,
    sagaIds.map((sagaId) => ({
      id: randomUUID(),
      sagaType: 'scripted',
      sagaId,
      messageType: 'Hello',
      payload: { type: 'Hello' },
      headers: {},
      availableAt: at,
      token: randomUUID(),
      attempts: 0,
      dispatchedAt: at,
      outcome: 'published' as const,
      createdAt: at,
    })),
  );
}
