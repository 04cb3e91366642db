// A pool with every connection in use is not an unreachable database and not the row's fault. On MikroORM 7, pg-pool's
// acquire timeout reaches the library as a bare DriverException: the dispatcher must not charge (and dead-letter)
// healthy timers (see test/unit/infrastructure-fault.test.ts), and handle() must say the pool had no free connection.
import type { EntityManager, MikroORM, Options } from '@mikro-orm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { pgConnectionOptions } from '../../../src/orm/connection-info.js';
import { queryRows } from '../../../src/orm/sql-execution.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { useDatabase } from '../../support/suite.js';

describe('a pool with every connection in use (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  let orm: MikroORM;
  let holder: EntityManager;
  const clock = new FakeClock();

  beforeAll(async () => {
    // One connection, and a short wait for it: knex's acquire timeout on MikroORM 6, pg-pool's on 7.
    orm = await db().openAnother({
      pool: { min: 0, max: 1, acquireTimeoutMillis: 300 },
      driverOptions: pgConnectionOptions({ connectionTimeoutMs: 300 }),
    } as Partial<Options>);
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    await runtime.handle(scriptedSaga, { type: 'Start', key: 'pool', actions: [{ op: 'schedule', name: 'reminder', after: 1 }] });
    clock.advance({ seconds: 2 });
    // Hold the pool's only connection in an open transaction.
    holder = orm.em.fork();
    await holder.begin();
    await queryRows(holder, 'select 1', []);
  });
  afterAll(async () => {
    await holder?.rollback();
  });

  it('handle() fails DATABASE_UNREACHABLE saying the pool had no free connection, and writes nothing', async () => {
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, verifySchema: false });
    const error = await runtime.handle(scriptedSaga, { type: 'Start', key: 'pool-2' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect((error as SagaPersistenceError).code).toBe('DATABASE_UNREACHABLE');
    expect((error as Error).message).toContain('no connection of the pool');
    const rows = await queryRows<{ n: number }>(
      db().orm.em.fork(),
      `select count(*)::int as n from scripted_saga where key = 'pool-2'`,
      [],
    );
    expect(rows[0]!.n).toBe(0);
  });
});
