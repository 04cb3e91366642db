// A force-complete is guarded by the version it read. On PostgreSQL a unit of work can commit between that read and
// the guarded UPDATE (which waits on the row lock): the change is then VERSION_CONFLICT and writes nothing. The test
// holds the other transaction open until the force-complete is seen waiting.
import { describe, expect, it } from 'vitest';
import { SagaConcurrencyError, SagaRuntime } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

type Executor = { execute<T>(sql: string, params?: unknown[]): Promise<T> };

describe('force-complete racing a unit of work (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('a commit between the version read and the guarded update makes it VERSION_CONFLICT; nothing is written', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
    const started = await runtime.handle(scriptedSaga, {
      type: 'Start',
      key: 'race',
      actions: [{ op: 'schedule', name: 'a', after: { days: 1 } }],
    });
    const id = started.sagaId!;
    const other = (await db().openAnother()).em.fork();
    await other.begin();
    await (other as unknown as Executor).execute('update "scripted_saga" set "version" = "version" + 1, "counter" = 1 where "id" = ?', [
      id,
    ]);

    const ops = new SagaOperations({ runtime });
    const change = ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: 'stuck' }).catch((e: unknown) => e);
    // Wait (on the database, not the clock) until the force-complete's UPDATE waits on the row lock.
    const admin = db().orm.em.fork() as unknown as Executor;
    for (;;) {
      const [row] = await admin.execute<{ n: string | number }[]>(
        `select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
      );
      if (Number(row?.n) > 0) break;
    }
    await other.commit();

    const error = await change;
    expect(error).toBeInstanceOf(SagaConcurrencyError);
    expect(error).toMatchObject({ code: 'VERSION_CONFLICT', details: { sagaId: id } });
    const rows = rowsOf(db().orm);
    expect(await rows.saga('race')).toMatchObject({ version: 1, counter: 1, completedAt: null });
    expect(await rows.pendingTimers(id)).toHaveLength(1);
    expect(await rows.outbox(id)).toEqual([]);
  });
});
