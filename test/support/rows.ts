import type { MikroORM } from '@mikro-orm/core';
import { SagaOutbox, SagaTimer } from '../../src/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';

/** Reads rows through a fresh EntityManager, as another process would see them. */
export function rowsOf(orm: MikroORM) {
  const em = () => orm.em.fork({ clear: true });
  return {
    sagas: () => em().find(ScriptedSaga, {}, { orderBy: { createdAt: 'asc', key: 'asc' } }),
    saga: (key: string) => em().findOne(ScriptedSaga, { key }),
    timers: (where: Partial<Record<keyof SagaTimer, unknown>> = {}) =>
      em().find(SagaTimer, where as never, { orderBy: { createdAt: 'asc', name: 'asc' } }),
    pendingTimers: (sagaId?: string) =>
      em().find(SagaTimer, { dispatchedAt: null, ...(sagaId ? { sagaId } : {}) }, { orderBy: { name: 'asc' } }),
    outbox: (sagaId?: string) => em().find(SagaOutbox, sagaId ? { sagaId } : {}, { orderBy: { createdAt: 'asc', messageType: 'asc' } }),
    /** Row counts of the saga table, saga_timer and saga_outbox: a refused message leaves all three unchanged. */
    counts: async () => {
      const fork = em();
      return { sagas: await fork.count(ScriptedSaga), timers: await fork.count(SagaTimer), outbox: await fork.count(SagaOutbox) };
    },
  };
}
