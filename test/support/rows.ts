import type { MikroORM } from '@mikro-orm/core';
import { dialectOf } from '../../src/dialect/dialect-adapter.js';
import { SagaHandledMessage, SagaOutbox, SagaTimer } from '../../src/index.js';
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
    handledMessages: (sagaId?: string) =>
      em().find(SagaHandledMessage, sagaId ? { sagaId } : {}, { orderBy: { processedAt: 'asc', messageId: 'asc' } }),
    outbox: (sagaId?: string) => em().find(SagaOutbox, sagaId ? { sagaId } : {}, { orderBy: { createdAt: 'asc', messageType: 'asc' } }),
    /** Row counts of the saga table, saga_timer and saga_outbox: a refused message leaves all three unchanged. */
    counts: async () => {
      const fork = em();
      return { sagas: await fork.count(ScriptedSaga), timers: await fork.count(SagaTimer), outbox: await fork.count(SagaOutbox) };
    },
  };
}

/**
 * Makes the database refuse inserts into, and updates of, `table` rows whose `column` equals `value` (a trigger
 * that raises), so a test can fail one statement. Returns the function that removes the trigger.
 */
export async function refuseInserts(orm: MikroORM, table: string, column: string, value: string): Promise<() => Promise<void>> {
  const conn = orm.em.getConnection();
  const name = `refuse_${table}_${column}`;
  if (dialectOf(orm.em).name === 'postgresql') {
    await conn.execute(`create or replace function ${name}() returns trigger as $$
      begin if new.${column} = '${value}' then raise exception '${table} write refused'; end if; return new; end $$ language plpgsql`);
    await conn.execute(`create trigger ${name} before insert or update on ${table} for each row execute function ${name}()`);
    return async () => void (await conn.execute(`drop trigger ${name} on ${table}`));
  }
  for (const event of ['insert', 'update']) {
    await conn.execute(
      `create trigger ${name}_${event} before ${event} on ${table} when new.${column} = '${value}' begin select raise(abort, '${table} write refused'); end`,
    );
  }
  return async () => {
    await conn.execute(`drop trigger ${name}_insert`);
    await conn.execute(`drop trigger ${name}_update`);
  };
}
